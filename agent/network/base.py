"""What the alloc runner needs of a group network: attach a netns, verify it, detach it.

The runner knows only this protocol; `agent.network.bridge.BridgeNetwork` implements it with the
CNI plugins, and the runner's unit tests with a fake.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.structs.records import PortAlloc

CNI_MODE_PREFIX = "cni/"


@dataclass(frozen=True)
class AttachSpec:
    """Which network an alloc is attached to and the CNI_ARGS its ADD and CHECK pass (Nomad's
    network hook: `IgnoreUnknown=true`, the group network's `cni { args }`, then NOMAD_REGION,
    NOMAD_NAMESPACE, NOMAD_JOB_ID, NOMAD_GROUP_NAME, NOMAD_ALLOC_ID; DEL passes none, as Nomad's)."""

    mode: str = "bridge"  # "bridge" (the agent's own network) or "cni/<name>" (a conflist by name)
    args: tuple[tuple[str, str], ...] = ()

    @property
    def cni_name(self) -> str:
        """The conflist's name of a "cni/<name>" mode; "" for bridge."""
        return self.mode[len(CNI_MODE_PREFIX) :] if self.mode.startswith(CNI_MODE_PREFIX) else ""

    def cni_args(self) -> str:
        return ";".join(f"{k}={v}" for k, v in self.args)


BRIDGE = AttachSpec()


def plan_cni_args(
    custom: Mapping[str, str] | Sequence[tuple[str, str]],
    *,
    region: str,
    namespace: str,
    job_id: str,
    group: str,
    alloc_id: str,
) -> tuple[tuple[str, str], ...]:
    """The CNI_ARGS of an alloc as Nomad's network hook builds them: `IgnoreUnknown=true`, the group's
    custom args over it, then the NOMAD_* workload args over those (a custom arg cannot replace
    them); a workload value holding ";" (the separator of CNI_ARGS) is left out, as Nomad does."""
    args: dict[str, str] = {"IgnoreUnknown": "true"}
    args.update(dict(custom.items()) if isinstance(custom, Mapping) else dict(custom))
    for key, value in (
        ("NOMAD_REGION", region),
        ("NOMAD_NAMESPACE", namespace),
        ("NOMAD_JOB_ID", job_id),
        ("NOMAD_GROUP_NAME", group),
        ("NOMAD_ALLOC_ID", alloc_id),
    ):
        if ";" not in value:
            args[key] = value
    return tuple(sorted(args.items()))


class Network(Protocol):
    def add(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> str:
        """Attach the netns (CNI ADD, port mappings); the alloc's address. Raises AgentError."""

    def has_result(self, alloc_id: str) -> bool:
        """Whether the result of an ADD is kept for the alloc (needed by CHECK and DEL)."""

    def check(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> list[str]:
        """What is wrong with the attachment (empty: all as the ADD left it)."""

    def delete(
        self,
        alloc_id: str,
        netns: Path | None,
        *,
        address: str = "",
        ports: Sequence[PortAlloc] = (),
        spec: AttachSpec = BRIDGE,
    ) -> list[str]:
        """Detach (CNI DEL), safe to repeat and when things are gone; the plugins' complaints.
        `address` and `ports` (the alloc's recorded ones) say whose conntrack flows to clear when the
        kept ADD result is gone (with it, its address is used and the ports are added)."""

    def forget(self, alloc_id: str) -> None:
        """Drop the kept ADD result without DEL (only a fault flag does this: nomad-11272)."""

    def release_addresses(self, alloc_id: str) -> None:
        """Free the IP reservations and drop the result, leaving chains (fault: nomad-6385)."""
