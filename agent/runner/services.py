"""An alloc's services in Consul (its documented HTTP API), registered when the alloc runs and
deregistered at teardown; failures are task events, never fatal to the alloc. And this node's own
Nomad data: the `provider = "nomad"` services of its running allocs (`nomad_registrations`, what
/v1/services answers) and its variables (kind "var" of the store), as a task's templates may read
them (`NomadData`, agent.templates.nomadfuncs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.consul import ConsulClient, ConsulError, registrations
from agent.model import Group
from agent.records import AllocRecord, DesiredStatus
from agent.state import StateStore
from agent.state.changes import ChangeIndex
from agent.templates.nomadfuncs import NomadView, Workload, readable_paths
from agent.templates.nomadwatch import NomadWatch, Probe

if TYPE_CHECKING:
    from agent.runner.alloc import AllocRunner

VAR_KIND = "var"  # the store's kind of Nomad variables (agent.nomadapi.variables)

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


def nomad_registrations(
    runners: Iterable[AllocRunner],
    *,
    advertise_address: str,
    node_id: str,
    datacenter: str,
    index_of: Callable[[str], int],
) -> list[dict[str, Any]]:
    """On the loop: every nomad-provider service of the running allocs, as api.ServiceRegistration
    (address: the advertise address, else the alloc's; port: the mapped host port of its label, as
    Nomad's `address_mode = "auto"`), sorted by name and ID."""
    out = []
    for r in runners:
        if not r.alloc_running() or r.rec.desired is DesiredStatus.STOP:
            continue  # a stopping alloc's services are gone at once (Nomad's preKill, shutdown_delay)
        address = advertise_address or r.rec.address
        host = {p.label: p.host for p in r.rec.ports}
        index = index_of(r.id)
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
                    "NodeID": node_id,
                    "Datacenter": datacenter,
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


def variable_json(path: str, rec: Mapping[str, Any], *, metadata: bool = False) -> dict[str, Any]:
    """A stored variable as api.Variable (with its Items), or api.VariableMetadata."""
    out: dict[str, Any] = {
        "Namespace": "default",
        "Path": path,
        "CreateIndex": int(rec.get("create_index", 0)),
        "ModifyIndex": int(rec.get("modify_index", 0)),
        "CreateTime": int(rec.get("create_time", 0)),
        "ModifyTime": int(rec.get("modify_time", 0)),
    }
    if not metadata:
        out["Items"] = dict(rec.get("items") or {})
    return out


def client_id(data_dir: Path) -> Callable[[], str]:
    """This node's ID as its Nomad API gives it (agent.nomadapi.node.NodeIdentity, which writes
    `<data dir>/client/client-id` when the agent starts): read once found, "" until then."""
    found: list[str] = []

    def read() -> str:
        if not found:
            try:
                found.append((data_dir / "client" / "client-id").read_text().strip())
            except OSError:
                return ""
        return found[0]

    return read


class NomadData:
    """This node's Nomad variables and native services as a task's templates may read them
    (agent.templates.nomadfuncs.NomadSource), on the main loop: the variables of the four paths
    Nomad's implicit workload policy grants the task (no other path is asked of the store), the
    services of the running allocs; and the watch that re-renders a task when what it read
    changes (agent.templates.nomadwatch)."""

    def __init__(
        self,
        store: StateStore,
        runners: Callable[[], Mapping[str, AllocRunner]],
        changes: ChangeIndex,
        schedule: Callable[[float, Callable[[], None]], None],
        datacenter: str,
        advertise_address: str,
        data_dir: Path,
    ) -> None:
        self.store = store
        self.runners = runners
        self.changes = changes
        self.datacenter = datacenter
        self.advertise_address = advertise_address
        self.node_id = client_id(data_dir)
        self.watcher = NomadWatch(lambda: changes.current((VAR_KIND, "alloc")), schedule)

    def view(self, alloc_id: str, task: str) -> NomadView | None:
        runner = self.runners().get(alloc_id)
        if runner is None:
            return None
        workload = Workload(runner.job.id, runner.group.name, task)
        variables = {}
        for path in sorted(readable_paths(workload)):
            rec = self.store.get(VAR_KIND, path)
            if rec is not None:
                variables[path] = variable_json(path, rec)
        services = nomad_registrations(
            self.runners().values(),
            advertise_address=self.advertise_address,
            node_id=self.node_id(),
            datacenter=self.datacenter,
            index_of=lambda a: self.changes.of("alloc", a),
        )
        return NomadView(workload, variables, tuple(services))

    def watch(self, key: str, probe: Probe, fire: Callable[[], None]) -> None:
        self.watcher.watch(key, probe, fire)

    def unwatch(self, key: str) -> None:
        self.watcher.unwatch(key)
