"""A process task's stdout and stderr, as Nomad's client keeps them: through a `logmon` process
(agent.logmon) into `alloc/<id>/alloc/logs/<task>.stdout.N` and `.stderr.N`, rotated by the task's
`logs` block (max_files, max_file_size in MB; Nomad's defaults 10 and 10).

How the bytes go: each task has two named FIFOs in `alloc/<id>/.logmon/` (root's, 0700: no task can
reach them by path). The driver gives the task each FIFO opened read-write as its stdout/stderr, so
the task never blocks on open and never gets EPIPE; logmon holds the same FIFOs read-write and copies
what comes into the rotated files. logmon is a process of its own, started here before the task
(Nomad's logmon task-runner hook) and kept across the task's restarts and the agent's restarts (the
unit kills the agent's main process only): while it is down, what the task writes waits in the pipe
(64 KiB, then the task's writes block) and the next logmon copies it, so no line is lost or written
twice. `ensure` starts one when the recorded one is gone (after a reboot, or a kill); `stop` asks it to
drain and end (SIGTERM), at the alloc's teardown.

A docker task's output is its container's log: `follow_container` starts a docker logger
(agent.logmon.docker, Nomad's docker_logger) that copies the container's log into the same pipes, one
per container, found again on restore.

Its pid and start time are kept in `.logmon/<task>.pid`, so a restarted agent finds the one an earlier
agent started. Nothing here follows a link in the alloc's shared dir: the logs dir is opened component
by component without following one, and logmon gets it as an open fd.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.drivers.hostproc import proc_start_time

log = logging.getLogger(__name__)

FIFO_DIR = ".logmon"  # in the alloc dir: root's, 0700
STREAMS = ("stdout", "stderr")
STOP_TIMEOUT = 5.0  # seconds logmon gets to drain its pipes after SIGTERM, before SIGKILL
DOCKER_LOGGER = ".docker"  # `<task>.docker.pid`: the task's docker logger (agent.logmon.docker)
DOCKER_GRACE = 2.0  # seconds a docker logger gets to end with its container's log before SIGTERM
MB = 1024 * 1024


@dataclass(frozen=True)
class LogLimits:
    """A task's `logs` block (Nomad's LogConfig): how many files of each stream, each how big."""

    max_files: int = 10
    max_file_size_mb: int = 10


def logs_dir(alloc_dir: Path) -> Path:
    """`alloc/<id>/alloc/logs`: the alloc's shared dir's logs, as Nomad lays them out."""
    return alloc_dir / "alloc" / "logs"


def fifo_path(alloc_dir: Path, task: str, stream: str) -> Path:
    return alloc_dir / FIFO_DIR / f"{task}.{stream}"


class TaskLogs(Protocol):
    """What the runner asks of the logs of a task whose driver writes files (`log_files`)."""

    def ensure(self, alloc_dir: Path, task: str, limits: LogLimits) -> None:
        """A logmon copying the task's pipes (started when none runs); OSError when it cannot."""

    def pipes(self, alloc_dir: Path, task: str) -> tuple[int, int]:
        """The task's stdout and stderr: its FIFOs opened read-write (the caller closes them)."""

    def has_pipes(self, alloc_dir: Path, task: str) -> bool:
        """Whether the task was given its logmon's pipes (no: started by an agent before logmon)."""

    def follow_container(self, alloc_dir: Path, task: str, container: str) -> None:
        """A docker logger copying `container`'s log into the task's pipes (started when none runs
        for it); OSError when it cannot."""

    def stop(self, alloc_dir: Path, task: str) -> None:
        """The task's logmon drained and ended (nothing when none runs)."""

    def stop_all(self, alloc_dir: Path) -> None:
        """Every logmon and docker logger of the alloc (its teardown, the GC)."""


@dataclass(frozen=True)
class LogmonOutput:
    """A task's stdout/stderr for its driver (agent.drivers.base.TaskOutput): its logmon's pipes."""

    logs: TaskLogs
    alloc_dir: Path
    task: str

    def open(self) -> tuple[int, int]:
        return self.logs.pipes(self.alloc_dir, self.task)


def _open_fifo_dir(alloc_dir: Path) -> Path:
    d = alloc_dir / FIFO_DIR
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(errno.EPERM, f"{d}: not a directory of the agent's")
    return d


def _open_fifo(path: Path) -> int:
    """`path`, a FIFO of ours, opened read-write (made first when missing)."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path}: not a FIFO")
    return fd


def _open_logs_dir(alloc_dir: Path) -> int:
    """`alloc/logs` below the alloc dir, made when missing (0777, as Nomad's shared dir is), opened
    without following a link at either component: a task can write `alloc/` and could have put a
    link there."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(alloc_dir, flags)
    try:
        for name in ("alloc", "logs"):
            made = True
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                made = False
            nxt = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if made:
                os.fchmod(fd, 0o777)  # Nomad's shared alloc dir: every task writes it
    except OSError:
        os.close(fd)
        raise
    return fd


def _read_pidfile(path: Path) -> tuple[int, str, str] | None:
    """(pid, start time, target: the container a docker logger follows, else "")."""
    try:
        pid, started, *target = path.read_text().split()
        return int(pid), started, target[0] if target else ""
    except (OSError, ValueError):
        return None


def _alive(path: Path) -> int | None:
    """The pid of the process recorded in `path` when it still runs (same pid, same start time)."""
    got = _read_pidfile(path)
    if got is None:
        return None
    pid, started, _ = got
    return pid if proc_start_time(pid) == started else None


class HostLogmon:
    """logmon processes on this host, one per task that writes files."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._children: dict[int, subprocess.Popen[bytes]] = {}  # to reap the ones this agent started

    def pipes(self, alloc_dir: Path, task: str) -> tuple[int, int]:
        _open_fifo_dir(alloc_dir)
        out = _open_fifo(fifo_path(alloc_dir, task, "stdout"))
        try:
            return out, _open_fifo(fifo_path(alloc_dir, task, "stderr"))
        except OSError:
            os.close(out)
            raise

    def has_pipes(self, alloc_dir: Path, task: str) -> bool:
        try:
            return stat.S_ISFIFO(os.lstat(fifo_path(alloc_dir, task, "stdout")).st_mode)
        except OSError:
            return False

    def ensure(self, alloc_dir: Path, task: str, limits: LogLimits) -> None:
        pidfile = _open_fifo_dir(alloc_dir) / f"{task}.pid"
        if _alive(pidfile) is not None:
            return
        fds: list[int] = []
        try:
            fds.append(_open_logs_dir(alloc_dir))
            fds.extend(self.pipes(alloc_dir, task))
            proc = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "agent.logmon",
                    "--task",
                    task,
                    "--logs-fd",
                    str(fds[0]),
                    "--stdout-fd",
                    str(fds[1]),
                    "--stderr-fd",
                    str(fds[2]),
                    "--max-files",
                    str(limits.max_files),
                    "--max-file-size",
                    str(limits.max_file_size_mb * MB),
                ],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # not in the agent's process group: an agent's stop leaves it
            )
        finally:
            for fd in fds:
                os.close(fd)
        self._record(proc, pidfile, f"logmon for task {task}")
        log.debug("alloc dir %s task %s: logmon pid %d", alloc_dir.name[:8], task, proc.pid)

    def follow_container(self, alloc_dir: Path, task: str, container: str) -> None:
        fifo_dir = _open_fifo_dir(alloc_dir)
        pidfile = fifo_dir / f"{task}{DOCKER_LOGGER}.pid"
        got = _read_pidfile(pidfile)
        if got is not None and got[2] == container and _alive(pidfile) is not None:
            return
        out, err = self.pipes(alloc_dir, task)
        try:
            proc = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "agent.logmon.docker",
                    "--container",
                    container,
                    "--stdout-fd",
                    str(out),
                    "--stderr-fd",
                    str(err),
                    "--since-file",
                    str(fifo_dir / f"{task}.{container[:12]}.since"),
                ],
                pass_fds=(out, err),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        finally:
            os.close(out)
            os.close(err)
        self._record(proc, pidfile, f"docker logger for task {task}", container)

    def _record(self, proc: subprocess.Popen[bytes], pidfile: Path, what: str, target: str = "") -> None:
        started = proc_start_time(proc.pid, zombie_ok=True)
        if started is None:
            raise OSError(errno.ESRCH, f"{what} exited at once ({proc.wait()})")
        self._children[proc.pid] = proc
        tmp = pidfile.with_suffix(".pid.tmp")
        tmp.write_text(f"{proc.pid} {started} {target}\n")
        tmp.replace(pidfile)

    def stop(self, alloc_dir: Path, task: str) -> None:
        """The task's docker logger first (it ends by itself once its container is gone: a grace for
        that, so the container's last lines get into the pipe), then its logmon, which drains."""
        for name, grace in ((f"{task}{DOCKER_LOGGER}", DOCKER_GRACE), (task, 0.0)):
            pidfile = alloc_dir / FIFO_DIR / f"{name}.pid"
            pid = _alive(pidfile)
            if pid is not None:
                self._end(pid, grace)
            with contextlib.suppress(FileNotFoundError):
                pidfile.unlink()

    def stop_all(self, alloc_dir: Path) -> None:
        d = alloc_dir / FIFO_DIR
        try:
            names = [p.name[: -len(".pid")] for p in d.iterdir() if p.name.endswith(".pid")]
        except OSError:
            return
        for name in names:
            if not name.endswith(DOCKER_LOGGER):
                self.stop(alloc_dir, name)
        for name in names:  # a docker logger whose task has no logmon recorded (a kill in between)
            if name.endswith(DOCKER_LOGGER):
                self.stop(alloc_dir, name[: -len(DOCKER_LOGGER)])

    def _end(self, pid: int, grace: float = 0.0) -> None:
        """After `grace` seconds for it to end by itself, SIGTERM (logmon drains its pipes, then
        ends), SIGKILL after STOP_TIMEOUT; reaped when ours."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            ended, _, _ = select.select([fd], [], [], grace)
            if not ended:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                ended, _, _ = select.select([fd], [], [], STOP_TIMEOUT)
            if not ended:
                log.warning("logmon pid %d did not end %.0fs after SIGTERM: SIGKILL", pid, STOP_TIMEOUT)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            os.close(fd)
        proc = self._children.pop(pid, None)
        if proc is not None:
            deadline = time.monotonic() + STOP_TIMEOUT
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))


HOST_LOGMON = HostLogmon()
