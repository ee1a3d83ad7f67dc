"""The group network of bridge mode: the CNI conflist run on the alloc's netns (`CniNetwork`), and
its verification after a restart: the agent's own checks of netns, interface, address, routes,
bridge port and port-mapping rules, plus CNI CHECK where the plugins are new enough to pass it
(upstream's gate: bridge >= 1.3.0; older ones fail it spuriously and would churn healthy allocs).

Conntrack entries outlive the DNAT rules portmap removes at DEL: after DEL the alloc's flows (to its old
address, and DNATed from its host ports) are deleted, and after ADD the host-port flows DNATed anywhere
but the new address (made between DEL and ADD, or left by an earlier alloc on those ports). See
`agent.network.conntrack`; a failing cleanup is logged and never fails the DEL or the ADD.

An alloc made under an earlier layout (agent.structs.layout) keeps its network (`former`: the same bridge and
subnet under another CNI name) until it stops; the addresses its allocs hold are reserved in the
current network's host-local dir too (`carry_reservations`), and released there with their DEL."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.network import hostlocal
from agent.network.base import BRIDGE, AttachSpec
from agent.network.cni import CniNetwork
from agent.network.conntrack import FlowTarget, flush_stale_flows
from agent.network.result import CachedAttachment, CniError, PortMapping
from agent.network.verify import verify_network
from agent.structs import layout
from agent.structs.records import PortAlloc

log = logging.getLogger(__name__)


def port_mappings(ports: Sequence[PortAlloc]) -> list[PortMapping]:
    """CNI's portMappings of the alloc's ports: a port on a named host network bound on its address
    there only (Nomad's getPortMapping: the port's HostIP as the portmap's hostIP)."""
    return [PortMapping(p.host, p.to, host_ip=p.host_ip) for p in ports]


class FlowFlusher(Protocol):
    def __call__(self, target: FlowTarget, *, owner: str = "", why: str = "") -> object: ...


class BridgeNetwork:
    def __init__(
        self,
        cni: CniNetwork,
        bridge: str | None,
        *,
        run_check: bool,
        flush_flows: FlowFlusher = flush_stale_flows,
        former: Sequence[CniNetwork] = (),
        optional_portmap: bool = False,
    ) -> None:
        self.cni = cni
        # The host bridge the alloc's veth is on (checked on restore); None: a conflist with no bridge
        # (macvlan, ipvlan): only the inside of the netns is checked.
        self.bridge = bridge
        # A cni/<name> network as Nomad's: port mappings reach the plugins with the portMappings
        # capability, and a conflist without one maps nothing (no error); the agent's own bridge
        # network refuses ports it cannot map.
        self.optional_portmap = optional_portmap
        self.run_check = run_check
        self.flush_flows = flush_flows
        # Earlier layouts' networks on the same bridge and subnet (agent.structs.layout): their allocs keep
        # them.
        self.former = {n.name: n for n in former if n.name != cni.name}
        self.carry_reservations()

    def net(self, alloc_id: str) -> CniNetwork:
        """The network of this alloc's layout; the current one when that network is not on the node."""
        return self.former.get(layout.for_alloc(alloc_id).cni_network, self.cni)

    def carry_reservations(self) -> None:
        """The addresses the former networks' allocs hold are reserved in the current network too, so
        that it hands none of them out again (both run host-local on one subnet)."""
        if not self.former:
            return
        held = [r for n in self.former.values() for r in n.ipam_reservations()]
        for dest in self.cni.host_local_dirs():
            written, clashes = hostlocal.carry_over(held, dest)
            if written:
                log.info("reserved in %s for allocs of earlier networks: %s", dest, ", ".join(written))
            for clash in clashes:
                log.error("address held twice across networks: %s", clash)

    def mapped(self, ports: Sequence[PortAlloc]) -> Sequence[PortAlloc]:
        """The ports the plugins map: all of them, or none for a cni/<name> conflist without portmap."""
        if self.optional_portmap and not any(p.wants("portMappings") for p in self.cni.plugins):
            return ()
        return ports

    def add(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> str:
        net = self.net(alloc_id)
        ports = self.mapped(ports)
        result = net.add(alloc_id, netns, port_mappings=port_mappings(ports), cni_args=spec.cni_args())
        if net is not self.cni:
            self.carry_reservations()
        if ports:
            new = [ip.address for ip in result.ips]
            target = FlowTarget.of(host_ports=[p.host for p in ports], keep=new)
            self.flush_flows(target, owner=f"alloc {alloc_id}", why="after CNI ADD")
        return result.primary_ip or ""

    def has_result(self, alloc_id: str) -> bool:
        return self.net(alloc_id).cached_result(alloc_id) is not None

    def check(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> list[str]:
        net = self.net(alloc_id)
        cached = net.cached_result(alloc_id)
        if cached is None:
            return ["no CNI result recorded for the alloc"]
        diffs = verify_network(netns, cached, self.bridge, port_mappings(self.mapped(ports)))
        if self.run_check:
            try:
                net.check(alloc_id, netns, cni_args=spec.cni_args())
            except CniError as exc:
                diffs.append(f"CNI CHECK: {exc}")
        return diffs

    def delete(
        self,
        alloc_id: str,
        netns: Path | None,
        *,
        address: str = "",
        ports: Sequence[PortAlloc] = (),
        spec: AttachSpec = BRIDGE,
    ) -> list[str]:
        # The kept ADD result says which address the alloc had; the caller's record is used only
        # without it (a recorded address can be stale, and another alloc's by now).
        addresses, host_ports = [address], [p.host for p in ports]
        att = self._attachment(alloc_id)
        if att is not None:
            addresses = [ip.address for ip in att.result.ips]
            host_ports += [m.host_port for m in att.port_mappings]
        net = self.net(alloc_id)
        errors = list(net.delete(alloc_id, netns).plugin_errors)
        if net is not self.cni:  # the address carried into the current network goes with it
            self.cni.release_reservations(alloc_id)
        target = FlowTarget.of(addresses, host_ports)
        self.flush_flows(target, owner=f"alloc {alloc_id}", why="after CNI DEL")
        return errors

    def _attachment(self, alloc_id: str) -> CachedAttachment | None:
        try:
            return self.net(alloc_id).cached_attachment(alloc_id)
        except CniError:
            return None  # the DEL reports the unreadable cache

    def forget(self, alloc_id: str) -> None:
        self.net(alloc_id).cache_path(alloc_id).unlink(missing_ok=True)

    def release_addresses(self, alloc_id: str) -> None:
        net = self.net(alloc_id)
        net.release_reservations(alloc_id)
        net.cache_path(alloc_id).unlink(missing_ok=True)
        if net is not self.cni:
            self.cni.release_reservations(alloc_id)
