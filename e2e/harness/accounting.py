"""Start accounting: every start of a task is explained by exactly one decision of the agent.

The agent writes a "Started" event for each start of a task, `details.cause` naming why (agent/
decisions.py StartCause). Each cause answers one kind of decision, which the events record before
the start:

    first start          "Received" (the alloc was placed)
    restart policy       "Terminated" then "Restarting" (the task exited; the policy restarts it)
    network recovery     "Restart Signaled" of the task (the group's network is recreated)
    change_mode restart  "Restart Signaled" of the task (a template or Vault token changed)
    operator restart     "Restart Signaled" of the task (the API's restart)
    restore              "Restored", "Restore Network" or "Setup Resumed" of the alloc (an agent
                         start), or "Restart Signaled" of the task (restore recreated the network)

A start answers every decision of its task still open (Nomad's restart tracker: a pending restart is
cancelled by any later start), so a second start for the same decision is caught: a restart timer
firing after a network recovery already restarted the task, two recoveries' starts for one "Restart
Signaled". Also: a start with no cause or an unknown one, a "restart policy" start with no exit before
it, a restart started before its delay was up, and (given `now`) a restart the policy decided whose
time has long passed with the task never started again.

Pure: events in, problems out (the caller fetches them, `e2e.harness.invariants.check_starts`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FIRST_START = "first start"
RESTART_POLICY = "restart policy"
NETWORK_RECOVERY = "network recovery"
CHANGE_MODE = "change_mode restart"
RESTORE = "restore"
OPERATOR = "operator restart"
CAUSES = (FIRST_START, RESTART_POLICY, NETWORK_RECOVERY, CHANGE_MODE, RESTORE, OPERATOR)

# Kinds of decision, from the events that record them.
PLACED = "placed"  # Received
EXIT = "exit"  # Terminated + Restarting: the restart policy's decision
SIGNALED = "signaled"  # Restart Signaled: the agent's own restart or an operator's
RESTORED = "restored"  # an agent start's restore of the alloc (alloc-level event)

ANSWERS: Mapping[str, tuple[str, ...]] = {
    FIRST_START: (PLACED,),
    RESTART_POLICY: (EXIT,),
    NETWORK_RECOVERY: (SIGNALED,),
    CHANGE_MODE: (SIGNALED,),
    OPERATOR: (SIGNALED,),
    RESTORE: (RESTORED, SIGNALED),
}
RESTORE_EVENTS = ("Restored", "Restore Network", "Setup Resumed")
# Alloc-level events after which no restart is owed any more (the alloc ended).
ENDED_EVENTS = ("Alloc Failed", "Restore Failed", "Stop Resumed")
ALLOC_WIDE = frozenset(RESTORE_EVENTS + ENDED_EVENTS)
EARLY = 0.5  # seconds a restart may come before its delay is up (clock reads, the loop's timer)
OVERDUE = 10.0  # seconds past its due time after which an owed restart that never came is reported
_DELAY = re.compile(r"restarting in (\d+(?:\.\d+)?)s", re.IGNORECASE)


def at(t: float) -> str:
    """An event time as the report prints it (UTC, tenths of a second)."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 10) % 10}"


def restart_delay(message: str) -> float | None:
    """The delay of a "Restarting" event ("Task restarting in 15.0s (...)"), None if it names none."""
    m = _DELAY.search(message)
    return float(m.group(1)) if m else None


@dataclass(frozen=True)
class Decision:
    kind: str
    at: float
    what: str  # the events that made it, for the messages
    due: float | None = None  # EXIT: when the restart is due (None: the event names no delay)
    exit_seen: bool = True  # EXIT: a Terminated came before the Restarting


@dataclass
class _Task:
    name: str
    open: list[Decision] = field(default_factory=list)
    exited: dict[str, Any] | None = None  # a Terminated since the task's last start
    last_start: tuple[float, str] | None = None  # (time, cause)
    answered: list[Decision] = field(default_factory=list)  # what the last start answered
    starts: int = 0


def _decide(task: _Task, e: dict[str, Any]) -> None:
    """Note the decision event `e` of `task` records, if any."""
    kind, t, msg = e["type"], float(e["time"]), str(e.get("message", ""))
    if kind == "Received":
        task.open.append(Decision(PLACED, t, f"Received at {at(t)}"))
    elif kind == "Terminated":
        task.exited = e
    elif kind == "Restarting":
        delay = restart_delay(msg)
        due = t + delay if delay is not None else None
        prior = next((d for d in task.open if d.kind == EXIT), None)
        if prior is not None:  # the same exit's restart, resumed (an agent restart in between)
            task.open.remove(prior)
        if task.exited is not None:
            ex = task.exited
            what = f"Terminated at {at(float(ex['time']))} ({ex.get('message', '')}) + Restarting at {at(t)}"
            task.open.append(Decision(EXIT, t, what, due))
        else:
            task.open.append(Decision(EXIT, t, f"Restarting at {at(t)} ({msg})", due, exit_seen=False))
    elif kind == "Restart Signaled":
        task.open.append(Decision(SIGNALED, t, f"Restart Signaled at {at(t)} ({msg})"))


def _start(task: _Task, e: dict[str, Any], where: str) -> list[str]:
    """Account for the "Started" event `e`; it answers every open decision of the task."""
    t = float(e["time"])
    details = e.get("details") if isinstance(e.get("details"), dict) else {}
    cause = str((details or {}).get("cause") or "")
    me = f"{where} task {task.name} started at {at(t)}"
    problems: list[str] = []
    if not cause:
        problems.append(f"{me} with no cause (details {details or {}})")
    elif cause not in CAUSES:
        problems.append(f"{me} for an unknown cause {cause!r} (known: {', '.join(CAUSES)})")
    elif cause == FIRST_START and task.last_start is not None:
        problems.append(f"{me} as 'first start' after it had started at {at(task.last_start[0])}")
    else:
        problems += _answered(task, cause, t, me)
    task.answered = task.open
    task.open = []
    task.exited = None
    task.last_start = (t, cause)
    task.starts += 1
    return problems


def _answered(task: _Task, cause: str, t: float, me: str) -> list[str]:
    kinds = ANSWERS[cause]
    mine = [d for d in task.open if d.kind in kinds]
    if not mine:
        before = [d for d in task.answered if d.kind in kinds]
        if before and task.last_start is not None:
            prev_t, prev_cause = task.last_start
            return [
                f"{me} for {cause!r}, a second start for one decision: {before[-1].what} was answered "
                f"by its start at {at(prev_t)} ({prev_cause})"
            ]
        since = f" since its start at {at(task.last_start[0])}" if task.last_start else ""
        if cause == RESTART_POLICY:
            return [f"{me} for 'restart policy' with no exit (Terminated + Restarting){since}"]
        need = " or ".join(sorted({_NEEDS[k] for k in kinds}))
        return [f"{me} for {cause!r} with no {need}{since}"]
    d = mine[-1]
    if d.kind != EXIT:
        return []
    if not d.exit_seen:
        return [f"{me} for 'restart policy' after {d.what} with no exit (Terminated) before it"]
    if d.due is not None and t < d.due - EARLY:
        return [f"{me} for 'restart policy' {d.due - t:.1f}s before its delay was up ({d.what})"]
    return []


_NEEDS = {
    PLACED: "Received",
    EXIT: "exit (Terminated + Restarting)",
    SIGNALED: "Restart Signaled",
    RESTORED: "restore (" + "/".join(RESTORE_EVENTS) + ")",
}


def start_problems(
    events: Sequence[dict[str, Any]],
    *,
    where: str,
    status: str | None = None,
    now: float | None = None,
) -> list[str]:
    """What is wrong with the starts of one alloc's tasks, from its events in the agent's order.

    `where` prefixes every problem ("client1: alloc 1a2b3c4d"). With `status` "running" and `now`
    (the node's clock), a restart the policy decided that is more than OVERDUE past its due time
    with no start since is a problem too (call it after waiting past the restart delays)."""
    tasks: dict[str, _Task] = {
        str(e["task"]): _Task(str(e["task"])) for e in events if e.get("task") and e.get("type")
    }
    problems: list[str] = []
    ended = False
    for e in events:
        name = str(e.get("task") or "")
        # An alloc-wide event: no task, or (one task: Nomad's view shows it as the task's) its type.
        if not name or e.get("type") in ALLOC_WIDE:
            if e.get("type") in RESTORE_EVENTS:
                t = float(e["time"])
                for task in tasks.values():
                    task.open.append(Decision(RESTORED, t, f"{e['type']} at {at(t)}"))
            ended = ended or e.get("type") in ENDED_EVENTS
            continue
        task = tasks[name]
        if e.get("type") == "Started":
            problems += _start(task, e, where)
        else:
            _decide(task, e)
    if status == "running" and now is not None and not ended:
        for task in tasks.values():
            for d in task.open:
                if d.kind == EXIT and d.due is not None and now > d.due + OVERDUE:
                    problems.append(
                        f"{where} task {task.name}: the restart decided by {d.what} was due at "
                        f"{at(d.due)} and never came (now {at(now)})"
                    )
    return problems


def start_count(events: Sequence[dict[str, Any]]) -> int:
    return sum(1 for e in events if e.get("type") == "Started")


def restarts_settle_at(events: Sequence[dict[str, Any]], longest_delay: float) -> float:
    """When every restart timer these events may have set has fired: the last exit ("Terminated")
    or restart decision ("Restarting") plus the longer of its own delay and the jobs' longest
    (0.0 when nothing exited). A later wait past this sees any start a stale timer still makes."""
    out = 0.0
    for e in events:
        if e.get("type") not in ("Terminated", "Restarting"):
            continue
        own = restart_delay(str(e.get("message", ""))) if e["type"] == "Restarting" else None
        out = max(out, float(e["time"]) + max(longest_delay, own or 0.0))
    return out
