"""The client's `host_network` blocks (Nomad's ClientHostNetworkConfig) and the node's host networks
as Nomad's network fingerprint finds them (client/fingerprint/network.go: createNodeNetworkResources,
deriveAddressAliases). Pure: the config and the host's addresses in, the node's networks out.

An address of the host gets the alias of each host network whose `cidr` (a comma-separated list of
networks) contains it and whose `interface` is the address's interface (an unset one matches
anything), and the alias "default" when it is on the interface of the default route. A group
network's port with `host_network = "<name>"` is placed on the first address with that alias (Nomad's
NetworkIndex.AssignPorts): the port's HostIP. The host network's `reserved_ports` are never given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.errors import ConfigError

MAX_VALID_PORT = 65536  # Nomad's MaxValidPort
DEFAULT = "default"
_KEYS = frozenset({"cidr", "interface", "reserved_ports"})


@dataclass(frozen=True)
class HostNetwork:
    """One `host_network "<name>" { cidr, interface, reserved_ports }` block of the client."""

    name: str
    cidr: str = ""
    interface: str = ""
    reserved_ports: str = ""

    def json(self) -> dict[str, str]:
        """api.HostNetworkInfo (Node.HostNetworks' values)."""
        return {
            "Name": self.name,
            "CIDR": self.cidr,
            "Interface": self.interface,
            "ReservedPorts": self.reserved_ports,
        }


@dataclass(frozen=True)
class NetworkAddress:
    """Nomad's NodeNetworkAddress: an address of the node under one alias."""

    alias: str
    address: str
    family: str  # "ipv4" | "ipv6"
    reserved_ports: str = ""

    def json(self) -> dict[str, str]:
        return {
            "Family": self.family,
            "Alias": self.alias,
            "Address": self.address,
            "ReservedPorts": self.reserved_ports,
            "Gateway": "",
        }


@dataclass(frozen=True)
class NodeNetwork:
    """Nomad's NodeNetworkResource of mode "host": an interface and its aliased addresses."""

    device: str
    addresses: tuple[NetworkAddress, ...]

    def json(self) -> dict[str, Any]:
        return {
            "Mode": "host",
            "Device": self.device,
            "MacAddress": "",
            "Speed": 0,
            "Addresses": [a.json() for a in self.addresses],
        }


class HostAddressLike(Protocol):
    """An address of the host (agent.templates.sockaddr.HostAddress)."""

    @property
    def interface(self) -> str: ...
    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address: ...
    @property
    def default_route(self) -> bool: ...


# --- the config -------------------------------------------------------------------------------------


def parse_port_ranges(spec: str) -> list[int]:
    """Nomad's ParsePortRanges: "80,443,8000-8100" to its ports; ValueError with Nomad's reason."""
    parts = spec.split(",")
    if parts == [""]:
        return []
    ports: list[int] = []
    for part in parts:
        bounds = part.strip().split("-")
        if len(bounds) > 2:
            raise ValueError("can only parse single port numbers or port ranges (ex. 80,100-120,150)")
        if bounds == [""]:
            raise ValueError("can't specify empty port")
        values = []
        for text in bounds:
            if not (text.isascii() and text.isdigit()):
                raise ValueError(f'parsing "{text}": invalid syntax')
            values.append(int(text))
        start, end = values[0], values[-1]
        if end < start:
            raise ValueError(f"invalid range: ending value ({end}) less than starting ({start}) value")
        if start == 0:
            raise ValueError("port must be > 0")
        if end > MAX_VALID_PORT:
            raise ValueError(f"port must be < {MAX_VALID_PORT} but found {end}")
        ports.extend(range(start, end + 1))
    return ports


def _cidrs(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Go's net.ParseCIDR of each item: a network with its prefix length ("10.0.0.1/8" is 10/8)."""
    out = []
    for item in text.split(","):
        if "/" not in item:
            raise ValueError(f'"{item.strip()}" has no prefix length (a CIDR, e.g. 10.0.0.0/8)')
        out.append(ipaddress.ip_network(item.strip(), strict=False))
    return out


def parse_host_networks(p: str, raw: Mapping[str, Any], key: str) -> tuple[HostNetwork, ...]:
    """{"<name>": {"cidr": "10.0.0.0/8,...", "interface": "eth1", "reserved_ports": "22,80-90"}}
    (Nomad's client `host_network "<name>" {...}` blocks), each checked; ConfigError names the block."""
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(
            p, key, 'must be an object of name -> {"cidr": ..., "interface": ..., "reserved_ports": ...}'
        )
    out = []
    for name, spec in value.items():
        where = f'{key}."{name}"'
        if not name or not all(c.isalnum() or c in "_.-" for c in name):
            raise ConfigError(p, where, "a host network's name is letters, digits, '_', '.', '-'")
        if name == DEFAULT:
            raise ConfigError(
                p,
                where,
                'the "default" host network is the interface of the default route, as Nomad fingerprints it:'
                " fieldlab-agent does not take a block redefining it",
            )
        if not isinstance(spec, dict):
            raise ConfigError(p, where, "must be an object with cidr, interface, reserved_ports")
        if unknown := sorted(set(spec) - _KEYS):
            raise ConfigError(
                p, f"{where}.{unknown[0]}", "not a host_network field (cidr, interface, reserved_ports)"
            )
        for field in _KEYS:
            if not isinstance(spec.get(field, ""), str):
                raise ConfigError(p, f"{where}.{field}", "must be a string")
        cidr, interface = spec.get("cidr", ""), spec.get("interface", "")
        reserved = spec.get("reserved_ports", "")
        if cidr:
            try:
                _cidrs(cidr)
            except ValueError as exc:
                raise ConfigError(
                    p, f"{where}.cidr", f"not a comma-separated list of networks: {exc}"
                ) from None
        if "{{" in interface:
            raise ConfigError(
                p,
                f"{where}.interface",
                "a go-sockaddr template is not evaluated by fieldlab-agent: name the interface",
            )
        try:
            parse_port_ranges(reserved)
        except ValueError as exc:
            raise ConfigError(p, f"{where}.reserved_ports", f"error parsing reserved_ports: {exc}") from None
        out.append(HostNetwork(name, cidr, interface, reserved))
    return tuple(sorted(out, key=lambda h: h.name))


# --- the fingerprint --------------------------------------------------------------------------------


def derive_aliases(
    interface: str,
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    networks: Iterable[HostNetwork],
    default_interface: str,
) -> list[str]:
    """Nomad's deriveAddressAliases: the host networks the address is in (its cidr, when set, holds
    it; its interface, when set, is the address's), then "default" on the default route's interface."""
    aliases = []
    for hn in networks:
        in_cidr = not hn.cidr or any(
            address in net for net in _cidrs(hn.cidr) if net.version == address.version
        )
        on_interface = not hn.interface or hn.interface == interface
        if in_cidr and on_interface:
            aliases.append(hn.name)
    if default_interface and interface == default_interface:
        aliases.append(DEFAULT)
    return aliases


def node_networks(
    addresses: Sequence[HostAddressLike], networks: Sequence[HostNetwork]
) -> tuple[NodeNetwork, ...]:
    """Nomad's createNodeNetworkResources: per interface (in the order the host lists them) its
    addresses under each alias; link-local ones only on an interface that has no other."""
    reserved = {hn.name: hn.reserved_ports for hn in networks}
    default_interface = next((h.interface for h in addresses if h.default_route), "")
    found: dict[str, tuple[list[NetworkAddress], list[NetworkAddress]]] = {}
    for h in addresses:
        usable, link_local = found.setdefault(h.interface, ([], []))
        family = "ipv4" if h.address.version == 4 else "ipv6"
        for alias in derive_aliases(h.interface, h.address, networks, default_interface):
            a = NetworkAddress(alias, str(h.address), family, reserved.get(alias, ""))
            (link_local if h.address.is_link_local or h.address.is_multicast else usable).append(a)
    out = []
    for device, (usable, link_local) in found.items():
        if chosen := usable or link_local:
            out.append(NodeNetwork(device, tuple(chosen)))
    return tuple(out)


def alias_addresses(nets: Iterable[NodeNetwork]) -> dict[str, list[NetworkAddress]]:
    """Nomad's NetworkIndex.HostNetworks: alias -> its addresses, in fingerprint order."""
    out: dict[str, list[NetworkAddress]] = {}
    for n in nets:
        for a in n.addresses:
            out.setdefault(a.alias, []).append(a)
    return out
