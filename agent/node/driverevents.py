"""The node's events (Nomad's api.NodeEvent): "Node registered" at the agent's start and one per
driver whose health changed since the last look, as Nomad's client emits them
(applyNodeUpdatesFromDriver: subsystem "Driver", the new health description as the message, the
driver's name in the details). A driver seen for the first time is no event; a change to an empty
description is none either. The last MAX_EVENTS are kept, as Nomad keeps a node's (10)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_EVENTS = 10  # Nomad's MaxRetainedNodeEvents


@dataclass(frozen=True)
class NodeEvent:
    message: str
    subsystem: str
    details: Mapping[str, str] = field(default_factory=dict)
    timestamp: float = 0.0
    index: int = 0


def driver_changes(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """(driver, message) of each driver whose health or its description changed (pure)."""
    out = []
    for name, now in sorted(after.items()):
        was = before.get(name)
        if was is None:
            continue
        changed = bool(was["healthy"]) != bool(now["healthy"]) or was["detail"] != now["detail"]
        if changed and now["detail"]:
            out.append((name, str(now["detail"])))
    return out


class NodeEvents:
    """The node's last events, and the driver health they were judged against (on the main loop)."""

    def __init__(self) -> None:
        self.events: list[NodeEvent] = []
        self.drivers: dict[str, dict[str, Any]] | None = None

    def add(self, event: NodeEvent) -> None:
        self.events = [*self.events, event][-MAX_EVENTS:]
