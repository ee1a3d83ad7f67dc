"""What the process drivers (exec, raw_exec) share: a task is a process P the agent starts in a session
of its own (so it survives agent restarts), placed in a cgroup of its own with the task's limits before
it runs anything, and found again by pid plus start time.

    cgroups     <cgroup root>/fieldlab/<alloc id>.<task> on v2, or that dir below the memory and cpu
                controllers on v1; P joins them itself (`echo $$ > cgroup.procs`) before it exec's the
                task, so no child escapes them. The orphan sweeper (agent.sweeper) finds tasks of
                allocs that are gone by these names, whichever driver made them.
    handle      TaskHandle(driver, pid of P, field 22 of /proc/<pid>/stat): a pid reused by another
                process has another start time and is never adopted (status, signal, stop, reattach).
    exits       one pidfd waiter thread per task (no polling). P's parent is its keeper (agent/keeper.py,
                Nomad's executor in this): a process of its own that outlives agent restarts, reaps P
                and records its status in EXITS_DIR/<alloc>.<task>.<pid>-<start time> (root's, 0700),
                so a restarted agent still learns the exit code of a task that ended while it was
                down. Without a
                usable EXITS_DIR (not root), P is the agent's own child and a reattached process's
                code is unknown (None).
    signals     to P's process group (P is its session and group leader), so the task's children
                get them too; stop is kill_signal, then SIGKILL after kill_timeout.

`ProcessDriver` implements the TaskDriver protocol but `start` and `_exec_plan` (how a command goes
into the task: a change script's `exec`, and `exec_session` for `alloc exec -i/-t`), which say what P is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agent import layout
from agent.drivers.base import DriverError, ExitReport, TaskHandle, TaskOutput, TaskStatus
from agent.drivers.usage import Usage, cgroup_usage
from agent.model import Task

if TYPE_CHECKING:
    from agent.drivers.session import ExecPlan, ExecSession

log = logging.getLogger(__name__)
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_parent() -> str:
    """The agent's task cgroups: <root>[/<controller>]/<parent>/<alloc>.<task> (agent.layout)."""
    return layout.current().cgroup_parent


TOOL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KILL_WAIT = 5.0  # seconds to wait for a process after SIGKILL
EXITS_DIR = Path("/run/fieldlab/exits")  # the keepers' records: tmpfs, gone with a reboot as the tasks
KEEPER = str(Path(__file__).resolve().parent.parent / "keeper.py")
KEEPER_REPORT_WAIT = 10.0  # seconds for a keeper to say P's pid (a python start, a loaded node)
RECORD_WAIT = 2.0  # seconds for a keeper to write the record of a P that just ended
RECORD_POLL = 0.02  # seconds between looks for that record (the poll of a named wait: RECORD_WAIT)
RECORD_MAX = 32  # bytes of a record: "-9\n"
# What every host-side process of a process driver runs with (P before it becomes the workload, the
# exec driver's setup and init, `alloc exec` and change scripts on their way in): nothing of the
# task's environment, so a task's LD_PRELOAD, LD_AUDIT, GCONV_PATH, BASH_ENV... never reach a program
# that runs as root outside the task's user (issue 32). The task's variables ride along under
# CARRIER names, which no loader or shell reads, and become the environment only at the last step,
# after the drop to the task's user: `sh -c 'eval "$FIELDLAB_TASK_EXEC"' env <command> <args>` execs
# `env -i -- "$FIELDLAB_TASK_ENV_0" ... <command> <args>`.
HOST_ENV = {"PATH": TOOL_PATH, "LC_ALL": "C"}
CARRIER = "FIELDLAB_TASK_ENV_"
CARRIER_EXEC = "FIELDLAB_TASK_EXEC"
# `sh -c ENTER_TASK_ENV <env tool> <command> <args...>`: the last step into the task's environment.
ENTER_TASK_ENV = f'eval "${CARRIER_EXEC}"'
# The most output a change script or exec keeps: its last EXEC_OUTPUT_MAX bytes, kept as it streams.
EXEC_OUTPUT_MAX = 64 * 1024
READ_CHUNK = 64 * 1024


def proc_start_time(pid: int, *, zombie_ok: bool = False) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or None if gone (or a
    zombie, unless `zombie_ok`: a child of the agent that exited and is not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z" and not zombie_ok:
        return None
    return fields[19]


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def host_tool(name: str, driver: str = "exec", what: str = "isolation") -> str:
    """A node tool's path (util-linux/coreutils), a DriverError when the node lacks it."""
    found = shutil.which(name, path=TOOL_PATH)
    if found is None:
        raise DriverError(driver, what, f"{name} not found on this node (util-linux/coreutils)")
    return found


class Cgroups:
    """A task's cgroup(s): one dir under each v1 controller it uses, or one dir on v2."""

    def __init__(self, name: str, root: Path = CGROUP_ROOT) -> None:
        self.name = name
        self.v2 = (root / "cgroup.controllers").exists()
        self.dirs = (
            [root / cgroup_parent() / name]
            if self.v2
            else [root / c / cgroup_parent() / name for c in ("memory", "cpu")]
        )

    @classmethod
    def of_task(cls, alloc_id: str, task: str, root: Path = CGROUP_ROOT) -> Cgroups:
        return cls(f"{alloc_id}.{task}", root)

    @classmethod
    def of_pid(cls, pid: int, root: Path = CGROUP_ROOT) -> Cgroups | None:
        """The task cgroups process `pid` is in, None when it is in none (or gone)."""
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        name = task_cgroup_name(lines)
        return cls(name, root) if name else None

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

    def join_script(self) -> str:
        """Shell that moves the running shell into these cgroups (P, before it exec's anything)."""
        return "".join(f'echo "$$" > {shlex.quote(str(p))}; ' for p in self.procs_files())

    @classmethod
    def names(cls, root: Path = CGROUP_ROOT) -> list[str]:
        """Names of the task cgroups the agent made (for the orphan sweeper)."""
        v2 = (root / "cgroup.controllers").exists()
        base = root / cgroup_parent() if v2 else root / "memory" / cgroup_parent()
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def pids(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                found.update(int(x) for x in f.read_text().split())
        return sorted(found)

    def kill_pids(self) -> None:
        """SIGKILL every process in the cgroup and wait (a while) for each to be gone."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids():  # reaped by their parent (init) soon; rmdir needs them gone
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                select.select([fd], [], [], KILL_WAIT)
                os.close(fd)

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, then remove it (an orphaned task)."""
        self.kill_pids()
        self.remove()

    def remove(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


def task_cgroup_name(proc_cgroup_lines: list[str]) -> str | None:
    """The task cgroup's name ("<alloc>.<task>") in the lines of a /proc/<pid>/cgroup, if any."""
    for line in proc_cgroup_lines:
        path = line.split(":", 2)[-1]
        if path.startswith(f"/{cgroup_parent()}/"):
            parts = path.split("/")
            if len(parts) > 2 and parts[2]:
                return parts[2]
    return None


def cgroup_procs_of(pid: int) -> list[Path]:
    """The cgroup.procs files of the task cgroups process `pid` is in."""
    cg = Cgroups.of_pid(pid)
    return cg.procs_files() if cg is not None else []


# A process in the middle of an execve shows an empty /proc/<pid>/environ (the new image's stack is
# not set up yet): a task whose shell `exec`s its program is caught so now and then. An empty read is
# read again, every ENVIRON_POLL seconds, until ENVIRON_SETTLE seconds have passed.
ENVIRON_SETTLE = 1.0
ENVIRON_POLL = 0.01


def read_environ(pid: int) -> dict[str, str]:
    """The environment process `pid` was exec'd with ({} when it cannot be read, or is empty)."""
    path = Path(f"/proc/{pid}/environ")
    deadline = time.monotonic() + ENVIRON_SETTLE
    while True:
        try:
            raw = path.read_bytes()
        except OSError:
            return {}
        if raw or time.monotonic() >= deadline:
            break
        select.select([], [], [], ENVIRON_POLL)  # the poll's interval, within ENVIRON_SETTLE
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def carry_env(env: Mapping[str, str]) -> dict[str, str]:
    """HOST_ENV plus the task's variables under carrier names, and the script that makes them the
    environment (see HOST_ENV). A name that cannot be a variable (empty, or with `=` or a NUL) is left
    out, as execve could not carry it either."""
    pairs = [(k, v) for k, v in sorted(env.items()) if k and "=" not in k and "\0" not in k + v]
    out = dict(HOST_ENV)
    refs = []
    for i, (k, v) in enumerate(pairs):
        out[f"{CARRIER}{i}"] = f"{k}={v}"
        refs.append(f'"${CARRIER}{i}"')
    out[CARRIER_EXEC] = " ".join(['exec "$0" -i --', *refs, '"$@"'])
    return out


def carried_env(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The task environment `carry_env` carried in `environ` (a process's own, read back), or None
    when `environ` carries none."""
    if CARRIER_EXEC not in environ:
        return None
    out: dict[str, str] = {}
    i = 0
    while f"{CARRIER}{i}" in environ:
        k, _, v = environ[f"{CARRIER}{i}"].partition("=")
        out[k] = v
        i += 1
    return out


def enter_task_env(sh: str, env_tool: str) -> list[str]:
    """The argv prefix that runs `<command> <args>` (appended) in the carried task environment."""
    return [sh, "-c", ENTER_TASK_ENV, env_tool]


_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def read_log_tail(logs: Path, name: str, offset: int, limit: int = 400) -> str:
    """What <dir>/<name> gained past `offset`, its last `limit` characters; opened by the dir's fd
    without following a link or blocking on a FIFO, and read only if it is a regular file."""
    flags = os.O_RDONLY | _SAFE_FLAGS
    try:
        dfd = os.open(logs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        finally:
            os.close(dfd)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        start = max(offset, st.st_size - 4 * limit)
        return os.pread(fd, 4 * limit, start).decode(errors="replace").strip()[-limit:]
    finally:
        os.close(fd)


def read_capped(fd: int, deadline: float, limit: int = EXEC_OUTPUT_MAX) -> tuple[bytes, bool]:
    """Read `fd` to its end or `deadline` (monotonic), keeping only the last `limit` bytes as the
    output streams (a command that prints 200 MB costs `limit`). Returns (tail, whether it ended)."""
    kept: deque[bytes] = deque()
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(kept)[-limit:], False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            return b"".join(kept)[-limit:], True
        kept.append(chunk)
        size += len(chunk)
        while size - len(kept[0]) >= limit:
            size -= len(kept.popleft())


def task_environ(pid: int) -> dict[str, str]:
    """The task environment of process `pid`: the one it carries (a host-side process of a process
    driver), else its own as read (a workload)."""
    environ = read_environ(pid)
    carried = carried_env(environ)
    return environ if carried is None else carried


def exit_code_of(returncode: int) -> int:
    """A child's exit status as docker reports it: its code, or 128+N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


def run_command(
    argv: list[str], env: Mapping[str, str] | None, timeout: float, cwd: str = "/"
) -> tuple[int, str]:
    """(exit code, the last EXEC_OUTPUT_MAX bytes of stdout+stderr, read as they come); on timeout
    the whole process group is killed."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        out, ended = read_capped(proc.stdout.fileno(), deadline)
        if ended:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -1, f"timed out after {timeout:.0f}s"
    finally:
        proc.stdout.close()
    return proc.returncode, out.decode(errors="replace")


class KeptProcess:
    """P started by its keeper: P's pid, and the keeper (the agent's child) to reap."""

    def __init__(self, pid: int, started: str, keeper: subprocess.Popen[bytes]) -> None:
        self.pid = pid
        self.started = started  # P's start time, read by the keeper while P was alive or unreaped
        self.keeper = keeper


def _usable_exits_dir(path: Path) -> Path | None:
    """EXITS_DIR made (root's, 0700) or checked; None, with a warning, when it cannot be (not
    root): tasks are then the agent's own children, their codes lost with the agent."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(f"{path} is not a directory of uid {os.geteuid()}")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
    except OSError as exc:
        log.warning("no task keepers (exit codes are lost with the agent): %s", exc)
        return None
    return path


class ProcessDriver:
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
        self.exits_dir = _usable_exits_dir(exits_dir) if exits_dir is not None else None

    # -- the keepers' records ----------------------------------------------------------------------
    def _record_path(self, handle: TaskHandle) -> Path | None:
        """The record of P's end, `<alloc>.<task>.<pid>-<start time>` (the keeper's name), if written."""
        if self.exits_dir is None or not handle.id.isdigit() or not handle.started_at.isdigit():
            return None
        suffix = f".{handle.id}-{handle.started_at}"
        try:
            names = [n for n in os.listdir(self.exits_dir) if n.endswith(suffix)]
        except OSError:
            return None
        return self.exits_dir / names[0] if names else None

    def forget_records(self, alloc_id: str, task: str) -> None:
        """The task's records: at its next start (the runner handled every earlier exit before it
        starts the task again) and at its removal."""
        if self.exits_dir is None:
            return
        prefix = f"{alloc_id}.{task}."
        with contextlib.suppress(OSError):
            for name in os.listdir(self.exits_dir):
                if name.startswith(prefix):
                    with contextlib.suppress(OSError):
                        os.unlink(self.exits_dir / name)

    def recorded_code(self, handle: TaskHandle, wait: float = 0.0) -> int | None:
        """The exit code P's keeper recorded (the driver's way: exit_code), waiting up to `wait`
        seconds for the record; None when there is none (no keeper, a reboot, a keeper killed)."""
        if self.exits_dir is None:
            return None
        deadline = time.monotonic() + wait
        while (path := self._record_path(handle)) is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(RECORD_POLL)  # the keeper reaps P, then writes: a few ms
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            text = os.read(fd, RECORD_MAX).decode(errors="replace").strip()
        finally:
            os.close(fd)
        try:
            return self.exit_code(int(text))
        except ValueError:
            log.warning("%s: keeper record %s unreadable: %r", self.name, path.name, text[:16])
            return None

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
    def _exec_plan(
        self, handle: TaskHandle, argv: list[str], env: Mapping[str, str] | None
    ) -> ExecPlan | str:
        """The command line, environment and dir that run argv as the task runs, in the task's
        environment `env` (carried: see HOST_ENV); why not, as text."""
        raise NotImplementedError

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
        task never runs twice (agent.killpoints: start.after-task-start-before-record)."""
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
        problems = cg.create(task.resources.memory, task.resources.cpu)
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
            if self.exits_dir is not None:
                self.forget_records(alloc_id, task.name)
                name = f"{alloc_id}.{task.name}."
                return self._spawn_kept(task, name, argv, env=env, cwd=cwd, out=out, err=err, what=what)
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

    def _spawn_kept(
        self,
        task: Task,
        name: str,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path,
        out: int,
        err: int,
        what: str,
    ) -> KeptProcess:
        """P started by its keeper (agent/keeper.py): the keeper's report is P's pid."""
        assert self.exits_dir is not None
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            keeper = subprocess.Popen(
                [sys.executable, "-I", "-S", KEEPER, str(self.exits_dir), name, str(w), *argv],
                cwd=cwd,
                env=dict(env),
                stdout=out if out >= 0 else subprocess.DEVNULL,
                stderr=err if err >= 0 else subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                pass_fds=(w,),
                start_new_session=True,  # not in the agent's group, nor in P's
            )
        finally:
            os.close(w)
        try:
            report, _ = read_capped(r, time.monotonic() + KEEPER_REPORT_WAIT, 4096)
        finally:
            os.close(r)
        line = report.decode(errors="replace").strip()
        pid, _, started = line.partition(" ")
        if not (pid.isdigit() and started.isdigit()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                keeper.wait(KILL_WAIT)
            why = line.removeprefix("error ") or f"its keeper said nothing (exit {keeper.poll()})"
            raise DriverError(self.name, f"task {task.name}", f"cannot start {what!r}: {why}")
        return KeptProcess(int(pid), started, keeper)

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

    def close(self) -> None:
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
                code = self.recorded_code(handle, wait=RECORD_WAIT if self.exits_dir else 0.0)
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
