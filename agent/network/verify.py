"""The agent's own check of an alloc's network, independent of CNI CHECK (which 1.1.1 cannot pass).

`verify_network` compares what the kernel has now with what the cached ADD result says, and returns
each difference as one plain sentence (for task events); an empty list means the network is as set up:

- the netns file is present and is a live netns;
- inside it, the interface exists, is up and has every recorded address;
- inside it, a default route exists (via the recorded gateway, when one was recorded; for a network
  without a bridge only when its result records one);
- on the host (for a network with a bridge), the bridge exists, and the interface's veth peer
  (found by its ifindex, or by the host interface name in the result) exists, is up and is
  enslaved to the bridge;
- for every port mapping, portmap's DNAT rule (in a CNI-DN-* chain) exists and is reachable from
  PREROUTING through CNI-HOSTPORT-DNAT.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

from agent.network import iptables
from agent.network.netns import NetnsError, create_inside, is_netns
from agent.network.result import CniResult, PortMapping

log = logging.getLogger(__name__)

IFF_UP = 0x1
MAIN_TABLE = 254


def _attr(msg: Any, name: str) -> Any:
    return msg.get_attr(name)


def _sandbox_ifname(result: CniResult) -> str:
    for i in result.interfaces:
        if i.sandbox and i.name != "lo":
            return i.name
    return "eth0"


def load_netlink() -> None:
    """Import the netlink library the checks use (pyroute2: ~100 ms and ~12 MB) now: at the start of
    an agent with bridge networking, before its restore checks the allocs' networks, rather than
    inside the restore's first check. An agent without it never loads it."""
    from pyroute2 import IPRoute  # noqa: F401


def verify_network(
    netns_path: str | os.PathLike[str],
    result: CniResult,
    bridge: str | None,
    port_mappings: Sequence[PortMapping] = (),
    *,
    ifname: str | None = None,
) -> list[str]:
    """Differences between the live network of one alloc and its CNI result (empty: all fine)."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    path = os.fspath(netns_path)
    ifname = ifname or _sandbox_ifname(result)
    problems: list[str] = []
    inside: dict[str, Any] = {}
    if not is_netns(path):
        problems.append(f"netns {path} is missing")
    else:
        try:
            with create_inside(path, IPRoute) as ipr:
                problems += _check_inside(ipr, path, ifname, result, inside, any_default=bridge is not None)
        except (NetlinkError, OSError, NetnsError) as exc:
            problems.append(f"cannot inspect netns {path}: {exc}")
    if bridge is not None:  # a macvlan or ipvlan conflist has no bridge and no veth on the host
        try:
            with IPRoute() as ipr:
                problems += _check_host(ipr, bridge, ifname, result, inside)
        except (NetlinkError, OSError) as exc:
            problems.append(f"cannot inspect host links: {exc}")
    if port_mappings:
        problems += _check_portmap(result, ifname, port_mappings)
    if problems:
        log.info("network of %s differs from its CNI result: %s", path, "; ".join(problems))
    return problems


def _recorded_default(result: CniResult, family: int) -> bool:
    zero = "0.0.0.0/0" if family == socket.AF_INET else "::/0"
    return any(r.dst == zero for r in result.routes)


def _check_inside(
    ipr: Any, path: str, ifname: str, result: CniResult, inside: dict[str, Any], *, any_default: bool
) -> list[str]:
    from pyroute2.netlink.exceptions import NetlinkError

    problems: list[str] = []
    try:  # one request by name (link_lookup, then get_links, made two)
        links = list(ipr.link("get", ifname=ifname))
    except NetlinkError:
        links = []
    if not links:
        return [f"interface {ifname} is missing inside netns {path}"]
    link = links[0]
    index = link["index"]
    inside["index"] = index
    inside["peer_index"] = _attr(link, "IFLA_LINK")
    if not link["flags"] & IFF_UP:
        problems.append(f"interface {ifname} inside netns {path} is down")
    have = {f"{_attr(a, 'IFA_ADDRESS')}/{a['prefixlen']}" for a in ipr.get_addr(index=index)}
    shown = sorted(a for a in have if not ipaddress.ip_interface(a).is_link_local)
    for want in result.ips_of(ifname):
        if want.address not in have:
            problems.append(
                f"interface {ifname} inside netns {path} lacks address {want.address}"
                f" (has: {', '.join(shown) or 'none'})"
            )
    families = {socket.AF_INET if p.ip.version == 4 else socket.AF_INET6 for p in result.ips_of(ifname)}
    for family in sorted(families or {socket.AF_INET}):
        if not any_default and not _recorded_default(result, family):
            continue  # a network without a bridge (macvlan on a lab segment) may set no default route
        defaults = [
            r
            for r in ipr.get_routes(family=family, table=MAIN_TABLE)
            if r["dst_len"] == 0 and _attr(r, "RTA_DST") is None
        ]
        fam = "IPv4" if family == socket.AF_INET else "IPv6"
        if not defaults:
            problems.append(f"no {fam} default route inside netns {path}")
            continue
        gateways = {
            p.gateway
            for p in result.ips_of(ifname)
            if p.gateway and (p.ip.version == 4) == (family == socket.AF_INET)
        }
        via = {_attr(r, "RTA_GATEWAY") for r in defaults}
        if gateways and not gateways & via:
            problems.append(
                f"{fam} default route inside netns {path} goes via {', '.join(sorted(str(v) for v in via))},"
                f" not the recorded gateway {', '.join(sorted(gateways))}"
            )
    return problems


def _check_host(ipr: Any, bridge: str, ifname: str, result: CniResult, inside: dict[str, Any]) -> list[str]:
    from pyroute2.netlink.exceptions import NetlinkError

    problems: list[str] = []
    br = _host_index(bridge)
    if not br:
        problems.append(f"bridge {bridge} is missing on the host")
    if "index" not in inside:
        return problems  # no interface inside: its veth peer is gone with it
    host_link = None
    peer = inside.get("peer_index")
    if peer:
        with contextlib.suppress(NetlinkError):
            candidates = ipr.get_links(peer)
            # The index is the peer's in the host netns only if that link points back at our interface.
            if candidates and _attr(candidates[0], "IFLA_LINK") == inside["index"]:
                host_link = candidates[0]
    names = [i.name for i in result.host_interfaces() if i.name != bridge]
    if host_link is None:
        for name in names:
            idx = _host_index(name)
            if idx:
                host_link = ipr.get_links(idx[0])[0]
                break
    if host_link is None:
        recorded = f" (recorded as {', '.join(names)})" if names else ""
        return [*problems, f"host veth peer of {ifname} is missing{recorded}"]
    name = _attr(host_link, "IFLA_IFNAME")
    if not host_link["flags"] & IFF_UP:
        problems.append(f"host veth {name} is down")
    master = _attr(host_link, "IFLA_MASTER")
    if br and master != br[0]:
        where = "no bridge"
        if master:
            m = ipr.get_links(master)
            where = _attr(m[0], "IFLA_IFNAME") if m else f"ifindex {master}"
        problems.append(f"host veth {name} is not on bridge {bridge} (it is on {where})")
    return problems


def _host_index(name: str) -> list[int]:
    """[the ifindex of link `name` in the calling thread's netns], or [] when there is none: the
    kernel's lookup by name (if_nametoindex), with no netlink request."""
    try:
        return [socket.if_nametoindex(name)]
    except OSError:
        return []


def _check_portmap(result: CniResult, ifname: str, port_mappings: Sequence[PortMapping]) -> list[str]:
    try:
        nat = iptables.read_table("nat")
    except iptables.IptablesError as exc:
        return [f"cannot read the nat table: {exc}"]
    problems: list[str] = []
    v4 = [p for p in result.ips_of(ifname) if p.ip.version == 4]
    if not v4:
        return [f"no IPv4 address recorded for {ifname}: port mappings cannot be checked"]
    ip = str(v4[0].ip.ip)
    if not any(r.target == "CNI-HOSTPORT-DNAT" for r in nat.rules_in("PREROUTING")):
        problems.append("CNI-HOSTPORT-DNAT is not jumped to from PREROUTING (no port mapping can work)")
    for m in port_mappings:
        rule = next(
            (
                r
                for r in nat.jumps_to("DNAT")
                if r.chain.startswith("CNI-DN-")
                and r.option("--to-destination") == f"{ip}:{m.container_port}"
                and r.option("--dport") == str(m.host_port)
                and r.option("-p") == m.protocol
            ),
            None,
        )
        what = f"{m.protocol} host port {m.host_port} -> {ip}:{m.container_port}"
        if rule is None:
            problems.append(f"no portmap DNAT rule for {what}")
            continue
        jumps = [
            j
            for j in nat.jumps_to(rule.chain)
            if j.chain == "CNI-HOSTPORT-DNAT" and str(m.host_port) in (j.option("--dports") or "").split(",")
        ]
        if not jumps:
            problems.append(f"portmap chain {rule.chain} for {what} is not jumped to from CNI-HOSTPORT-DNAT")
    return problems
