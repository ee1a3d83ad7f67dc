"""An alloc's services in Consul (its documented HTTP API), registered when the alloc runs and
deregistered at teardown; failures are task events, never fatal to the alloc. And this node's own
Nomad data: the `provider = "nomad"` services of its running allocs (`nomad_registrations`, what
/v1/services answers) and its variables (kind "var" of the store), as a task's templates may read
them (`NomadData`, agent.templates.nomadfuncs)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.client.checktarget import service_address
from agent.consul.catalog import advertised_tags
from agent.runner.interfaces import AllocContext
from agent.runner.registrar import ServiceRegistrar
from agent.state import StateStore
from agent.state.changes import ChangeIndex
from agent.structs.records import DesiredStatus
from agent.templates.nomadfuncs import NomadView, ServiceCatalogue, Workload, readable_paths
from agent.templates.nomadwatch import NomadWatch, Probe

__all__ = [
    "VAR_KIND",
    "NomadData",
    "ServiceRegistrar",
    "alloc_registrations",
    "nomad_registrations",
    "variable_json",
]
log = logging.getLogger(__name__)
VAR_KIND = "var"  # the store's kind of Nomad variables (agent.nomadapi.variables)

MAX_WORKLOADS = 4096  # workloads whose variables NomadData keeps between variable writes


def nomad_registrations(
    runners: Iterable[AllocContext],
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
        out += alloc_registrations(
            r,
            advertise_address=advertise_address,
            node_id=node_id,
            datacenter=datacenter,
            index=index_of(r.id),
        )
    return sorted(out, key=_by_name_and_id)


def _by_name_and_id(s: Mapping[str, Any]) -> tuple[str, str]:
    return (str(s["ServiceName"]), str(s["ID"]))


def alloc_registrations(
    r: AllocContext, *, advertise_address: str, node_id: str, datacenter: str, index: int
) -> list[dict[str, Any]]:
    """One alloc's part of `nomad_registrations` (none while it is not running or is stopping)."""
    if not r.alloc_running() or r.rec.desired is DesiredStatus.STOP:
        return []  # a stopping alloc's services are gone at once (Nomad's preKill, shutdown_delay)
    owners = [("group", s) for s in r.group.services] + [
        (t.name, s) for t in r.group.tasks for s in t.services
    ]
    out = []
    for owner, svc in owners:
        if svc.provider != "nomad":
            continue
        got = service_address(
            mode=svc.address_mode,
            custom=svc.address,
            label=svc.port,
            ports=r.rec.ports,
            alloc_address=r.rec.address,
            node_address=advertise_address,
        )
        if isinstance(got, str):  # Nomad's registration fails the same way: nothing is listed
            log.warning("alloc=%s: unable to get address for service %r: %s", r.id[:8], svc.name, got)
            continue
        address, port = got
        out.append(
            {
                "ID": f"_nomad-task-{r.id}-{owner}-{svc.name}-{svc.port}",
                "ServiceName": svc.name,
                "Namespace": "default",
                "NodeID": node_id,
                "Datacenter": datacenter,
                "JobID": r.job.id,
                "AllocID": r.id,
                "Tags": advertised_tags(svc, canary=False) or None,  # the agent places no canaries
                "Address": address,
                "Port": port,
                "CreateIndex": index,
                "ModifyIndex": index,
            }
        )
    return out


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


@dataclass(frozen=True)
class _Part:
    """One alloc's registrations and what they were built from: its record (frozen, replaced by
    every write: AllocState.save), group and job (fixed for the runner's life), its change index
    and the node's ID. Built again only when one of those is not the same."""

    rec: object
    group: object
    job: object
    index: int
    node_id: str
    registrations: tuple[dict[str, Any], ...]

    def built_from(self, r: AllocContext, index: int, node_id: str) -> bool:
        return (
            self.rec is r.rec
            and self.group is r.group
            and self.job is r.job
            and self.index == index
            and self.node_id == node_id
        )


class NomadData:
    """This node's Nomad variables and native services as a task's templates may read them
    (agent.templates.nomadfuncs.NomadSource), on the main loop: the variables of the four paths
    Nomad's implicit workload policy grants the task (no other path is asked of the store), the
    services of the running allocs; and the watch that re-renders a task when what it read
    changes (agent.templates.nomadwatch).

    Computed once per change and shared (issue 51: a look of the watch used to build and hash every
    service of the node once per watched task). The service catalogue is built incrementally: each
    alloc's registrations are kept with what they were built from (`_Part`) and built again only
    for an alloc that changed; the catalogue is merged again only when a part did, and a look with
    no write to the store since the last (its probes of a hundred tasks) walks nothing. Everything
    a registration reads is written to the store first (AllocState.save, Core's placement), so
    the store's change index moves whenever the catalogue may have. A workload's variables are
    read again only when a variable was written. The digests the watch compares are kept with
    the catalogue and the view (agent.templates.nomadfuncs.ServiceCatalogue)."""

    def __init__(
        self,
        store: StateStore,
        runners: Callable[[], Mapping[str, AllocContext]],
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
        self._parts: dict[str, _Part] = {}
        self._catalogue = ServiceCatalogue()
        self._catalogue_at: tuple[int, int, str] | None = None  # (change index, allocs, node ID)
        self._vars_at: int | None = None  # the variables' change index of `_vars`
        self._vars: dict[Workload, dict[str, dict[str, Any]]] = {}
        self._views: dict[tuple[str, str], NomadView] = {}
        self.catalogue_builds = 0  # catalogues merged (a change that moved some alloc's services)
        self.part_builds = 0  # allocs whose registrations were built

    def view(self, alloc_id: str, task: str) -> NomadView | None:
        runner = self.runners().get(alloc_id)
        if runner is None:
            self._views.pop((alloc_id, task), None)
            return None
        workload = Workload(runner.job.id, runner.group.name, task)
        variables = self._variables(workload)
        catalogue = self.catalogue()
        key = (alloc_id, task)
        view = self._views.get(key)
        if (
            view is None
            or view.workload != workload
            or view.variables is not variables
            or view.services is not catalogue
        ):
            view = NomadView(workload, variables, catalogue)
            self._views[key] = view
        return view

    def _variables(self, workload: Workload) -> dict[str, dict[str, Any]]:
        """The variables of the workload's four paths that exist, read again after a variable write."""
        at = self.changes.current((VAR_KIND,))
        if at != self._vars_at or len(self._vars) >= MAX_WORKLOADS:
            self._vars_at, self._vars = at, {}
        found = self._vars.get(workload)
        if found is None:
            found = {}
            for path in sorted(readable_paths(workload)):
                rec = self.store.get(VAR_KIND, path)
                if rec is not None:
                    found[path] = variable_json(path, rec)
            self._vars[workload] = found
        return found

    def catalogue(self) -> ServiceCatalogue:
        """This node's Nomad service registrations now, shared by every view until they change."""
        runners = self.runners()
        node_id = self.node_id()
        at = (self.changes.current(), len(runners), node_id)
        if at == self._catalogue_at:
            return self._catalogue
        parts: dict[str, _Part] = {}
        gone = [p for k, p in self._parts.items() if k not in runners]
        moved = any(p.registrations for p in gone)
        for alloc_id, r in runners.items():
            index = self.changes.of("alloc", alloc_id)
            part = self._parts.get(alloc_id)
            if part is None or not part.built_from(r, index, node_id):
                registrations = tuple(
                    alloc_registrations(
                        r,
                        advertise_address=self.advertise_address,
                        node_id=node_id,
                        datacenter=self.datacenter,
                        index=index,
                    )
                )
                self.part_builds += 1
                moved = moved or (part.registrations if part else ()) != registrations
                part = _Part(r.rec, r.group, r.job, index, node_id, registrations)
            parts[alloc_id] = part
        self._parts = parts
        if moved:
            merged = [s for part in parts.values() for s in part.registrations]
            self._catalogue = ServiceCatalogue(sorted(merged, key=_by_name_and_id))
            self.catalogue_builds += 1
        if gone:
            self._views = {k: v for k, v in self._views.items() if k[0] in runners}
        self._catalogue_at = at
        return self._catalogue

    def watch(self, key: str, probe: Probe, fire: Callable[[], None]) -> None:
        self.watcher.watch(key, probe, fire)

    def unwatch(self, key: str) -> None:
        self.watcher.unwatch(key)
