"""Nomad's native service discovery for this node (`provider = "nomad"` services):
`GET /v1/services` (api.ServiceRegistrationListStub per namespace) and `GET /v1/service/:name`
(api.ServiceRegistration, api/services.go). A service is listed while its alloc runs; its address
is the node's advertise address (else the alloc's) and its port the mapped host port of its label,
as Nomad's `address_mode = "auto"`. Consul services (the default provider) are not listed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from agent.api import Handler, Response
from agent.nomadapi.http import answer, blocking

if TYPE_CHECKING:
    from agent.nomadapi.routes import NomadApi


def registrations(api: NomadApi) -> list[dict[str, Any]]:
    """On the loop: every nomad-provider service of the running allocs."""
    core = api.core
    out = []
    for r in core.runners.values():
        if not r.alloc_running():
            continue
        address = core.deps.advertise_address or r.rec.address
        host = {p.label: p.host for p in r.rec.ports}
        index = core.changes.of("alloc", r.id)
        owners = [("group", s) for s in r.group.services] + [
            (t.name, s) for t in r.group.tasks for s in t.services
        ]
        for owner, svc in owners:
            if svc.provider != "nomad":
                continue
            port = host.get(svc.port, int(svc.port) if svc.port.isdigit() else 0)
            out.append(
                {
                    "ID": f"_nomad-task-{r.id}-{owner}-{svc.name}-{svc.port}",
                    "ServiceName": svc.name,
                    "Namespace": "default",
                    "NodeID": api.node.id,
                    "Datacenter": api.node.datacenter,
                    "JobID": r.job.id,
                    "AllocID": r.id,
                    "Tags": list(svc.tags) or None,
                    "Address": address,
                    "Port": port,
                    "CreateIndex": index,
                    "ModifyIndex": index,
                }
            )
    return sorted(out, key=lambda s: (s["ServiceName"], s["ID"]))


def service_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    core = api.core

    def services(groups: tuple[str, ...], body: bytes) -> Response:
        def read() -> list[dict[str, Any]]:
            tags: dict[str, set[str]] = {}
            for s in registrations(api):
                tags.setdefault(s["ServiceName"], set()).update(s["Tags"] or ())
            stubs = [{"ServiceName": n, "Tags": sorted(t)} for n, t in sorted(tags.items())]
            return [{"Namespace": "default", "Services": stubs}] if stubs else []

        return answer(blocking(core.changes, ("alloc",), lambda: core.call(read)))

    def service(groups: tuple[str, ...], body: bytes) -> Response:
        name = unquote(groups[0])
        return answer(
            blocking(
                core.changes,
                ("alloc",),
                lambda: core.call(lambda: [s for s in registrations(api) if s["ServiceName"] == name]),
            )
        )

    return [("GET", r"/v1/services", services), ("GET", r"/v1/service/([^/]+)", service)]
