"""consul-template's `sockaddr` function: a go-sockaddr template expression about this host's
addresses, evaluated by the agent (the render worker has no view of the host's interfaces).

The single-call forms Nomad jobspecs use are supported: `GetPrivateIP`, `GetPrivateIPs`,
`GetPublicIP`, `GetPublicIPs`, `GetInterfaceIP "<name>"` and `GetInterfaceIPs "<name>"` (IPv4 before
IPv6; several addresses are space-separated, as go-sockaddr prints them). Private means RFC 6890
special-purpose space that is not loopback (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7...).
GetPrivateIP prefers the interface that holds the default route, as go-sockaddr does. Pipelines
over GetAllInterfaces (`include`, `exclude`, `sort`, `attr`...) are refused with a clear reason.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.errors import AgentError

_CALL = re.compile(r'^\s*(Get(?:Private|Public)IPs?)\s*$|^\s*(GetInterfaceIPs?)\s+"([^"\\]{1,64})"\s*$')
SUPPORTED = (
    'GetPrivateIP, GetPrivateIPs, GetPublicIP, GetPublicIPs, GetInterfaceIP "name", GetInterfaceIPs "name"'
)


@dataclass(frozen=True)
class HostAddress:
    interface: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    default_route: bool  # the interface holds a default route


def _private(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if a.is_loopback or a.is_link_local or a.is_multicast or a.is_unspecified:
        return False
    return a.is_private or (a.version == 4 and a in ipaddress.IPv4Network("100.64.0.0/10"))


def _public(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return a.is_global and not a.is_multicast


def _ordered(addrs: list[HostAddress]) -> list[HostAddress]:
    return sorted(addrs, key=lambda h: (not h.default_route, h.address.version, h.interface))


def evaluate(expr: str, addresses: list[HostAddress]) -> str:
    """The value of a go-sockaddr expression over `addresses` (pure: tests give the addresses)."""
    m = _CALL.match(expr)
    if m is None:
        raise AgentError(f"sockaddr {expr!r}: fieldlab-agent evaluates only {SUPPORTED}")
    if m.group(1):
        name = m.group(1)
        keep: Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], bool] = (
            _private if "Private" in name else _public
        )
        found = [h for h in _ordered(addresses) if keep(h.address)]
        many = name.endswith("s")
    else:
        iface, many = m.group(3), m.group(2).endswith("s")
        found = [h for h in _ordered(addresses) if h.interface == iface]
    if not found:
        return ""
    return " ".join(str(h.address) for h in found) if many else str(found[0].address)


IP_TIMEOUT = 5.0  # seconds for one `ip -j` listing


def _ip_json(args: list[str]) -> list[dict[str, Any]]:
    """`ip -j <args>` (iproute2's JSON), an OSError when it cannot be had."""
    try:
        out = subprocess.run(
            ["ip", "-j", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=True
        ).stdout
        found = json.loads(out or "[]")
    except (subprocess.SubprocessError, ValueError) as exc:
        raise OSError(f"ip -j {' '.join(args)}: {exc}") from None
    if not isinstance(found, list):
        raise OSError(f"ip -j {' '.join(args)}: not a list")
    return [x for x in found if isinstance(x, dict)]


def host_addresses() -> list[HostAddress]:
    """This host's addresses, with the interfaces that hold a default route (of the main table)
    marked: iproute2's `ip -j` listings, as the agent runs `ip netns`, so that this fingerprint
    at start (and a template's sockaddr) loads no netlink library into the daemon (pyroute2 is
    12 MB of its RSS; only a bridge alloc's network check needs it)."""
    default = {
        str(r.get("dev", ""))
        for family in ("-4", "-6")
        for r in _ip_json([family, "route", "show", "default"])
    }
    out = []
    for link in _ip_json(["addr", "show"]):
        name = str(link.get("ifname", ""))
        for a in link.get("addr_info") or ():
            text = a.get("local") if isinstance(a, dict) else None
            if text:
                out.append(HostAddress(name, ipaddress.ip_address(str(text)), name in default))
    return out


def sockaddr(expr: str) -> str:
    try:
        addresses = host_addresses()
    except (OSError, ImportError) as exc:
        raise AgentError(f"sockaddr {expr!r}: cannot read this host's addresses: {exc}") from None
    return evaluate(expr, addresses)
