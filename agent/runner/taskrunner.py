"""One task of an alloc (Nomad's task runner): its hooks around the driver's start, its start, its
exit through the restart policy (the restart tracker is agent.decide.decisions.plan_task_restart), its
restarts, signals and commands. Its hooks are made for it from its task (agent.runner.taskhooks) and
own their state (its Vault token: agent.runner.vaulthook; its templates: agent.runner.templatehook);
its environment is agent.runner.env, the driver's prepare for a start (docker's pull) off the main
loop agent.runner.prepare.

The alloc runner (agent.runner.alloc) owns the alloc (its dir, network, lifecycle order, status)
and makes one TaskRunner per task; a task runner acts on the alloc only through it. It runs on the
agent's main loop, as the alloc runner does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.client.taskenv import interpolate_config
from agent.decide.decisions import (
    UNRECOVERABLE,
    DeadOnRestore,
    PendingRestart,
    RestartDecision,
    StartCause,
    StartFailure,
    plan_dead_on_restore,
    plan_pending_restart,
    plan_start_failure,
    plan_task_restart,
)
from agent.decide.taskdecisions import (
    HOST_NAMESPACE_KEYS,
    plan_host_namespaces,
    plan_logs_read_only,
    plan_task_dir_mounts,
)
from agent.drivers.base import (
    RESTARTED,
    DriverError,
    PreparesStart,
    TaskContext,
    TaskDriver,
    TaskHandle,
)
from agent.errors import AgentError
from agent.runner.deps import RunnerDeps
from agent.runner.env import task_env, task_view
from agent.runner.interfaces import AllocHost, HookPoints, StartRequest, TaskHook, Then
from agent.runner.kill import exit_text, stop_for_restart
from agent.runner.prepare import StartPrepare
from agent.runner.state import NETNS_OWNER, AllocState
from agent.runner.templatehook import TemplateHook
from agent.runner.vaulthook import VaultHook
from agent.runner.vaulttoken import NoVaultBlock, TaskVaultToken
from agent.structs.model import Task
from agent.structs.records import AllocStatus, DesiredStatus, TaskRecord, TaskState
from agent.templates.render import SecretSource
from agent.templates.runner import TaskTemplates
from agent.vault import VaultError

log = logging.getLogger(__name__)
ALL_TASKS_COMPLETE = "All tasks have completed"  # the reason of an alloc whose tasks all completed, as Nomad


class TaskRunner:
    def __init__(
        self, ar: AllocHost, t: Task, make_hooks: Callable[[TaskRunner], Sequence[TaskHook]]
    ) -> None:
        """`make_hooks`: the task's hooks, made from this runner's ports (agent.runner.taskhooks)."""
        self.ar = ar
        self.t = t
        # The environment as its last start was given it: what `alloc exec` and change scripts run
        # in (never one read back from the task, which the task could rewrite).
        self._started_env: dict[str, str] | None = None
        self.killed_as_failure = False  # its next exit follows a check_restart kill: a failure
        self.prep = StartPrepare(self)  # the driver's prepare for its next start (docker's pull)
        self._preparing = False  # a restart waits for the driver's prepare off the loop
        hooks = make_hooks(self)
        self.hooks = HookPoints.of(hooks)  # each point's hooks (agent.runner.interfaces)
        self._vault = next((h for h in hooks if isinstance(h, VaultHook)), None)
        self._template = next((h for h in hooks if isinstance(h, TemplateHook)), None)

    @property
    def d(self) -> RunnerDeps:
        return self.ar.d

    @property
    def state(self) -> AllocState:
        return self.ar.state

    @property
    def name(self) -> str:
        return self.t.name

    @property
    def driver(self) -> TaskDriver:
        return self.d.drivers.get(self.t.driver)

    @property
    def task_dir(self) -> Path:
        return self.ar.alloc_dir / self.t.name

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.ar.event(self.t.name, type_, message, **details)

    # -- what its template runner reads of it besides (agent.templates.deps.TaskHost) ----------
    @property
    def alloc_id(self) -> str:
        return self.ar.id

    def alloc_running(self) -> bool:
        return self.ar.alloc_running()

    def restart_for_template(self) -> None:
        """A change_mode restart: in the alloc's turn, after what runs in it."""
        self.ar.serial.run(lambda: self.stop_then_restart(StartCause.CHANGE_MODE, "template re-rendered"))

    def handle(self) -> TaskHandle | None:
        return self.state.handle(self.t.name)

    def running(self) -> bool:
        """Recorded running (what the agent decided), not what the driver sees."""
        return self.state.task(self.t.name).state is TaskState.RUNNING

    def handle_running(self, h: TaskHandle) -> bool:
        """What the driver sees: the task of this handle runs (not one started again since)."""
        st = self.driver.status(h)
        return bool(st.running and st.detail != RESTARTED)

    # -- templates and the Vault token (their hooks') ---------------------------------------------
    def templates(self) -> TaskTemplates:
        """The task's template runner (its template hook's); an error for a task without templates."""
        if self._template is None:
            raise AgentError(f"task {self.t.name} has no templates")
        return self._template.templates

    def vault_token(self) -> TaskVaultToken | None:
        """The task's token keeper (its Vault hook's); None when the task has no vault block or the
        agent no Vault."""
        return self._vault.token if self._vault is not None else None

    def task_vault(self) -> SecretSource | None:
        """What the task's templates read Vault with: its own token; a task without a vault block
        gets a source that refuses (never the agent's token); None when the agent has no Vault."""
        if self.d.vault is None:
            return None
        return self.vault_token() or NoVaultBlock()

    @property
    def vault_changed_on_restore(self) -> bool:
        """The restore gave the task a new token (its Vault hook's restore)."""
        return self._vault is not None and self._vault.changed_on_restore

    def vault_token_changed(self, why: str) -> None:
        """A new token replaced the one the running task was given: its vault hook's change_mode."""
        if self._vault is not None:
            self._vault.changed(why)

    # -- environment -------------------------------------------------------------------------------
    def template_env(self) -> dict[str, str]:
        """The variables of the task's `env = true` templates (its template hook's)."""
        return self._template.rendered_env() if self._template is not None else {}

    def env(self) -> dict[str, str]:
        """The task's environment (agent.runner.env), its hooks' variables last."""
        return task_env(self.ar, self.d, self.t, self.task_dir, self.hooks.env)

    def exec_env(self) -> dict[str, str]:
        """The environment a command run in the task gets: the one its last start was given, or
        (after an agent restart) the same made again from the job and the agent's state."""
        env = self._started_env
        return dict(env) if env is not None else {**self.env(), **self.template_env()}

    # -- what runs in the task ----------------------------------------------------------------------
    def signal(self, sig: str) -> None:
        h = self.handle()
        if h is not None:
            self.driver.signal(h, sig)

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        """Run argv in the running task (a change script) off the main loop; `then(exit code,
        output)` on the loop when it is done (-1 and the reason when it could not run or timed out).
        The alloc's other operations do not wait for it."""
        h = self.handle()
        if h is None:
            then(-1, "task has no handle")
            return
        driver = self.driver

        def done(result: object, exc: Exception | None) -> None:
            if exc is not None:
                then(-1, str(exc))
                return
            assert isinstance(result, tuple)
            then(int(result[0]), str(result[1]))

        env = self.exec_env()
        self.d.offload(f"exec-{self.t.name}", lambda: driver.exec(h, argv, timeout, env), done)

    # -- setup and start ----------------------------------------------------------------------------
    def setup(self, then: Then) -> None:
        """The hooks' setup in their order, each after the one before finished; `then(None)` after
        the last, `then(exc)` at the first failure (or at once when the alloc was stopped meanwhile)."""
        self._setup_from(0, then)

    def _setup_from(self, i: int, then: Then) -> None:
        if i == len(self.hooks.setup):
            self._prepare_first_start(lambda: then(None))
            return

        def next_hook(failed: Exception | None) -> None:
            if failed is not None or self.ar.rec.desired is DesiredStatus.STOP:
                then(failed)
                return
            self._setup_from(i + 1, then)

        try:
            self.hooks.setup[i].setup(next_hook)
        except (AgentError, OSError) as exc:
            then(exc)

    def _prepare_first_start(self, then: Callable[[], None]) -> None:
        """A task the alloc's setup starts (one of its first tasks): the driver's prepare (docker's
        image pull) off the main loop, then `then` on the loop (the setup goes on to the start)."""
        ar = self.ar
        first = any(x.name == self.t.name for x in ar.coord.first_tasks())
        if ar.rec.desired is DesiredStatus.STOP or not first:
            then()
            return

        ar.serial.run(lambda: self.prep.then(then))

    def start_poststop(self, again: bool, failed: Callable[[], None]) -> bool:
        """A poststop task's start as the alloc ends (`again`: by its restart policy), after the
        driver's prepare off the loop, in the alloc's turn. A start that fails is a "Driver Failure"
        and the task dead and failed: False when that came before this returned, else `failed()`."""
        outcome: list[bool] = []  # the start's, when it came before this returned
        returned = False

        def go() -> None:
            ok = self._start_poststop(again)
            if not returned:
                outcome.append(ok)
            elif not ok:
                failed()

        self.ar.serial.run(lambda: self.prep.then(go))
        returned = True
        return all(outcome)

    def _start_poststop(self, again: bool) -> bool:
        try:
            if again:
                self.start(StartCause.RESTART_POLICY, "", restart=True)
            else:
                self.start(StartCause.FIRST_START, "the alloc is ending")
        except (AgentError, OSError) as exc:
            self.event("Driver Failure", str(exc))
            self.state.update_task(self.t.name, state=TaskState.DEAD, failed=True)
            return False
        finally:
            self.prep.drop()  # used by its start, or not: gone
        return True

    def start(self, cause: StartCause, why: str = "", *, restart: bool = False) -> None:
        """Start the task once, for one decision (`cause`, in the "Started" event's details). Any
        restart still on a timer for the task is cancelled by it (the generation moves on).
        `restart`: counted in `restarts` (with the 'starting' record, so a kill before the start
        is recorded never counts it twice: restore starts a 'starting' task without counting)."""
        t, ar = self.t, self.ar
        self.killed_as_failure = False
        self.state.bump(t.name)
        prepared = self.prep.take()
        req = StartRequest()
        try:  # the hooks' held dirs (host volumes) stay open until the driver's start returned
            for hook in self.hooks.prestart:
                hook.prestart(req)
            self._started_env = env = {**self.env(), **self.template_env()}
            config = interpolate_config(dict(t.config), task_view(self.t, env), self.d.node_table)
            asked = [k for k in HOST_NAMESPACE_KEYS if t.driver == "docker" and config.get(k) == "host"]
            host_namespaces, refused = plan_host_namespaces(asked, self.d.bugs)
            if refused:
                raise DriverError(t.driver, t.name, refused)
            if prepared is not None and prepared.config != config:
                prepared = None  # prepared for another config: the driver's start does it
            ctx = TaskContext(
                job=ar.job.id,
                group=ar.group.name,
                alloc_id=ar.id,
                task=replace(t, config=config),
                task_dir=self.task_dir,
                env=env,
                network_mode=ar.group.network.driver_mode if ar.group.network else "none",
                netns=ar.netns_path(),
                netns_owner=self.state.handle(NETNS_OWNER) if ar.bridge else None,
                sandbox=ar.network.sandbox(),
                ports=tuple((p.label, p.host, p.to) for p in ar.rec.ports),
                port_host_ips={p.label: p.host_ip for p in ar.rec.ports if p.host_ip},
                output=req.output,
                mounts=req.mounts,
                task_dirs=plan_task_dir_mounts(self.d.bugs),
                host_namespaces=host_namespaces,
                logs_read_only=plan_logs_read_only(self.d.bugs),
                driver_event=lambda message, details: self.event("Driver", message, **details),
                prepared=prepared is not None,
            )
            record = self.state.task(t.name)
            self.state.put_task(
                t.name,
                (record.restarted() if restart else record).with_(state=TaskState.STARTING, completed=False),
            )
            ar.kill_point("start.before-task-start")
            if prepared is not None and prepared.error is not None:
                raise prepared.error  # the prepare's failure is the start's
            h = self.driver.start(ctx)  # replaces a leftover of this task whose start was not recorded
        finally:
            req.release()
        ar.kill_point("start.after-task-start-before-record")
        details: dict[str, Any] = {"cause": cause.value}
        if why:
            details["why"] = why
        with self.d.store.transaction():  # the handle, the state and the event land together
            self.state.put_handle(t.name, h)
            if self._template is not None:
                self._template.templates.task_started()
            self.state.update_task(t.name, state=TaskState.RUNNING, failed=False)
            self.event("Started", "Task started by client", **details)
        ar.kill_point("start.after-task-record")
        for after in self.hooks.poststart:
            after.poststart(h)

    # -- exit and restart ---------------------------------------------------------------------------
    def exited(self, code: int | None, *, while_down: bool = False) -> None:
        """The task exited on its own (found exited at restore: `while_down`; None: its exit code is
        unknown, an exec or raw_exec task that died while the agent was down): the restart policy
        decides. A batch job's task that exits 0 is complete (dead, not failed; the alloc completes
        with its last task); any other exit counts against the policy's attempts."""
        t, ar = self.t, self.ar
        if ar.rec.status is not AllocStatus.RUNNING:
            return
        note = {"exit_code": code, "while_agent_down": True} if while_down else {"exit_code": code}
        now = self.d.clock()
        record = self.state.task(t.name).with_(state=TaskState.DEAD)
        decision = self.restart_decision(record, now, code)
        generation = self.state.bump(t.name)
        shown = exit_text(code, while_down)
        reason = f"task {t.name} failed with exit code {shown}: {decision.reason}"
        all_done = False
        # The exit, the policy's decision (and a failure) land together: a kill never counts the
        # exit twice, nor loses it, nor leaves a task recorded failed in an alloc recorded running.
        with self.d.store.transaction():
            self.event("Terminated", f"Exit Code: {shown}", **note)
            if decision.complete:
                self.state.put_task(t.name, record.with_(completed=True, failed=False, restart_due=0.0))
                all_done = ar.coord.done()  # every task dead for good, poststop ones included
                if all_done:
                    ar.state.save(status=AllocStatus.COMPLETE, reason=ALL_TASKS_COMPLETE)
            elif not decision.restart:
                self.state.put_task(t.name, record.with_(failed=True))
                self.event("Not Restarting", f"{decision.reason} (exit code {shown})", exit_code=code)
                ar.record_failure(reason)
            else:
                counted = record.counted(now, now + decision.delay, decision.interval_start)
                self.state.put_task(t.name, counted)
                self.event("Restarting", f"Task restarting in {decision.delay:.1f}s ({decision.reason})")
        if decision.complete:
            if all_done:  # what the alloc holds on the node goes; a kill before leaves it to the sweep
                ar.teardown()
            else:  # this task is done for good (its logmon drains and ends); the next stage's turn
                for hook in self.hooks.exited:
                    hook.exited()
                ar.coord.advance()
            return
        if not decision.restart:
            ar.finish_failure(reason)
            return
        ar.kill_point("restart.after-exit-record")
        self.schedule_restart(decision.delay, generation)

    def restart_decision(self, record: TaskRecord, now: float, code: int | None) -> RestartDecision:
        """The restart tracker's decision on an exit with `code` (None: unknown, or a start error), by
        the task's own policy (its `restart` merged over its group's), else its group's."""
        t, ar = self.t, self.ar
        return plan_task_restart(
            t.restart or ar.group.restart,
            record.restart_times,
            now,
            StartCause.RESTART_POLICY,
            exit_code=code,
            job_type=ar.job.type,
            hook=t.lifecycle.hook if t.lifecycle else "",
            sidecar=bool(t.lifecycle and t.lifecycle.sidecar),
            interval_start=record.interval_start or ar.rec.created,
            bugs=self.d.bugs,
            failure=self.killed_as_failure,
        )

    def schedule_restart(self, delay: float, generation: int) -> None:
        pending = PendingRestart(self.t.name, generation)

        def fire() -> None:
            running = self.ar.rec.status is AllocStatus.RUNNING
            if plan_pending_restart(pending, self.state.generation(self.t.name), running, self.d.bugs):
                self.restart(StartCause.RESTART_POLICY)
            else:
                log.info(
                    "alloc=%s task=%s: restart timer superseded by a later decision",
                    self.ar.id[:8],
                    self.t.name,
                )

        self.d.schedule(delay, lambda: self.ar.serial.run(fire))

    def restart(
        self,
        cause: StartCause,
        why: str = "",
        *,
        count: bool = True,
        rendered: bool = False,
        prepared: bool = False,
    ) -> None:
        """Start the task again now, for one decision. Only RESTART_POLICY restarts were counted (by
        the decision that scheduled them); every restart shows in `restarts` (`count`: False when a
        restore finishes a start that was already counted). With `restart { render_templates }`
        the templates are rendered anew first (`rendered`: that is done), then the driver's prepare
        runs off the loop (`prepared`: that is done)."""
        ar = self.ar
        if ar.rec.status is not AllocStatus.RUNNING or ar.rec.desired is DesiredStatus.STOP:
            return
        if not rendered and self._render_before_restart(cause, why, count):
            return
        if not prepared and self._prepare_before_restart(cause, why, count):
            return
        ar.kill_point("restart.before-start")
        try:
            self.start(cause, why, restart=count)
        except DriverError as exc:
            self.event("Driver Failure", str(exc))
            action = plan_start_failure(ar.bridge, exc.recoverable, self.d.bugs)
            if action is StartFailure.RECOVER_NETWORK:
                ar.recover_network(f"task {self.t.name} could not start: {exc.reason}")
            elif action is StartFailure.FAIL:
                self.event("Not Restarting", UNRECOVERABLE)
                self.state.update_task(self.t.name, state=TaskState.DEAD, failed=True)  # as Nomad's
                ar.fail(f"task {self.t.name} could not start: {exc}")
            elif given_up := self.start_failed(exc):
                ar.fail(f"task {self.t.name} could not start: {given_up}: {exc}")
        except VaultError as exc:
            self.event("Vault Token Failed", str(exc))
            ar.fail(f"task {self.t.name} could not start: no Vault token: {exc}")

    def _render_before_restart(self, cause: StartCause, why: str, count: bool) -> bool:
        """Nomad's template hook on a restart with `render_templates`: every template rendered anew
        (off the main loop, as the first render) before the task starts again; a render that fails
        fails the task's start. Whether the restart goes on once the render is done. An agent
        restore's start is not a restart of the task: the restore renders on its own."""
        policy = self.t.restart or self.ar.group.restart
        first = cause in (StartCause.RESTORE, StartCause.FIRST_START)
        hook, ar = self._template, self.ar
        if hook is None or not policy.render_templates or first:
            return False

        def failed(exc: Exception) -> None:  # a render's failure fails the start, said
            self.event("Template Failed", str(exc))
            ar.fail(f"task {self.t.name} could not start: templates not rendered: {exc}")

        def render() -> None:  # in the alloc's turn: no other operation of it is off the loop
            if ar.rec.status is AllocStatus.RUNNING and ar.rec.desired is not DesiredStatus.STOP:
                hook.render_again(lambda: self.restart(cause, why, count=count, rendered=True), failed)

        ar.serial.run(render)
        return True

    def _prepare_before_restart(self, cause: StartCause, why: str, count: bool) -> bool:
        """The driver's prepare (docker's pull) off the loop before the start, in the alloc's turn;
        whether the restart goes on once it is done. A restart asked while one waits for its
        prepare joins it (the coordinator asks again for a task still pending)."""
        if not isinstance(self.driver, PreparesStart):
            return False
        if cause is StartCause.RESTORE:
            # a restore's start stays in the restore's turn (the pull on the loop, as before): the
            # restore judges the alloc right after (lifecycle_changed), and a task still waiting for
            # its pull would be judged dead: nomad-5883's rerun would end the alloc instead
            return False
        if self._preparing:
            return True
        ar = self.ar
        self._preparing = True

        def go(off_loop: bool) -> None:
            self._preparing = False
            self.restart(cause, why, count=count, rendered=True, prepared=True)
            self.prep.drop()  # used by its start, or not started (stopped meanwhile): gone
            if off_loop and ar.rec.status is AllocStatus.RUNNING:
                ar.coord.advance()  # its start may open the next lifecycle stage: the caller's turn

        def prepare() -> None:
            if ar.rec.status is not AllocStatus.RUNNING or ar.rec.desired is DesiredStatus.STOP:
                self._preparing = False
                return
            if not self.prep.run(lambda: go(True)):
                go(False)

        ar.serial.run(prepare)
        return True

    def first_start(self, cause: StartCause, why: str = "") -> None:
        """The task's start as the alloc is set up. A start error the restart policy takes (a
        recoverable one outside a bridge group) is counted and the start tried again after the
        delay; any other ends the setup (raised)."""
        try:
            self.start(cause, why)
        except DriverError as exc:
            if (
                plan_start_failure(self.ar.bridge, exc.recoverable, self.d.bugs)
                is not StartFailure.RESTART_POLICY
            ):
                raise
            self.event("Driver Failure", str(exc))
            if self.start_failed(exc):
                raise

    def start_failed(self, exc: DriverError) -> str:
        """A recoverable start error through the restart policy, as an exit whose code is unknown:
        counted, and the start tried again after the policy's delay (""); else the policy gave up
        ("Not Restarting"): its reason, and the caller fails the alloc."""
        t = self.t
        now = self.d.clock()
        record = self.state.task(t.name).with_(state=TaskState.DEAD)
        decision = self.restart_decision(record, now, None)
        generation = self.state.bump(t.name)
        with self.d.store.transaction():
            if not decision.restart:
                self.state.put_task(t.name, record.with_(failed=True))
                self.event("Not Restarting", f"{decision.reason} (start error: {exc.reason})")
                return decision.reason
            self.state.put_task(t.name, record.counted(now, now + decision.delay, decision.interval_start))
            self.event("Restarting", f"Task restarting in {decision.delay:.1f}s ({decision.reason})")
        self.schedule_restart(decision.delay, generation)
        return ""

    def stop_then_restart(self, cause: StartCause, why: str) -> None:
        """The task stopped (off the loop) and started again, for one decision."""
        ar = self.ar
        if ar.rec.status is not AllocStatus.RUNNING or ar.rec.desired is DesiredStatus.STOP:
            return

        def start_again() -> None:
            ar.kill_point("restart.after-stop")
            self.restart(cause, why)

        stop_for_restart(ar, [self.t], start_again, events=cause is StartCause.OPERATOR)

    # -- restore ------------------------------------------------------------------------------------
    def restore_dead(self) -> None:
        """Not running at restore: through the restart policy as if it had died while the agent ran
        (see plan_dead_on_restore). A task recorded 'starting' was being (re)started when the agent
        was killed: its start was decided and counted already, so it is started once more without
        counting (the exit a handle may still show was handled before that start)."""
        record = self.state.task(self.t.name)
        h = self.handle()
        if record.state is TaskState.PENDING:
            return  # its lifecycle turn has not come: the coordinator starts it (lifecycle_changed)
        if record.state is TaskState.STARTING:
            self.restart(StartCause.RESTORE, "its start was interrupted by an agent restart", count=False)
            return
        st = self.driver.status(h) if h else None
        exited = st is not None and not st.running
        code = st.exit_code if st is not None and exited else None
        # no exit status of a task that ended while the agent was down, from a driver that does not
        # keep one (TaskDriver.keeps_exit_status: docker does; a process task's comes from its keeper)
        lost = exited and code is None and not self.driver.keeps_exit_status
        action = plan_dead_on_restore(
            record.state,
            record.restart_due,
            code,
            exit_lost=lost,
            completed=record.completed,
            bugs=self.d.bugs,
        )
        if action is DeadOnRestore.COMPLETE:
            return
        if action is DeadOnRestore.RESTART_POLICY:
            self.exited(code, while_down=True)
        elif action is DeadOnRestore.RESUME_PENDING:
            delay = max(0.0, record.restart_due - self.d.clock())
            self.event("Restarting", f"Task restarting in {delay:.1f}s (owed from before the agent stopped)")
            self.schedule_restart(delay, self.state.bump(self.t.name))
        elif record.state is TaskState.DEAD:
            self.restart(StartCause.RESTORE, "stopped for a restart the agent was killed before finishing")
        else:
            why = "gone while the agent was down (no exit status to count)" if h else "never started"
            self.restart(StartCause.RESTORE, why)
