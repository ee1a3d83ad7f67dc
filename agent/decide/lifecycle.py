"""The order of a group's tasks by their `lifecycle`, as Nomad's task coordinator
(client/allocrunner/tasklifecycle) and its alloc runner's task-state handler decide it.

Pure functions over plain data: the runner describes each task (`TaskPhase`) and acts on the
`LifecycleStep` it gets back.

- Prestart tasks start first. Main tasks start once every ephemeral prestart task (not a sidecar)
  has exited successfully and every prestart sidecar has started.
- Poststart tasks start once every main task has started.
- When the group's leader is dead for good (it completed), every other live task is killed ("Leader
  Task Dead"); a leader that failed fails the alloc as any failed task does.
- When no task but sidecars is left alive, the sidecars are killed ("Main Tasks Dead").
- Poststop tasks start once every other task is dead, whether it completed, failed or was stopped.
- The alloc is done when every task is dead, poststop tasks included.

A task's life after its start (restarts, exit codes) is the restart policy's (`plan_task_restart`
with the task's hook); this module only says which tasks may start now and which must go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from agent.fieldbugs.bugs import NO_BUGS, Bugs


class Stage(Enum):
    PRESTART = "prestart"  # ephemeral: runs to a successful exit before the main tasks
    PRESTART_SIDECAR = "prestart sidecar"
    MAIN = "main"
    POSTSTART = "poststart"
    POSTSTART_SIDECAR = "poststart sidecar"
    POSTSTOP = "poststop"


SIDECARS = (Stage.PRESTART_SIDECAR, Stage.POSTSTART_SIDECAR)
MAIN_TASKS_DEAD = "Main Tasks Dead"  # Nomad's TaskMainDead event
MAIN_TASKS_DEAD_MESSAGE = "Main tasks in the group died"
LEADER_DEAD = "Leader Task Dead"  # Nomad's TaskLeaderDead event
LEADER_DEAD_MESSAGE = "Leader Task in Group dead"


def stage_of(hook: str, sidecar: bool) -> Stage:
    """A task's stage from its lifecycle block ("" hook: no block, a main task)."""
    if hook == "prestart":
        return Stage.PRESTART_SIDECAR if sidecar else Stage.PRESTART
    if hook == "poststart":
        return Stage.POSTSTART_SIDECAR if sidecar else Stage.POSTSTART
    if hook == "poststop":
        return Stage.POSTSTOP
    return Stage.MAIN


class Phase(Enum):
    PENDING = "pending"  # never started
    LIVE = "live"  # started: running, or dead with a restart owed
    DEAD = "dead"  # dead for good: completed, failed, or killed


@dataclass(frozen=True)
class TaskPhase:
    name: str
    stage: Stage
    phase: Phase
    successful: bool = False  # dead after an exit the restart policy took as the end of its work
    leader: bool = False  # `leader = true`: its end is the group's


@dataclass(frozen=True)
class LifecycleStep:
    start: tuple[str, ...] = ()  # pending tasks whose turn it is
    kill: tuple[str, ...] = ()  # live tasks that must go: see `why`
    why: tuple[str, str] = (MAIN_TASKS_DEAD, MAIN_TASKS_DEAD_MESSAGE)  # the kill's event: type, message
    done: bool = False  # every task dead, poststop ones included: the alloc has ended


def _prestart_done(tasks: Sequence[TaskPhase]) -> bool:
    return all(
        t.successful if t.stage is Stage.PRESTART else t.phase is not Phase.PENDING
        for t in tasks
        if t.stage in (Stage.PRESTART, Stage.PRESTART_SIDECAR)
    )


def _open_stages(tasks: Sequence[TaskPhase]) -> set[Stage]:
    """The stages whose pending tasks may start now (Nomad's coordinator, walked from prestart)."""
    if all(t.phase is Phase.DEAD for t in tasks if t.stage is not Stage.POSTSTOP):
        return {Stage.POSTSTOP}
    if not _prestart_done(tasks):
        return {Stage.PRESTART, Stage.PRESTART_SIDECAR}
    if any(t.phase is Phase.PENDING for t in tasks if t.stage is Stage.MAIN):
        return {Stage.PRESTART_SIDECAR, Stage.MAIN}
    return {Stage.PRESTART_SIDECAR, Stage.MAIN, Stage.POSTSTART, Stage.POSTSTART_SIDECAR}


def plan_kill_order(
    tasks: Sequence[tuple[str, Stage]], bugs: Bugs = NO_BUGS, leaders: Sequence[str] = ()
) -> tuple[tuple[str, ...], ...]:
    """The phases of an alloc's stop (poststop tasks aside: they run after): the group's leader
    first (Nomad since 0.6.0, #2753), every other task once it is dead, then the sidecars once
    those are dead, as Nomad's alloc runner since PR #13055 (a proxy outlives the service it
    fronts). `sidecars-killed-with-main` is nomad-13055: one phase, all at once (the leader's aside).
    `leader-killed-with-others` is nomad-2753: the leader is killed with the others."""
    lead = () if bugs.leader_killed_with_others else tuple(n for n, _ in tasks if n in leaders)
    rest = [(n, s) for n, s in tasks if n not in lead]
    if bugs.sidecars_killed_with_main:
        return tuple(p for p in (lead, tuple(n for n, _ in rest)) if p)
    first = tuple(n for n, s in rest if s not in SIDECARS)
    last = tuple(n for n, s in rest if s in SIDECARS)
    return tuple(p for p in (lead, first, last) if p)


def plan_lifecycle(tasks: Sequence[TaskPhase], bugs: Bugs = NO_BUGS) -> LifecycleStep:
    """What the alloc runner does next with its tasks, from where each one is.
    `sidecar-outlives-main` is nomad-8165: sidecars left alone are not killed, so a batch alloc
    whose main tasks finished never completes."""
    if all(t.phase is Phase.DEAD for t in tasks):
        return LifecycleStep(done=True)
    live = [t for t in tasks if t.stage is not Stage.POSTSTOP and t.phase is not Phase.DEAD]
    leader_done = any(t.leader and t.phase is Phase.DEAD and t.successful for t in tasks)
    if live and leader_done:  # Nomad's alloc runner: the leader's end ends the group, sidecars too
        return LifecycleStep(kill=tuple(t.name for t in live), why=(LEADER_DEAD, LEADER_DEAD_MESSAGE))
    has_sidecars = any(t.stage in SIDECARS for t in tasks)
    alone = live and has_sidecars and all(t.stage in SIDECARS for t in live)
    if alone and not bugs.sidecar_outlives_main:
        # Nomad kills every live sidecar, started or not, once no other task is left to serve
        return LifecycleStep(kill=tuple(t.name for t in live))
    stages = _open_stages(tasks)
    start = tuple(t.name for t in tasks if t.phase is Phase.PENDING and t.stage in stages)
    return LifecycleStep(start=start)
