"""An interactive exec session in a running task (`alloc exec -i/-t`): the command's stdin, its
output as it comes, a terminal's size, and its exit code.

Drivers open one with `exec_session` after the same checks and the same way into the task as their
one-shot `exec` (a change script): the docker driver through the engine's exec API with stdin
attached, the process drivers by running their exec command line under a pseudo-terminal (or pipes
without -t) on the node. The agent holds the terminal's master side; the task only ever gets the
slave side of a pty made for this session.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import socket
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.drivers.errors import DriverError
from agent.drivers.execframes import STDERR, STDOUT
from agent.drivers.hostproc import children, proc_state

READ_SIZE = 64 * 1024
EXITED_CHECK = 0.5  # seconds a read waits for output before it looks whether the command has ended
ENGINE_EXIT_WAIT = 0.2  # seconds between looks at the docker engine for an ended exec's code


class ExecSession(Protocol):
    """One running command in a task. `read` and the rest are called from the agent's session
    threads: one reading, one writing (`write`, `close_stdin`, `resize`), any one killing."""

    tty: bool

    def read(self) -> tuple[bytes, bytes]:
        """The next output: (STDOUT or STDERR, bytes); (STDOUT, b"") once output has ended."""

    def write(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...

    def resize(self, rows: int, cols: int) -> None: ...

    def wait(self, timeout: float) -> int | None:
        """The exit code (128+N after signal N), or None if it has not ended within `timeout`."""

    def kill(self) -> None:
        """SIGKILL the command and what it started; idempotent."""


def exit_status(returncode: int) -> int:
    """A Popen returncode as a shell reports it: a signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class ProcessSession:
    """`argv` run on the node, under a pty of its own or with pipes. With a tty, `setsid` (util-linux)
    makes the pty the command's controlling terminal; setsid None: argv does that itself, further in
    (the exec driver's, inside the task's pid namespace, where a shell's job control can see the
    terminal's process group). Kill reaches the whole process tree the command started."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str] | None,
        cwd: str,
        *,
        tty: bool,
        rows: int = 24,
        cols: int = 80,
        setsid: str | None = "/usr/bin/setsid",
    ) -> None:
        self.tty = tty
        self._fds: dict[int, bytes] = {}
        if tty:
            master, slave = os.openpty()
            try:
                set_winsize(slave, rows, cols)
                self._proc = subprocess.Popen(
                    [setsid, "--ctty", "--wait", *argv] if setsid else argv,
                    env=env,
                    cwd=cwd,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    start_new_session=setsid is None,
                )
            except OSError as exc:
                os.close(master)
                raise DriverError("exec", "interactive exec", f"cannot start {argv[0]}: {exc}") from None
            finally:
                os.close(slave)
            self._master: int | None = master
            self._fds[master] = STDOUT
        else:
            try:
                self._proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:
                raise DriverError("exec", "interactive exec", f"cannot start {argv[0]}: {exc}") from None
            self._master = None
            assert self._proc.stdout is not None and self._proc.stderr is not None
            self._fds[self._proc.stdout.fileno()] = STDOUT
            self._fds[self._proc.stderr.fileno()] = STDERR

    def read(self) -> tuple[bytes, bytes]:
        while self._fds:
            ready = select.select(list(self._fds), [], [], EXITED_CHECK)[0]
            for fd in ready:
                try:
                    data = os.read(fd, READ_SIZE)
                except OSError:  # EIO: every holder of the pty's slave side has closed it
                    data = b""
                if data:
                    return self._fds[fd], data
                self._fds.pop(fd, None)
            if not ready and self._proc.poll() is not None:
                # Ended, and nothing more to read now: a child it left behind may hold the output
                # open; the session ends with the command (its exit code is what was asked for).
                self._fds.clear()
        return STDOUT, b""

    def write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # the command has closed its stdin, or ended
            if self._master is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._master, view) :]
            elif self._proc.stdin is not None:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError):
            if self._master is not None:
                os.write(self._master, b"\x04")  # end of input on a terminal: ^D
            elif self._proc.stdin is not None:
                self._proc.stdin.close()

    def resize(self, rows: int, cols: int) -> None:
        if self._master is not None:
            with contextlib.suppress(OSError):
                set_winsize(self._master, rows, cols)  # the kernel sends the foreground SIGWINCH

    def wait(self, timeout: float) -> int | None:
        try:
            return exit_status(self._proc.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self._proc.poll() is None:
            kill_tree(self._proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5.0)
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = None
            self._fds.clear()
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


STOP_WAIT = 1.0  # seconds a process is given to show it stopped before its children are read
STOP_POLL = 0.002  # seconds between looks at its state


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and its descendants: each is stopped (SIGSTOP, and seen stopped) before its
    children are read, so none forks a child the walk misses (a shell between its `&` and its next
    command, seen under load), then all are killed: none is reparented away before."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        _stopped(p)
        seen.append(p)
        todo.extend(children(p))
    for p in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def _stopped(pid: int) -> None:
    """SIGSTOP `pid` and poll (STOP_WAIT at most) until its state says stopped, dead or gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + STOP_WAIT
    while proc_state(pid) not in ("", "T", "t", "Z", "X") and time.monotonic() < deadline:
        time.sleep(STOP_POLL)


@dataclass(frozen=True)
class ExecPlan:
    """How a process driver runs a command in a task: the command line (which enters the task's
    namespaces, cgroups and user), its environment and working dir; `tty_argv`, when the command
    line for a tty differs (it takes the terminal as its controlling one itself, further in)."""

    argv: list[str]
    env: Mapping[str, str] | None
    cwd: str = "/"
    tty_argv: list[str] | None = None

    def session(self, *, tty: bool, rows: int, cols: int, setsid: str) -> ProcessSession:
        if tty and self.tty_argv is not None:
            return ProcessSession(
                self.tty_argv, self.env, self.cwd, tty=True, rows=rows, cols=cols, setsid=None
            )
        return ProcessSession(self.argv, self.env, self.cwd, tty=tty, rows=rows, cols=cols, setsid=setsid)


class EngineExec(Protocol):
    """What DockerSession needs of docker's low-level API (docker.APIClient)."""

    def exec_inspect(self, exec_id: str) -> dict[str, object]: ...

    def exec_resize(self, exec_id: str, height: int | None = None, width: int | None = None) -> None: ...


class DockerSession:
    """An engine exec with stdin attached, over the socket the engine hands over (`exec_start(...,
    socket=True)`). Without a tty the engine multiplexes stdout and stderr: 8-byte headers
    (stream, 0, 0, 0, length big-endian) before each piece."""

    def __init__(
        self, api: EngineExec, exec_id: str, sock: socket.socket, *, tty: bool, kill: Callable[[int], None]
    ) -> None:
        self.tty = tty
        self._api, self._id, self._sock, self._kill = api, exec_id, sock, kill
        self._buf = b""
        self._ended = False

    def read(self) -> tuple[bytes, bytes]:
        if self.tty:
            return STDOUT, self._recv()
        while True:
            if len(self._buf) >= 8:
                stream, length = self._buf[0], struct.unpack(">I", self._buf[4:8])[0]
                if len(self._buf) >= 8 + length:
                    data, self._buf = self._buf[8 : 8 + length], self._buf[8 + length :]
                    if data:
                        return (STDERR if stream == 2 else STDOUT), data
                    continue
            more = self._recv()
            if not more:
                return STDOUT, b""
            self._buf += more

    def _recv(self) -> bytes:
        if self._ended:
            return b""
        try:
            data = self._sock.recv(READ_SIZE)
        except OSError:
            data = b""
        self._ended = not data
        return data

    def write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            self._sock.sendall(data)

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError):
            if self.tty:
                self._sock.sendall(b"\x04")
            else:
                self._sock.shutdown(socket.SHUT_WR)

    def resize(self, rows: int, cols: int) -> None:
        if self.tty:
            with contextlib.suppress(Exception):  # the exec has ended: nothing to resize
                self._api.exec_resize(self._id, height=rows, width=cols)

    def _inspect(self) -> dict[str, object]:
        try:
            return self._api.exec_inspect(self._id)
        except Exception as exc:
            raise DriverError("docker", f"exec {self._id[:12]}", str(exc)) from None

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while True:
            info = self._inspect()
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(str(info["ExitCode"]))
            if time.monotonic() >= deadline:
                return None
            time.sleep(ENGINE_EXIT_WAIT)  # polling the engine for the code: it has no wait for execs

    def kill(self) -> None:
        with contextlib.suppress(DriverError):
            info = self._inspect()
            if info.get("Running"):
                self._kill(int(str(info.get("Pid") or 0)))
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
