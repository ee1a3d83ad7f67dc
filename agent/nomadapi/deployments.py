"""Nomad's deployments and scaling policies as one node's client shows them (issue 51/52)."""

from __future__ import annotations

from typing import Any

from agent.api.server import Handler


def deployment_routes(api: Any) -> list[tuple[str, str, Handler]]:
    return []
