"""Nomad's parameterized and periodic job verbs: dispatch, periodic force, evaluate (issue 52)."""

from __future__ import annotations

from typing import Any

from agent.api.server import Handler


def job_dispatch_routes(api: Any) -> list[tuple[str, str, Handler]]:
    return []
