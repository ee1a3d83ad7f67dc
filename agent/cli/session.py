"""`fieldlab-agent alloc exec`: the client side of Nomad's exec websocket
(`GET /v1/client/allocation/:id/exec?task=&tty=&command=[...]`, agent.cli.wsclient), as `nomad alloc
exec` speaks it: stdin as `{"stdin": {"data": <base64>}}` then `{"stdin": {"close": true}}`, the
terminal's size as `{"tty_size": {"height", "width"}}`, a `{}` heartbeat every HEARTBEAT seconds;
the agent sends `{"stdout"|"stderr": {"data"}}` and last `{"exited": true, "result": {"exit_code"}}`.

With -i (the default, as Nomad's) stdin goes to the command as it comes, and its end closes the
command's stdin; with -i=false the command's stdin is closed at once. With -t and a terminal on
stdin, the terminal is put in raw mode for the session (keys go to the command as typed, ^C
included) and its size follows the window (SIGWINCH); it is restored however the session ends. A
session given -timeout is bounded by it: past it the connection is closed, which kills the command."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import select
import selectors
import signal
import sys
import termios
import time
import tty as ttymod
from collections.abc import Mapping, Sequence
from typing import Any, TextIO
from urllib.parse import urlencode

from agent.api.client import ApiClient
from agent.cli.calls import q
from agent.cli.wsclient import Closed, WebSocket
from agent.errors import AgentError

CANNOT_RUN = 126  # the exit code when the command could not run, or ran past -timeout
HEARTBEAT = 10.0  # seconds between heartbeats, as Nomad's CLI sends them
STDIN_READ = 16 * 1024  # bytes of stdin per message
CLOSE_WAIT = 2.0  # seconds to wait for the close that says why a command could not run


def terminal_size() -> tuple[int, int]:
    """The terminal's rows and columns; 24x80 when there is none, or it has no size (0x0: a pty
    nobody sized, as under `script` or some CI runners), as Nomad's CLI falls back."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            if size.lines > 0 and size.columns > 0:
                return size.lines, size.columns
    return 24, 80


def exec_path(alloc_id: str, task: str, command: Sequence[str], *, tty: bool) -> str:
    query = urlencode({"task": task, "tty": "true" if tty else "false", "command": json.dumps(list(command))})
    return f"/v1/client/allocation/{q(alloc_id)}/exec?{query}"


def write_out(out: TextIO, data: bytes) -> None:
    """Bytes to stdout or stderr as they are (a text-only stream, as some test captures: decoded)."""
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        out.flush()
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data.decode(errors="replace"))
        out.flush()


def run(
    api: ApiClient,
    alloc_id: str,
    task: str,
    command: Sequence[str],
    *,
    tty: bool,
    stdin: bool,
    timeout: float | None = None,
) -> int:
    """Carry the session to its end: the command's exit code (CANNOT_RUN when it could not run or
    ran past `timeout`)."""
    what = f"exec in task {task} of alloc {alloc_id[:8]}"
    ws = WebSocket.connect(api, exec_path(alloc_id, task, command, tty=tty), what)
    in_fd = _stdin_fd() if stdin else None
    raw = tty and in_fd is not None and os.isatty(in_fd)
    saved = termios.tcgetattr(in_fd) if raw and in_fd is not None else None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    previous = signal.signal(signal.SIGWINCH, lambda *_: _poke(wake_w)) if tty else None
    try:
        if tty:
            rows, cols = terminal_size()
            ws.send({"tty_size": {"height": rows, "width": cols}})
        if in_fd is None:
            ws.send({"stdin": {"close": True}})
        if saved is not None and in_fd is not None:
            ttymod.setraw(in_fd)
        return _Session(ws, in_fd, wake_r, timeout).carry()
    finally:
        if saved is not None and in_fd is not None:
            termios.tcsetattr(in_fd, termios.TCSADRAIN, saved)
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)
        for fd in (wake_r, wake_w):
            os.close(fd)
        ws.close()  # before the exit code: the agent kills a command whose caller went away


def _stdin_fd() -> int | None:
    """stdin's descriptor; None when it has none (a test's capture, a closed stdin): the command's
    stdin is then closed at once, as for an empty one."""
    try:
        return sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):
        return None


def _poke(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, b"w")


def exit_code(result: Mapping[str, Any]) -> int:
    """The exit code of an `exited` message's result; -1 when it has none."""
    try:
        return int((result.get("result") or {}).get("exit_code", -1))
    except (TypeError, ValueError):
        return -1


def output(message: Mapping[str, Any]) -> tuple[str, bytes] | None:
    """("stdout" | "stderr", bytes) of an output message; None for any other."""
    for name in ("stdout", "stderr"):
        part = message.get(name)
        if isinstance(part, Mapping) and part.get("data"):
            try:
                return name, base64.b64decode(str(part["data"]), validate=True)
            except (binascii.Error, ValueError):
                raise AgentError(f"the agent sent {name} that is not base64") from None
    return None


class _Session:
    def __init__(self, ws: WebSocket, in_fd: int | None, wake: int, timeout: float | None) -> None:
        self.ws, self.in_fd, self.wake, self.timeout = ws, in_fd, wake, timeout
        self.deadline = time.monotonic() + timeout if timeout is not None else None
        self.sel = selectors.PollSelector()  # poll, not epoll: stdin may be a regular file (< FILE)
        self.sel.register(ws, selectors.EVENT_READ)
        self.sel.register(wake, selectors.EVENT_READ)
        if in_fd is not None:
            self.sel.register(in_fd, selectors.EVENT_READ)
        self.beat = time.monotonic() + HEARTBEAT

    def carry(self) -> int:
        while True:
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                print(
                    f"fieldlab-agent: exec: the command ran past -timeout {self.timeout:g}s: killed",
                    file=sys.stderr,
                )
                return CANNOT_RUN
            if now >= self.beat:
                self.ws.send({})
                self.beat = now + HEARTBEAT
            wait = self.beat - now if self.deadline is None else min(self.beat, self.deadline) - now
            if self.ws.pending():
                ready: list[Any] = [self.ws]
            else:
                ready = [k.fileobj for k, _ in self.sel.select(max(wait, 0.0))]
            for source in ready:
                if source is self.ws:
                    code = self._from_agent()
                    if code is not None:
                        return code
                elif source == self.wake:
                    os.read(self.wake, 64)
                    rows, cols = terminal_size()
                    self.ws.send({"tty_size": {"height": rows, "width": cols}})
                else:
                    self._from_stdin()

    def _from_agent(self) -> int | None:
        messages, closed = self.ws.receive()
        for message in messages:
            out = output(message)
            if out is not None:
                write_out(sys.stdout if out[0] == "stdout" else sys.stderr, out[1])
            elif message.get("exited"):
                return self._exited(exit_code(message), closed)
        if closed is not None:
            why = f" ({closed.reason})" if closed.reason else ""
            raise AgentError(f"the agent ended the exec session without the command's exit code{why}")
        return None

    def _exited(self, code: int, closed: Closed | None) -> int:
        if code >= 0:
            return min(code, 255)
        # -1: the command could not run (or its exit code was lost); the close says why
        end = time.monotonic() + CLOSE_WAIT
        while closed is None and time.monotonic() < end:
            if not self.ws.pending() and not select.select([self.ws], [], [], end - time.monotonic())[0]:
                break
            try:
                _, closed = self.ws.receive()
            except AgentError:
                break
        why = closed.reason if closed is not None and closed.reason else "the command could not run"
        print(f"fieldlab-agent: exec: {why}", file=sys.stderr)
        return CANNOT_RUN

    def _from_stdin(self) -> None:
        assert self.in_fd is not None
        data = os.read(self.in_fd, STDIN_READ)
        if data:
            self.ws.send({"stdin": {"data": base64.b64encode(data).decode()}})
            return
        self.sel.unregister(self.in_fd)
        self.in_fd = None
        self.ws.send({"stdin": {"close": True}})
