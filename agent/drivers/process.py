"""What the process drivers (exec, raw_exec) share: a task is a process P the agent starts in a session
of its own (so it survives agent restarts), placed in a cgroup of its own with the task's limits before
it runs anything, and found again by pid plus start time.

    cgroups     one per task (agent.drivers.cgroups); P joins them itself (`echo $$ > cgroup.procs`)
                before it exec's the task, so no child escapes them.
    handle      TaskHandle(driver, pid of P, field 22 of /proc/<pid>/stat): a pid reused by another
                process has another start time and is never adopted (status, signal, stop, reattach).
    exits       one pidfd waiter thread per task (no polling). P's parent is its keeper
                (agent.drivers.keeperclient): a process of its own that outlives agent restarts and
                records P's status, so a restarted agent still learns the exit code of a task that
                ended while it was down. Without a usable EXITS_DIR (not root), P is the agent's own
                child and a reattached process's code is unknown (None).
    signals     to P's process group (P is its session and group leader), so the task's children
                get them too; stop is kill_signal, then SIGKILL after kill_timeout.

The /proc reads, the carried environment and the capped reads are agent.drivers.hostproc's.
`ProcessDriver` implements the TaskDriver protocol but `start` and `_exec_plan` (how a command goes
into the task: a change script's `exec`, and `exec_session` for `alloc exec -i/-t`), which say what P is.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import select
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agent.drivers.base import DriverError, ExitReport, TaskHandle, TaskOutput, TaskStatus
from agent.drivers.cgroups import KILL_WAIT, Cgroups
from agent.drivers.hostproc import exit_code_of, host_tool, proc_start_time, run_command
from agent.drivers.keeperclient import (
    EXITS_DIR,
    RECORD_WAIT,
    ExitRecords,
    KeeperFailed,
    KeptProcess,
    spawn_kept,
    usable_exits_dir,
)
from agent.drivers.usage import Usage, cgroup_usage
from agent.structs.model import Task

if TYPE_CHECKING:
    from agent.drivers.session import ExecPlan, ExecSession

log = logging.getLogger(__name__)


class ProcessDriver(abc.ABC):
    """The TaskDriver protocol for a task that is one process P (and its process group); subclasses
    give `name`, `start` (spawn + adopt) and `exec`."""

    name = "process"
    joins_container_netns = False
    keeps_exit_status = False  # the task was a child of the agent that started it
    log_files = True  # through its logmon, into alloc/logs
    container_log = False  # the task writes the pipes itself

    def __init__(self, on_exit: ExitReport | None = None, *, exits_dir: Path | None = EXITS_DIR) -> None:
        self.on_exit = on_exit  # (alloc id, pid) -> None, called from a watcher thread
        self._children: dict[int, subprocess.Popen[bytes]] = {}  # P, when the agent is its parent
        self._keepers: dict[int, subprocess.Popen[bytes]] = {}  # P's pid -> the keeper this agent started
        self._codes: dict[int, int] = {}
        self._lock = threading.Lock()
        usable = usable_exits_dir(exits_dir) if exits_dir is not None else None
        self.records = ExitRecords(usable, self.name) if usable is not None else None

    # -- the keepers' records (agent.drivers.keeperclient) ----------------------------------------------
    def forget_records(self, alloc_id: str, task: str) -> None:
        """The task's records: at its next start (the runner handled every earlier exit before it
        starts the task again) and at its removal."""
        if self.records is not None:
            self.records.forget(alloc_id, task)

    def recorded_code(self, handle: TaskHandle, wait: float = 0.0) -> int | None:
        """The exit code P's keeper recorded, as exit_code reports it, waiting up to `wait` seconds
        for the record; None when there is none (no keeper, a reboot, a keeper killed)."""
        status = self.records.status(handle, wait) if self.records is not None else None
        return None if status is None else self.exit_code(status)

    def ended(self, proc: subprocess.Popen[bytes] | KeptProcess) -> tuple[bool, int | None]:
        """Whether P ended (without reaping a child P), and its code when known."""
        if isinstance(proc, KeptProcess):
            if proc_start_time(proc.pid) == proc.started:
                return False, None
            return True, self.recorded_code(TaskHandle(self.name, str(proc.pid), proc.started), RECORD_WAIT)
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return False, None
        return True, (info.si_status if info.si_code == os.CLD_EXITED else -info.si_status)

    def reap(self, proc: subprocess.Popen[bytes] | KeptProcess) -> None:
        """After a start that failed: P (or its keeper) reaped."""
        if isinstance(proc, KeptProcess):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.keeper.wait(KILL_WAIT)
        else:
            proc.wait()

    # -- a command in the task ---------------------------------------------------------------------
    @abc.abstractmethod
    def _exec_plan(
        self, handle: TaskHandle, argv: list[str], env: Mapping[str, str] | None
    ) -> ExecPlan | str:
        """The command line, environment and dir that run argv as the task runs, in the task's
        environment `env` (carried: see HOST_ENV); why not, as text (each driver says how)."""

    def exec(
        self,
        handle: TaskHandle,
        argv: list[str],
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, str]:
        """Run a command as the task runs (change_mode script), the way `_exec_plan` says. `env`: the
        task's environment as the runner recorded it at start."""
        plan = self._exec_plan(handle, argv, env)
        if isinstance(plan, str):
            return -1, plan
        return run_command(plan.argv, plan.env, timeout, plan.cwd)

    def exec_session(
        self,
        handle: TaskHandle,
        argv: list[str],
        *,
        tty: bool,
        rows: int = 24,
        cols: int = 80,
        env: Mapping[str, str] | None = None,
    ) -> ExecSession:
        """`alloc exec -i/-t`: the same way in as `exec`, with stdin and (tty) a pty."""
        plan = self._exec_plan(handle, argv, env)
        if isinstance(plan, str):
            raise DriverError(self.name, "interactive exec", plan)
        return plan.session(tty=tty, rows=rows, cols=cols, setsid=host_tool("setsid", self.name, "exec"))

    # -- start helpers ------------------------------------------------------------------------------
    def exit_code(self, returncode: int) -> int:
        """What status() reports for a P that ended with Popen's `returncode`: its code, or 128+N
        when signal N killed it (exit_code_of), as docker reports it."""
        return exit_code_of(returncode)

    def task_cgroups(self, alloc_id: str, task: Task) -> Cgroups:
        """The task's cgroups, created with its limits (what cannot be applied is logged).

        Called before every start of the task: a process still in its cgroup is a leftover (a start
        an agent was killed before recording, or a child of a stopped one), killed first, so the
        task never runs twice (agent.fieldbugs.killpoints: start.after-task-start-before-record)."""
        cg = Cgroups.of_task(alloc_id, task.name)
        leftover = cg.pids()
        if leftover:
            log.warning(
                "alloc=%s task=%s: killing %d process(es) left in the task's cgroup before starting it: %s",
                alloc_id[:8],
                task.name,
                len(leftover),
                leftover,
            )
            cg.kill_pids()
        problems = cg.create(task.resources.memory, task.resources.cpu, task.resources.memory_max)
        if problems:
            log.warning(
                "alloc=%s task=%s cgroup limits not fully applied: %s", alloc_id[:8], task.name, problems
            )
        return cg

    def spawn(
        self,
        alloc_id: str,
        task: Task,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path,
        output: TaskOutput | None,
        what: str,
    ) -> subprocess.Popen[bytes] | KeptProcess:
        """P, in a session of its own, its stdout/stderr the task's `output` (its logmon's pipes;
        None: /dev/null). `env` is P's own: HOST_ENV and the carried task environment (carry_env),
        never the task's as is."""
        out = err = -1
        try:
            if output is not None:
                out, err = output.open()
            if self.records is not None:
                self.records.forget(alloc_id, task.name)
                name = f"{alloc_id}.{task.name}."
                try:
                    return spawn_kept(self.records.dir, name, argv, env=env, cwd=cwd, out=out, err=err)
                except KeeperFailed as exc:
                    why = f"cannot start {what!r}: {exc}"
                    raise DriverError(self.name, f"task {task.name}", why) from None
            return subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdout=out if out >= 0 else subprocess.DEVNULL,
                stderr=err if err >= 0 else subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise DriverError(
                self.name, f"task {task.name}", f"cannot start {what!r}: {exc.strerror or exc}"
            ) from None
        finally:
            for fd in (out, err):
                if fd >= 0:
                    os.close(fd)

    def adopt(self, alloc_id: str, task: Task, proc: subprocess.Popen[bytes] | KeptProcess) -> TaskHandle:
        """Track P: its handle, and its exit reported through on_exit. A P that already exited (not
        reaped yet) is tracked too: its exit is then reported with its code, like any other."""
        if isinstance(proc, KeptProcess):  # one that ended already is reported with its recorded code
            with self._lock:
                self._keepers[proc.pid] = proc.keeper
            handle = TaskHandle(self.name, str(proc.pid), proc.started)
            self._watch_pid(alloc_id, handle)
            return handle
        started = proc_start_time(proc.pid, zombie_ok=True)
        if started is None:
            proc.wait()
            raise DriverError(self.name, f"task {task.name}", f"exited at once with code {proc.returncode}")
        with self._lock:
            self._children[proc.pid] = proc
        handle = TaskHandle(self.name, str(proc.pid), started)
        self._watch_pid(alloc_id, handle)
        return handle

    # -- the TaskDriver protocol --------------------------------------------------------------------
    def watch(self, report: ExitReport, stop: threading.Event) -> None:
        """Exits are reported by one pidfd waiter per task (see reattach): just take the report."""
        self.on_exit = report

    def reattach(self, alloc_id: str, handle: TaskHandle) -> None:
        """Watch a task an earlier agent started; one that is gone (or whose pid now belongs to
        another process) is reported as exited at once."""
        self._watch_pid(alloc_id, handle)

    def one_look(self) -> contextlib.AbstractContextManager[None]:
        """Processes are read from /proc, cheaply, each time: nothing to share."""
        return contextlib.nullcontext()

    def close(self) -> None:  # noqa: B027 - a no-op on purpose, not left for a subclass
        """The pidfd waiters are daemon threads: nothing to end."""

    def alloc_labels(self, alloc_id: str) -> dict[str, str] | None:
        """A process carries no labels."""
        return None

    def remove(self, alloc_id: str, task: Task, handle: TaskHandle) -> None:
        self.stop(handle, task.kill_timeout, task.kill_signal)
        self.remove_cgroups(alloc_id, task.name)
        self.forget_records(alloc_id, task.name)

    def remove_cgroups(self, alloc_id: str, task: str) -> None:
        Cgroups.of_task(alloc_id, task).remove()

    def _report(self, alloc_id: str, handle: TaskHandle) -> None:
        if self.on_exit:
            self.on_exit(alloc_id, handle.id)

    def _watch_pid(self, alloc_id: str, handle: TaskHandle) -> None:
        """Call on_exit when the process ends (works for children and for reattached processes)."""
        pid = int(handle.id)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            self._report(alloc_id, handle)
            return
        # Checked with the pidfd open, so the pid cannot be reused in between: not the task's process.
        if proc_start_time(pid, zombie_ok=True) != handle.started_at:
            os.close(fd)
            self._report(alloc_id, handle)
            return

        def wait() -> None:
            try:
                select.select([fd], [], [])
            finally:
                os.close(fd)
            with self._lock:
                proc = self._children.pop(pid, None)
                keeper = self._keepers.pop(pid, None)
            if proc is not None:
                self._codes[pid] = self.exit_code(proc.wait())
            else:
                if keeper is not None:  # it writes the record, then ends: reaped here
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        keeper.wait(RECORD_WAIT)
                code = self.recorded_code(handle, wait=RECORD_WAIT if self.records else 0.0)
                if code is not None:
                    self._codes[pid] = code
            self._report(alloc_id, handle)

        threading.Thread(target=wait, name=f"{self.name}-{pid}", daemon=True).start()

    def _alive(self, handle: TaskHandle) -> bool:
        return proc_start_time(int(handle.id)) == handle.started_at

    def status(self, handle: TaskHandle) -> TaskStatus:
        if self._alive(handle):
            return TaskStatus(True)
        code = self._codes.get(int(handle.id))
        if code is None:  # a task that ended while the agent was down: what its keeper recorded
            code = self.recorded_code(handle)
        return TaskStatus(False, code, "process is gone")

    def pid(self, handle: TaskHandle) -> int:
        return int(handle.id) if self._alive(handle) else 0

    def usage(self, alloc_id: str, task: str, handle: TaskHandle) -> Usage | None:
        cg = Cgroups.of_task(alloc_id, task)
        return cgroup_usage(cg.dirs, cg.v2)

    def signal(self, handle: TaskHandle, sig: str) -> None:
        """To the task's process group (P and every process of the task that stayed in it)."""
        if not self._alive(handle):
            raise DriverError(self.name, f"pid {handle.id}", "is gone")
        os.killpg(int(handle.id), signal.Signals[sig])

    def stop(self, handle: TaskHandle, timeout: float, sig: str = "SIGINT") -> None:
        """kill_signal to the task's process group, SIGKILL after kill_timeout (waits on a pidfd)."""
        if not self._alive(handle):
            return
        pid = int(handle.id)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            if proc_start_time(pid, zombie_ok=True) != handle.started_at:
                return  # gone between the look and the pidfd, and the pid reused already
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.Signals[sig])
            exited, _, _ = select.select([fd], [], [], timeout)
            if not exited:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                select.select([fd], [], [], KILL_WAIT)
        finally:
            os.close(fd)
        with self._lock:
            proc = self._children.get(pid)
        if proc is not None and proc.poll() is not None:
            self._codes[pid] = self.exit_code(proc.returncode)
