"""Where one of a task's Nomad service checks is sent (Nomad's client checker resolves it with
serviceregistration.GetAddress): a pure decision over plain data.

- `address_mode = "host"` (a check's default): the host port of a port label the alloc reserved,
  at the node's address: the advertise address, else the one Nomad's client fingerprints and
  reserves ports on (the first address of the interface holding the default route:
  `fingerprinted_address`), as Nomad's GetAddress gives a port mapping's HostIP. An alloc with
  a network namespace of its own (bridge) is reached at its own address and the port inside it
  when the node has no address to give, or only a loopback one: the same listener, reached
  without going through the host.
- `address_mode = "alloc"`: the alloc's own address (bridge only), the port's `to` (the port
  inside its network namespace), or a literal port number (Nomad allows one only in this mode).
- no `address_mode` on a check of a service with a custom `address`: that address (Nomad's "auto").

`service_address` is where a service registration points (Nomad's GetAddress over its
`address_mode` and `address`).

A check never goes to a port the alloc did not reserve in host mode, nor to a loopback or
unspecified address: a check of a host-network alloc on a node with no address (none advertised,
none fingerprinted) fails with the reason (the agent's own services, Consul and the like listen on
the host's loopback).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

from agent.structs.records import PortAlloc

# Nomad's helper.IsMethodHTTP: the methods a nomad-provider http check may use.
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE")
MODE_HOST = "host"
MODE_ALLOC = "alloc"


@dataclass(frozen=True)
class CheckTarget:
    address: str  # an IP literal, or the node's advertise address as configured (a name is resolved later)
    port: int


def is_local_address(address: str) -> bool:
    """A loopback or unspecified address (connecting to 0.0.0.0 or :: reaches the host's loopback)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address.strip().lower().rstrip(".") in ("localhost", "") or address.lower().endswith(
            ".localhost"
        )
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    return ip.is_loopback or ip.is_unspecified


def check_target(
    *,
    mode: str,
    label: str,
    ports: Sequence[PortAlloc],
    alloc_address: str,
    node_address: str,
    custom: str = "",
) -> CheckTarget | str:
    """The address and port of a check (`label`: the check's port, else its service's), or why it
    cannot be sent anywhere (the check's output, its status critical). A check without an address
    mode of a service with a custom `address` goes to that address (Nomad's "auto" for it)."""
    found = next((p for p in ports if p.label == label), None)
    if not mode and custom:
        got = service_address(
            mode="auto", custom=custom, label=label, ports=ports, alloc_address="", node_address=""
        )
        return got if isinstance(got, str) else CheckTarget(*got)
    mode = mode or MODE_HOST
    if mode == MODE_HOST:
        return _host_target(label, found, alloc_address, node_address)
    if mode == MODE_ALLOC:
        return _alloc_target(label, found, alloc_address)
    return f'address_mode "{mode}" is not run by fieldlab-agent'


def service_address(
    *,
    mode: str,
    custom: str,
    label: str,
    ports: Sequence[PortAlloc],
    alloc_address: str,
    node_address: str,
) -> tuple[str, int] | str:
    """A service registration's address and port as Nomad's GetAddress gives them (no driver
    network here): "auto" with a custom `address`: it, with the mapped host port of `label` (or the
    number `label` is); "auto" otherwise and "host": the node's address and the host port (a number
    as it is); "alloc": the alloc's own address and the port inside it. Or why not (Nomad's texts)."""
    found = next((p for p in ports if p.label == label), None)
    numeric = int(label) if label.isdigit() and 0 < int(label) <= 65535 else None
    mode = mode or "auto"
    if mode == "auto" and custom:
        address, port, bad = (
            custom,
            found.host if found else numeric,
            "not a valid port mapping or numeric port",
        )
        bad = f'invalid port: "{label}": {bad}'
    elif custom:
        return f'cannot use custom advertise address with "{mode}" address mode'
    elif mode in ("auto", MODE_HOST):  # a port on a named host network: its address there (HostIP)
        host_ip = found.host_ip if found else ""
        address, port = host_ip or node_address or alloc_address, found.host if found else numeric
        bad = f'invalid port "{label}": port label not found'
    elif mode == MODE_ALLOC:
        if not alloc_address:
            return 'cannot use address_mode="alloc": no allocation network status reported'
        address, port = alloc_address, (found.to or found.host) if found else numeric
        bad = f'invalid port "{label}": port label not found or is not numeric'
    else:
        return f'invalid address mode "{mode}"'
    if not label:
        return address, 0
    return bad if port is None else (address, port)


def _host_target(
    label: str, found: PortAlloc | None, alloc_address: str, node_address: str
) -> CheckTarget | str:
    if found is None:
        return f'port "{label}" is not a port this alloc reserved (its group network has no such label)'
    if found.host_ip:  # a port on a named host network is checked at its address there (HostIP)
        why = f'port "{label}" is bound on {found.host_ip} (its host network): checks never go to loopback'
        return why if is_local_address(found.host_ip) else CheckTarget(found.host_ip, found.host)
    if alloc_address and (not node_address or is_local_address(node_address)):
        return CheckTarget(alloc_address, found.to or found.host)  # the alloc's own address
    if not node_address:
        return (
            "this node has no address (no advertise_address, and none found on the interface of its "
            "default route): a host-mode check of an alloc on the host network is sent to the node's "
            "address, never to loopback"
        )
    if is_local_address(node_address):
        return f"the node's advertise_address {node_address} is loopback: checks never go to loopback"
    return CheckTarget(node_address, found.host)


class HostAddress(Protocol):
    """One of the host's addresses (agent.templates.sockaddr.HostAddress)."""

    @property
    def interface(self) -> str: ...
    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address: ...
    @property
    def default_route(self) -> bool: ...


def fingerprinted_address(addresses: Sequence[HostAddress]) -> str:
    """The node's address as Nomad's network fingerprint finds it when no network_interface is
    given: an address of the interface holding the default route (IPv4 first; link-local only when
    it has no other), never a loopback or unspecified one; "" when there is none."""
    routed = {h.interface for h in addresses if h.default_route}
    usable = [h for h in addresses if h.interface in routed and not is_local_address(str(h.address))]
    usable.sort(key=lambda h: (h.address.is_link_local, h.address.version, h.interface))
    return str(usable[0].address) if usable else ""


def _alloc_target(label: str, found: PortAlloc | None, alloc_address: str) -> CheckTarget | str:
    if not alloc_address:
        return 'cannot use address_mode="alloc": the alloc has no network namespace of its own (bridge)'
    if found is not None:
        return CheckTarget(alloc_address, found.to or found.host)
    if label.isdigit() and 0 < int(label) <= 65535:
        return CheckTarget(alloc_address, int(label))
    return f'invalid port "{label}": port label not found or is not numeric'


def http_request(method: str, path: str) -> tuple[str, str] | str:
    """An http check's method and request target on the connection to its own target (a path
    naming a scheme or a host is refused: the request never goes anywhere else), or why not."""
    method = (method or "GET").upper()
    if method not in HTTP_METHODS:
        return f'method type "{method[:40]}" not supported in Nomad http check'
    path = (path or "/").split("#", 1)[0]
    if ":" in re.split(r"[/?#]", path, maxsplit=1)[0] or re.search(r"[\x00-\x1f\x7f]", path):
        return f"http check path {path[:80]!r} is not a relative http path"
    if not path.startswith("/"):
        path = "/" + path
    return method, quote(path, safe="/?&=:;@!$'()*+,%~[]")
