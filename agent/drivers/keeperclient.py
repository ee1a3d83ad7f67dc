"""The agent's side of a process task's keeper (agent/drivers/keeper.py, Nomad's executor in this): the
keeper is started with the task's argv, starts P as its child in a session of its own, says P's pid
and start time on a pipe, reaps P and records its status in EXITS_DIR/<alloc>.<task>.<pid>-<start
time> (root's, 0700, on a tmpfs: gone with a reboot, as the tasks are). So a restarted agent still
learns the exit code of a task that ended while it was down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from agent.drivers.base import TaskHandle
from agent.drivers.cgroups import KILL_WAIT
from agent.drivers.hostproc import read_capped

log = logging.getLogger(__name__)
EXITS_DIR = Path("/run/fieldlab/exits")  # the keepers' records: tmpfs, gone with a reboot as the tasks
KEEPER = str(Path(__file__).resolve().parent / "keeper.py")
KEEPER_REPORT_WAIT = 10.0  # seconds for a keeper to say P's pid (a python start, a loaded node)
RECORD_WAIT = 2.0  # seconds for a keeper to write the record of a P that just ended
RECORD_POLL = 0.02  # seconds between looks for that record (the poll of a named wait: RECORD_WAIT)
RECORD_MAX = 32  # bytes of a record: "-9\n"


class KeeperFailed(Exception):
    """The keeper did not start P: why, as it said (or that it said nothing)."""


class KeptProcess:
    """P started by its keeper: P's pid, and the keeper (the agent's child) to reap."""

    def __init__(self, pid: int, started: str, keeper: subprocess.Popen[bytes]) -> None:
        self.pid = pid
        self.started = started  # P's start time, read by the keeper while P was alive or unreaped
        self.keeper = keeper


def usable_exits_dir(path: Path) -> Path | None:
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


class ExitRecords:
    """The keepers' records in one usable EXITS_DIR."""

    def __init__(self, exits_dir: Path, driver: str) -> None:
        self.dir = exits_dir
        self.driver = driver  # in a warning about an unreadable record

    def path(self, handle: TaskHandle) -> Path | None:
        """The record of P's end, `<alloc>.<task>.<pid>-<start time>` (the keeper's name), if written."""
        if not handle.id.isdigit() or not handle.started_at.isdigit():
            return None
        suffix = f".{handle.id}-{handle.started_at}"
        try:
            names = [n for n in os.listdir(self.dir) if n.endswith(suffix)]
        except OSError:
            return None
        return self.dir / names[0] if names else None

    def forget(self, alloc_id: str, task: str) -> None:
        prefix = f"{alloc_id}.{task}."
        with contextlib.suppress(OSError):
            for name in os.listdir(self.dir):
                if name.startswith(prefix):
                    with contextlib.suppress(OSError):
                        os.unlink(self.dir / name)

    def status(self, handle: TaskHandle, wait: float = 0.0) -> int | None:
        """P's status as its keeper recorded it (Popen's returncode: -N for signal N), waiting up
        to `wait` seconds for the record; None when there is none."""
        deadline = time.monotonic() + wait
        while (path := self.path(handle)) is None:
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
            return int(text)
        except ValueError:
            log.warning("%s: keeper record %s unreadable: %r", self.driver, path.name, text[:16])
            return None


def spawn_kept(
    exits_dir: Path,
    name: str,
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path,
    out: int,
    err: int,
) -> KeptProcess:
    """P started by its keeper, its stdout/stderr `out`/`err` (-1: /dev/null), `env` its own; the
    keeper's report is P's pid. KeeperFailed when the keeper did not start it."""
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", KEEPER, str(exits_dir), name, str(w), *argv],
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
        raise KeeperFailed(line.removeprefix("error ") or f"its keeper said nothing (exit {keeper.poll()})")
    return KeptProcess(int(pid), started, keeper)
