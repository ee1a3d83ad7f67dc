"""The data of agent.network: CNI errors, port mappings, a plugin chain's result, the cached ADD and
what a DEL did.

Plain values only: nothing here runs a plugin or touches the filesystem (parsing a result is pure), so
the agent's own network check (agent.network.verify) and the alloc runner can use these without the
plugin runner (agent.network.cni) or the plugin version probe (agent.network.plugins).
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from agent.errors import AgentError

# --- errors -------------------------------------------------------------------------------------


class CniError(AgentError):
    """A CNI operation failed. `plugin`, `command`, `code` and `details` are set when a plugin said so."""

    def __init__(
        self,
        message: str,
        *,
        plugin: str | None = None,
        command: str | None = None,
        container_id: str | None = None,
        code: int | None = None,
        details: str = "",
    ) -> None:
        self.message = message
        self.msg = message  # CniPluginError: the plugin's own message, without the context
        self.plugin = plugin
        self.command = command
        self.container_id = container_id
        self.code = code
        self.details = details
        self.cleanup_errors: list[str] = []
        super().__init__(message)


class CniPluginError(CniError):
    """A plugin exited non-zero; `msg` is the plugin's own message (its JSON error object's `msg`)."""

    def __init__(
        self,
        plugin: str,
        command: str,
        container_id: str,
        msg: str,
        *,
        code: int | None = None,
        details: str = "",
    ) -> None:
        text = f"CNI {plugin} {command} for container {container_id} failed: {msg}"
        if code is not None:
            text += f" (code {code})"
        if details and details != msg:
            text += f": {details}"
        super().__init__(
            text, plugin=plugin, command=command, container_id=container_id, code=code, details=details
        )
        self.msg = msg


class CniTimeout(CniError):
    """A plugin did not finish in time and was killed (with its children)."""


class CniAlreadyAdded(CniError):
    """ADD for a container that has a cached result: DEL it first (a second ADD trips host-local)."""


class CniCheckFailed(CniError):
    """CHECK found a difference; `failures` holds one CniPluginError per plugin that said so."""

    def __init__(self, container_id: str, failures: list[CniError]) -> None:
        self.failures = failures
        said = "; ".join(f"{f.plugin}: {f.msg}" for f in failures)
        super().__init__(
            f"CNI CHECK for container {container_id} failed: {said}",
            command="CHECK",
            container_id=container_id,
        )


# --- values -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PortMapping:
    """A host port forwarded to a port in the container's netns (CNI's `portMappings` capability)."""

    host_port: int
    container_port: int
    protocol: str = "tcp"
    host_ip: str = ""

    def __post_init__(self) -> None:
        for what, port in (("host_port", self.host_port), ("container_port", self.container_port)):
            if not isinstance(port, int) or not 0 < port < 65536:
                raise CniError(f"port mapping {what} {port!r} is not a port number (1-65535)")
        if self.protocol not in ("tcp", "udp", "sctp"):
            raise CniError(f"port mapping protocol {self.protocol!r} is not tcp, udp or sctp")

    def to_cni(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "hostPort": self.host_port,
            "containerPort": self.container_port,
            "protocol": self.protocol,
        }
        if self.host_ip:
            d["hostIP"] = self.host_ip
        return d

    @classmethod
    def from_cni(cls, d: Mapping[str, Any]) -> PortMapping:
        return cls(
            int(d["hostPort"]),
            int(d["containerPort"]),
            str(d.get("protocol", "tcp")),
            str(d.get("hostIP", "")),
        )


@dataclass(frozen=True)
class CniInterface:
    name: str
    mac: str = ""
    sandbox: str = ""


@dataclass(frozen=True)
class CniIPConfig:
    address: str  # CIDR, e.g. "10.213.250.2/24"
    gateway: str | None = None
    interface: int | None = None

    @property
    def ip(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return ipaddress.ip_interface(self.address)


@dataclass(frozen=True)
class CniRoute:
    dst: str
    gw: str | None = None


@dataclass(frozen=True)
class CniResult:
    """A plugin chain's final result (spec 0.3.x/0.4.0/1.0.0), and the raw JSON for prevResult."""

    cni_version: str
    interfaces: tuple[CniInterface, ...]
    ips: tuple[CniIPConfig, ...]
    routes: tuple[CniRoute, ...]
    dns: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Any, source: str = "CNI result") -> CniResult:
        if not isinstance(data, dict):
            raise CniError(f"{source}: not a JSON object")
        try:
            interfaces = tuple(
                CniInterface(str(i["name"]), str(i.get("mac", "")), str(i.get("sandbox", "")))
                for i in data.get("interfaces") or []
            )
            ips = tuple(
                CniIPConfig(
                    str(ipaddress.ip_interface(p["address"])),
                    str(p["gateway"]) if p.get("gateway") else None,
                    int(p["interface"]) if p.get("interface") is not None else None,
                )
                for p in data.get("ips") or []
            )
            routes = tuple(
                CniRoute(str(r["dst"]), str(r["gw"]) if r.get("gw") else None)
                for r in data.get("routes") or []
            )
            dns = dict(data.get("dns") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise CniError(f"{source}: malformed result ({type(exc).__name__}: {exc})") from exc
        return cls(str(data.get("cniVersion", "")), interfaces, ips, routes, dns, copy.deepcopy(data))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.raw))

    def sandbox_interface(self, ifname: str) -> CniInterface | None:
        """The interface named `ifname` inside the netns (one with a sandbox)."""
        return next((i for i in self.interfaces if i.sandbox and i.name == ifname), None)

    def host_interfaces(self) -> list[CniInterface]:
        """Interfaces on the host side (no sandbox): for bridge, the bridge itself and the host veth."""
        return [i for i in self.interfaces if not i.sandbox]

    def ips_of(self, ifname: str) -> list[CniIPConfig]:
        """The addresses recorded for the sandbox interface `ifname` (or all, when none names one)."""
        idx = next((n for n, i in enumerate(self.interfaces) if i.sandbox and i.name == ifname), None)
        return [p for p in self.ips if p.interface is None or p.interface == idx]

    @property
    def primary_ip(self) -> str | None:
        """The first address without its prefix, e.g. "10.213.250.2": what the agent reports."""
        return str(self.ips[0].ip.ip) if self.ips else None


class CacheKey(NamedTuple):
    container_id: str
    ifname: str


@dataclass(frozen=True)
class CachedAttachment:
    """What the agent persisted at ADD time: the result plus what DEL/CHECK need to repeat the call."""

    network: str
    container_id: str
    ifname: str
    netns: str
    port_mappings: tuple[PortMapping, ...]
    created: float
    result: CniResult


@dataclass
class DelReport:
    """What a DEL did: plugin errors (DEL went on past them) and what the agent removed itself."""

    container_id: str
    ifname: str
    had_cached_result: bool
    plugin_errors: list[str] = field(default_factory=list)
    cleaned_up: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.plugin_errors


@dataclass(frozen=True)
class Reservation:
    """One host-local IPAM reservation file: <dataDir>/<network>/<ip> holding "<id>\\r\\n<ifname>"."""

    ip: str
    container_id: str
    ifname: str
    path: Path
