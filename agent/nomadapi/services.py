"""Nomad's native service discovery for this node (`provider = "nomad"` services):
`GET /v1/services` (api.ServiceRegistrationListStub per namespace) and `GET /v1/service/:name`
(api.ServiceRegistration, api/services.go). A service is listed while its alloc runs; its address
is the node's advertise address (else the alloc's) and its port the mapped host port of its label,
as Nomad's `address_mode = "auto"`. Consul services (the default provider) are not listed here.
A task's templates read the same registrations with `nomadService` and `nomadServices`
(agent.templates.nomadfuncs), and render again when they change.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response
from agent.nomadapi.context import Allocs, Changes, NodeParts, OnLoop
from agent.nomadapi.http import answer, blocking
from agent.runner.services import nomad_registrations


class ServicePort(OnLoop, Changes, Allocs, NodeParts, Protocol):
    """The runners (their services), the node's advertise address, the loop and the change index."""


def registrations(api: ServicePort) -> list[dict[str, Any]]:
    """On the loop: every nomad-provider service of the running allocs (what the tasks' templates
    read too: agent.runner.services.NomadData)."""
    return nomad_registrations(
        api.runners.values(),
        advertise_address=api.deps.advertise_address,
        node_id=api.node.id,
        datacenter=api.node.datacenter,
        index_of=lambda alloc_id: api.changes.of("alloc", alloc_id),
    )


def service_routes(api: ServicePort) -> list[tuple[str, str, Handler]]:
    def services(groups: tuple[str, ...], body: bytes) -> Response:
        def read() -> list[dict[str, Any]]:
            tags: dict[str, set[str]] = {}
            for s in registrations(api):
                tags.setdefault(s["ServiceName"], set()).update(s["Tags"] or ())
            stubs = [{"ServiceName": n, "Tags": sorted(t)} for n, t in sorted(tags.items())]
            return [{"Namespace": "default", "Services": stubs}] if stubs else []

        return answer(blocking(api.changes, ("alloc",), lambda: api.call(read)))

    def service(groups: tuple[str, ...], body: bytes) -> Response:
        name = unquote(groups[0])
        return answer(
            blocking(
                api.changes,
                ("alloc",),
                lambda: api.call(lambda: [s for s in registrations(api) if s["ServiceName"] == name]),
            )
        )

    return [("GET", r"/v1/services", services), ("GET", r"/v1/service/([^/]+)", service)]
