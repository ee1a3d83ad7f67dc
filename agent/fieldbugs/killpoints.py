"""Named kill points: the steps of start, restart, network recovery, replacement and stop at which a
kill -9 of the agent must lose nothing and double nothing.

The runner and the core call their `kill_point(name)` hook at each of these steps (a no-op in
production). `tests/test_killpoints.py` enumerates `POINTS`: for each one it kills the agent there
(the hook raises `Killed`, a BaseException nothing in the agent catches, as a SIGKILL leaves no
handler a chance), builds a new agent on the same node and state, restores, and checks that every
alloc that should run runs its tasks once. The fault setting `crash-at=<point>` (agent.fieldbugs.faults) makes
the real agent SIGKILL itself at that point once per data dir, for the lab.

This module is the one list of the names: a new step is one `KillPoint` here plus one call, and the
enumeration tests it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KillHook = Callable[[str], None]


@dataclass(frozen=True)
class KillPoint:
    name: str
    doc: str  # what is written (and what is not yet) when the agent dies there


CATALOGUE: tuple[KillPoint, ...] = (
    # -- start (AllocRegistry.new_alloc, AllocRunner.start; the task steps also on every restart) ------------
    KillPoint(
        "start.after-alloc-record",
        "the new alloc's record is written (pending), nothing of it is set up yet",
    ),
    KillPoint(
        "start.before-network",
        "the task dirs are prepared; no netns owner, no CNI ADD yet",
    ),
    KillPoint(
        "start.before-network-add",
        "the netns owner is created and recorded, the network is recorded 'adding'; CNI ADD not run",
    ),
    KillPoint(
        "start.after-network-add",
        "CNI ADD succeeded but its address is not recorded (the network is still 'adding')",
    ),
    KillPoint(
        "start.before-task-start",
        "the task is recorded 'starting' (a restart already counted in `restarts`); the driver not asked",
    ),
    KillPoint(
        "start.after-task-start-before-record",
        "the driver started the task but its handle is not recorded: the next start of the same task "
        "must replace it (docker: same container name; exec: the task cgroup is emptied first)",
    ),
    KillPoint(
        "start.after-task-record",
        "the task's handle, its 'running' state and its Started event are recorded (one transaction)",
    ),
    KillPoint(
        "start.before-alloc-running",
        "every task is started and recorded; the alloc is still recorded 'pending'",
    ),
    # -- restart (the restart policy, an operator's restart) ------------------------------------
    KillPoint(
        "restart.after-exit-record",
        "a task's exit is recorded with the policy's decision (Terminated, Restarting, restart_due: one "
        "transaction); the restart timer is not set",
    ),
    KillPoint(
        "restart.after-stop",
        "an operator (or change_mode) restart: the task is recorded dead and stopped; not started again",
    ),
    KillPoint(
        "restart.before-start",
        "the restart is due (timer fired, or restarted at once); the task is not started yet",
    ),
    # -- network recovery (pause death, a task that cannot start, restore) -------------------------
    KillPoint(
        "recovery.after-stop",
        "the group's tasks are recorded dead and stopped; the old network is still attached",
    ),
    KillPoint(
        "recovery.after-del",
        "CNI DEL of the old attachment done and recorded; the old netns owner still exists",
    ),
    KillPoint(
        "recovery.after-owner-remove",
        "the old netns owner is removed; no new one yet",
    ),
    KillPoint(
        "recovery.before-tasks",
        "a new netns owner and CNI ADD are recorded; the tasks are not restarted yet",
    ),
    # -- replacement (an alloc fails, the core starts another) ----------------------------------
    KillPoint(
        "replace.after-fail-record",
        "the alloc is recorded failed with its replacement owed (replace_pending); not torn down",
    ),
    KillPoint(
        "replace.after-teardown",
        "the failed alloc is torn down; its replacement is not scheduled yet",
    ),
    KillPoint(
        "replace.after-fail-before-new-alloc",
        "the replacement's timer fired; no new alloc exists yet",
    ),
    KillPoint(
        "replace.after-new-alloc-before-record",
        "the replacement alloc is created and started; the failed one's replaced_by is not written",
    ),
    # -- stop (job stop) -------------------------------------------------------------------------
    KillPoint(
        "stop.after-desired-record",
        "the alloc is recorded desired 'stop'; its tasks still run",
    ),
    KillPoint(
        "stop.after-tasks-stopped",
        "every task is stopped and recorded dead; the network and the netns owner are still there",
    ),
    KillPoint(
        "stop.after-teardown",
        "everything of the alloc is torn down; it is not recorded complete yet",
    ),
)

POINTS: tuple[str, ...] = tuple(p.name for p in CATALOGUE)
DOCS: dict[str, str] = {p.name: p.doc for p in CATALOGUE}


class Killed(BaseException):
    """Raised by a test's hook at its kill point: the agent 'dies' there. A BaseException, so no
    `except Exception` of the agent's runs, and the store rolls back an open transaction."""

    def __init__(self, point: str) -> None:
        self.point = point
        super().__init__(f"killed at {point}")


def check_point(name: str) -> str:
    """The name if it is a kill point, else ValueError naming the known ones."""
    if name not in DOCS:
        raise ValueError(f"unknown kill point {name!r}; known: {', '.join(POINTS)}")
    return name


def no_kill(point: str) -> None:
    """Production: the agent goes on."""


def sigkill_at(point: str, marker_dir: Path | None = None) -> KillHook:
    """The `crash-at=<point>` hook: SIGKILL the agent itself when it reaches `point` ("": never).

    With `marker_dir`, it fires once per data dir: a marker file (`crash-at.<point>.done`) is written
    first, so the agent restarted on the same state with the same setting gets past the point."""
    if not point:
        return no_kill
    check_point(point)
    marker = marker_dir / f"crash-at.{point}.done" if marker_dir is not None else None

    def hook(name: str) -> None:
        if name != point:
            return
        if marker is not None:
            if marker.exists():
                return
            with contextlib.suppress(OSError):
                marker.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
                os.fsync(fd)
                os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    return hook
