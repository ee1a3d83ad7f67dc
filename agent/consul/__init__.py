"""Consul's catalog API (beside agent/vault)."""
