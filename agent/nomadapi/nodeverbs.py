"""Nomad's node verbs on this one node: eligibility, drain, evaluate (issue 52)."""

from __future__ import annotations

from typing import Any

from agent.api.server import Handler


def node_verb_routes(api: Any) -> list[tuple[str, str, Handler]]:
    return []
