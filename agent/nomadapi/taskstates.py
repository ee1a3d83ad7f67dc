"""Pure views: an agent task's events and state as Nomad's api.TaskEvent and api.TaskState
(api/tasks.go), and each task's events of an alloc (what TaskStates shows). Times in seconds since
the epoch in, Go's nanoseconds and time.Time out (agent.nomadapi.gojson). No I/O here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from agent.nomadapi.gojson import duration_ns, go_bool, go_int, go_string, go_time, ns, signal_number

# The agent's task states -> Nomad's ("pending", "running", "dead").
_TASK_STATE = {"pending": "pending", "starting": "pending", "running": "running", "dead": "dead"}
_STARTED = frozenset({"Started"})
_FINISHED = frozenset({"Terminated", "Killed", "Not Restarting"})
_RESTARTED = frozenset({"Restarting", "Restart Signaled"})


class TaskEventLike(Protocol):
    """What the views read of an agent event (agent.state.store.Event)."""

    @property
    def time(self) -> float: ...
    @property
    def type(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def details(self) -> Mapping[str, Any]: ...
    @property
    def task(self) -> str: ...  # "" for an event of the whole alloc


# --- task states and events -------------------------------------------------------------------------

_E = TypeVar("_E", bound=TaskEventLike)


# The deprecated flat fields of api.TaskEvent read from one detail each (text), by the detail's name.
_TEXT_DETAILS = {
    "restart_reason": "RestartReason",
    "setup_error": "SetupError",
    "driver_error": "DriverError",
    "driver_message": "DriverMessage",
    "kill_reason": "KillReason",
    "kill_error": "KillError",
    "download_error": "DownloadError",
    "validation_error": "ValidationError",
    "failed_sibling": "FailedSibling",
    "task_signal_reason": "TaskSignalReason",
    "task_signal": "TaskSignal",
    "generic_source": "GenericSource",
}
_EVENT_ZERO: dict[str, Any] = {  # api.TaskEvent's fields in its order, each at its zero value
    "Type": "",
    "Time": 0,
    "DisplayMessage": "",
    "Details": {},
    "Message": "",
    "FailsTask": False,
    "RestartReason": "",
    "SetupError": "",
    "DriverError": "",
    "DriverMessage": "",
    "ExitCode": 0,
    "Signal": 0,
    "KillReason": "",
    "KillTimeout": 0,
    "KillError": "",
    "StartDelay": 0,
    "DownloadError": "",
    "ValidationError": "",
    "DiskLimit": 0,
    "DiskSize": 0,
    "FailedSibling": "",
    "VaultError": "",
    "TaskSignalReason": "",
    "TaskSignal": "",
    "GenericSource": "",
}


def task_event(ev: TaskEventLike) -> dict[str, Any]:
    """api.TaskEvent (api/tasks.go). Details (snake_case keys, as Nomad's) become strings; the deprecated
    flat fields are filled from the details Nomad names them by, zero otherwise (a listing shapes
    tens of thousands of these: only the details an event has are read)."""
    d = ev.details or {}
    out = dict(_EVENT_ZERO)
    out["Type"], out["Time"], out["DisplayMessage"], out["Message"] = (
        ev.type,
        ns(ev.time),
        ev.message,
        ev.message,
    )
    out["Details"] = {str(k): go_string(v) for k, v in d.items()}
    if ev.type == "Driver":  # a driver's event: its message is the DriverMessage (alloc_runner.go)
        out["DriverMessage"] = ev.message
    if not d:
        return out
    for key, value in d.items():
        if value is not None and (name := _TEXT_DETAILS.get(key)) is not None:
            out[name] = go_string(value)
    vault = d.get("vault_renewal_error")
    if (vault := vault if vault is not None else d.get("vault_error")) is not None:
        out["VaultError"] = go_string(vault)
    out["FailsTask"] = go_bool(d.get("fails_task"))
    out["ExitCode"] = go_int(d.get("exit_code"))
    out["Signal"] = signal_number(d.get("signal"))
    out["KillTimeout"] = duration_ns(d.get("kill_timeout"))
    out["StartDelay"] = duration_ns(d.get("start_delay"))
    out["DiskLimit"] = go_int(d.get("disk_limit"))
    out["DiskSize"] = go_int(d.get("disk_size"))
    return out


def events_by_task(events: Sequence[_E], tasks: Sequence[str]) -> dict[str, list[_E]]:
    """Each task's events, as TaskStates shows them. An event of the whole alloc (its network, its
    stop, its failure) is in every task's list, as Nomad's alloc runner appends an alloc-wide event to
    each task's state (pure)."""
    out: dict[str, list[_E]] = {t: [] for t in tasks}
    for ev in events:
        for name in [ev.task] if ev.task else tasks:
            out.setdefault(name, []).append(ev)
    return out


def _last(events: Sequence[TaskEventLike], types: frozenset[str]) -> float | None:
    return next((e.time for e in reversed(events) if e.type in types), None)


def task_state(state: str, failed: bool, restarts: int, events: Sequence[TaskEventLike]) -> dict[str, Any]:
    """api.TaskState (api/tasks.go): `state` is the agent's task state ("starting" is Nomad's
    "pending"), `events` the task's, oldest first. StartedAt is the last "Started"; FinishedAt the last
    "Terminated", "Killed" or "Not Restarting" of a dead task (zero while it is not dead); LastRestart
    the last "Restarting" or "Restart Signaled". (No TaskHandle: nomad/structs comments it out.)"""
    nomad_state = _TASK_STATE.get(state, "pending")
    finished = _last(events, _FINISHED) if nomad_state == "dead" else None
    return {
        "State": nomad_state,
        "Failed": failed,
        "Restarts": restarts,
        "LastRestart": go_time(_last(events, _RESTARTED)),
        "StartedAt": go_time(_last(events, _STARTED)),
        "FinishedAt": go_time(finished),
        "Events": [task_event(e) for e in events],
    }
