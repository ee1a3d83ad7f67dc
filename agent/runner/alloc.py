"""One allocation's life on this node (Nomad's alloc runner): its dir, its network, its tasks in
their lifecycle order, its status, its failure and replacement, its stop and teardown.

Each task has a task runner (agent.runner.taskrunner) with its hooks (agent.runner.hooks): its start,
exit, restarts, environment, templates and Vault token. The alloc's network is agent.runner.network
(its recovery is `recover_network` here, over the network and the kill), the lifecycle order
agent.runner.coordinator, the restore after an agent restart agent.runner.restorer, the kills
agent.runner.kill. Each part is handed this runner as a port (agent.runner.interfaces.AllocHost) and
never imports it back.

Every transition is written to the state store before it is acted on, so a crash at any point
leaves a record the next start can act on. All methods run on the agent's main loop thread; what
blocks (a task's stop up to its kill_timeout, a change script up to its timeout) runs off it
(agent.client.offload) while the alloc's next operations wait in order behind it. The
runner knows drivers, netns owners and the network only by their protocols (agent.drivers.base,
agent.network.base); what a fault flag changes is decided by the pure `plan_*` functions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.client.offload import Serial
from agent.decide.decisions import (
    SETUP_RETRY_ATTEMPTS,
    ObservedAlloc,
    PauseDeathAction,
    RestoreAction,
    StartCause,
    plan_pause_death,
    plan_setup_retry,
)
from agent.decide.lifecycle import Stage, plan_kill_order
from agent.decide.taskdecisions import (
    plan_group_shutdown_delay,
    plan_kill_signal,
    plan_kill_timeout,
    plan_shutdown_delay,
)
from agent.drivers.base import DriverError, NetnsOwner, TaskDriver, TaskHandle
from agent.errors import AgentError, Unavailable
from agent.jobspec.durations import format_duration
from agent.runner.coordinator import Coordinator, stage
from agent.runner.deps import RunnerDeps
from agent.runner.kill import (
    capped_delay,
    capped_why,
    exit_text,
    kill_in_phases,
    kill_off_loop,
    stop_for_restart,
)
from agent.runner.maxrun import arm_max_run_duration
from agent.runner.migrate import migrate_previous
from agent.runner.network import RECOVERY_RETRY_MAX, AllocNetwork
from agent.runner.prepare import prepare_each
from agent.runner.registrar import service_definitions
from agent.runner.restorer import Restorer
from agent.runner.state import NETNS_OWNER, AllocState
from agent.runner.taskhooks import task_hooks
from agent.runner.taskrunner import ALL_TASKS_COMPLETE, TaskRunner
from agent.runner.view import alloc_view
from agent.structs.model import Group, Job, Task
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, TaskState
from agent.templates.render import TemplateRenderError
from agent.vault import VaultError

log = logging.getLogger(__name__)
EXIT_RETRY = 1.0  # seconds until a task's exit is looked at again when the engine did not answer


class AllocRunner:
    def __init__(self, deps: RunnerDeps, record: AllocRecord, job: Job, group: Group) -> None:
        self.d = deps
        self.state = AllocState(deps.store, record)
        self.job = job
        # each task as its stops see it: the signal they send first (its kill_signal, else the
        # driver's default) and how long they wait before SIGKILL (capped by the client)
        tasks = tuple(
            replace(
                t,
                kill_signal=plan_kill_signal(t.kill_signal, t.driver, deps.bugs),
                kill_timeout=plan_kill_timeout(t.kill_timeout, deps.max_kill_timeout, deps.bugs),
            )
            for t in group.tasks
        )
        self.group = replace(group, tasks=tasks)
        self.id: str = record.id
        self.serial = Serial(deps.offload, f"alloc={record.id[:8]}")
        # Set by the stop, at once (not behind the alloc's operation in progress): a setup step off
        # the loop that can take long (an artifact's download) ends early, as Nomad's hooks' context.
        self.setup_cancel = threading.Event()
        self.tasks: dict[str, TaskRunner] = {
            t.name: TaskRunner(self, t, task_hooks) for t in self.group.tasks
        }
        self._deregistered = False  # its Consul services, once at a stop (shutdown_delay) or teardown
        self.coord = Coordinator(self)  # the tasks' lifecycle order
        self.network = AllocNetwork(self)
        self.restorer = Restorer(self)
        self.network_from_state = False  # its network taken over at a restore, not created in this run
        arm_max_run_duration(self)  # batch: stopped past its max_run_duration (agent.runner.maxrun)

    @property
    def rec(self) -> AllocRecord:
        return self.state.rec

    def alloc_running(self) -> bool:
        return self.rec.status is AllocStatus.RUNNING

    def event(self, task: str, type_: str, message: str, **details: Any) -> None:
        self.state.event(task, type_, message, **details)

    # -- what the alloc is -----------------------------------------------------------------------
    @property
    def bridge(self) -> bool:
        # bridge and cni/<name> alike: a netns of the group's, attached by CNI (agent.network.networks)
        return self.group.network is not None and self.group.network.group_netns

    @property
    def owner(self) -> NetnsOwner:
        """Who holds the group's netns: a pause container when a task joins a container's netns
        (docker), otherwise a netns the agent creates and the tasks join by path."""
        return self.d.drivers.netns_owner(self.group)

    def driver(self, t: Task) -> TaskDriver:
        return self.d.drivers.get(t.driver)

    def netns_path(self) -> Path | None:
        """The alloc's network namespace as a path, or None when it has none (host mode) or it is gone."""
        if not self.bridge:
            return None
        return self.owner.path(self.id, self.state.handle(NETNS_OWNER))

    @property
    def alloc_dir(self) -> Path:
        return self.d.data_dir / "alloc" / self.id

    def owns_container(self, container_id: str) -> str | None:
        for name in [NETNS_OWNER, *self.tasks]:
            h = self.state.handle(name)
            if h and h.id == container_id:
                return name
        return None

    # -- start ---------------------------------------------------------------------------------
    def kill_point(self, name: str) -> None:
        """A named step (agent.fieldbugs.killpoints): where the `crash-at` setting or a test kills the
        agent."""
        self.d.kill_point(name)

    def start(self, cause: StartCause = StartCause.FIRST_START, why: str = "", *, attempt: int = 0) -> None:
        """Set the alloc up and start its tasks. A first render that Vault (or Consul) could not
        answer leaves the alloc pending and sets it up again later (`plan_setup_retry`, as Nomad's
        vault_retry), `attempt` counting those tries; any other failure fails the setup."""
        if cause is StartCause.FIRST_START and attempt == 0:
            for t in self.group.tasks:
                self.event(t.name, "Received", "Task received by client")
        # The templates render off the main loop (the alloc's next operations wait behind them in
        # its Serial); the setup goes on in _setup_done.
        self._setup_dirs(0, lambda exc: self._setup_done(exc, cause, why, attempt))

    def _setup_done(self, failed: Exception | None, cause: StartCause, why: str, attempt: int) -> None:
        if self.rec.desired is DesiredStatus.STOP:
            return  # stopped while its templates rendered: the stop waiting behind them finishes it
        if failed is not None:
            down = isinstance(failed, Unavailable) or (
                isinstance(failed, TemplateRenderError) and failed.unavailable
            )
            delay = plan_setup_retry(attempt + 1, down)
            if delay is None:
                self._fail_setup(f"failed to setup alloc: {failed}")
                return
            self.event(
                "",
                "Setup Retrying",
                f"{failed}: setting the alloc up again in {delay:g}s (attempt {attempt + 1} of "
                f"{SETUP_RETRY_ATTEMPTS})",
            )
            retried: list[bool] = []

            def retry() -> None:  # on its timer, or when Vault answers again: whichever is first
                if not retried:
                    retried.append(True)
                    self.serial.run(lambda: self._retry_setup(cause, why, attempt + 1))

            self.d.schedule(delay, retry)
            wake = self.d.templates.vault_wake
            if down and wake is not None:
                wake.subscribe(f"{self.id}/setup", retry, lambda: not retried and self._setup_pending())
            return
        try:
            if self.bridge:
                self.kill_point("start.before-network")
                self.network.setup()
            for t in self.coord.first_tasks():  # prestart tasks first, when the group has any
                self.tasks[t.name].first_start(cause, why)
            self.kill_point("start.before-alloc-running")
            self.state.save(status=AllocStatus.RUNNING, reason="")
            self._register_services()
            self.coord.advance()  # poststart tasks, once the main tasks are started
        except (AgentError, OSError) as exc:
            self._fail_setup(f"failed to setup alloc: {exc}")

    def _retry_setup(self, cause: StartCause, why: str, attempt: int) -> None:
        """A retry of the setup's first render, unless the alloc was stopped (or else settled) since."""
        if not self._setup_pending():
            return
        self.start(cause, why, attempt=attempt)

    def _setup_pending(self) -> bool:
        return self.rec.status is AllocStatus.PENDING and self.rec.desired is not DesiredStatus.STOP

    def resume_setup(self) -> None:
        """At restore: the agent was killed while setting the alloc up (it is still recorded
        pending). What the interrupted setup made is undone (tasks by their recorded handles; a task
        whose start was not recorded is replaced by the driver's next start of it), then the alloc
        is set up again from the start, once."""
        self.event(
            "", "Setup Resumed", "the agent was killed while setting the alloc up: setting it up again"
        )
        for t in self.group.tasks:
            self.state.bump(t.name)
        self.teardown()
        with self.d.store.transaction():  # every task's turn comes again, in lifecycle order
            for t in self.group.tasks:
                self.state.put_task(t.name, self.state.task(t.name).with_(state=TaskState.PENDING))
        self.start(StartCause.RESTORE, "setup interrupted by an agent restart")

    def _setup_dirs(self, first: int, then: Callable[[Exception | None], None]) -> None:
        """Each task's setup hooks (its dir, its Vault token, its first render off the main loop),
        from the `first` task on, each task after the one before; `then(None)` on the loop when all
        are done, `then(exc)` at the first failure (or when the alloc was stopped meanwhile)."""
        tasks = self.group.tasks
        if first == 0:
            try:
                migrate_previous(self)
            except OSError as exc:
                then(exc)
                return
        if first == len(tasks):
            then(None)
            return

        def next_task(failed: Exception | None) -> None:
            if failed is not None or self.rec.desired is DesiredStatus.STOP:
                then(failed)
                return
            self._setup_dirs(first + 1, then)

        self.tasks[tasks[first].name].setup(next_task)

    def _fail_setup(self, reason: str) -> None:
        """The alloc could not be set up: each task dead and failed with the reason (as Nomad's
        client shows a task whose prestart failed), not left pending."""
        with self.d.store.transaction():
            for t in self.group.tasks:
                self.event(t.name, "Setup Failure", reason)
                self.state.update_task(t.name, state=TaskState.DEAD, failed=True)
        self.teardown()
        self.state.save(status=AllocStatus.FAILED, reason=reason)

    # -- run time ------------------------------------------------------------------------------
    def on_task_exit(self, handle_id: str) -> None:
        """A driver (or the netns owner's) reported that one of this alloc's tasks exited."""
        self.serial.run(lambda: self._on_task_exit(handle_id))

    def _on_task_exit(self, handle_id: str) -> None:
        name = self.owns_container(handle_id)
        if name is None:
            return
        if name == NETNS_OWNER:
            self._owner_exited()
            return
        t = self._task(name)
        h = self.state.handle(name)
        try:
            code = self.driver(t).status(h).exit_code if h else None
        except DriverError as exc:
            if not exc.unavailable:
                raise
            # The engine went away as the task died (a docker stop): the exit is looked at again once
            # the engine answers, never dropped (it was: the task stayed "running" with no container).
            log.warning("alloc=%s task=%s: its exit waits for the engine: %s", self.id[:8], name, exc)
            self.d.schedule(EXIT_RETRY, lambda: self.on_task_exit(handle_id))
            return
        record = self.state.task(name)
        if self.coord.waits_for(t):  # a poststop task of an ending alloc
            self.coord.poststop_exited(t, code, exit_text(code))
        elif record.state is TaskState.PENDING or (
            record.state is TaskState.DEAD and (record.completed or record.failed)
        ):
            pass  # dead for good already (a killed sidecar), or back to its turn (restart all): no policy
        elif self.rec.status is not AllocStatus.RUNNING:
            pass
        elif self.rec.desired is DesiredStatus.STOP:  # killed by the stop (its poststop tasks run): no policy
            self.event(name, "Terminated", f"Exit Code: {exit_text(code)}", exit_code=code)
            self.state.update_task(name, state=TaskState.DEAD)
        else:
            self.tasks[name].exited(code)

    def _owner_exited(self) -> None:
        if self.rec.status is not AllocStatus.RUNNING:
            return
        self.event("", "Network Lost", "pause container died; recovering the group's network")
        if plan_pause_death(self.d.bugs) is PauseDeathAction.RESTART_INTO_DEAD_PAUSE:
            # nomad-12216: tasks are restarted into the dead pause's network and fail there.
            for t in self.unfinished():
                self.tasks[t.name].restart(StartCause.NETWORK_RECOVERY, "pause container died")
            return
        self.recover_network("pause container died")

    def _task(self, name: str) -> Task:
        return next(t for t in self.group.tasks if t.name == name)

    def unfinished(self) -> list[Task]:
        """The group's tasks but those that completed (a batch task's exit 0, a killed sidecar) and
        those whose lifecycle turn has not come: what a recovery of the group's network starts again."""
        return [
            t
            for t in self.group.tasks
            if not (record := self.state.task(t.name)).completed and record.state is not TaskState.PENDING
        ]

    def recover_network(self, why: str, cause: StartCause = StartCause.NETWORK_RECOVERY) -> None:
        """The group's whole network recreated and its unfinished tasks started again, each once
        (`cause`: not counted against the restart policy; a restart on a timer is cancelled): the
        tasks stopped (agent.runner.kill), the network recreated (AllocNetwork.recreate: DEL, a fresh
        netns owner, ADD), the tasks started. An engine that does not answer (docker restarting) is
        waited out: the recovery is tried again from the start, with an event, until it completes;
        any other failure fails the alloc (and it is replaced): never a dead end, never a second set."""
        self.serial.run(lambda: self._stop_then_recreate(why, cause, 1, f"network recreated: {why}"))

    def _stop_then_recreate(self, why: str, cause: StartCause, attempt: int, signaled: str) -> None:
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return
        for t in self.unfinished():
            self.event(t.name, "Restart Signaled", signaled)
        stop_for_restart(self, self.unfinished(), lambda: self._recreate(why, cause, attempt))

    def _recreate(self, why: str, cause: StartCause, attempt: int) -> None:
        self.kill_point("recovery.after-stop")
        if not self._recovery_step(why, cause, attempt, self.network.recreate):
            return
        self.kill_point("recovery.before-tasks")

        def start_tasks() -> None:  # each driver's prepare (docker's pull) done off the loop
            if self.rec.status is AllocStatus.RUNNING and self.rec.desired is not DesiredStatus.STOP:
                self._recovery_step(why, cause, attempt, lambda: self._start_recovered(why, cause))

        prepare_each([self.tasks[t.name].prep for t in self.unfinished()], start_tasks)

    def _start_recovered(self, why: str, cause: StartCause) -> None:
        for t in self.unfinished():
            self.kill_point("restart.before-start")
            self.tasks[t.name].start(cause, why, restart=True)
        self.event("", "Network Recovered", f"network recreated ({why})", address=self.rec.address)

    def _recovery_step(self, why: str, cause: StartCause, attempt: int, step: Callable[[], None]) -> bool:
        """One step of the recovery; whether it went through (else it is tried again or failed)."""
        try:
            step()
            return True
        except DriverError as exc:
            if not exc.unavailable:
                self.event("", "Driver Failure", str(exc))
                self.fail(f"network recovery failed: {exc}")
                return False
            delay = min(RECOVERY_RETRY_MAX, 2.0 ** (attempt - 1))
            message = f"{exc}; trying again in {delay:.0f}s (attempt {attempt + 1})"
            self.event("", "Network Recovery Retrying", message)
            # The recovery again from the start, once the engine may answer: what the interrupted
            # attempt started is stopped first (a new decision for each task, with its event).
            again = f"network recreated: {why} (attempt {attempt + 1})"
            self.d.schedule(
                delay,
                lambda: self.serial.run(lambda: self._stop_then_recreate(why, cause, attempt + 1, again)),
            )
        except VaultError as exc:
            self.fail(f"network recovery failed: no Vault token: {exc}")
        except (AgentError, OSError) as exc:
            self.fail(f"network recovery failed: {exc}")
        return False

    def fail(self, reason: str, *, teardown: bool = True) -> None:
        """Mark the alloc failed, tear it down and have a replacement started. The replacement is
        owed from the moment the failure is written (`replace_pending`), so a kill before it starts
        leaves a record the next restore replaces. `teardown` False: only the nomad-17104 fault."""
        with self.d.store.transaction():
            self.record_failure(reason)
        if not teardown:
            self.d.replace(self, reason)
            return
        self.finish_failure(reason)

    def record_failure(self, reason: str) -> None:
        owed = self.rec.desired is DesiredStatus.RUN
        self.state.save(status=AllocStatus.FAILED, reason=reason, replace_pending=owed)
        self.event("", "Alloc Failed", reason)

    def finish_failure(self, reason: str) -> None:
        """After the failure is recorded: a group with poststop tasks has its other tasks stopped and
        its poststop tasks run to their end (Nomad runs them after a failure too), then what the alloc
        holds on the node goes (a kill before that leaves it to the orphan sweep: the alloc is no
        longer live), then the replacement."""
        self.kill_point("replace.after-fail-record")
        if self.coord.poststop_owed():
            live = self._running_tasks(lambda t: stage(t) is not Stage.POSTSTOP)
            kill_off_loop(
                self,
                "stop before poststop",
                live,
                lambda: self.coord.run_poststop(lambda: self._replace(reason)),
            )
            return
        self._replace(reason)

    def _replace(self, reason: str) -> None:
        self.teardown()
        self.kill_point("replace.after-teardown")
        self.d.replace(self, reason)

    # -- restore (agent.runner.restorer) -----------------------------------------------------------
    def observe(self) -> ObservedAlloc:
        return self.restorer.observe()

    def restore(self, observed: ObservedAlloc | None = None) -> RestoreAction:
        return self.restorer.restore(observed)

    def _running_tasks(self, which: Callable[[Task], bool]) -> list[tuple[Task, TaskHandle]]:
        running: list[tuple[Task, TaskHandle]] = []
        for tr in self.tasks.values():
            h = tr.handle()
            if which(tr.t) and h is not None and tr.handle_running(h):
                running.append((tr.t, h))
        return running

    # -- the coordinator's hands (agent.runner.coordinator) ---------------------------------------
    def lifecycle_changed(self) -> None:
        """Tasks are dead for good (killed sidecars) or a restore is done: the alloc completes when
        every task is, else the tasks whose lifecycle turn came start."""
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return
        if self.coord.done():
            self.state.save(status=AllocStatus.COMPLETE, reason=ALL_TASKS_COMPLETE)
            self.teardown()
            return
        self.coord.advance()

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, reason: str = "job stopped") -> None:
        """Stop and tear down; every step is safe to do again, so a restore after a kill in between
        finishes the stop (Restore.restore). The decision is recorded at once; the tasks are stopped
        when the alloc's operation in progress (a restart's stop) is done."""
        self.state.save(desired=DesiredStatus.STOP)
        self.setup_cancel.set()
        self.kill_point("stop.after-desired-record")
        for t in self.group.tasks:
            self.state.bump(t.name)  # no restart on a timer starts it again
        self.serial.run(lambda: self._stop_tasks(reason))

    def _stop_tasks(self, reason: str) -> None:
        if self.rec.status in (AllocStatus.COMPLETE, AllocStatus.FAILED):
            return  # a second stop, or the alloc failed meanwhile (its teardown is done)
        # poststop tasks are not killed: they run once the others are dead (Coordinator.run_poststop)
        running = self._running_tasks(lambda t: stage(t) is not Stage.POSTSTOP)

        def finish() -> None:
            for t in self.group.tasks:
                if stage(t) is Stage.POSTSTOP:
                    continue
                never_started = self.state.task(t.name).state is TaskState.PENDING
                if self.state.handle(t.name) is not None or never_started:
                    self.state.update_task(t.name, state=TaskState.DEAD)
            self.kill_point("stop.after-tasks-stopped")
            self.coord.run_poststop(teardown)

        def teardown() -> None:
            self.teardown()
            self.kill_point("stop.after-teardown")
            self.state.save(status=AllocStatus.COMPLETE, reason=reason)

        def kill() -> None:
            delays = {
                t.name: plan_shutdown_delay(t.shutdown_delay, bool(t.services), self.d.bugs)
                for t, _ in running
            }
            leaders = [t.name for t, _ in running if t.leader]
            order = plan_kill_order([(t.name, stage(t)) for t, _ in running], self.d.bugs, leaders)
            phases = [[(t, h) for t, h in running if t.name in names] for names in order]
            kill_in_phases(self, reason, phases, finish, delays)

        # Nomad's shutdown_delay: the alloc's services leave the registries first (the nomad ones
        # with the stop recorded: alloc_running is false), then the group's delay, then the kills.
        asked = plan_group_shutdown_delay(self.group.shutdown_delay, bool(running), self.d.bugs)
        delay = capped_delay(asked, self.d.max_shutdown_delay)  # a record stored before the limit
        if running and (delay or any(t.shutdown_delay for t, _ in running)):
            self._deregister_services()
        if delay:
            why = capped_why(asked, self.d.max_shutdown_delay)
            self.event(
                "",
                "Shutdown Delay",
                f"services deregistered: killing the tasks in {format_duration(delay)}{why}",
            )
            self.d.schedule(delay, lambda: self.serial.run(kill))
            return
        kill()

    def services(self) -> list[tuple[str, dict[str, Any] | str]]:
        return service_definitions(self.rec, self.group, self.d.advertise_address)

    def _register_services(self) -> None:
        if self.d.services is not None:
            self.d.services.register(self.services(), self.event)

    def _deregister_services(self) -> None:
        if self.d.services is not None and not self._deregistered:
            self.d.services.deregister(self.services(), self.event)
            self._deregistered = True

    def teardown(self) -> None:
        """What the alloc holds on the node goes: its services, its tasks' handles, its network, each
        task's hooks' part (its Vault token), its logmons (after the tasks: each drains its pipes)
        and its dir."""
        self._deregister_services()
        for tr in self.tasks.values():
            h = tr.handle()
            if h:
                if tr.driver.container_log:  # its logger reads the container's log to the end first
                    self.d.task_logs.stop(self.alloc_dir, tr.t.name)
                tr.driver.remove(self.id, tr.t, h)
        if self.bridge:
            self.network.teardown()
        for tr in self.tasks.values():
            for hook in tr.hooks.stop:
                hook.stop()
        self.d.task_logs.stop_all(self.alloc_dir)
        self.d.task_dirs.cleanup(self.alloc_dir)

    # -- API view ------------------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        names = [t.name for t in self.group.tasks]
        tasks, handles = {n: self.state.task(n) for n in names}, {n: self.state.handle(n) for n in names}
        return alloc_view(self.rec, self.group, tasks, handles, self.state.handle(NETNS_OWNER))

    # -- user actions (API) ----------------------------------------------------------------------
    def user_restart(self, t: Task, reason: str = "User requested task to restart") -> None:
        self.event(t.name, "Restart Signaled", reason)
        tr = self.tasks[t.name]
        self.serial.run(lambda: tr.stop_then_restart(StartCause.OPERATOR, "user request"))

    def user_restart_all(self) -> None:
        self.serial.run(lambda: self.coord.restart_all("User requested all tasks to restart"))

    def user_signal(self, task: str, sig: str) -> None:
        h = self.state.handle(task)
        if h is None:
            raise AgentError(f"alloc {self.id} has no running task {task!r}")
        self.event(task, "Signaling", f"Task being sent signal {sig}")
        t = next(x for x in self.group.tasks if x.name == task)
        self.driver(t).signal(h, sig)
