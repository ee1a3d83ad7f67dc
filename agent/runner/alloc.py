"""One allocation's life on this node: set up its network and tasks, watch them, restart them by
policy, recover from a dead netns owner, restore after an agent restart, and tear down.

Every transition is written to the state store before it is acted on, so a crash at any point
leaves a record the next start can act on. All methods run on the agent's main loop thread; what
blocks (a task's stop up to its kill_timeout, a change script up to its timeout) runs off it
(agent.offload) while the alloc's next operations wait in order behind it. The
runner knows drivers, netns owners and the network only by their protocols (agent.drivers.base,
agent.network.base); what a fault flag changes is decided by the pure `plan_*` functions.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import DEFAULT_TOKEN_ROLE
from agent.decisions import (
    NO_BUGS,
    SETUP_RETRY_ATTEMPTS,
    Bugs,
    DeadOnRestore,
    ObservedAlloc,
    PauseDeathAction,
    PendingRestart,
    RestoreAction,
    RestorePlan,
    StartCause,
    plan_dead_on_restore,
    plan_network_recovery,
    plan_network_teardown,
    plan_pause_death,
    plan_pending_restart,
    plan_restore,
    plan_setup_retry,
    plan_start_failure,
    plan_task_restart,
)
from agent.drivers.base import (
    RESTARTED,
    DriverError,
    Mount,
    NetnsOwner,
    TaskContext,
    TaskDriver,
    TaskHandle,
    TaskOutput,
)
from agent.drivers.registry import DriverRegistry
from agent.errors import AgentError, Unavailable
from agent.jobspec.durations import format_duration
from agent.killpoints import KillHook, no_kill
from agent.lifecycle import Stage
from agent.model import Group, Job, Task
from agent.network.base import Network
from agent.offload import Offload, Serial, run_inline
from agent.records import AllocRecord, AllocStatus, DesiredStatus, NetworkState, TaskState
from agent.runner.coordinator import Coordinator, stage
from agent.runner.logmonhook import HOST_LOGMON, LogLimits, LogmonOutput, TaskLogs
from agent.runner.services import ServiceRegistrar, service_definitions
from agent.runner.state import NETNS_OWNER, AllocState
from agent.runner.taskdirs import HostTaskDirs, TaskDirs
from agent.runner.vaulttoken import NoVaultBlock, TaskVaultToken, TokenIssuer
from agent.runner.view import alloc_view
from agent.state import StateStore
from agent.templates.envfile import parse_env_file
from agent.templates.render import SecretSource, TemplateRenderError
from agent.templates.runner import SetupPass, TaskTemplates, TemplateDeps
from agent.templates.sandbox import SandboxError, read_file
from agent.vaultclient import VaultError

log = logging.getLogger(__name__)
RECOVERY_RETRY_MAX = 30.0  # seconds between tries of a network recovery while the engine is away
RESTORE_RENDER = "render on restore"  # the restore's re-render, off the main loop (its Serial's step)
ALL_TASKS_COMPLETE = "All tasks have completed"  # the reason of an alloc whose tasks all completed, as Nomad
_ENV_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")


def exit_text(code: int | None, while_down: bool = False) -> str:
    """A task's exit code as its events and failure reasons show it; an unknown one says why."""
    if code is not None:
        return str(code)
    return "unknown (the task died while the agent was down)" if while_down else "unknown"


@dataclass
class RunnerDeps:
    store: StateStore
    drivers: DriverRegistry
    network: Network | None
    data_dir: Path
    schedule: Callable[[float, Callable[[], None]], None]
    replace: Callable[[AllocRunner, str], None]
    templates: TemplateDeps
    bugs: Bugs = NO_BUGS
    dirs: TaskDirs | None = None
    task_logs: TaskLogs = HOST_LOGMON  # process tasks' logmons (agent.runner.logmonhook)
    services: ServiceRegistrar | None = None
    advertise_address: str = ""
    vault: TokenIssuer | None = None  # the agent's Vault client: creates and revokes tasks' tokens
    vault_token_role: str = DEFAULT_TOKEN_ROLE
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep  # a task's shutdown_delay, in its stop's thread
    # Called at each named step (agent.killpoints): a no-op, or the `crash-at` SIGKILL, or a test's
    # Killed. Every step leaves a record the next restore acts on, losing and doubling nothing.
    kill_point: KillHook = no_kill
    # Where blocking steps run (agent.offload): worker threads whose continuations come back
    # to the main loop (the agent), or at once (the fakes' tests).
    offload: Offload = run_inline
    host_volumes: Mapping[str, tuple[str, bool]] = field(default_factory=dict)  # the node's, by name

    def __post_init__(self) -> None:
        if self.dirs is None:
            self.dirs = HostTaskDirs()

    @property
    def task_dirs(self) -> TaskDirs:
        assert self.dirs is not None  # set in __post_init__
        return self.dirs


class AllocRunner:
    def __init__(self, deps: RunnerDeps, record: AllocRecord, job: Job, group: Group) -> None:
        self.d = deps
        self.state = AllocState(deps.store, record)
        self.job = job
        self.group = group
        self.id: str = record.id
        self._templates: dict[str, TaskTemplates] = {}
        self._vault_tokens: dict[str, TaskVaultToken] = {}
        self.serial = Serial(deps.offload, f"alloc={record.id[:8]}")
        self._vault_changed_on_restore: list[Task] = []  # tasks the restore gave a new token
        # Each task's environment as its last start was given it: what `alloc exec` and change scripts
        # run in (never one read back from the task, which the task could rewrite).
        self._started_env: dict[str, dict[str, str]] = {}
        self._deregistered = False  # its Consul services, once at a stop (shutdown_delay) or teardown
        self.coord = Coordinator(self)  # the tasks' lifecycle order

    @property
    def rec(self) -> AllocRecord:
        return self.state.rec

    # -- what the template runner needs (agent.templates.runner.TaskHost) ---------------------------
    @property
    def alloc_id(self) -> str:
        return self.id

    def alloc_running(self) -> bool:
        return self.rec.status is AllocStatus.RUNNING

    def templates(self, t: Task) -> TaskTemplates:
        if t.name not in self._templates:
            self._templates[t.name] = TaskTemplates(self, t, self.d.templates)
        return self._templates[t.name]

    def template_env(self, t: Task) -> dict[str, str]:
        """The variables of the task's `env = true` templates as the agent rendered them, kept with
        the templates' states (agent.templates.changemode.TemplateState.env), at every start, so a
        change_mode restart picks up new values; they win over the task's env, as in Nomad. The file
        in the task dir is never read back: the task can write it. A line that was not KEY=VALUE was
        a "Template Env Failed" event when it was rendered. A state from an agent that kept no values
        falls back to the file only while it holds exactly what was rendered (its sha256)."""
        env: dict[str, str] = {}
        if not any(tpl.env for tpl in t.templates):
            return env
        states = {s.dest: s for s in self.templates(t).states()}
        for tpl in t.templates:
            st = states.get(tpl.destination)
            if not tpl.env or st is None:
                continue
            if st.env is not None:
                env.update(st.env)
                continue
            why = "not rendered yet"
            if st.rendered:
                try:
                    text = read_file(self.task_dir(t), tpl.destination)
                except (SandboxError, OSError) as exc:
                    why = str(exc)
                else:
                    if hashlib.sha256(text.encode()).hexdigest() == st.rendered:
                        env.update(parse_env_file(text)[0])
                        continue
                    why = "changed since it was rendered: not used"
            self.event(t.name, "Template Env Failed", f"{tpl.destination}: {why}")
        return env

    def task_env(self, t: Task) -> dict[str, str]:
        env = {
            **t.env,
            "NOMAD_ALLOC_ID": self.id,
            "NOMAD_TASK_NAME": t.name,
            "NOMAD_JOB_ID": self.job.id,
            "NOMAD_JOB_NAME": self.job.name or self.job.id,
            "NOMAD_GROUP_NAME": self.group.name,
            "NOMAD_ALLOC_IP": self.rec.address,
            "NOMAD_ALLOC_DIR": str(self.alloc_dir / "alloc"),  # the shared dir (HostTaskDirs.prepare)
            # host paths, as raw_exec sees them; exec and docker see /local and /secrets (inside_env)
            "NOMAD_TASK_DIR": str(self.task_dir(t) / "local"),
            "NOMAD_SECRETS_DIR": str(self.task_dir(t) / "secrets"),
        }
        meta = {**self.job.meta, **self.group.meta, **t.meta}  # Nomad: the task's wins over the group's
        for key, value in meta.items():
            clean = _ENV_UNSAFE.sub("_", key)
            env[f"NOMAD_META_{clean}"] = value
            env[f"NOMAD_META_{clean.upper()}"] = value
        for p in self.rec.ports:
            label = _ENV_UNSAFE.sub("_", p.label)  # Nomad's CleanEnvVar: a dashed label is allowed
            env[f"NOMAD_PORT_{label}"] = str(p.to)
            env[f"NOMAD_HOST_PORT_{label}"] = str(p.host)
        token = self.vault_token(t)
        if token is not None and t.vault is not None and self.d.vault is not None:
            env["VAULT_ADDR"] = self.d.vault.address
            if t.vault.env and token.token:
                env["VAULT_TOKEN"] = token.token
        return env

    # -- the task's own Vault token (agent.runner.vaulttoken) --------------------------------------
    def vault_token(self, t: Task) -> TaskVaultToken | None:
        """The task's token keeper; None when the task has no vault block or the agent no Vault."""
        if t.vault is None or self.d.vault is None:
            return None
        if t.name not in self._vault_tokens:
            self._vault_tokens[t.name] = TaskVaultToken(
                alloc_id=self.id,
                job=self.job.id,
                task=t,
                issuer=self.d.vault,
                role=self.d.vault_token_role,
                store=self.d.store,
                secrets_dir=self.task_dir(t) / "secrets",
                schedule=self.d.schedule,
                event=lambda type_, message: self.event(t.name, type_, message),
                on_new_token=lambda why: self._vault_token_changed(t, why),
                clock=self.d.clock,
            )
        return self._vault_tokens[t.name]

    def task_vault(self, t: Task) -> SecretSource | None:
        """What the task's templates read Vault with: its own token; a task without a vault block
        gets a source that refuses (never the agent's token); None when the agent has no Vault."""
        if self.d.vault is None:
            return None
        return self.vault_token(t) or NoVaultBlock()

    def _vault_token_changed(self, t: Task, why: str) -> None:
        """A new token replaced the one the running task was given: vault.change_mode says how it hears."""
        if t.vault is None or not self.task_running(t) or self.rec.status is not AllocStatus.RUNNING:
            return
        if t.vault.change_mode == "signal":
            self.event(
                t.name, "Signaling", f"new Vault token acquired ({why}); sending {t.vault.change_signal}"
            )
            self.signal_task(t, t.vault.change_signal)
        elif t.vault.change_mode == "restart":
            self.event(t.name, "Restart Signaled", f"new Vault token acquired ({why})")
            self.serial.run(lambda: self._stop_then_restart(t, StartCause.CHANGE_MODE, "new Vault token"))

    def _revoke_vault_tokens(self) -> None:
        for t in self.group.tasks:
            token = self.vault_token(t)
            if token is not None:
                token.revoke()

    def task_running(self, t: Task) -> bool:
        return self.state.task(t.name).state is TaskState.RUNNING

    def signal_task(self, t: Task, sig: str) -> None:
        h = self.state.handle(t.name)
        if h is not None:
            self.driver(t).signal(h, sig)

    def exec_in_task(
        self, t: Task, argv: list[str], timeout: float, then: Callable[[int, str], None]
    ) -> None:
        """Run argv in the running task (a change script) off the main loop; `then(exit code,
        output)` on the loop when it is done (-1 and the reason when it could not run or timed out).
        The alloc's other operations do not wait for it."""
        h = self.state.handle(t.name)
        if h is None:
            then(-1, "task has no handle")
            return
        driver = self.driver(t)

        def done(result: object, exc: Exception | None) -> None:
            if exc is not None:
                then(-1, str(exc))
                return
            assert isinstance(result, tuple)
            then(int(result[0]), str(result[1]))

        env = self.exec_env(t)
        self.d.offload(f"exec-{t.name}", lambda: driver.exec(h, argv, timeout, env), done)

    def exec_env(self, t: Task) -> dict[str, str]:
        """The environment a command run in the task gets: the one its last start was given, or
        (after an agent restart) the same made again from the job and the agent's state."""
        env = self._started_env.get(t.name)
        return dict(env) if env is not None else {**self.task_env(t), **self.template_env(t)}

    def restart_for_template(self, t: Task) -> None:
        self.serial.run(lambda: self._stop_then_restart(t, StartCause.CHANGE_MODE, "template re-rendered"))

    def event(self, task: str, type_: str, message: str, **details: Any) -> None:
        self.state.event(task, type_, message, **details)

    # -- what the alloc is -----------------------------------------------------------------------
    @property
    def bridge(self) -> bool:
        return self.group.network is not None and self.group.network.mode == "bridge"

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

    def task_dir(self, task: Task) -> Path:
        return self.alloc_dir / task.name

    def owns_container(self, container_id: str) -> str | None:
        for name in [NETNS_OWNER, *(t.name for t in self.group.tasks)]:
            h = self.state.handle(name)
            if h and h.id == container_id:
                return name
        return None

    # -- start ---------------------------------------------------------------------------------
    def kill_point(self, name: str) -> None:
        """A named step (agent.killpoints): where the `crash-at` setting or a test kills the agent."""
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
                self._setup_network()
            for t in self.coord.first_tasks():  # prestart tasks first, when the group has any
                self._start_task(t, cause, why)
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
        self._teardown()
        with self.d.store.transaction():  # every task's turn comes again, in lifecycle order
            for t in self.group.tasks:
                self.state.put_task(t.name, self.state.task(t.name).with_(state=TaskState.PENDING))
        self.start(StartCause.RESTORE, "setup interrupted by an agent restart")

    def _migrate_previous(self) -> None:
        """ephemeral_disk sticky/migrate: the data of the alloc this one replaces, on this node,
        taken over before any task or template of this one runs (Nomad's migrate hook)."""
        disk, previous = self.group.ephemeral_disk, self.rec.replaces
        if not previous or not (disk.sticky or disk.migrate):
            return
        old_dir = self.d.data_dir / "alloc" / previous
        moved = self.d.task_dirs.migrate(old_dir, self.alloc_dir, [t.name for t in self.group.tasks])
        if moved:
            self.event("", "Migrated", f"took over {', '.join(moved)} of alloc {previous} (ephemeral_disk)")

    def _setup_dirs(self, first: int, then: Callable[[Exception | None], None]) -> None:
        """Each task's dir and token from the `first` task on, its templates rendered off the main
        loop before the next task's turn; `then(None)` on the loop when all are, `then(exc)` at the
        first failure."""
        tasks = self.group.tasks
        if first == 0:
            try:
                self._migrate_previous()
            except OSError as exc:
                then(exc)
                return
        for i in range(first, len(tasks)):
            t = tasks[i]
            try:
                self.event(t.name, "Task Setup", "Building Task Directory")
                self.d.task_dirs.prepare(self.task_dir(t))
                token = self.vault_token(t)
                if token is not None:
                    token.ensure()
            except (AgentError, OSError) as exc:
                then(exc)
                return
            if t.templates:
                self._render_setup(t, functools.partial(self._setup_rendered, i + 1, then))
                return
        then(None)

    def _setup_rendered(
        self, nxt: int, then: Callable[[Exception | None], None], failed: Exception | None
    ) -> None:
        """A task's first render is done: the next task's turn, or the failure (or the end, when the
        alloc was stopped meanwhile)."""
        if failed is not None or self.rec.desired is DesiredStatus.STOP:
            then(failed)
            return
        self._setup_dirs(nxt, then)

    def _render_setup(self, t: Task, then: Callable[[Exception | None], None]) -> None:
        """The task's first render, off the main loop (agent.templates.runner.SetupPass)."""
        tt = self.templates(t)
        try:
            setup = tt.begin_render_all()
        except (AgentError, OSError) as exc:
            then(exc)
            return
        if setup is None:
            then(None)
            return

        def done(result: object, exc: Exception | None) -> None:
            try:
                tt.finish_render_all(setup, result if isinstance(result, list) else None, exc)
            except Exception as failed:
                if isinstance(failed, TemplateRenderError):
                    self.event(t.name, "Template Failed", str(failed))
                then(failed)
                return
            then(None)

        self.serial.off_loop(f"render {t.name}", lambda: tt.run_render_all(setup), done)

    def _setup_network(self, *, keep_address: bool = False) -> None:
        """Create the alloc's netns owner and run CNI ADD on it; record the address ADD gave.
        `keep_address` is only the `stale-network-status-on-restore` fault (see recover_network)."""
        if self.d.network is None:
            raise AgentError("bridge networking needs a CNI conflist (config cni_conf_dir)")
        handle = self.owner.create(self.job.id, self.group.name, self.id)
        if handle is not None:
            self.state.put_handle(NETNS_OWNER, handle)
        ns = self.owner.path(self.id, handle)
        if ns is None:
            raise AgentError(f"the {self.owner.kind} owning the network namespace is not running")
        self.state.save(network_state=NetworkState.ADDING)
        self.kill_point("start.before-network-add")
        address = self.d.network.add(self.id, ns, self.rec.ports)
        self.kill_point("start.after-network-add")
        if keep_address and self.rec.address:
            # nomad-24236/16893: the recreated network's address is not written back; the alloc
            # (API, NOMAD_ALLOC_IP of the tasks restarted next) keeps the one from before.
            address = self.rec.address
        self.state.save(network_state=NetworkState.READY, address=address)

    def _record_env(self, t: Task) -> dict[str, str]:
        env = {**self.task_env(t), **self.template_env(t)}
        self._started_env[t.name] = env
        return env

    def _start_task(self, t: Task, cause: StartCause, why: str = "", *, restart: bool = False) -> None:
        """Start the task once, for one decision (`cause`, in the "Started" event's details). Any
        restart still on a timer for the task is cancelled by it (the generation moves on).
        `restart`: counted in `restarts` (with the 'starting' record, so a kill before the start
        is recorded never counts it twice: restore starts a 'starting' task without counting)."""
        self.state.bump(t.name)
        token = self.vault_token(t)
        if token is not None:
            token.ensure()  # a no-op unless the token expired while the task was down
        owner = self.state.handle(NETNS_OWNER) if self.bridge else None
        output = self._task_output(t)
        ctx = TaskContext(
            job=self.job.id,
            group=self.group.name,
            alloc_id=self.id,
            task=t,
            task_dir=self.task_dir(t),
            env=self._record_env(t),
            network_mode=self.group.network.mode if self.group.network else "none",
            netns=self.netns_path(),
            netns_owner=owner,
            ports=tuple((p.label, p.host, p.to) for p in self.rec.ports),
            output=output,
            mounts=self._mounts(t),
        )
        record = self.state.task(t.name)
        self.state.put_task(
            t.name,
            (record.restarted() if restart else record).with_(state=TaskState.STARTING, completed=False),
        )
        self.kill_point("start.before-task-start")
        h = self.driver(t).start(ctx)  # replaces a leftover of this task whose start was not recorded
        self.kill_point("start.after-task-start-before-record")
        details: dict[str, Any] = {"cause": cause.value}
        if why:
            details["why"] = why
        with self.d.store.transaction():  # the handle, the state and the event land together
            self.state.put_handle(t.name, h)
            if t.templates:
                self.templates(t).task_started()
            self.state.update_task(t.name, state=TaskState.RUNNING, failed=False)
            self.event(t.name, "Started", "Task started by client", **details)
        self.kill_point("start.after-task-record")
        self._follow_container_log(t, h)

    def _mounts(self, t: Task) -> tuple[Mount, ...]:
        """The task's volume_mounts on this node's host volumes (Nomad's volume hook): read only when
        the client's volume, the group's request or the mount says so. A volume the node no longer
        has (its config changed since the job was placed) fails the start, naming it."""
        requests = {v.alias: v for v in self.group.volumes}
        out = []
        for m in t.volume_mounts:
            req = requests[m.volume]
            found = self.d.host_volumes.get(req.source)
            if found is None:
                why = f"host volume validation error: missing {req.source}"
                raise DriverError("volume", f"task {t.name}", why)
            path, client_ro = found
            read_only = client_ro or req.read_only or m.read_only
            out.append(Mount(path, m.destination, read_only, m.propagation_mode))
        return tuple(out)

    def _task_output(self, t: Task) -> TaskOutput | None:
        """A process task's stdout/stderr: the pipes of its logmon, started when none runs (Nomad's
        logmon hook); None for a driver that keeps its own log (docker) or when `logs` is disabled."""
        if not self.driver(t).log_files or t.logs.disabled:
            return None
        limits = LogLimits(t.logs.max_files, t.logs.max_file_size)
        try:
            self.d.task_logs.ensure(self.alloc_dir, t.name, limits)
        except OSError as exc:
            raise DriverError("logmon", f"task {t.name}", f"cannot start its logmon: {exc}") from None
        return LogmonOutput(self.d.task_logs, self.alloc_dir, t.name)

    def _follow_container_log(self, t: Task, h: TaskHandle) -> None:
        """A container's log copied into the task's logmon pipes (Nomad's docker_logger), one logger
        per container; a logger that cannot start is an event, not a failed task."""
        if not self.driver(t).container_log or t.logs.disabled:
            return
        try:
            self.d.task_logs.follow_container(self.alloc_dir, t.name, h.id)
        except OSError as exc:
            self.event(t.name, "Logmon Failure", f"cannot follow its container's log: {exc}")

    def _fail_setup(self, reason: str) -> None:
        """The alloc could not be set up: each task dead and failed with the reason (as Nomad's
        client shows a task whose prestart failed), not left pending."""
        with self.d.store.transaction():
            for t in self.group.tasks:
                self.event(t.name, "Setup Failure", reason)
                self.state.update_task(t.name, state=TaskState.DEAD, failed=True)
        self._teardown()
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
        code = self.driver(t).status(h).exit_code if h else None
        record = self.state.task(name)
        if self.coord.waits_for(t):  # a poststop task of an ending alloc
            self.coord.poststop_exited(t, code, exit_text(code))
        elif record.state is TaskState.DEAD and (record.completed or record.failed):
            pass  # dead for good already (a sidecar the coordinator killed): nothing to decide
        elif self.rec.status is not AllocStatus.RUNNING:
            pass
        elif self.rec.desired is DesiredStatus.STOP:  # killed by the stop (its poststop tasks run): no policy
            self.event(name, "Terminated", f"Exit Code: {exit_text(code)}", exit_code=code)
            self.state.update_task(name, state=TaskState.DEAD)
        else:
            self._task_exited(t, code)

    def _owner_exited(self) -> None:
        if self.rec.status is not AllocStatus.RUNNING:
            return
        self.event("", "Network Lost", "pause container died; recovering the group's network")
        if plan_pause_death(self.d.bugs) is PauseDeathAction.RESTART_INTO_DEAD_PAUSE:
            # nomad-12216: tasks are restarted into the dead pause's network and fail there.
            for t in self._unfinished():
                self._restart_task(t, StartCause.NETWORK_RECOVERY, "pause container died")
            return
        self.recover_network("pause container died")

    def _task(self, name: str) -> Task:
        return next(t for t in self.group.tasks if t.name == name)

    def _task_exited(self, t: Task, code: int | None, *, while_down: bool = False) -> None:
        """The task exited on its own (found exited at restore: `while_down`; None: its exit code is
        unknown, an exec or raw_exec task that died while the agent was down): the restart policy
        decides. A batch job's task that exits 0 is complete (dead, not failed; the alloc completes
        with its last task); any other exit counts against the policy's attempts."""
        if self.rec.status is not AllocStatus.RUNNING:
            return
        note = {"exit_code": code, "while_agent_down": True} if while_down else {"exit_code": code}
        now = self.d.clock()
        record = self.state.task(t.name).with_(state=TaskState.DEAD)
        decision = plan_task_restart(
            self.group.restart,
            record.restart_times,
            now,
            StartCause.RESTART_POLICY,
            exit_code=code,
            job_type=self.job.type,
            hook=t.lifecycle.hook if t.lifecycle else "",
            sidecar=bool(t.lifecycle and t.lifecycle.sidecar),
        )
        generation = self.state.bump(t.name)
        shown = exit_text(code, while_down)
        reason = f"task {t.name} failed with exit code {shown}: {decision.reason}"
        all_done = False
        # The exit, the policy's decision (and a failure) land together: a kill never counts the
        # exit twice, nor loses it, nor leaves a task recorded failed in an alloc recorded running.
        with self.d.store.transaction():
            self.event(t.name, "Terminated", f"Exit Code: {shown}", **note)
            if decision.complete:
                self.state.put_task(t.name, record.with_(completed=True, failed=False, restart_due=0.0))
                all_done = self.coord.done()  # every task dead for good, poststop ones included
                if all_done:
                    self.state.save(status=AllocStatus.COMPLETE, reason=ALL_TASKS_COMPLETE)
            elif not decision.restart:
                self.state.put_task(t.name, record.with_(failed=True))
                self.event(t.name, "Not Restarting", f"{decision.reason} (exit code {shown})", exit_code=code)
                self._record_failure(reason)
            else:
                self.state.put_task(t.name, record.counted(now, now + decision.delay))
                self.event(
                    t.name, "Restarting", f"Task restarting in {decision.delay:.1f}s ({decision.reason})"
                )
        if decision.complete:
            if all_done:  # what the alloc holds on the node goes; a kill before leaves it to the sweep
                self._teardown()
            else:  # this task is done for good: its logmon drains and ends (Nomad's logmon hook)
                self.d.task_logs.stop(self.alloc_dir, t.name)
                self.coord.advance()  # the next lifecycle stage's turn, or sidecars left alone
            return
        if not decision.restart:
            self._finish_failure(reason)
            return
        self.kill_point("restart.after-exit-record")
        self._schedule_restart(t, decision.delay, generation)

    def _schedule_restart(self, t: Task, delay: float, generation: int) -> None:
        pending = PendingRestart(t.name, generation)

        def fire() -> None:
            running = self.rec.status is AllocStatus.RUNNING
            if plan_pending_restart(pending, self.state.generation(t.name), running, self.d.bugs):
                self._restart_task(t, StartCause.RESTART_POLICY)
            else:
                log.info(
                    "alloc=%s task=%s: restart timer superseded by a later decision", self.id[:8], t.name
                )

        self.d.schedule(delay, lambda: self.serial.run(fire))

    def _restart_task(self, t: Task, cause: StartCause, why: str = "", *, count: bool = True) -> None:
        """Start the task again now, for one decision. Only RESTART_POLICY restarts were counted (by
        the decision that scheduled them); every restart shows in `restarts` (`count`: False when a
        restore finishes a start that was already counted)."""
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return
        self.kill_point("restart.before-start")
        try:
            self._start_task(t, cause, why, restart=count)
        except DriverError as exc:
            self.event(t.name, "Driver Failure", str(exc))
            if plan_start_failure(self.bridge, self.d.bugs):
                self.recover_network(f"task {t.name} could not start: {exc.reason}")
            else:
                self.fail(f"task {t.name} could not start: {exc}")
        except VaultError as exc:
            self.event(t.name, "Vault Token Failed", str(exc))
            self.fail(f"task {t.name} could not start: no Vault token: {exc}")

    def _unfinished(self) -> list[Task]:
        """The group's tasks but those that completed (a batch task's exit 0, a killed sidecar) and
        those whose lifecycle turn has not come: what a recovery of the group's network starts again."""
        return [
            t
            for t in self.group.tasks
            if not (record := self.state.task(t.name)).completed and record.state is not TaskState.PENDING
        ]

    def recover_network(self, why: str, cause: StartCause = StartCause.NETWORK_RECOVERY) -> None:
        """Recreate the whole network of the group (DEL, fresh netns owner, ADD) and restart its
        tasks (`cause`: not counted against the restart policy; a restart on a timer is cancelled).
        If that fails, the alloc is failed and replaced: never a dead end, never a second set."""
        self.serial.run(lambda: self._recover_network(why, cause))

    def _recover_network(self, why: str, cause: StartCause) -> None:
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return
        for t in self._unfinished():
            self.event(t.name, "Restart Signaled", f"network recreated: {why}")
        self._stop_for_restart(self._unfinished(), lambda: self._recreate_network(why, cause))

    def _recreate_network(self, why: str, cause: StartCause, attempt: int = 1) -> None:
        """DEL, a fresh netns owner, ADD, then every task started once for this recovery. An engine
        that does not answer (docker restarting) is waited out: the recovery is tried again, with
        an event, until it completes; any other failure fails the alloc (and it is replaced)."""
        self.kill_point("recovery.after-stop")
        plan = plan_network_recovery(self.d.bugs)
        try:
            if plan.forget_cached_result and self.d.network is not None:
                # nomad-11272: forget the old attachment without DEL, so a reservation that
                # survived the reboot is still held by this very alloc id.
                self.d.network.forget(self.id)
            if plan.run_del:
                self._del_network()
            self.kill_point("recovery.after-del")
            self.owner.remove(self.id, self.state.handle(NETNS_OWNER))
            self.kill_point("recovery.after-owner-remove")
            self._setup_network(keep_address=plan.keep_old_address)
            self.kill_point("recovery.before-tasks")
            for t in self._unfinished():
                self.kill_point("restart.before-start")
                self._start_task(t, cause, why, restart=True)
            self.event("", "Network Recovered", f"network recreated ({why})", address=self.rec.address)
        except DriverError as exc:
            if not exc.unavailable:
                self.event("", "Driver Failure", str(exc))
                self.fail(f"network recovery failed: {exc}")
                return
            delay = min(RECOVERY_RETRY_MAX, 2.0 ** (attempt - 1))
            self.event(
                "",
                "Network Recovery Retrying",
                f"{exc}; trying again in {delay:.0f}s (attempt {attempt + 1})",
            )
            self.d.schedule(
                delay, lambda: self.serial.run(lambda: self._retry_recovery(why, cause, attempt + 1))
            )
        except VaultError as exc:
            self.fail(f"network recovery failed: no Vault token: {exc}")
        except (AgentError, OSError) as exc:
            self.fail(f"network recovery failed: {exc}")

    def _retry_recovery(self, why: str, cause: StartCause, attempt: int) -> None:
        """The recovery again from the start, once the engine may answer: what the interrupted
        attempt started is stopped first (a new decision for each task, with its event)."""
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return
        for t in self._unfinished():
            self.event(t.name, "Restart Signaled", f"network recreated: {why} (attempt {attempt})")
        self._stop_for_restart(self._unfinished(), lambda: self._recreate_network(why, cause, attempt))

    def _del_network(self) -> None:
        if self.d.network is None:
            return
        if plan_network_teardown(self.d.bugs).release_only:
            # nomad-6385 family: teardown frees the address but leaves every iptables chain and
            # DNAT rule behind, so the host port stays pointed at a dead address.
            self.d.network.release_addresses(self.id)
        else:
            errors = self.d.network.delete(
                self.id, self.netns_path(), address=self.rec.address, ports=self.rec.ports
            )
            if errors:
                self.event("", "Network Teardown", "CNI DEL reported: " + "; ".join(errors))
        self.state.save(network_state=NetworkState.DELETED)

    def fail(self, reason: str) -> None:
        """Mark the alloc failed, tear it down and have a replacement started. The replacement is
        owed from the moment the failure is written (`replace_pending`), so a kill before it starts
        leaves a record the next restore replaces."""
        with self.d.store.transaction():
            self._record_failure(reason)
        self._finish_failure(reason)

    def _record_failure(self, reason: str) -> None:
        owed = self.rec.desired is DesiredStatus.RUN
        self.state.save(status=AllocStatus.FAILED, reason=reason, replace_pending=owed)
        self.event("", "Alloc Failed", reason)

    def _finish_failure(self, reason: str) -> None:
        """After the failure is recorded: a group with poststop tasks has its other tasks stopped and
        its poststop tasks run to their end (Nomad runs them after a failure too), then what the alloc
        holds on the node goes (a kill before that leaves it to the orphan sweep: the alloc is no
        longer live), then the replacement."""
        self.kill_point("replace.after-fail-record")
        if self.coord.poststop_owed():
            live = self._running_tasks(lambda t: stage(t) is not Stage.POSTSTOP)
            self._stop_off_loop(
                "stop before poststop", live, lambda: self.coord.run_poststop(lambda: self._replace(reason))
            )
            return
        self._replace(reason)

    def _replace(self, reason: str) -> None:
        self._teardown()
        self.kill_point("replace.after-teardown")
        self.d.replace(self, reason)

    # -- restore -------------------------------------------------------------------------------
    def observe(self) -> ObservedAlloc:
        """What is on the node for this alloc, before anything is changed."""
        tasks_running: list[bool] = []
        share: list[bool] = []
        owner_handle = self.state.handle(NETNS_OWNER)
        if self.bridge:
            owner_status = self.owner.status(self.id, owner_handle)
            owner_alive, same_start = owner_status.running, owner_status.detail != RESTARTED
        else:
            owner_alive, same_start = False, True
        for t in self.group.tasks:
            h = self.state.handle(t.name)
            driver = self.driver(t)
            st = driver.status(h) if h else None
            running = bool(st and st.running and st.detail != RESTARTED)
            tasks_running.append(running)
            pid = driver.pid(h) if (h and running) else 0
            share.append(bool(pid and self.bridge and self.owner.holds(self.id, owner_handle, pid)))
            if running and h:
                driver.reattach(self.id, h)
        diffs: list[str] = []
        has_result = bool(self.bridge and self.d.network and self.d.network.has_result(self.id))
        ns_path = self.netns_path()
        if has_result and ns_path is not None and self.d.network is not None:
            diffs = self.d.network.check(self.id, ns_path, self.rec.ports)
        if self.bridge and self.rec.network_state is not NetworkState.READY:
            # Killed between CNI ADD and recording its address (or during a DEL): the address the
            # tasks would be given is not the attachment's.
            diffs = [*diffs, f"network recorded {self.rec.network_state.value or 'not set up'}, not ready"]
        return ObservedAlloc(
            alloc_dir_exists=self.alloc_dir.is_dir(),
            bridge=self.bridge,
            pause_running=owner_alive,
            pause_same_start=same_start,
            tasks_running=tasks_running,
            tasks_share_pause_netns=share,
            network_diffs=diffs,
            has_cni_result=has_result,
            tasks_completed=[self.state.task(t.name).completed for t in self.group.tasks],
        )

    def _rerender_on_restore(self, then: Callable[[], None]) -> None:
        """Dynamic secrets are issued again on every agent start (as in the field): render them
        before anything restarts, so a restarted task reads fresh content. The renders run off the
        main loop (the alloc's next operations wait behind them); `then` on the loop after them."""
        pending: list[tuple[Task, TaskTemplates, SetupPass]] = []
        for t in self.group.tasks:
            if self.alloc_dir.is_dir() and self.d.task_dirs.remount_secrets(self.task_dir(t)):
                self.event(t.name, "Task Setup", "secrets/ tmpfs mounted again (it is gone after a reboot)")
            token = self.vault_token(t)
            if token is not None and token.restore():
                self._vault_changed_on_restore.append(t)
            if not t.templates:
                continue
            tt = self.templates(t)
            try:
                setup = tt.begin_render_all()
            except AgentError as exc:
                self._restore_render_failed(t, exc)
                continue
            if setup is not None:
                pending.append((t, tt, setup))
        if not pending:
            then()
            return

        def blocking() -> list[tuple[object, Exception | None]]:
            out: list[tuple[object, Exception | None]] = []
            for _, tt, setup in pending:
                try:
                    out.append((tt.run_render_all(setup), None))
                except Exception as exc:
                    out.append((None, exc))
            return out

        def done(result: object, exc: Exception | None) -> None:
            results = result if isinstance(result, list) else [(None, exc)] * len(pending)
            for (t, tt, setup), (renders, failed) in zip(pending, results, strict=True):
                try:
                    tt.finish_render_all(setup, renders if isinstance(renders, list) else None, failed)
                except Exception as err:
                    self._restore_render_failed(t, err)
            then()

        self.serial.off_loop(RESTORE_RENDER, blocking, done)

    def _restore_render_failed(self, t: Task, exc: Exception) -> None:
        """A task's render at restore failed: an event and a retry (at once when Vault answers again,
        if it could not answer)."""
        if not isinstance(exc, AgentError):
            log.error("alloc=%s task=%s: render at restore failed: %r", self.id[:8], t.name, exc)
        self.event(t.name, "Template Failed", f"{exc}; retrying")
        tt = self.templates(t)
        tt.schedule_rerender(1.0)
        down = isinstance(exc, Unavailable) or (isinstance(exc, TemplateRenderError) and exc.unavailable)
        tt.wake_when_vault_answers(down)

    def restore(self, observed: ObservedAlloc | None = None) -> RestoreAction:
        """`observed`: what `observe` found, when the core looked at every alloc at once. The
        templates render off the main loop first (`_rerender_on_restore`); what the plan calls for
        follows on the loop."""
        obs = observed if observed is not None else self.observe()
        plan = plan_restore(obs, self.d.bugs, [self.task_running(t) for t in self.group.tasks])
        log.info("alloc=%s restore: %s (%s)", self.id[:8], plan.action.value, plan.reason)
        self._vault_changed_on_restore = []
        if plan.action is RestoreAction.REPLACE:
            self._act_on_restore(plan, obs)
        else:
            self._rerender_on_restore(lambda: self._after_restore_render(plan, obs))
        return plan.action

    def _after_restore_render(self, plan: RestorePlan, obs: ObservedAlloc) -> None:
        try:
            self._act_on_restore(plan, obs)
        except Exception as exc:  # as agent.restore does for a restore that raises
            log.exception("alloc=%s: restore failed", self.id[:8])
            self.fail(f"restore failed: {exc}")

    def _act_on_restore(self, plan: RestorePlan, obs: ObservedAlloc) -> None:
        if plan.action is RestoreAction.REATTACH:
            self._record_reattached()
            self.event("", "Restored", f"reattached: {plan.reason}")
            for t in self.group.tasks:
                if t.templates:
                    self.templates(t).after_restore()
            for t in self._vault_changed_on_restore:
                self._vault_token_changed(t, "the stored token no longer works")
            self.lifecycle_changed()
        elif plan.action is RestoreAction.RESTART_TASKS:
            self.event("", "Restored", plan.reason)
            self._record_reattached()
            for t, running in zip(self.group.tasks, obs.tasks_running, strict=True):
                if not running:
                    self._restore_dead_task(t)
                elif t in self._vault_changed_on_restore:
                    self._vault_token_changed(t, "the stored token no longer works")
            self.lifecycle_changed()
        elif plan.action is RestoreAction.RECREATE_NETWORK:
            self.event("", "Restore Network", plan.reason)
            self.recover_network(plan.reason, StartCause.RESTORE)
        else:
            self.event("", "Restore Failed", plan.reason)
            self.fail(plan.reason)

    def _record_reattached(self) -> None:
        """A task found running whose record is not 'running' (the agent was killed between the
        start being recorded and the state catching up): recorded running now. A running process
        task whose logmon is gone (killed) gets a new one, which copies what waited in the pipe."""
        for t in self.group.tasks:
            h = self.state.handle(t.name)
            record = self.state.task(t.name)
            if h is None or not self._handle_running(t, h):
                continue
            if record.state is not TaskState.RUNNING:
                self.state.put_task(t.name, record.with_(state=TaskState.RUNNING))
            # Its logmon outlived the agent as a rule; one that did not is started again. A process
            # task an agent before logmon started writes its own file (agent.logs.TaskDirLog): none.
            if self.driver(t).container_log or self.d.task_logs.has_pipes(self.alloc_dir, t.name):
                try:
                    self._task_output(t)
                except DriverError as exc:
                    self.event(t.name, "Logmon Failure", f"{exc.reason}: its output waits in the pipe")
            self._follow_container_log(t, h)

    def _handle_running(self, t: Task, h: Any) -> bool:
        st = self.driver(t).status(h)
        return bool(st.running and st.detail != RESTARTED)

    handle_running = _handle_running  # for the coordinator

    def _running_tasks(self, which: Callable[[Task], bool]) -> list[tuple[Task, TaskHandle]]:
        running: list[tuple[Task, TaskHandle]] = []
        for t in self.group.tasks:
            h = self.state.handle(t.name)
            if which(t) and h is not None and self._handle_running(t, h):
                running.append((t, h))
        return running

    # -- the coordinator's hands (agent.runner.coordinator) ---------------------------------------
    def lifecycle_changed(self) -> None:
        """Tasks are dead for good (killed sidecars) or a restore is done: the alloc completes when
        every task is, else the tasks whose lifecycle turn came start."""
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return
        if self.coord.done():
            self.state.save(status=AllocStatus.COMPLETE, reason=ALL_TASKS_COMPLETE)
            self._teardown()
            return
        self.coord.advance()

    def start_in_turn(self, t: Task) -> None:
        """A task whose lifecycle turn came while the alloc runs (a main task once its prestart
        tasks are done, a poststart task, a poststop task after the others ended)."""
        self._restart_task(t, StartCause.FIRST_START, f"{stage(t).value} turn", count=False)

    def start_poststop(self, t: Task) -> bool:
        """A poststop task of an ending alloc (stopped or failed); False: it could not start."""
        try:
            self._start_task(t, StartCause.FIRST_START, "the alloc is ending")
        except (AgentError, OSError) as exc:
            self.event(t.name, "Driver Failure", str(exc))
            self.state.update_task(t.name, state=TaskState.DEAD, failed=True)
            return False
        return True

    def stop_off_loop(
        self, what: str, tasks: list[tuple[Task, TaskHandle]], then: Callable[[], None]
    ) -> None:
        self._stop_off_loop(what, tasks, then)

    def _exit_status_kept(self, t: Task) -> bool:
        """Whether the task's driver still has the exit status of a task that ended while the agent
        was down (TaskDriver.keeps_exit_status: docker yes, exec and raw_exec no)."""
        return self.driver(t).keeps_exit_status

    def _restore_dead_task(self, t: Task) -> None:
        """A task not running at restore: through the restart policy as if it had died while the
        agent ran (see plan_dead_on_restore). A task recorded 'starting' was being (re)started when
        the agent was killed: its start was decided and counted already, so it is started once more
        without counting (the exit a handle may still show was handled before that start)."""
        record = self.state.task(t.name)
        h = self.state.handle(t.name)
        if record.state is TaskState.PENDING:
            return  # its lifecycle turn has not come: the coordinator starts it (lifecycle_changed)
        if record.state is TaskState.STARTING:
            self._restart_task(
                t, StartCause.RESTORE, "its start was interrupted by an agent restart", count=False
            )
            return
        st = self.driver(t).status(h) if h else None
        exited = st is not None and not st.running
        code = st.exit_code if st is not None and exited else None
        lost = exited and code is None and not self._exit_status_kept(t)
        action = plan_dead_on_restore(
            record.state, record.restart_due, code, exit_lost=lost, completed=record.completed
        )
        if action is DeadOnRestore.COMPLETE:
            return
        if action is DeadOnRestore.RESTART_POLICY:
            self._task_exited(t, code, while_down=True)
        elif action is DeadOnRestore.RESUME_PENDING:
            delay = max(0.0, record.restart_due - self.d.clock())
            self.event(
                t.name, "Restarting", f"Task restarting in {delay:.1f}s (owed from before the agent stopped)"
            )
            self._schedule_restart(t, delay, self.state.bump(t.name))
        elif record.state is TaskState.DEAD:
            self._restart_task(
                t, StartCause.RESTORE, "stopped for a restart the agent was killed before finishing"
            )
        else:
            why = "gone while the agent was down (no exit status to count)" if h else "never started"
            self._restart_task(t, StartCause.RESTORE, why)

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, reason: str = "job stopped") -> None:
        """Stop and tear down; every step is safe to do again, so a restore after a kill in between
        finishes the stop (Core.restore). The decision is recorded at once; the tasks are stopped
        when the alloc's operation in progress (a restart's stop) is done."""
        self.state.save(desired=DesiredStatus.STOP)
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
            self._teardown()
            self.kill_point("stop.after-teardown")
            self.state.save(status=AllocStatus.COMPLETE, reason=reason)

        def kill() -> None:
            for t, _ in running:
                if t.shutdown_delay:  # Nomad's task runner: services gone, then this wait, then the signal
                    shown = format_duration(t.shutdown_delay)
                    message = f"Waiting for shutdown_delay of {shown} before killing the task."
                    self.event(t.name, "Waiting for shutdown delay", message)
                self.event(t.name, "Killing", f"Sent {t.kill_signal} ({reason})")
            self._stop_off_loop("stop", running, finish, delays=True)

        # Nomad's shutdown_delay: the alloc's services leave the registries first (the nomad ones
        # with the stop recorded: alloc_running is false), then the group's delay, then the kills.
        if running and (self.group.shutdown_delay or any(t.shutdown_delay for t, _ in running)):
            self._deregister_services()
        if running and self.group.shutdown_delay:
            delay = self.group.shutdown_delay
            self.event(
                "", "Shutdown Delay", f"services deregistered: killing the tasks in {format_duration(delay)}"
            )
            self.d.schedule(delay, lambda: self.serial.run(kill))
            return
        kill()

    def services(self) -> list[dict[str, Any]]:
        return service_definitions(self.rec, self.group, self.d.advertise_address)

    def _register_services(self) -> None:
        if self.d.services is not None:
            self.d.services.register(self.services(), self.event)

    def _deregister_services(self) -> None:
        if self.d.services is not None and not self._deregistered:
            self.d.services.deregister(self.services(), self.event)
            self._deregistered = True

    def _teardown(self) -> None:
        self._deregister_services()
        for t in self.group.tasks:
            h = self.state.handle(t.name)
            if h:
                self.driver(t).remove(self.id, t, h)
        if self.bridge:
            try:
                self._del_network()
            except AgentError as exc:
                self.event("", "Network Teardown", str(exc))
            self.owner.remove(self.id, self.state.handle(NETNS_OWNER))
        self._revoke_vault_tokens()
        self.d.task_logs.stop_all(self.alloc_dir)  # after the tasks: each logmon drains its pipes
        self.d.task_dirs.cleanup(self.alloc_dir)

    # -- API view ------------------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        names = [t.name for t in self.group.tasks]
        return alloc_view(
            self.rec,
            self.group,
            {n: self.state.task(n) for n in names},
            {n: self.state.handle(n) for n in names},
            self.state.handle(NETNS_OWNER),
        )

    # -- user actions (API) ----------------------------------------------------------------------
    def user_restart(self, t: Task) -> None:
        self.event(t.name, "Restart Signaled", "User requested task to restart")
        self.serial.run(lambda: self._stop_then_restart(t, StartCause.OPERATOR, "user request"))

    def user_signal(self, task: str, sig: str) -> None:
        h = self.state.handle(task)
        if h is None:
            raise AgentError(f"alloc {self.id} has no running task {task!r}")
        self.event(task, "Signaling", f"Task being sent signal {sig}")
        t = next(x for x in self.group.tasks if x.name == task)
        self.driver(t).signal(h, sig)

    def _stop_then_restart(self, t: Task, cause: StartCause, why: str) -> None:
        """One task stopped (off the loop) and started again, for one decision."""
        if self.rec.status is not AllocStatus.RUNNING or self.rec.desired is DesiredStatus.STOP:
            return

        def start_again() -> None:
            self.kill_point("restart.after-stop")
            self._restart_task(t, cause, why)

        self._stop_for_restart([t], start_again)

    def _stop_for_restart(self, tasks: Sequence[Task], then: Callable[[], None]) -> None:
        """Stop tasks to start them again: recorded dead first, so a kill before the start leaves a
        task the restore starts again (uncounted), never an 'exit' it would count."""
        stopping: list[tuple[Task, TaskHandle]] = []
        for t in tasks:
            h = self.state.handle(t.name)
            if h is not None:
                self.state.update_task(t.name, state=TaskState.DEAD)
                stopping.append((t, h))
        self._stop_off_loop("stop for restart", stopping, then)

    def _stop_off_loop(
        self,
        what: str,
        tasks: list[tuple[Task, TaskHandle]],
        then: Callable[[], None],
        *,
        delays: bool = False,
    ) -> None:
        """Stop the tasks (kill_signal, SIGKILL after kill_timeout) off the main loop, then `then` on
        it. A stop that fails is an event; the driver's next start of the task or the teardown
        removes what is left."""
        if not tasks:
            then()
            return
        stops = [
            (t.name, self.driver(t), h, t.kill_timeout, t.kill_signal, t.shutdown_delay if delays else 0.0)
            for t, h in tasks
        ]

        def blocking() -> list[tuple[str, str]]:
            # The tasks are stopped together, as Nomad's client does: the alloc's stop takes its
            # longest kill_timeout, not their sum.
            failed: list[tuple[str, str]] = []

            def one(
                name: str, driver: TaskDriver, h: TaskHandle, timeout: float, sig: str, delay: float
            ) -> None:
                if delay:  # the task's shutdown_delay, in this stop's own thread (each task its own)
                    self.d.sleep(delay)
                try:
                    driver.stop(h, timeout, sig)
                except AgentError as exc:
                    failed.append((name, str(exc)))

            threads = [threading.Thread(target=one, args=stop, daemon=True) for stop in stops[1:]]
            for t in threads:
                t.start()
            one(*stops[0])
            for t in threads:
                t.join()
            return failed

        def done(result: object, exc: Exception | None) -> None:
            if exc is not None:
                log.error("alloc=%s: %s failed: %s", self.id[:8], what, exc)
                self.event("", "Kill Failed", f"{what}: {exc}")
            for name, reason in result if isinstance(result, list) else ():
                self.event(name, "Kill Failed", reason)
            then()

        self.serial.off_loop(what, blocking, done)
