"""Service registration in Consul through its documented HTTP API (PUT /v1/agent/service/register,
PUT /v1/agent/service/deregister/<id>). Without a Consul address the services are only listed by the
agent's own API; nothing pretends to be Consul."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from typing import Any

import requests

from agent.errors import AgentError
from agent.model import Service

log = logging.getLogger(__name__)
CONSUL_TIMEOUT = 5.0


class ConsulError(AgentError):
    pass


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


def registrations(
    alloc_id: str, task: str, services: Sequence[Service], address: str, ports: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Consul service definitions for one task's (or group's) services: the node's address and the
    mapped host port, as Nomad's address_mode "auto" does for bridge networking."""
    host_ports = {str(p["label"]): int(p["host"]) for p in ports}
    out = []
    for svc in services:
        port = host_ports.get(svc.port, 0) if svc.port else 0
        checks = []
        for c in svc.checks:
            check: dict[str, Any] = {
                "Name": c.name,
                "Interval": _duration(c.interval),
                "Timeout": _duration(c.timeout),
            }
            cport = host_ports.get(c.port, port) if c.port else port
            if c.type == "http":
                check["HTTP"] = f"http://{address}:{cport}{c.path or '/'}"
            elif c.type == "tcp":
                check["TCP"] = f"{address}:{cport}"
            else:  # script checks are run by the agent, reported to Consul as a TTL check
                check["TTL"] = _duration(c.interval * 3)
            checks.append(check)
        out.append(
            {
                "ID": f"_fieldlab-{alloc_id}-{task or 'group'}-{svc.name}",
                "Name": svc.name,
                "Tags": list(svc.tags),
                "Address": address,
                "Port": port,
                "Meta": {"alloc_id": alloc_id, "task": task},
                "Checks": checks,
            }
        )
    return out


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
