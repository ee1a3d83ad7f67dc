"""What a process driver's host-side steps share: the /proc reads that find a task's process again
(pid plus start time), the environment the task's variables are carried in past root's steps, the
capped reads of a command's output, and node tools."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from agent.drivers.errors import DriverError

TOOL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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


def proc_state(pid: int) -> str:
    """The process's state letter from /proc/<pid>/stat ("" when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    rest = stat.rpartition(")")[2].split()
    return rest[0] if rest else ""


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
