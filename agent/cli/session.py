"""`fieldlab-agent alloc exec -i/-t`: the client side of an interactive exec session
(agent.execframes). With -t and a terminal on stdin, the terminal is put in raw mode for the
session (keys go to the command as typed, ^C included) and its size follows the window (SIGWINCH);
it is restored however the session ends."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import ssl
import sys
import termios
import tty as ttymod
from typing import Any

from agent import execframes as ef
from agent.client import ApiClient
from agent.errors import AgentError

CANNOT_RUN = 126  # the exit code when the command could not run (as the one-shot exec)


def terminal_size() -> tuple[int, int]:
    """The terminal's rows and columns; 24x80 when there is none, or it has no size (0x0: a pty
    nobody sized, as under `script` or some CI runners), as Nomad's CLI falls back."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            if size.lines > 0 and size.columns > 0:
                return size.lines, size.columns
    return 24, 80


def run(api: ApiClient, path: str, body: dict[str, Any], *, stdin: bool) -> int:
    """Carry the session to its end: the command's exit code (CANNOT_RUN when it could not run)."""
    rows, cols = terminal_size()
    sock, early = api.upgrade(path, {**body, "rows": rows, "cols": cols}, ef.PROTOCOL)
    in_fd = sys.stdin.fileno() if stdin else None
    raw = bool(body.get("tty")) and in_fd is not None and os.isatty(in_fd)
    saved = termios.tcgetattr(in_fd) if raw and in_fd is not None else None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    previous = signal.signal(signal.SIGWINCH, lambda *_: _poke(wake_w))
    try:
        if saved is not None and in_fd is not None:
            ttymod.setraw(in_fd)
        return _Session(sock, in_fd, wake_r).carry(early)
    finally:
        if saved is not None and in_fd is not None:
            termios.tcsetattr(in_fd, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, previous)
        for fd in (wake_r, wake_w):
            os.close(fd)
        with contextlib.suppress(OSError):
            sock.close()


def _poke(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, b"w")


class _Session:
    def __init__(self, sock: ssl.SSLSocket, in_fd: int | None, wake: int) -> None:
        self.sock, self.in_fd, self.wake = sock, in_fd, wake
        self.decoder = ef.Decoder(ef.FROM_AGENT)
        self.sel = selectors.DefaultSelector()
        self.sel.register(sock, selectors.EVENT_READ)
        self.sel.register(wake, selectors.EVENT_READ)
        if in_fd is not None:
            self.sel.register(in_fd, selectors.EVENT_READ)

    def carry(self, early: bytes) -> int:
        code = self._frames(early)
        while code is None:
            ready = [self.sock] if self.sock.pending() else [k.fileobj for k, _ in self.sel.select()]
            for source in ready:
                if source is self.sock:
                    code = self._from_agent()
                elif source == self.wake:
                    os.read(self.wake, 64)
                    self.sock.sendall(ef.resize(*terminal_size()))
                else:
                    self._from_stdin()
                if code is not None:
                    break
        return code

    def _from_agent(self) -> int | None:
        try:
            data = self.sock.recv(ef.MAX_PAYLOAD)
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(f"the exec session's connection broke: {exc}") from None
        if not data:
            raise AgentError("the agent ended the exec session without the command's exit code")
        return self._frames(data)

    def _frames(self, data: bytes) -> int | None:
        try:
            frames = self.decoder.feed(data)
        except ef.FrameError as exc:
            raise AgentError(f"the agent sent a bad frame: {exc}") from None
        for kind, payload in frames:
            if kind == ef.EXIT:
                code, error = ef.parse_exit(payload)
                if code < 0:
                    print(f"fieldlab-agent: exec: {error or 'the command could not run'}", file=sys.stderr)
                    return CANNOT_RUN
                return min(code, 255)
            out = sys.stdout if kind == ef.STDOUT else sys.stderr
            out.buffer.write(payload)
            out.flush()
        return None

    def _from_stdin(self) -> None:
        assert self.in_fd is not None
        data = os.read(self.in_fd, ef.MAX_PAYLOAD)
        if data:
            self.sock.sendall(ef.encode(ef.STDIN, data))
            return
        self.sel.unregister(self.in_fd)
        self.in_fd = None
        self.sock.sendall(ef.encode(ef.CLOSE_STDIN))
