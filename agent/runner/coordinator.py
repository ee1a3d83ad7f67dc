"""The alloc runner's task coordinator: it starts a group's tasks in their lifecycle order, kills
sidecars that are left alone, and runs poststop tasks at the end (Nomad's tasklifecycle coordinator
and the task-state handler of its alloc runner).

The order itself is decided by agent.decide.lifecycle (pure). This adapter reads the tasks' records, acts
through the runner and keeps one thing of its own: what to do once the poststop tasks of an ending
alloc (a stop, a failure) have exited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.decide.decisions import StartCause
from agent.decide.lifecycle import (
    Phase,
    Stage,
    TaskPhase,
    plan_kill_order,
    plan_lifecycle,
    stage_of,
)
from agent.runner.interfaces import AllocHost
from agent.runner.kill import kill_in_phases, stop_for_restart
from agent.structs.model import Task
from agent.structs.records import AllocStatus, DesiredStatus, TaskRecord, TaskState

if TYPE_CHECKING:
    from agent.drivers.base import TaskHandle


def stage(t: Task) -> Stage:
    return stage_of(t.lifecycle.hook, t.lifecycle.sidecar) if t.lifecycle else Stage.MAIN


def phase(record: TaskRecord) -> Phase:
    if record.state is TaskState.PENDING:
        return Phase.PENDING
    if record.state is TaskState.DEAD and (record.completed or record.failed):
        return Phase.DEAD
    return Phase.LIVE


class Coordinator:
    def __init__(self, runner: AllocHost) -> None:
        self.r = runner
        self._after_poststop: Callable[[], None] | None = None

    @property
    def has_lifecycle(self) -> bool:
        return any(t.lifecycle is not None for t in self.r.group.tasks)

    def phases(self) -> list[TaskPhase]:
        out = []
        for t in self.r.group.tasks:
            record = self.r.state.task(t.name)
            out.append(
                TaskPhase(t.name, stage(t), phase(record), successful=record.completed, leader=t.leader)
            )
        return out

    def first_tasks(self) -> list[Task]:
        """The tasks the alloc's setup starts: every task but those whose turn comes later."""
        names = set(plan_lifecycle(self.phases(), self.r.d.bugs).start)
        return [t for t in self.r.group.tasks if t.name in names]

    def done(self) -> bool:
        return plan_lifecycle(self.phases(), self.r.d.bugs).done

    def poststop_owed(self) -> bool:
        """Whether the group has a poststop task that has not run to its end yet."""
        return any(
            stage(t) is Stage.POSTSTOP and phase(self.r.state.task(t.name)) is not Phase.DEAD
            for t in self.r.group.tasks
        )

    def advance(self) -> None:
        """After a task's state changed while the alloc runs: the tasks whose turn it is start (a
        start may open the next stage: main tasks started open poststart), and sidecars with no
        main task left alive are killed."""
        r = self.r
        for _ in range(len(Stage)):
            if r.rec.status is not AllocStatus.RUNNING or r.rec.desired is DesiredStatus.STOP:
                return
            step = plan_lifecycle(self.phases(), self.r.d.bugs)
            if step.kill:
                self._kill(step.kill, step.why)
                return
            if not step.start:
                return
            for name in step.start:  # its lifecycle turn came while the alloc runs
                t = self._task(name)
                r.tasks[name].restart(StartCause.FIRST_START, f"{stage(t).value} turn", count=False)

    def _kill(self, names: tuple[str, ...], why: tuple[str, str]) -> None:
        """Tasks whose group ended (sidecars left alone, every task once the leader is done):
        recorded dead (done, not failed) first, so their exit is not the restart policy's, then
        stopped off the loop, sidecars last; the coordinator goes on after."""
        r = self.r
        stopping: list[tuple[Task, TaskHandle]] = []
        with r.d.store.transaction():
            for name in names:
                t = self._task(name)
                r.state.bump(name)  # a restart on a timer for it is cancelled
                record = r.state.task(name)
                r.state.put_task(name, record.with_(state=TaskState.DEAD, completed=True, restart_due=0.0))
                r.event(name, *why)
                h = r.state.handle(name)
                if h is not None and r.tasks[t.name].handle_running(h):
                    stopping.append((t, h))
        order = plan_kill_order([(t.name, stage(t)) for t, _ in stopping], r.d.bugs)
        phases = [[(t, h) for t, h in stopping if t.name in names] for names in order]
        kill_in_phases(r, why[1].lower(), phases, r.lifecycle_changed, {})

    def restart_all(self, reason: str) -> None:
        """`nomad alloc restart -all-tasks` (Nomad's RestartAll): every task but the poststop ones
        is stopped and goes back to pending, each restart counted, and the lifecycle starts again
        from its first stage: a prestart task that had finished runs again before the main tasks."""
        r = self.r
        tasks = [t for t in r.group.tasks if stage(t) is not Stage.POSTSTOP]
        for t in tasks:
            r.event(t.name, "Restart Signaled", reason)

        def again() -> None:
            if r.rec.status is not AllocStatus.RUNNING or r.rec.desired is DesiredStatus.STOP:
                return  # stopped or failed meanwhile: nothing starts again
            with r.d.store.transaction():
                for t in tasks:
                    r.state.bump(t.name)  # a restart on a timer for it is cancelled
                    record = r.state.task(t.name)
                    if record.state is not TaskState.PENDING:
                        record = record.restarted()
                    r.state.put_task(
                        t.name, record.with_(state=TaskState.PENDING, completed=False, failed=False)
                    )
            self.advance()

        stop_for_restart(r, tasks, again, events=True)

    # -- poststop at the end of an alloc (a stop, a failure) -----------------------------------------
    def run_poststop(self, then: Callable[[], None]) -> None:
        """The alloc is ending (its other tasks are killed): its poststop tasks run to their end,
        then `then`. Pending ones start; one found running (a restore in the middle) is waited
        for; one that ran already is not run again."""
        r = self.r
        waiting = False
        for t in r.group.tasks:
            if stage(t) is not Stage.POSTSTOP:
                continue
            record = r.state.task(t.name)
            p = phase(record)
            if p is Phase.PENDING:
                if r.tasks[t.name].start_poststop(False, self.poststop_progress):
                    waiting = True
            elif p is Phase.LIVE:
                h = r.state.handle(t.name)
                if h is not None and r.tasks[t.name].handle_running(h):
                    waiting = True
                else:  # it ended while the agent was down: its exit status is not known
                    r.state.put_task(t.name, record.with_(state=TaskState.DEAD, failed=True))
        if waiting:
            self._after_poststop = then
        else:
            then()

    def waits_for(self, t: Task) -> bool:
        """Whether an exit of `t` belongs to the poststop run of an ending alloc."""
        return self._after_poststop is not None and stage(t) is Stage.POSTSTOP

    def poststop_exited(self, t: Task, code: int | None, shown: str) -> None:
        """A poststop task of an ending alloc exited. As Nomad's task runner (a poststop task is not
        shut down by the alloc's stop, so its exit goes to the restart tracker): exit 0 completes
        it; a failure is restarted as the group's restart policy says (its own attempts, delay and
        mode), else it is dead and failed. Once every poststop task is dead for good, the alloc's
        end goes on."""
        r = self.r
        now = r.d.clock()
        record = r.state.task(t.name).with_(state=TaskState.DEAD)
        decision = r.tasks[t.name].restart_decision(record, now, code)
        generation = r.state.bump(t.name)
        again = decision.restart and not decision.complete
        with r.d.store.transaction():
            r.event(t.name, "Terminated", f"Exit Code: {shown}", exit_code=code)
            if again:
                r.state.put_task(t.name, record.counted(now, now + decision.delay, decision.interval_start))
                r.event(t.name, "Restarting", f"Task restarting in {decision.delay:.1f}s ({decision.reason})")
            else:
                ok = code == 0
                r.state.put_task(t.name, record.with_(completed=ok, failed=not ok, restart_due=0.0))
                if not ok:
                    r.event(
                        t.name, "Not Restarting", f"{decision.reason} (exit code {shown})", exit_code=code
                    )
        if again:
            r.d.schedule(decision.delay, lambda: r.serial.run(lambda: self._poststop_again(t, generation)))
            return
        self.poststop_progress()

    def _poststop_again(self, t: Task, generation: int) -> None:
        """A poststop task's restart timer: started again unless a later decision came first."""
        if self._after_poststop is None or self.r.state.generation(t.name) != generation:
            return
        if not self.r.tasks[t.name].start_poststop(True, self.poststop_progress):  # could not start: dead
            self.poststop_progress()

    def poststop_progress(self) -> None:
        """A poststop task is dead for good: once every one is, the alloc's end goes on."""
        if not self.poststop_owed() and self._after_poststop is not None:
            then, self._after_poststop = self._after_poststop, None
            then()

    def _task(self, name: str) -> Task:
        return next(t for t in self.r.group.tasks if t.name == name)
