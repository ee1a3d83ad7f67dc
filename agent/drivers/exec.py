"""The exec driver: a plain process in the alloc's network namespace, joined by path (nsenter), in a
cgroup of its own, in its own session so that it outlives an agent restart. A restarted agent finds
it again by pid plus the process start time (which a reused pid would not have).

Exit is watched with a pidfd (no polling); the agent's own children are reaped for their exit code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shlex
import signal
import subprocess
import threading
from pathlib import Path

from agent.drivers.base import DriverError, ExitReport, TaskContext, TaskHandle, TaskStatus
from agent.model import Task

log = logging.getLogger(__name__)
CGROUP_ROOT = Path("/sys/fs/cgroup")


def proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or None if gone/zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return fields[19]


class Cgroups:
    """A task's cgroup(s): one dir under each v1 controller it uses, or one dir on v2."""

    def __init__(self, name: str, root: Path = CGROUP_ROOT) -> None:
        self.v2 = (root / "cgroup.controllers").exists()
        self.dirs = (
            [root / "fieldlab" / name]
            if self.v2
            else [root / c / "fieldlab" / name for c in ("memory", "cpu")]
        )

    def create(self, memory_mb: int, cpu_shares: int) -> list[str]:
        """Create and set limits; return what could not be applied (said in an event, not hidden)."""
        problems = []
        for d in self.dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                problems.append(f"cgroup {d}: {exc.strerror}")
        limits = (
            {
                "memory.max": str(memory_mb * 1024 * 1024),
                "cpu.weight": str(max(1, min(10000, cpu_shares // 10))),
            }
            if self.v2
            else {
                "memory.limit_in_bytes": str(memory_mb * 1024 * 1024),
                "cpu.shares": str(max(2, cpu_shares)),
            }
        )
        for f, value in limits.items():
            target = next((d / f for d in self.dirs if (d / f).exists()), None)
            if target is None:
                problems.append(f"cgroup file {f} not available")
                continue
            try:
                target.write_text(value)
            except OSError as exc:
                problems.append(f"{target}: {exc.strerror}")
        return problems

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs if (d / "cgroup.procs").exists()]

    @classmethod
    def names(cls, root: Path = CGROUP_ROOT) -> list[str]:
        """Names of the task cgroups the agent made (for the orphan sweeper)."""
        base = root / "fieldlab" if (root / "cgroup.controllers").exists() else root / "memory" / "fieldlab"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def pids(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                found.update(int(x) for x in f.read_text().split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, then remove it (an orphaned exec task)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids():  # reaped by their parent (init) soon; rmdir needs them gone
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                select.select([fd], [], [], 5.0)
                os.close(fd)
        self.remove()

    def remove(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


class ExecDriver:
    name = "exec"
    joins_container_netns = False

    def __init__(
        self,
        on_exit: ExitReport | None = None,
        *,
        allow_root: bool = False,
        chroot_env: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.on_exit = on_exit  # (alloc id, pid) -> None, called from a watcher thread
        self.allow_root = allow_root  # a task may ask for user "root" (client config exec_allow_root)
        self.chroot_env = chroot_env  # (host path, path in the chroot) (client config chroot_env)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._codes: dict[int, int] = {}
        self._lock = threading.Lock()

    def start(self, ctx: TaskContext) -> TaskHandle:
        alloc_id, task, netns, task_dir, env = ctx.alloc_id, ctx.task, ctx.netns, ctx.task_dir, ctx.env
        cmd = str(task.config.get("command", ""))
        args = [str(a) for a in task.config.get("args", [])]
        cg = Cgroups(f"{alloc_id}.{task.name}")
        problems = cg.create(task.resources.memory, task.resources.cpu)
        if problems:
            log.warning(
                "alloc=%s task=%s cgroup limits not fully applied: %s", alloc_id[:8], task.name, problems
            )
        argv = [cmd, *args]
        if netns is not None:
            argv = ["nsenter", f"--net={netns}", "--", *argv]
        # The shell joins the cgroups before exec'ing the task, so no child escapes them.
        joins = "; ".join(f"echo $$ > {shlex.quote(str(p))}" for p in cg.procs_files())
        script = f"{joins}; exec {shlex.join(argv)}" if joins else f"exec {shlex.join(argv)}"
        logs = task_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            with (logs / "stdout").open("ab") as out, (logs / "stderr").open("ab") as err:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", script],
                    cwd=task_dir,
                    env=dict(env),
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            raise DriverError("exec", f"task {task.name}", f"cannot start {cmd!r}: {exc.strerror}") from None
        started = proc_start_time(proc.pid)
        if started is None:
            proc.wait()
            raise DriverError("exec", f"task {task.name}", f"exited at once with code {proc.returncode}")
        with self._lock:
            self._children[proc.pid] = proc
        handle = TaskHandle("exec", str(proc.pid), started)
        self._watch_pid(alloc_id, handle)
        return handle

    def watch(self, report: ExitReport, stop: threading.Event) -> None:
        """Exits are reported by one pidfd waiter per task (see reattach): just take the report."""
        self.on_exit = report

    def reattach(self, alloc_id: str, handle: TaskHandle) -> None:
        self._watch_pid(alloc_id, handle)

    def close(self) -> None:
        """The pidfd waiters are daemon threads: nothing to end."""

    def alloc_labels(self, alloc_id: str) -> dict[str, str] | None:
        """A process carries no labels."""
        return None

    def remove(self, alloc_id: str, task: Task, handle: TaskHandle) -> None:
        self.stop(handle, task.kill_timeout, task.kill_signal)
        self.remove_cgroups(alloc_id, task.name)

    def _watch_pid(self, alloc_id: str, handle: TaskHandle) -> None:
        """Call on_exit when the process ends (works for children and for reattached processes)."""
        pid = int(handle.id)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            if self.on_exit:
                self.on_exit(alloc_id, handle.id)
            return

        def wait() -> None:
            try:
                select.select([fd], [], [])
            finally:
                os.close(fd)
            with self._lock:
                proc = self._children.pop(pid, None)
            if proc is not None:
                self._codes[pid] = proc.wait()
            if self.on_exit:
                self.on_exit(alloc_id, handle.id)

        threading.Thread(target=wait, name=f"exec-{pid}", daemon=True).start()

    def _alive(self, handle: TaskHandle) -> bool:
        return proc_start_time(int(handle.id)) == handle.started_at

    def status(self, handle: TaskHandle) -> TaskStatus:
        if self._alive(handle):
            return TaskStatus(True)
        return TaskStatus(False, self._codes.get(int(handle.id)), "process is gone")

    def pid(self, handle: TaskHandle) -> int:
        return int(handle.id) if self._alive(handle) else 0

    def signal(self, handle: TaskHandle, sig: str) -> None:
        if not self._alive(handle):
            raise DriverError("exec", f"pid {handle.id}", "is gone")
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
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.Signals[sig])
            exited, _, _ = select.select([fd], [], [], timeout)
            if not exited:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                select.select([fd], [], [], 5.0)
        finally:
            os.close(fd)
        with self._lock:
            proc = self._children.get(pid)
        if proc is not None and proc.poll() is not None:
            self._codes[pid] = proc.returncode

    def exec(self, handle: TaskHandle, argv: list[str], timeout: float = 30.0) -> tuple[int, str]:
        """Run a command inside the task's namespaces (for change_mode script)."""
        cmd = ["nsenter", f"--target={handle.id}", "--net", "--mount", "--", *argv]
        try:
            res = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return -1, f"timed out after {timeout:.0f}s"
        return res.returncode, (res.stdout + res.stderr).decode(errors="replace")

    def remove_cgroups(self, alloc_id: str, task: str) -> None:
        Cgroups(f"{alloc_id}.{task}").remove()
