"""Service registration in Consul through its documented HTTP API (PUT /v1/agent/service/register,
PUT /v1/agent/service/deregister/<id>). Without a Consul address the services are only listed by the
agent's own API; nothing pretends to be Consul."""

from __future__ import annotations

import base64
import ipaddress
import logging
from collections.abc import Sequence
from typing import Any

import requests

from agent.client.checktarget import service_address
from agent.errors import AgentError
from agent.structs.model import Check, Service
from agent.structs.records import PortAlloc

log = logging.getLogger(__name__)
CONSUL_TIMEOUT = 5.0


class ConsulError(AgentError):
    pass


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


def registrations(
    alloc_id: str,
    task: str,
    services: Sequence[Service],
    address: str,
    ports: Sequence[dict[str, Any]],
    *,
    alloc_address: str = "",
    canary: bool = False,
) -> list[dict[str, Any]]:
    """Consul service definitions (api.AgentServiceRegistration) for one task's (or group's)
    services, as Nomad's service client builds them: the address and port of its `address_mode`
    (agent.client.checktarget.service_address: "auto" is the node's `address` and the mapped host port, or
    a custom `address`), the canary's tags and meta when `canary` and it has some, `meta` with
    Nomad's "external-source", Consul's own fields (kind, enable_tag_override, weights,
    tagged_addresses), and the checks (`check_definition`). A service whose address cannot be
    resolved raises ConsulError with Nomad's reason."""
    allocated = [
        PortAlloc(str(p["label"]), int(p["host"]), int(p.get("to") or 0), str(p.get("host_ip") or ""))
        for p in ports
    ]
    out = []
    for svc in services:
        got = service_address(
            mode=svc.address_mode,
            custom=svc.address,
            label=svc.port,
            ports=allocated,
            alloc_address=alloc_address,
            node_address=address,
        )
        if isinstance(got, str):
            raise ConsulError(f'unable to get address for service "{svc.name}": {got}')
        ip, port = got
        meta = dict(svc.canary_meta if canary and svc.canary_meta else svc.meta)
        meta["external-source"] = "nomad"
        reg: dict[str, Any] = {
            "ID": f"_fieldlab-{alloc_id}-{task or 'group'}-{svc.name}",
            "Name": svc.name,
            "Tags": advertised_tags(svc, canary=canary),
            "Address": ip,
            "Port": port,
            "Meta": meta,
            "Checks": [
                check_definition(svc, c, address=address, ports=allocated, alloc_address=alloc_address)
                for c in svc.checks
            ],
        }
        if svc.kind:
            reg["Kind"] = svc.kind
        if svc.enable_tag_override:
            reg["EnableTagOverride"] = True
        if svc.weights is not None:
            reg["Weights"] = {"Passing": svc.weights[0], "Warning": svc.weights[1]}
        if svc.tagged_addresses:
            reg["TaggedAddresses"] = {
                k: tagged_address(v, port) for k, v in sorted(svc.tagged_addresses.items())
            }
        out.append(reg)
    return out


def advertised_tags(svc: Service, *, canary: bool) -> list[str]:
    """A registration's tags: its `canary_tags` while the alloc is a canary and it has some, else
    its `tags` (Nomad's, for both providers)."""
    return list(svc.canary_tags if canary and svc.canary_tags else svc.tags)


def tagged_address(raw: str, port: int) -> dict[str, Any]:
    """A `tagged_addresses` value as Consul's ServiceAddress: "ip" (the service's port) or "ip:port"
    (Nomad's parseAddress; the jobspec reader refuses what it cannot parse)."""
    host, _, given = raw.rpartition(":")
    if given.isdigit() and _is_ip(host.strip("[]")):
        return {"Address": host.strip("[]"), "Port": int(given)}
    return {"Address": raw.strip("[]"), "Port": port}


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_definition(
    svc: Service, c: Check, *, address: str, ports: Sequence[PortAlloc], alloc_address: str
) -> dict[str, Any]:
    """One check as Nomad's createCheckReg gives it to Consul (api.AgentServiceCheck): its
    initial status and thresholds, an http check's URL (`protocol`), method, headers, body and TLS
    settings, a grpc check's `host:port/service`, a script check as a TTL the agent keeps alive.
    Where it points: its `address_mode` (host: the node's address and the host port), else its
    service's custom address."""
    check: dict[str, Any] = {
        "Name": c.name,
        "Interval": _duration(c.interval),
        "Timeout": _duration(c.timeout),
    }
    if c.initial_status:
        check["Status"] = c.initial_status
    for key, value in (
        ("SuccessBeforePassing", c.success_before_passing),
        ("FailuresBeforeCritical", c.failures_before_critical),
        ("FailuresBeforeWarning", c.failures_before_warning),
    ):
        if value:
            check[key] = value
    if c.type == "script":  # run by the agent, reported to Consul as a TTL check
        check["TTL"] = _duration(c.interval * 3)
        return check
    mode = c.address_mode or ("auto" if svc.address else "host")
    got = service_address(
        mode=mode,
        custom=svc.address if mode == "auto" else "",
        label=c.port or svc.port,
        ports=ports,
        alloc_address=alloc_address,
        node_address=address,
    )
    if isinstance(got, str):
        raise ConsulError(f'unable to get address for check "{c.name}": {got}')
    host = f"[{got[0]}]" if ":" in got[0] else got[0]
    where = f"{host}:{got[1]}"
    if c.type == "tcp":
        check["TCP"] = where
        return check
    if c.type == "http":
        check["HTTP"] = f"{c.protocol or 'http'}://{where}{c.path or '/'}"
        given: dict[str, object] = {"Method": c.method if c.method != "GET" else "", "Body": c.body}
        given["Header"] = {k: list(v) for k, v in c.header.items()}
    else:  # grpc: Consul runs it
        check["GRPC"] = f"{where}/{c.grpc_service}"
        given = {"GRPCUseTLS": c.grpc_use_tls}
    given |= {"TLSSkipVerify": c.tls_skip_verify, "TLSServerName": c.tls_server_name}
    check.update({k: v for k, v in given.items() if v})  # Consul's omitempty
    return check


class ConsulClient:
    def __init__(self, address: str) -> None:
        self.address = address.rstrip("/")

    def _put(self, path: str, body: Any = None) -> None:
        try:
            resp = requests.put(f"{self.address}{path}", json=body, timeout=CONSUL_TIMEOUT)
        except requests.RequestException as exc:
            raise ConsulError(f"consul {self.address}{path}: {exc}") from None
        if resp.status_code != 200:
            raise ConsulError(f"consul {path}: HTTP {resp.status_code}: {resp.text.strip()[:200]}")

    def register(self, definition: dict[str, Any]) -> None:
        self._put("/v1/agent/service/register", definition)

    def deregister(self, service_id: str) -> None:
        self._put(f"/v1/agent/service/deregister/{service_id}")


class ConsulData:
    """The templates' Consul functions through Consul's HTTP API, in consul-template's shapes:
    `key`/`keyOrDefault`/`keyExists` (GET /v1/kv/<path>?raw), `ls` and `tree` (GET
    /v1/kv/<prefix>?recurse: KeyPair with Path (full), Key (relative to the prefix) and Value),
    `service` (GET /v1/health/service/<name>?passing[&tag=]: HealthService) and `services` (GET
    /v1/catalog/services: CatalogSnippet, sorted by name)."""

    def __init__(self, address: str) -> None:
        self.address = address.rstrip("/")

    def _get(self, path: str, params: dict[str, str] | None = None) -> requests.Response | None:
        """The response, or None for a 404 (no such key)."""
        try:
            resp = requests.get(f"{self.address}{path}", params=params, timeout=CONSUL_TIMEOUT)
        except requests.RequestException as exc:
            raise ConsulError(f"consul {self.address}{path}: {exc}") from None
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ConsulError(f"consul {path}: HTTP {resp.status_code}: {resp.text.strip()[:200]}")
        return resp

    def key(self, path: str) -> str | None:
        resp = self._get(f"/v1/kv/{path.lstrip('/')}", {"raw": ""})
        return None if resp is None else resp.text

    def _pairs(self, prefix: str) -> list[dict[str, Any]]:
        prefix = prefix.strip("/")
        resp = self._get(f"/v1/kv/{prefix}", {"recurse": ""})
        entries = [] if resp is None else resp.json()
        base = f"{prefix}/" if prefix else ""
        out = []
        for e in entries:
            full = str(e["Key"])
            if full.endswith("/"):
                continue  # a folder, not a pair
            raw = e.get("Value")
            value = base64.b64decode(raw).decode(errors="replace") if raw else ""
            out.append(
                {
                    "Path": full,
                    "Key": full[len(base) :] if full.startswith(base) else full,
                    "Value": value,
                    "Exists": True,
                    "CreateIndex": e.get("CreateIndex", 0),
                    "ModifyIndex": e.get("ModifyIndex", 0),
                    "LockIndex": e.get("LockIndex", 0),
                    "Flags": e.get("Flags", 0),
                    "Session": e.get("Session", ""),
                }
            )
        return sorted(out, key=lambda p: str(p["Key"]))

    def ls(self, prefix: str) -> list[dict[str, Any]]:
        return [p for p in self._pairs(prefix) if "/" not in str(p["Key"])]

    def tree(self, prefix: str) -> list[dict[str, Any]]:
        return self._pairs(prefix)

    def service(self, name: str, tag: str = "", passing_only: bool = True) -> list[dict[str, Any]]:
        params = {"passing": ""} if passing_only else {}
        if tag:
            params["tag"] = tag
        resp = self._get(f"/v1/health/service/{name}", params)
        entries = [] if resp is None else resp.json()
        out = []
        for e in entries:
            node, svc = e.get("Node") or {}, e.get("Service") or {}
            checks = e.get("Checks") or []
            status = "passing"
            for c in checks:
                if c.get("Status") == "critical" or (c.get("Status") == "warning" and status == "passing"):
                    status = str(c.get("Status"))
            out.append(
                {
                    "Node": node.get("Node", ""),
                    "NodeID": node.get("ID", ""),
                    "NodeAddress": node.get("Address", ""),
                    "NodeDatacenter": node.get("Datacenter", ""),
                    "NodeTaggedAddresses": node.get("TaggedAddresses") or {},
                    "NodeMeta": node.get("Meta") or {},
                    "ServiceMeta": svc.get("Meta") or {},
                    "Address": svc.get("Address") or node.get("Address", ""),
                    "ID": svc.get("ID", ""),
                    "Name": svc.get("Service", name),
                    "Kind": svc.get("Kind", ""),
                    "Tags": list(svc.get("Tags") or []),
                    "Checks": checks,
                    "Status": status,
                    "Port": svc.get("Port", 0),
                    "Namespace": svc.get("Namespace", ""),
                }
            )
        return out

    def datacenters(self) -> list[str]:
        resp = self._get("/v1/catalog/datacenters")
        return [] if resp is None else [str(d) for d in resp.json()]

    @staticmethod
    def _node(n: dict[str, Any]) -> dict[str, Any]:
        return {
            "ID": n.get("ID", ""),
            "Node": n.get("Node", ""),
            "Address": n.get("Address", ""),
            "Datacenter": n.get("Datacenter", ""),
            "TaggedAddresses": n.get("TaggedAddresses") or {},
            "Meta": n.get("Meta") or {},
        }

    def node(self, name: str = "") -> dict[str, Any] | None:
        """consul-template's CatalogNode: the node (this agent's when `name` is empty) and its
        services; None when there is no such node."""
        if not name:
            me = self._get("/v1/agent/self")
            name = "" if me is None else str((me.json().get("Config") or {}).get("NodeName", ""))
        resp = self._get(f"/v1/catalog/node/{name}") if name else None
        body = None if resp is None else resp.json()
        if not body:
            return None
        services = [
            {
                "ID": s.get("ID", ""),
                "Service": s.get("Service", ""),
                "Tags": list(s.get("Tags") or []),
                "Meta": s.get("Meta") or {},
                "Port": s.get("Port", 0),
                "Address": s.get("Address", ""),
            }
            for s in (body.get("Services") or {}).values()
        ]
        return {
            "Node": self._node(body.get("Node") or {}),
            "Services": sorted(services, key=lambda s: s["ID"]),
        }

    def nodes(self) -> list[dict[str, Any]]:
        resp = self._get("/v1/catalog/nodes")
        return [] if resp is None else [self._node(n) for n in resp.json()]

    def services(self) -> list[dict[str, Any]]:
        resp = self._get("/v1/catalog/services")
        catalog = {} if resp is None else resp.json()
        return [{"Name": n, "Tags": sorted(catalog[n] or [])} for n in sorted(catalog)]
