"""The group network of bridge mode: the CNI conflist run on the alloc's netns (`CniNetwork`), and
its verification after a restart: the agent's own checks of netns, interface, address, routes,
bridge port and port-mapping rules, plus CNI CHECK where the plugins are new enough to pass it
(upstream's gate: bridge >= 1.3.0; older ones fail it spuriously and would churn healthy allocs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.network.cni import CniNetwork
from agent.network.result import CniError, PortMapping
from agent.network.verify import verify_network
from agent.records import PortAlloc


def port_mappings(ports: Sequence[PortAlloc]) -> list[PortMapping]:
    return [PortMapping(p.host, p.to) for p in ports]


class BridgeNetwork:
    def __init__(self, cni: CniNetwork, bridge: str, *, run_check: bool) -> None:
        self.cni = cni
        self.bridge = bridge
        self.run_check = run_check

    def add(self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc]) -> str:
        result = self.cni.add(alloc_id, netns, port_mappings=port_mappings(ports))
        return result.primary_ip or ""

    def has_result(self, alloc_id: str) -> bool:
        return self.cni.cached_result(alloc_id) is not None

    def check(self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc]) -> list[str]:
        cached = self.cni.cached_result(alloc_id)
        if cached is None:
            return ["no CNI result recorded for the alloc"]
        diffs = verify_network(netns, cached, self.bridge, port_mappings(ports))
        if self.run_check:
            try:
                self.cni.check(alloc_id, netns)
            except CniError as exc:
                diffs.append(f"CNI CHECK: {exc}")
        return diffs

    def delete(self, alloc_id: str, netns: Path | None) -> list[str]:
        return list(self.cni.delete(alloc_id, netns).plugin_errors)

    def forget(self, alloc_id: str) -> None:
        self.cni.cache_path(alloc_id).unlink(missing_ok=True)

    def release_addresses(self, alloc_id: str) -> None:
        self.cni.release_reservations(alloc_id)
        self.cni.cache_path(alloc_id).unlink(missing_ok=True)
