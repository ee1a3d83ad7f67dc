"""Shared fixtures: `openbao`, a real OpenBao server (see tests/openbao_server.py)."""

from __future__ import annotations

from tests.openbao_server import openbao

__all__ = ["openbao"]
