"""What the alloc runner needs of a group network: attach a netns, verify it, detach it.

The runner knows only this protocol; `agent.network.bridge.BridgeNetwork` implements it with the
CNI plugins, and the runner's unit tests with a fake.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.records import PortAlloc


class Network(Protocol):
    def add(self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc]) -> str:
        """Attach the netns (CNI ADD, port mappings); the alloc's address. Raises AgentError."""

    def has_result(self, alloc_id: str) -> bool:
        """Whether the result of an ADD is kept for the alloc (needed by CHECK and DEL)."""

    def check(self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc]) -> list[str]:
        """What is wrong with the attachment (empty: all as the ADD left it)."""

    def delete(
        self, alloc_id: str, netns: Path | None, *, address: str = "", ports: Sequence[PortAlloc] = ()
    ) -> list[str]:
        """Detach (CNI DEL), safe to repeat and when things are gone; the plugins' complaints.
        `address` and `ports` (the alloc's recorded ones) say whose conntrack flows to clear when the
        kept ADD result is gone (with it, its address is used and the ports are added)."""

    def forget(self, alloc_id: str) -> None:
        """Drop the kept ADD result without DEL (only a fault flag does this: nomad-11272)."""

    def release_addresses(self, alloc_id: str) -> None:
        """Free the IP reservations and drop the result, leaving chains (fault: nomad-6385)."""
