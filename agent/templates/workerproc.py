"""The render worker's own side (the process agent.templates.worker starts): it drops its privileges
and limits, then renders each template it is sent with agent.gotemplate, every data function a call
back to the agent over the frames below (4-byte big-endian length, then JSON)."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from typing import Any

from agent.templates.budget import (
    MAX_CALL_FRAME,
    MAX_MESSAGE,
    OUTPUT_CHUNK,
)
from agent.templates.errors import CUT_MARK
from agent.templates.proxy import Proxy

DEFAULT_RENDER_TIMEOUT = 2.0  # seconds (client config template_render_timeout)
WORKER_MEMORY = 1 << 30  # the render worker's address space limit
UNBOUNDED_STEPS = 1 << 62


class _CallFailed(Exception):
    """A function the template called failed in the agent (the agent holds the reason)."""


FRAME_LEN = 4  # frame: 4-byte big-endian length, then JSON


def encode_frame(msg: dict[str, Any]) -> bytes:
    body = json.dumps(msg, ensure_ascii=True, separators=(",", ":")).encode()
    return len(body).to_bytes(FRAME_LEN, "big") + body


def _read_exact(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def _worker_recv(fd: int) -> dict[str, Any]:
    n = int.from_bytes(_read_exact(fd, FRAME_LEN), "big")
    msg = json.loads(_read_exact(fd, n))
    assert isinstance(msg, dict)
    return msg


def _worker_send(fd: int, msg: dict[str, Any]) -> None:
    _worker_write(fd, encode_frame(msg))


def _call_frame(name: str, args: list[Any], kwargs: dict[str, Any]) -> bytes:
    """A call to the agent; one the agent would refuse as too large fails here, where the template
    error names the action that made it."""
    frame = encode_frame({"op": "call", "fn": name, "args": args, "kwargs": kwargs})
    if (size := len(frame) - FRAME_LEN) > MAX_CALL_FRAME:
        raise _CallFailed(f"its arguments are {size} bytes, more than the {MAX_CALL_FRAME} a call may carry")
    return frame


def _worker_output(fd: int, output: str) -> None:
    """The rendered output, in frames of OUTPUT_CHUNK characters (none larger than MAX_FRAME)."""
    for at in range(0, len(output), OUTPUT_CHUNK):
        _worker_send(fd, {"op": "output", "text": output[at : at + OUTPUT_CHUNK]})


def _worker_write(fd: int, frame: bytes) -> None:
    data = memoryview(frame)
    while data:
        data = data[os.write(fd, data) :]


def cut_message(text: str) -> str:
    """An error message of at most about MAX_MESSAGE characters: a value it quotes may be cut off
    (the agent then redacts a secret's beginning at the cut, agent.templates.errors)."""
    if len(text) <= MAX_MESSAGE:
        return text
    return f"{text[:MAX_MESSAGE]}{CUT_MARK}{len(text) - MAX_MESSAGE} more characters]"


class _TooBig(Exception):
    pass


def _worker_render(req: dict[str, Any], call: Callable[[str, list[Any], dict[str, Any]], Any]) -> str:
    from agent import gotemplate  # the worker's only template engine

    limit = int(req["max_bytes"])
    size = 0

    def write(chunk: str) -> None:
        nonlocal size
        size += len(chunk)  # characters: never more than its UTF-8 bytes
        if size > limit:
            raise _TooBig

    tpl = gotemplate.parse(
        str(req["text"]),
        name=str(req.get("name", "template")),
        left_delim=str(req.get("left") or "{{"),
        right_delim=str(req.get("right") or "}}"),
    )
    out = tpl.execute(
        data=None,
        funcs=gotemplate.consul_functions(Proxy(call)),
        write=write,
        missing_key_error=bool(req.get("missing_key_error")),
        max_steps=UNBOUNDED_STEPS,  # the worker's time budget bounds a render, not a step count
    )
    if len(out.encode(errors="surrogatepass")) > limit:
        raise _TooBig
    return out


def worker_main() -> None:  # pragma: no cover - runs in the worker process
    """The worker: hard limits, then one render per request. Its stdin/stdout are the protocol; fds
    0 and 1 are pointed at /dev/null so nothing else can write into the protocol."""
    import resource
    import signal

    from agent.gotemplate import TemplateError

    inp, out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for limit, value in (
        (resource.RLIMIT_AS, WORKER_MEMORY),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NPROC, 0),
    ):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(limit, (value, value))

    alarm = 0

    def call(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        frame = _call_frame(name, args, kwargs)
        signal.alarm(0)  # the agent's time serving the call is not the template's
        _worker_write(out, frame)
        reply = _worker_recv(inp)
        signal.alarm(alarm)
        if "error" in reply:
            raise _CallFailed(reply["error"])
        return reply.get("value")

    _worker_send(out, {"op": "ready", "uid": os.getuid()})
    while True:
        try:
            req = _worker_recv(inp)
        except EOFError:
            return
        alarm = max(1, math.ceil(float(req.get("timeout", DEFAULT_RENDER_TIMEOUT)))) + 5
        signal.alarm(alarm)  # ends a runaway render whose agent died (the agent kills it otherwise)
        fatal = False
        try:
            _worker_output(out, _worker_render(req, call))
            reply: dict[str, Any] = {"op": "done"}
        except _CallFailed as exc:
            reply = {"op": "error", "kind": "call", "message": str(exc)}
        except TemplateError as exc:  # positioned: name:line:col: reason (a failed call's reason too)
            fatal = isinstance(exc.__cause__, MemoryError | RecursionError)
            reply = {"op": "error", "kind": "template", "message": exc.reason, "at": [exc.line, exc.col]}
        except _TooBig:
            reply = {
                "op": "error",
                "kind": "size",
                "message": f"the rendered output is more than the {req['max_bytes']}-byte budget "
                "(template_max_bytes): not written",
            }
        except Exception as exc:
            fatal = isinstance(exc, MemoryError | RecursionError)
            why = str(exc) or (
                f"more memory than the render worker may use ({WORKER_MEMORY >> 20} MiB)"
                if isinstance(exc, MemoryError)
                else "no message"
            )
            reply = {"op": "error", "kind": "exception", "message": f"{type(exc).__name__}: {why}"}
        signal.alarm(0)
        reply["fatal"] = fatal
        if "message" in reply:
            reply["message"] = cut_message(str(reply["message"]))
        _worker_send(out, reply)
        if fatal:
            return
