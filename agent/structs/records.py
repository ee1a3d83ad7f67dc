"""What the agent keeps about an allocation and its tasks: typed records with explicit states.

Stored as JSON objects in the state store (kinds "alloc" and "task"); `to_record`/`from_record` are
the only way between the two. A stored value that does not fit (an unknown status, a port that is
not a number) raises `RecordError`, which restore treats like any corrupt record: that alloc is
replaced, the others restore untouched.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from agent.errors import AgentError, NotFound
from agent.structs.layout import NodeLayout
from agent.structs.layout import from_record as layout_from_record

RECORD_FORMAT = 1  # bumped with a state-schema upgrade step when a record's shape changes
RESTART_TIMES_KEPT = 20


class RecordError(AgentError):
    """A stored alloc or task record does not have the shape this agent writes."""

    def __init__(self, kind: str, key: str, reason: str) -> None:
        self.kind, self.key, self.reason = kind, key, reason
        super().__init__(f"state {kind}/{key}: {reason}")


MIN_PREFIX = 2  # the shortest alloc id prefix that names an alloc, as Nomad's CLI takes one


def one_by_prefix(ref: str, ids: Iterable[str], what: str = "alloc") -> str:
    """The one id of `ids` that `ref` (MIN_PREFIX characters or more) starts; NotFound when none,
    AgentError naming (some of) them when more than one."""
    matches = sorted(i for i in ids if i.startswith(ref)) if len(ref) >= MIN_PREFIX else []
    if not matches:
        raise NotFound(f"no {what} {ref}")
    if len(matches) > 1:
        shown = ", ".join(m[:8] for m in matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise AgentError(f"{what} prefix {ref} matches {len(matches)} ({shown}): give more of the id")
    found: str = matches[0]
    return found


class AllocStatus(Enum):
    PENDING = "pending"  # created, being set up
    RUNNING = "running"
    FAILED = "failed"  # terminal: a replacement may have been started
    COMPLETE = "complete"  # terminal: stopped on request

    @property
    def live(self) -> bool:
        return self in (AllocStatus.PENDING, AllocStatus.RUNNING)


class DesiredStatus(Enum):
    RUN = "run"
    STOP = "stop"


class NetworkState(Enum):
    NONE = ""  # no bridge network, or not set up yet
    ADDING = "adding"  # CNI ADD under way: a crash here leaves an attachment to DEL
    READY = "ready"
    DELETED = "deleted"


class TaskState(Enum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    DEAD = "dead"


@dataclass(frozen=True)
class PortAlloc:
    label: str
    host: int  # port on the node
    to: int  # port inside the alloc's network namespace
    # Nomad's AllocatedPortMapping.HostIP of a port on a named host network (its address on this
    # node, agent.node.hostnetworks); "" on the default one (the node's address, as before)
    host_ip: str = ""

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "host": self.host, "to": self.to}
        return out | ({"host_ip": self.host_ip} if self.host_ip else {})


def _enum(kind: str, key: str, cls: type[Any], value: Any, default: Any) -> Any:
    if value is None:
        return default
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in cls)
        raise RecordError(kind, key, f"{cls.__name__} {value!r} is not one of {choices}") from None


def _int(kind: str, key: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise RecordError(kind, key, f"{what} {value!r} is not a whole number")
    try:
        return int(value)
    except ValueError:
        raise RecordError(kind, key, f"{what} {value!r} is not a whole number") from None


def _float(kind: str, key: str, what: str, value: Any, default: float = 0.0) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(kind, key, f"{what} {value!r} is not a number")
    return float(value)


def _layout(key: str, raw: Any) -> NodeLayout | None:
    try:
        return layout_from_record(raw)
    except (TypeError, ValueError) as exc:
        raise RecordError("alloc", key, str(exc)) from None


@dataclass(frozen=True)
class RescheduleEvent:
    """One entry of Nomad's RescheduleTracker: the alloc `prev_alloc` (on node `prev_node`) was
    replaced at `time` (unix seconds) after `delay` seconds (agent.decide.reschedule.plan_reschedule)."""

    time: float
    prev_alloc: str
    prev_node: str
    delay: float

    def to_record(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "prev_alloc": self.prev_alloc,
            "prev_node": self.prev_node,
            "delay": self.delay,
        }


def _events(key: str, raw: Any) -> tuple[RescheduleEvent, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(e, Mapping) for e in raw):
        raise RecordError("alloc", key, "reschedule_events is not a list of events")
    return tuple(
        RescheduleEvent(
            _float("alloc", key, f"reschedule_events[{i}].time", e.get("time")),
            str(e.get("prev_alloc") or ""),
            str(e.get("prev_node") or ""),
            _float("alloc", key, f"reschedule_events[{i}].delay", e.get("delay")),
        )
        for i, e in enumerate(raw)
    )


@dataclass(frozen=True)
class AllocRecord:
    id: str
    job: str
    group: str
    status: AllocStatus = AllocStatus.PENDING
    desired: DesiredStatus = DesiredStatus.RUN
    reason: str = ""
    created: float = field(default_factory=time.time)
    ports: tuple[PortAlloc, ...] = ()
    address: str = ""
    network_state: NetworkState = NetworkState.NONE
    replaces: str = ""
    replaced_by: str = ""
    # Failed and a replacement is owed (written with the failure, cleared when the replacement is
    # recorded): a restore after a kill in between starts it (Restore.restore).
    replace_pending: bool = False
    job_version: int = 0  # the version of its job the alloc was placed for (api.Allocation's JobVersion)
    # The names of its netns, task cgroups and CNI network (agent.structs.layout), kept for its whole life;
    # None: written by an agent before records held them (restore finds them on the node).
    layout: NodeLayout | None = None
    # Nomad's Allocation.EvalID (the evaluation that placed it: agent.nomadapi.node.Evals) and
    # CreateIndex (the change index of its creation, never rewritten); ""/0: written by an agent
    # before records held them.
    eval_id: str = ""
    create_index: int = 0
    # Nomad's RescheduleTracker: the reschedules that led to this alloc, the last one its own
    reschedule_events: tuple[RescheduleEvent, ...] = ()
    # Failed and owed a replacement after a delay (agent.decide.reschedule.plan_reschedule): the evaluation
    # that places it (Nomad's FollowupEvalID), when it is due (unix seconds) and the delay it waits
    followup_eval_id: str = ""
    reschedule_due: float = 0.0
    reschedule_delay: float = 0.0

    @property
    def live(self) -> bool:
        """Owns resources on the node: the sweeper keeps them, restore picks it up."""
        return self.status.live

    def with_(self, **changes: Any) -> AllocRecord:
        return replace(self, **changes)

    def to_record(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "id": self.id,
            "job": self.job,
            "group": self.group,
            "status": self.status.value,
            "desired": self.desired.value,
            "reason": self.reason,
            "created": self.created,
            "ports": [p.to_record() for p in self.ports],
            "address": self.address,
            "network_state": self.network_state.value,
            "replaces": self.replaces,
            "replaced_by": self.replaced_by,
            "replace_pending": self.replace_pending,
            "job_version": self.job_version,
            "layout": self.layout.to_record() if self.layout is not None else None,
            "eval_id": self.eval_id,
            "create_index": self.create_index,
            "reschedule_events": [e.to_record() for e in self.reschedule_events],
            "followup_eval_id": self.followup_eval_id,
            "reschedule_due": self.reschedule_due,
            "reschedule_delay": self.reschedule_delay,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], key: str = "") -> AllocRecord:
        """Reads every shape an earlier agent wrote (fields it did not have take their defaults)."""
        key = key or str(rec.get("id", "?"))
        for name in ("id", "job", "group"):
            if not isinstance(rec.get(name), str) or not rec.get(name):
                raise RecordError("alloc", key, f"{name} is missing or not a string")
        ports_raw = rec.get("ports") or []
        if not isinstance(ports_raw, list):
            raise RecordError("alloc", key, "ports is not a list")
        ports = []
        for i, p in enumerate(ports_raw):
            if not isinstance(p, Mapping) or not isinstance(p.get("label"), str):
                raise RecordError("alloc", key, f"ports[{i}] is not a port record")
            ports.append(
                PortAlloc(
                    str(p["label"]),
                    _int("alloc", key, f"ports[{i}].host", p.get("host")),
                    _int("alloc", key, f"ports[{i}].to", p.get("to")),
                    str(p.get("host_ip") or ""),
                )
            )
        return cls(
            id=str(rec["id"]),
            job=str(rec["job"]),
            group=str(rec["group"]),
            status=_enum("alloc", key, AllocStatus, rec.get("status"), AllocStatus.PENDING),
            desired=_enum("alloc", key, DesiredStatus, rec.get("desired"), DesiredStatus.RUN),
            reason=str(rec.get("reason") or ""),
            created=_float("alloc", key, "created", rec.get("created")),
            ports=tuple(ports),
            address=str(rec.get("address") or ""),
            network_state=_enum("alloc", key, NetworkState, rec.get("network_state"), NetworkState.NONE),
            replaces=str(rec.get("replaces") or ""),
            replaced_by=str(rec.get("replaced_by") or ""),
            replace_pending=bool(rec.get("replace_pending", False)),
            job_version=_int("alloc", key, "job_version", rec.get("job_version", 0)),
            layout=_layout(key, rec.get("layout")),
            eval_id=str(rec.get("eval_id") or ""),
            create_index=_int("alloc", key, "create_index", rec.get("create_index", 0)),
            reschedule_events=_events(key, rec.get("reschedule_events")),
            followup_eval_id=str(rec.get("followup_eval_id") or ""),
            reschedule_due=_float("alloc", key, "reschedule_due", rec.get("reschedule_due")),
            reschedule_delay=_float("alloc", key, "reschedule_delay", rec.get("reschedule_delay")),
        )


@dataclass(frozen=True)
class TaskRecord:
    """`restarts` counts every restart (as Nomad's task state); `restart_times` only those the
    restart policy counts (the task's own exits, at the time the policy decided), which its
    `attempts` are checked against. `restart_due`: when a restart the policy put on a timer is due
    (0: none), so that a restore resumes it rather than counting the same exit again. `completed`:
    dead for good, not failed (a batch task that exited 0): nothing restarts it. `interval_start`:
    the start of the restart policy's current interval (0: none yet, the task's first start)."""

    state: TaskState = TaskState.PENDING
    restarts: int = 0
    restart_times: tuple[float, ...] = ()
    failed: bool = False
    restart_due: float = 0.0
    completed: bool = False
    interval_start: float = 0.0

    def with_(self, **changes: Any) -> TaskRecord:
        return replace(self, **changes)

    def restarted(self) -> TaskRecord:
        """The task is being started again (whatever the cause): no restart is owed any more."""
        return replace(self, restarts=self.restarts + 1, restart_due=0.0)

    def counted(self, now: float, due: float, interval_start: float) -> TaskRecord:
        """The policy decided to restart the task at `due` after its exit at `now`; the exit counts
        in the interval that started at `interval_start`."""
        times = (*self.restart_times, now)[-RESTART_TIMES_KEPT:]
        return replace(self, restart_times=times, restart_due=due, interval_start=interval_start)

    def to_record(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "state": self.state.value,
            "restarts": self.restarts,
            "restart_times": list(self.restart_times),
            "failed": self.failed,
            "restart_due": self.restart_due,
            "completed": self.completed,
            "interval_start": self.interval_start,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], key: str = "?") -> TaskRecord:
        times = rec.get("restart_times") or []
        if not isinstance(times, list):
            raise RecordError("task", key, "restart_times is not a list")
        return cls(
            state=_enum("task", key, TaskState, rec.get("state"), TaskState.PENDING),
            restarts=_int("task", key, "restarts", rec.get("restarts", 0)),
            restart_times=tuple(_float("task", key, "restart time", t) for t in times),
            failed=bool(rec.get("failed", False)),
            restart_due=_float("task", key, "restart_due", rec.get("restart_due")),
            completed=bool(rec.get("completed", False)),
            interval_start=_float("task", key, "interval_start", rec.get("interval_start")),
        )
