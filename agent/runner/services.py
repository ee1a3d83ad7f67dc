"""An alloc's services in Consul (its documented HTTP API), registered when the alloc runs and
deregistered at teardown; failures are task events, never fatal to the alloc."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent.consul import ConsulClient, ConsulError, registrations
from agent.model import Group
from agent.records import AllocRecord

EventSink = Callable[[str, str, str], None]  # (task, type, message)


def service_definitions(rec: AllocRecord, group: Group, advertise_address: str) -> list[dict[str, Any]]:
    """This alloc's Consul services (group and task services of provider "consul") in Consul's shape;
    provider "nomad" services are Nomad's own (agent.nomadapi.services), never sent to Consul."""
    addr = advertise_address or rec.address
    ports: Sequence[dict[str, Any]] = [p.to_record() for p in rec.ports]
    out = registrations(rec.id, "", [s for s in group.services if s.provider == "consul"], addr, ports)
    for t in group.tasks:
        out += registrations(rec.id, t.name, [s for s in t.services if s.provider == "consul"], addr, ports)
    return out


class ServiceRegistrar:
    def __init__(self, consul: ConsulClient) -> None:
        self.consul = consul

    def register(self, services: list[dict[str, Any]], event: EventSink) -> None:
        for svc in services:
            task = str(svc["Meta"]["task"])
            try:
                self.consul.register(svc)
                event(task, "Service Registered", f"{svc['Name']} in Consul")
            except ConsulError as exc:
                event(task, "Service Registration Failed", str(exc))

    def deregister(self, services: list[dict[str, Any]], event: EventSink) -> None:
        for svc in services:
            try:
                self.consul.deregister(str(svc["ID"]))
            except ConsulError as exc:
                event(str(svc["Meta"]["task"]), "Service Deregistration Failed", str(exc))
