"""The render worker: templates run in a process of their own, never in the agent.

- **Budgets.** The template is rendered in a worker process (`_Worker`), not in the agent: the worker
  runs the template, and every function the template calls is a request back to the agent, which
  does the file access and the Vault/Consul requests itself. The agent waits for the result at most
  `timeout` seconds (TemplateDeps.render_timeout) and then SIGKILLs the worker and starts a fresh
  one: a template that loops, or one Python operation that never returns (`10 ** (10 ** 10)`),
  costs the agent about the budget and nothing after it. The time the agent waits on Vault,
  Consul or a file for a call (a Vault request that issues a certificate, bounded by the Vault
  client's own timeout; RenderMeter.io) is not charged to the template, but one render may make at
  most `MAX_FETCHES` Vault, Consul or file reads, so a loop of fetches is refused rather than waited
  for; the rest of the agent's time serving calls (`env`, a held secret) is charged. Every call is
  counted and its frame bounded, and the output comes in frames of at most MAX_FRAME bytes
  (agent.templates.budget), so what the agent reads from the worker stays small. A thread
  could not give that bound (a long C-level operation holds the GIL, and a runaway thread cannot be
  stopped). The worker drops to `nobody` when the agent is root (when it cannot, renders fail with
  the reason under `template_worker_fail_closed`, else it runs as root with a warning; the agent's
  health shows which, `status()`), has hard limits on address space
  (`WORKER_MEMORY`), file size (0) and processes (0), and an alarm that kills it if it outlives the
  agent in a render. Output larger than `max_bytes` (TemplateDeps.max_bytes) is refused and not
  written; the worker stops rendering as soon as it is over. Template text larger than `max_bytes`
  is refused before rendering. The submission check (`check_template`) only parses, with constant
  folding disabled, so a submitted template never computes anything in the agent.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import pwd
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent.structs.model import Template
from agent.templates.budget import (
    MAX_CALL_BYTES,
    MAX_CALL_FRAME,
    MAX_CALLS,
    MAX_FRAME,
    MAX_MESSAGE,
    RenderMeter,
)
from agent.templates.errors import TemplateRenderError
from agent.templates.workerproc import FRAME_LEN, encode_frame

log = logging.getLogger(__name__)


class _Timeout(Exception):
    pass


class _WorkerGone(Exception):
    pass


class _Worker:
    """One render worker process and its pipes (the agent's side, non-blocking, polled)."""

    def __init__(self, unprivileged: bool) -> None:
        root = str(Path(__file__).resolve().parents[2])
        code = (
            f"import sys; sys.path.insert(0, {root!r}); "
            "from agent.templates.workerproc import worker_main; worker_main()"
        )
        extra: dict[str, Any] = {}
        if unprivileged:
            uid, gid = _nobody()
            extra = {"user": uid, "group": gid, "extra_groups": []}
        self.unprivileged = unprivileged
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            cwd="/",
            close_fds=True,
            start_new_session=True,
            **extra,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.wfd, self.rfd, self.efd = (
            self.proc.stdin.fileno(),
            self.proc.stdout.fileno(),
            self.proc.stderr.fileno(),
        )
        for fd in (self.wfd, self.rfd, self.efd):
            os.set_blocking(fd, False)
        self.buf = bytearray()
        self.last_size = 0  # bytes of the last message received
        self.err = bytearray()  # the tail of its stderr
        self.err_open = True
        self.ready = False

    def _wait(self, fd: int, events: int, deadline: float) -> None:
        poller = select.poll()
        poller.register(fd, events)
        if self.err_open:
            poller.register(self.efd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout
            for got, _ in poller.poll(max(1, math.ceil(left * 1000))):
                if got == self.efd:
                    self._drain_stderr(poller)
                elif got == fd:
                    return

    def _drain_stderr(self, poller: select.poll) -> None:
        try:
            chunk = os.read(self.efd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            poller.unregister(self.efd)
            self.err_open = False
            return
        self.err += chunk
        del self.err[:-4096]

    def send(self, msg: dict[str, Any], deadline: float) -> None:
        view = memoryview(encode_frame(msg))
        while view:
            try:
                n = os.write(self.wfd, view)
            except BlockingIOError:
                self._wait(self.wfd, select.POLLOUT, deadline)
                continue
            except BrokenPipeError:
                raise _WorkerGone(self.gone()) from None
            view = view[n:]

    def recv(self, deadline: float, limit: int) -> dict[str, Any]:
        while True:
            if len(self.buf) >= FRAME_LEN:
                n = int.from_bytes(self.buf[:FRAME_LEN], "big")
                if n > limit:
                    raise _WorkerGone(f"the render worker sent a {n}-byte message (at most {limit})")
                if len(self.buf) >= FRAME_LEN + n:
                    msg = json.loads(bytes(self.buf[FRAME_LEN : FRAME_LEN + n]))
                    del self.buf[: FRAME_LEN + n]
                    self.last_size = n
                    if not isinstance(msg, dict):
                        raise _WorkerGone("the render worker sent a malformed message")
                    return msg
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                self._wait(self.rfd, select.POLLIN, deadline)
                continue
            if not chunk:
                raise _WorkerGone(self.gone())
            self.buf += chunk

    def gone(self) -> str:
        try:
            rc = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "the render worker stopped talking"
        with contextlib.suppress(OSError):
            while chunk := os.read(self.efd, 1 << 16):
                self.err += chunk
        tail = self.err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return f"the render worker exited with status {rc}" + (f": {tail[0]}" if tail[0] else "")

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


def _nobody() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam("nobody")
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return 65534, 65534


class _WorkerPool:
    """The one render worker of the agent: renders run one at a time (they come from offload's
    threads, serialized per alloc; the lock serializes them across allocs). A worker that overran
    its budget is killed and a fresh one is started at once, so its start-up overlaps the agent's other work.

    A root agent's worker drops to nobody. When it cannot (nobody cannot read the agent's Python or
    venv, no such user, ...): with `fail_closed` (client config template_worker_fail_closed) every
    render fails with the reason, the start is tried again at the next render, and `refused` says
    why (the agent's health shows it); without it the worker runs as the agent's user from then on,
    with one warning, and `fallback` says why."""

    START_TIMEOUT = 30.0

    def __init__(self, *, fail_closed: bool = False) -> None:
        self.lock = threading.Lock()
        self.worker: _Worker | None = None
        self.unprivileged = os.geteuid() == 0
        self.fail_closed = fail_closed
        self.refused = ""  # fail closed: why the worker could not start as nobody ("" once it did)
        self.fallback = ""  # fail open: why it runs as the agent's user instead of nobody

    def get(self) -> _Worker:
        for _ in range(2):
            if self.worker is None:
                try:
                    self.worker = _Worker(self.unprivileged)
                except OSError as exc:
                    if not self.unprivileged:
                        raise
                    self._cannot_drop(str(exc))
                    continue
            w = self.worker
            if w.ready:
                return w
            try:
                msg = w.recv(time.monotonic() + self.START_TIMEOUT, 1 << 16)
                if msg.get("op") != "ready":
                    raise _WorkerGone(f"the render worker said {msg.get('op')!r} instead of ready")
            except (_WorkerGone, _Timeout) as exc:
                self.discard()
                if w.unprivileged:
                    self._cannot_drop(str(exc) or "no answer")
                    continue
                raise _WorkerGone(f"the render worker did not start: {exc}") from None
            w.ready = True
            if w.unprivileged and self.refused:
                log.info("template render worker runs as nobody again: renders resume")
                self.refused = ""
            return w
        raise _WorkerGone("the render worker did not start")

    def _cannot_drop(self, why: str) -> None:
        """The worker could not start as nobody: refuse (fail closed), or run it as the agent's user."""
        if self.fail_closed:
            if why != self.refused:  # once per reason, not once per render
                log.error(
                    "template render worker cannot run as nobody (%s): templates are not rendered "
                    "(template_worker_fail_closed)",
                    why,
                )
            self.refused = why
            raise _WorkerGone(
                f"the render worker cannot run as nobody ({why}), and template_worker_fail_closed "
                "forbids rendering as the agent's user"
            )
        log.warning(
            "template render worker cannot run as nobody (%s); it runs as the agent's user from now on", why
        )
        self.fallback = why
        self.unprivileged = False

    def status(self) -> dict[str, Any]:
        """The worker for the agent's health: `user` it runs (or would run) as, `fail_closed`,
        `state` (ok, refused: renders fail; fallback: renders run as the agent's user; not started)
        and `error` (why, for refused and fallback)."""
        w = self.worker
        if self.refused:
            state, error = "refused", self.refused
        elif self.fallback:
            state, error = "fallback", self.fallback
        else:
            state, error = ("ok" if w is not None and w.ready else "not started"), ""
        return {
            "user": "nobody" if self.unprivileged else "agent",
            "fail_closed": self.fail_closed,
            "state": state,
            "error": error,
        }

    def discard(self, *, respawn: bool = False) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
        if respawn:
            with contextlib.suppress(OSError):
                self.worker = _Worker(self.unprivileged)

    def close(self) -> None:
        """At exit (the worker would also end on its own when its stdin closes)."""
        if self.lock.acquire(timeout=1.0):
            try:
                self.discard()
            finally:
                self.lock.release()


_POOL = _WorkerPool()
atexit.register(_POOL.close)


def configure(*, fail_closed: bool) -> None:
    """The agent's choice when the worker cannot drop to nobody (client config
    template_worker_fail_closed): True, renders fail; False, they run as the agent's user."""
    with _POOL.lock:
        _POOL.fail_closed = fail_closed


def prestart() -> None:
    """Start the worker now (in a thread of its own), so that the agent's health knows at once
    whether it runs as nobody, before the first template asks for it."""

    def start() -> None:
        with _POOL.lock, contextlib.suppress(_WorkerGone, OSError):
            _POOL.get()

    threading.Thread(target=start, name="render-worker-start", daemon=True).start()


def status() -> dict[str, Any]:
    """The render worker as the agent's health reports it (_WorkerPool.status)."""
    return _POOL.status()


def _serve(
    tpl: Template, msg: dict[str, Any], functions: Mapping[str, Callable[..., Any]], deadline: float
) -> tuple[dict[str, Any], Exception | None]:
    """Run one function the template called (in the agent); the reply, and the failure if any."""
    fn = functions.get(str(msg.get("fn")))
    try:
        if fn is None:
            raise TemplateRenderError(tpl.destination, f"no function {msg.get('fn')!r}")
        if time.monotonic() >= deadline:
            raise _Timeout
        reply = {"value": fn(*msg.get("args", []), **msg.get("kwargs", {}))}
        encode_frame(reply)  # serialisable, or an error here
    except _Timeout:
        raise
    except Exception as exc:
        return {"error": exc.reason if isinstance(exc, TemplateRenderError) else str(exc)}, exc
    return reply, None


class _Render:
    """One render as the agent sees it: the calls it served against their budget (a call over it is
    answered with an error, never served, and fails the render; agent.templates.budget) and the
    output so far."""

    def __init__(
        self,
        tpl: Template,
        functions: Mapping[str, Callable[..., Any]],
        meter: RenderMeter,
        max_bytes: int,
    ) -> None:
        self.tpl, self.functions, self.meter, self.max_bytes = tpl, functions, meter, max_bytes
        self.calls = self.call_bytes = self.size = 0
        self.failed: Exception | None = None  # the first call that failed
        self.output: list[str] = []

    def _over(self, msg: dict[str, Any], size: int) -> str | None:
        self.calls += 1
        self.call_bytes += size
        if size > MAX_CALL_FRAME:
            return f"its arguments are {size} bytes, more than the {MAX_CALL_FRAME} a call may carry"
        if self.calls > MAX_CALLS:
            return f"more than {MAX_CALLS} calls to the agent in one render (each data function is one)"
        if self.call_bytes > MAX_CALL_BYTES:
            return f"the render's calls to the agent carry more than {MAX_CALL_BYTES} bytes"
        return None

    def call(self, worker: _Worker, msg: dict[str, Any], deadline: float) -> float:
        """Answer one call; the deadline, moved on by the time the agent waited on Vault, Consul or
        files for it (not the template's)."""
        failed: Exception | None
        if over := self._over(msg, worker.last_size):
            reply, failed = {"error": over}, TemplateRenderError(self.tpl.destination, over)
        else:
            io = self.meter.io
            reply, failed = _serve(self.tpl, msg, self.functions, deadline)
            deadline += self.meter.io - io
        self.failed = self.failed or failed
        worker.send(reply, deadline)
        return deadline

    def add(self, text: str) -> None:
        self.size += len(text)
        if self.size > self.max_bytes:
            _POOL.discard(respawn=True)  # it is still sending
            raise TemplateRenderError(
                self.tpl.destination,
                f"the rendered output is more than the {self.max_bytes}-byte budget "
                "(template_max_bytes): not written",
            )
        self.output.append(text)

    def error(self, msg: dict[str, Any]) -> TemplateRenderError:
        if msg.get("fatal"):
            _POOL.discard(respawn=True)
        message = str(msg.get("message", "render failed"))[: 2 * MAX_MESSAGE]
        at = msg.get("at")
        where = (int(at[0]), int(at[1])) if isinstance(at, list) and len(at) == 2 else None
        return TemplateRenderError(self.tpl.destination, message, where)


def run_in_worker(
    tpl: Template,
    request: dict[str, Any],
    functions: Mapping[str, Callable[..., Any]],
    timeout: float,
    max_bytes: int,
    meter: RenderMeter | None = None,
) -> str:
    """Render `request` (text, name, delimiters, missing_key_error) in the worker; serve its
    function calls; give up after `timeout` seconds. The time the agent waits on Vault, Consul or
    files for a call (what the functions add to `meter.io`) is not charged; the rest of the render's
    time is, and is added to `meter.charged` (the pass budget)."""
    meter = meter if meter is not None else RenderMeter()
    with _POOL.lock:
        try:
            worker = _POOL.get()
        except (_WorkerGone, OSError) as exc:
            raise TemplateRenderError(tpl.destination, f"cannot render: {exc}") from None
        began, io_began = time.monotonic(), meter.io
        deadline = began + timeout
        this = _Render(tpl, functions, meter, max_bytes)
        try:
            worker.send({"op": "render", **request, "max_bytes": max_bytes, "timeout": timeout}, deadline)
            while True:
                msg = worker.recv(deadline, MAX_FRAME)
                op = msg.get("op")
                if op == "call":
                    deadline = this.call(worker, msg, deadline)
                elif op == "output":
                    this.add(str(msg.get("text", "")))
                elif op == "done":
                    if this.failed is not None:  # a failed call must fail the render, even if it went on
                        raise this.failed
                    return "".join(this.output)
                elif op == "error":
                    raise this.error(msg)
                else:
                    raise _WorkerGone(f"the render worker sent {str(op)[:64]!r}")
        except _Timeout:
            _POOL.discard(respawn=True)
            raise TemplateRenderError(
                tpl.destination,
                f"rendering took longer than the {timeout:g}s budget (template_render_timeout): stopped",
            ) from None
        except _WorkerGone as exc:
            _POOL.discard(respawn=True)
            raise TemplateRenderError(tpl.destination, f"render failed: {exc}") from None
        finally:
            meter.charged += (time.monotonic() - began) - (meter.io - io_began)


# -- the worker's side ------------------------------------------------------------------------
