"""An alloc's Consul services (its documented HTTP API): built from the alloc's record and group,
registered when the alloc runs and deregistered at teardown; failures are task events, never fatal
to the alloc. Low in the runner: the runner's deps hold the registrar."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent.consul.catalog import ConsulClient, ConsulError, registrations
from agent.structs.model import Group
from agent.structs.records import AllocRecord

EventSink = Callable[[str, str, str], None]  # (task, type, message)


def service_definitions(
    rec: AllocRecord, group: Group, advertise_address: str
) -> list[tuple[str, dict[str, Any] | str]]:
    """This alloc's Consul services (group and task services of provider "consul") in Consul's shape,
    each with its task ("" for the group's), or why a task's could not be built (Nomad's "unable to
    get address for service ..."); provider "nomad" services are Nomad's own
    (agent.nomadapi.services), never sent to Consul. The agent places no canaries."""
    addr = advertise_address or rec.address
    ports: Sequence[dict[str, Any]] = [p.to_record() for p in rec.ports]
    owners = [("", group.services)] + [(t.name, t.services) for t in group.tasks]
    out: list[tuple[str, dict[str, Any] | str]] = []
    for task, services in owners:
        consul = [s for s in services if s.provider == "consul"]
        try:
            regs = registrations(rec.id, task, consul, addr, ports, alloc_address=rec.address)
        except ConsulError as exc:
            out.append((task, str(exc)))
            continue
        out += [(task, r) for r in regs]
    return out


class ServiceRegistrar:
    def __init__(self, consul: ConsulClient) -> None:
        self.consul = consul

    def register(self, services: list[tuple[str, dict[str, Any] | str]], event: EventSink) -> None:
        for task, svc in services:
            if isinstance(svc, str):
                event(task, "Service Registration Failed", svc)
                continue
            try:
                self.consul.register(svc)
                event(task, "Service Registered", f"{svc['Name']} in Consul")
            except ConsulError as exc:
                event(task, "Service Registration Failed", str(exc))

    def deregister(self, services: list[tuple[str, dict[str, Any] | str]], event: EventSink) -> None:
        for task, svc in services:
            if isinstance(svc, str):
                continue
            try:
                self.consul.deregister(str(svc["ID"]))
            except ConsulError as exc:
                event(task, "Service Deregistration Failed", str(exc))
