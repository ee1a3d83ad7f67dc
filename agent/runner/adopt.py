"""Adoption: the tasks still running after the agent's state database was lost.

When the state store finds its file corrupt at open it moves it aside and starts empty
(`StateStore.recovered_from` names the moved file). The allocs the node still runs are then unknown
to the agent, and the orphan sweeper would kill them. Instead they are *adopted*: found by what the
drivers leave on the node (docker containers' `org.fieldlab.*` labels, exec/raw_exec tasks' cgroups
named `<alloc>.<task>`), kept out of the sweep, listed by the API with status "adopted" and an
"Adopted" event that says where the old database went, and removed when an operator stops them
(`DELETE /v1/job/<job>`, or `POST /v1/allocation/<id>/stop`).

The jobspec was lost with the database: an adopted alloc is never restarted, replaced or
re-rendered; its tasks just run until they exit or are stopped. The adoption is kept in the fresh
database (kind "adopted"), so a later restart of the agent adopts the same allocs again rather than
sweeping them; one whose containers and cgroups are all gone by then is forgotten.

`plan_adoption` is pure (plain listings in, adopted allocs out); `Adoption` observes, stores and stops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agent.drivers.base import LABEL_ALLOC, LABEL_GROUP, LABEL_JOB, LABEL_ROLE, LABEL_TASK, TaskHandle
from agent.drivers.cgroups import Cgroups
from agent.drivers.docker import DockerDriver
from agent.drivers.hostproc import task_environ
from agent.drivers.registry import DriverRegistry
from agent.errors import AgentError
from agent.state import StateStore
from agent.structs.records import MIN_PREFIX

log = logging.getLogger(__name__)

KIND_ADOPTED = "adopted"  # key: alloc id; an AdoptedAlloc's record
STATUS_ADOPTED = "adopted"  # the alloc status the API shows (never one of AllocStatus's)
EVENT_ADOPTED = "Adopted"
STOP_TIMEOUT = 10.0  # seconds a task gets between SIGTERM (docker stop) and SIGKILL


@dataclass(frozen=True)
class NodeContainer:
    """A managed docker container as listed on the node (plain data)."""

    id: str
    name: str
    labels: Mapping[str, str]
    running: bool


@dataclass(frozen=True)
class NodeCgroup:
    """A process task's cgroup (`<alloc>.<task>`) as listed on the node, with the environment of one
    of its processes (its NOMAD_JOB_ID and NOMAD_GROUP_NAME say whose it is)."""

    name: str
    pids: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AdoptedTask:
    task: str  # the task's name ("" for a pause container)
    kind: str  # "container" or "cgroup"
    target: str  # the container id, or the cgroup name
    role: str  # "task" or "pause" (a container), "process" (a cgroup)
    running: bool
    name: str = ""  # the container's name, or the cgroup's pids

    def to_record(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "kind": self.kind,
            "target": self.target,
            "role": self.role,
            "running": self.running,
            "name": self.name,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> AdoptedTask:
        return cls(
            str(rec["task"]),
            str(rec["kind"]),
            str(rec["target"]),
            str(rec["role"]),
            bool(rec["running"]),
            str(rec.get("name", "")),
        )


@dataclass(frozen=True)
class AdoptedAlloc:
    id: str
    job: str  # "" when nothing on the node says (a process task with an unreadable environment)
    group: str
    tasks: tuple[AdoptedTask, ...]
    adopted_at: float
    lost_state: str  # where the corrupt state database was moved

    def to_record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job,
            "group": self.group,
            "tasks": [t.to_record() for t in self.tasks],
            "adopted_at": self.adopted_at,
            "lost_state": self.lost_state,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> AdoptedAlloc:
        return cls(
            str(rec["id"]),
            str(rec.get("job", "")),
            str(rec.get("group", "")),
            tuple(AdoptedTask.from_record(t) for t in rec.get("tasks") or ()),
            float(rec.get("adopted_at") or 0.0),
            str(rec.get("lost_state", "")),
        )

    @property
    def reason(self) -> str:
        return (
            f"adopted: the agent's state database was corrupt and moved aside to {self.lost_state};"
            " running, not managed (not restarted or replaced)"
        )

    def view(self) -> dict[str, Any]:
        """The API's view, in the shape of a managed alloc's (agent.runner.view) plus `adopted`."""
        pause = next((t for t in self.tasks if t.role == "pause"), None)
        return {
            "id": self.id,
            "job": self.job,
            "group": self.group,
            "status": STATUS_ADOPTED,
            "desired": "run",
            "reason": self.reason,
            "replaced_by": "",
            "replaces": "",
            "created": self.adopted_at,
            "network": {
                "mode": "unknown",
                "address": "",
                "ports": [],
                "pause_container": pause.target if pause else None,
            },
            "tasks": {
                t.task: {
                    "state": "running" if t.running else "dead",
                    "restarts": 0,
                    "failed": False,
                    "container": t.target if t.kind == "container" else None,
                    "cgroup": t.target if t.kind == "cgroup" else None,
                }
                for t in self.tasks
                if t.role != "pause"
            },
            "adopted": {"state_db": self.lost_state, "at": self.adopted_at},
        }


def adoption_message(a: AdoptedAlloc) -> str:
    names = ", ".join(sorted(t.task for t in a.tasks if t.role != "pause")) or "none"
    stop = f"`fieldlab-agent job stop {a.job}` (nomad job stop {a.job}) or " if a.job else ""
    return (
        f"Restore failed: the agent's state database was corrupt and was moved aside to {a.lost_state};"
        f" this alloc's tasks ({names}) were found still running and are adopted: left running, not"
        " managed. The jobspec was lost with the database, so they are not restarted, replaced or"
        f" re-rendered when they exit. To remove them: {stop}`fieldlab-agent alloc stop {a.id}`."
    )


def _found_tasks(
    containers: Iterable[NodeContainer], cgroups: Iterable[NodeCgroup]
) -> dict[str, tuple[str, str, list[AdoptedTask]]]:
    """Everything on the node by alloc id: (job, group, tasks)."""
    found: dict[str, tuple[str, str, list[AdoptedTask]]] = {}
    for c in containers:
        alloc = c.labels.get(LABEL_ALLOC, "")
        if not alloc:
            continue
        job, group, tasks = found.get(alloc, ("", "", []))
        role = c.labels.get(LABEL_ROLE, "task")
        task = "" if role == "pause" else c.labels.get(LABEL_TASK, "") or c.name
        tasks.append(AdoptedTask(task, "container", c.id, role, c.running, c.name))
        found[alloc] = (job or c.labels.get(LABEL_JOB, ""), group or c.labels.get(LABEL_GROUP, ""), tasks)
    for g in cgroups:
        alloc, sep, task = g.name.rpartition(".")
        if not sep or not alloc or not task:
            continue
        job, group, tasks = found.get(alloc, ("", "", []))
        pids = " ".join(str(p) for p in g.pids)
        tasks.append(AdoptedTask(task, "cgroup", g.name, "process", bool(g.pids), f"pids {pids}"))
        found[alloc] = (
            job or g.env.get("NOMAD_JOB_ID", ""),
            group or g.env.get("NOMAD_GROUP_NAME", ""),
            tasks,
        )
    return found


def plan_adoption(
    known: Iterable[str],
    containers: Iterable[NodeContainer],
    cgroups: Iterable[NodeCgroup],
    *,
    adopted: Mapping[str, AdoptedAlloc],
    lost_state: str,
    now: float,
) -> tuple[list[AdoptedAlloc], list[str]]:
    """Pure: which allocs are adopted now, and which adopted ones are gone from the node.

    An alloc the agent knows (`known`: its restored runners) is never adopted. One already adopted
    (`adopted`, from the store) is kept, with what of it is on the node now. With `lost_state` (the
    state database was just lost), every other alloc with something still running (a running
    container, a cgroup with processes) is adopted with all it has on the node, stopped containers
    too (their logs are the operator's). Without it nothing new is adopted: leftovers are the
    sweeper's, as always."""
    known_ids = set(known)
    found = _found_tasks(containers, cgroups)
    out: list[AdoptedAlloc] = []
    for alloc, (job, group, tasks) in sorted(found.items()):
        if alloc in known_ids:
            continue
        order = sorted(tasks, key=lambda t: (t.role == "pause", t.task, t.target))
        if alloc in adopted:
            before = adopted[alloc]
            out.append(
                replace(before, job=before.job or job, group=before.group or group, tasks=tuple(order))
            )
        elif lost_state and any(t.running for t in tasks):
            out.append(AdoptedAlloc(alloc, job, group, tuple(order), now, lost_state))
    gone = sorted(a for a in adopted if a not in found and a not in known_ids)
    return out, gone


class NodeTasks(Protocol):
    """What adoption needs of the node: list what the drivers left, and stop it."""

    def list(self) -> tuple[list[NodeContainer], list[NodeCgroup]]: ...

    def stop_container(self, container_id: str, timeout: float) -> None: ...

    def stop_cgroup(self, name: str, timeout: float) -> None: ...


class DriverNode:
    """NodeTasks over the docker driver (when there is one) and the process drivers' cgroups."""

    def __init__(self, docker: DockerDriver | None) -> None:
        self.docker = docker

    def list(self) -> tuple[list[NodeContainer], list[NodeCgroup]]:
        containers = [
            NodeContainer(c.id, c.name, dict(c.labels), c.status == "running")
            for c in (self.docker.managed_containers() if self.docker is not None else [])
        ]
        cgroups = []
        for name in Cgroups.names():
            pids = tuple(Cgroups.found(name).pids())
            cgroups.append(NodeCgroup(name, pids, task_environ(pids[0]) if pids else {}))
        return containers, cgroups

    def stop_container(self, container_id: str, timeout: float) -> None:
        if self.docker is None:
            raise AgentError(f"container {container_id[:12]}: no docker driver to stop it with")
        self.docker.stop(TaskHandle("docker", container_id, ""), timeout)
        self.docker.remove_container(container_id)

    def stop_cgroup(self, name: str, timeout: float) -> None:
        cg = Cgroups.found(name)
        pidfds = []
        for pid in cg.pids():
            with contextlib.suppress(ProcessLookupError, OSError):
                pidfds.append(os.pidfd_open(pid))  # readable once the process has exited
                os.kill(pid, signal.SIGTERM)
        try:
            deadline = time.monotonic() + timeout
            waiting = list(pidfds)
            while waiting and (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select(waiting, [], [], left)
                waiting = [fd for fd in waiting if fd not in ready]
        finally:
            for fd in pidfds:
                os.close(fd)
        cg.kill_all()  # SIGKILL what is left, then remove the cgroup


def node_of(drivers: DriverRegistry) -> DriverNode:
    docker = next((d for d in drivers.all().values() if isinstance(d, DockerDriver)), None)
    return DriverNode(docker)


class Adoption:
    """The adopted allocs of this agent: found at restore, kept in the store, stopped on request."""

    def __init__(self, store: StateStore, node: NodeTasks, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.node = node
        self.clock = clock
        self.allocs: dict[str, AdoptedAlloc] = {}
        # The state was lost but the node could not be listed: nothing may be swept until it is.
        self.pending = False

    def ids(self) -> set[str]:
        return set(self.allocs)

    def restore(self, known: Iterable[str]) -> list[AdoptedAlloc]:
        """At restore (after the runners): adopt what runs unowned when the state was just lost,
        re-adopt what earlier starts adopted. Returns the newly adopted."""
        known = set(known)
        lost = self.store.recovered_from
        stored = self.store.list(KIND_ADOPTED)
        before: dict[str, AdoptedAlloc] = {}
        for key, rec in stored.records.items():
            try:
                before[key] = AdoptedAlloc.from_record(rec)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("state: adopted alloc %s unreadable (%s): no longer adopted", key, exc)
        if not lost and not before:
            return []
        try:
            containers, cgroups = self.node.list()
        except Exception as exc:
            log.error("adoption: cannot list the node's tasks (%s): no orphan sweep until it can", exc)
            self.allocs.update(before)
            self.pending = True
            return []
        self.pending = False
        now, gone = plan_adoption(
            known, containers, cgroups, adopted=before, lost_state=lost, now=self.clock()
        )
        new = []
        for a in now:
            self.store.put(KIND_ADOPTED, a.id, a.to_record())
            self.allocs[a.id] = a
            if a.id not in before:
                new.append(a)
                self.store.append_event(
                    a.id,
                    "",
                    EVENT_ADOPTED,
                    adoption_message(a),
                    {"state_db": a.lost_state, "tasks": [t.to_record() for t in a.tasks]},
                )
                log.warning("alloc=%s job=%s: adopted (%s)", a.id[:8], a.job or "?", a.reason)
        for alloc_id in gone:
            log.info("alloc=%s: adopted, and nothing of it is left on the node: forgotten", alloc_id[:8])
            self._forget(alloc_id)
        return new

    def find(self, prefix: str) -> AdoptedAlloc | None:
        """The adopted alloc whose id starts with `prefix` (MIN_PREFIX characters at least), if just one."""
        matches = (
            [a for i, a in self.allocs.items() if i.startswith(prefix)] if len(prefix) >= MIN_PREFIX else []
        )
        return matches[0] if len(matches) == 1 else None

    def of_job(self, job_id: str) -> list[str]:
        return sorted(i for i, a in self.allocs.items() if a.job == job_id)

    def views(self) -> list[dict[str, Any]]:
        return [a.view() for a in self.allocs.values()]

    def stop(self, alloc_id: str, timeout: float = STOP_TIMEOUT) -> list[str]:
        """Stop and remove an adopted alloc's tasks (tasks first, the pause container last) and
        forget it; what could not be removed is returned (and the alloc stays adopted)."""
        a = self.allocs[alloc_id]
        errors = []
        for t in a.tasks:
            try:
                if t.kind == "container":
                    self.node.stop_container(t.target, timeout)
                else:
                    self.node.stop_cgroup(t.target, timeout)
            except Exception as exc:
                errors.append(f"{t.kind} {t.target}: {exc}")
        if errors:
            self.store.append_event(alloc_id, "", "Stop Failed", "; ".join(errors))
            log.error("alloc=%s: adopted alloc not fully stopped: %s", alloc_id[:8], "; ".join(errors))
            return errors
        log.info("alloc=%s job=%s: adopted alloc stopped and removed", alloc_id[:8], a.job or "?")
        self._forget(alloc_id)
        return []

    def _forget(self, alloc_id: str) -> None:
        self.allocs.pop(alloc_id, None)
        with self.store.transaction():
            self.store.delete(KIND_ADOPTED, alloc_id)
            self.store.delete_events(alloc_id)
