"""Service registration in Consul through its documented HTTP API (PUT /v1/agent/service/register,
PUT /v1/agent/service/deregister/<id>). Without a Consul address the services are only listed by the
agent's own API; nothing pretends to be Consul."""

from __future__ import annotations

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
    """The templates' `key()` and `service()` through Consul's HTTP API (GET /v1/kv/<path>?raw,
    GET /v1/health/service/<name>?passing)."""

    def __init__(self, address: str) -> None:
        self.address = address.rstrip("/")

    def _get(self, path: str) -> requests.Response:
        try:
            resp = requests.get(f"{self.address}{path}", timeout=CONSUL_TIMEOUT)
        except requests.RequestException as exc:
            raise ConsulError(f"consul {self.address}{path}: {exc}") from None
        if resp.status_code == 404:
            raise ConsulError(f"consul {path}: not found")
        if resp.status_code != 200:
            raise ConsulError(f"consul {path}: HTTP {resp.status_code}: {resp.text.strip()[:200]}")
        return resp

    def key(self, path: str) -> str:
        return self._get(f"/v1/kv/{path.lstrip('/')}?raw").text

    def service(self, name: str) -> list[dict[str, Any]]:
        entries = self._get(f"/v1/health/service/{name}?passing").json()
        return [
            {
                "address": e["Service"].get("Address") or e["Node"]["Address"],
                "port": e["Service"]["Port"],
                "tags": e["Service"].get("Tags") or [],
                "id": e["Service"]["ID"],
            }
            for e in entries
        ]
