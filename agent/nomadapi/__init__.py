"""Nomad's v1 HTTP API over the agent's core: pure views (structs), the alloc dir's files (allocfs), blocking-query indexes and the routes."""  # noqa: E501
