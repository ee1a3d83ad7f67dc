"""`nomad alloc exec` over a websocket (`GET /v1/client/allocation/:id/exec?task=&tty=&command=[...]`):
RFC 6455 framing, and Nomad's messages on it (api/allocations.go: ExecStreamingInput/Output).

From the client: `{"stdin": {"data": <base64>}}`, `{"stdin": {"close": true}}`,
`{"tty_size": {"height": H, "width": W}}`, `{}` (a heartbeat). To the client: `{"stdout": {"data":
...}}`, `{"stderr": {"data": ...}}`, then `{"exited": true, "result": {"exit_code": N}}` and a close
frame. Client frames must be masked (RFC 6455 5.1); a message is at most MAX_MESSAGE bytes;
fragmented messages are joined; pings are answered; anything else ends the session as a broken
format (the command is killed).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import struct
from collections.abc import Iterator
from email.message import Message
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from agent.api.server import Response, StreamOpener, Upgrade, query_params
from agent.drivers import execframes as ef
from agent.drivers.base import DriverError
from agent.drivers.session import ExecSession
from agent.errors import AgentError, Conflict, NotFound
from agent.nomadapi.http import HttpError, text

if TYPE_CHECKING:
    from agent.nomadapi.routes import NomadApi

log = logging.getLogger(__name__)

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 1024 * 1024
OUT_CHUNK = 16 * 1024  # bytes of output per message
TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key."""
    return base64.b64encode(
        hashlib.sha1((key.strip() + GUID).encode(), usedforsecurity=False).digest()
    ).decode()


def valid_key(key: str) -> bool:
    try:
        return len(base64.b64decode(key.strip(), validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


def frame(opcode: int, payload: bytes) -> bytes:
    """A server frame: final, unmasked."""
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _message(data: dict[str, object]) -> bytes:
    return frame(TEXT, json.dumps(data, separators=(",", ":")).encode())


def out_messages(kind: bytes, data: bytes) -> Iterator[bytes]:
    name = "stdout" if kind == ef.STDOUT else "stderr"
    for i in range(0, len(data), OUT_CHUNK):
        yield _message({name: {"data": base64.b64encode(data[i : i + OUT_CHUNK]).decode()}})


def exit_message(code: int, error: str | None = None) -> bytes:
    """The exit, then a normal close (an error is said in the close's reason, as Nomad's client reads it)."""
    reason = (error or "").encode()[:120]
    closing = frame(CLOSE, struct.pack(">H", 1000 if error is None else 1011) + reason)
    return (
        _message({"exited": True, "result": {"exit_code": max(code, 0) if error is None else -1}}) + closing
    )


async def _read_frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes]:
    b0, b1 = await reader.readexactly(2)
    if not b1 & 0x80:
        raise ef.FrameError("a client frame is not masked")
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack(">H", await reader.readexactly(2))
    elif n == 127:
        (n,) = struct.unpack(">Q", await reader.readexactly(8))
    if n > MAX_MESSAGE:
        raise ef.FrameError(f"a websocket frame of {n} bytes (at most {MAX_MESSAGE})")
    mask = await reader.readexactly(4)
    raw = await reader.readexactly(n)
    payload = bytes(c ^ mask[i % 4] for i, c in enumerate(raw))
    return bool(b0 & 0x80), b0 & 0x0F, payload


class WsInput:
    """Reads the client's messages as (kind, payload) of agent.drivers.execframes; None when it closed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def next(self) -> tuple[bytes, bytes] | None:
        while True:
            message = await self._message()
            if message is None:
                return None
            try:
                data = json.loads(message)
            except ValueError:
                raise ef.FrameError("a websocket message that is not JSON") from None
            if not isinstance(data, dict):
                raise ef.FrameError("a websocket message that is not a JSON object")
            stdin, size = data.get("stdin"), data.get("tty_size")
            if isinstance(stdin, dict):
                if stdin.get("data"):
                    try:
                        return ef.STDIN, base64.b64decode(str(stdin["data"]), validate=True)
                    except (binascii.Error, ValueError):
                        raise ef.FrameError("stdin data that is not base64") from None
                if stdin.get("close"):
                    return ef.CLOSE_STDIN, b""
            elif isinstance(size, dict):
                payload = json.dumps({"rows": size.get("height", 0), "cols": size.get("width", 0)}).encode()
                ef.parse_resize(payload)  # the same bounds as the agent's own protocol
                return ef.RESIZE, payload
            # {}: a heartbeat

    async def _message(self) -> bytes | None:
        parts: list[bytes] = []
        while True:
            final, opcode, payload = await _read_frame(self.reader)
            if opcode == CLOSE:
                return None
            if opcode == PING:
                self.writer.write(frame(PONG, payload))
                continue
            if opcode == PONG:
                continue
            if opcode not in (TEXT, BINARY, CONT):
                raise ef.FrameError(f"websocket opcode {opcode}")
            parts.append(payload)
            if sum(len(p) for p in parts) > MAX_MESSAGE:
                raise ef.FrameError(f"a websocket message over {MAX_MESSAGE} bytes")
            if final:
                return b"".join(parts)


class WsCodec:
    """agent.api.stream.Codec for Nomad's exec websocket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.input = WsInput(reader, writer)

    def output(self, kind: bytes, data: bytes) -> Iterator[bytes]:
        return out_messages(kind, data)

    def exit(self, code: int, error: str | None = None) -> bytes:
        return exit_message(code, error)

    async def receive(self) -> tuple[bytes, bytes] | None:
        return await self.input.next()


def _handshake(headers: Message) -> dict[str, str]:
    key = headers.get("Sec-WebSocket-Key", "")
    if headers.get("Sec-WebSocket-Version", "").strip() != "13":
        raise ValueError("a websocket needs Sec-WebSocket-Version: 13")
    if not valid_key(key):
        raise ValueError("a websocket needs a Sec-WebSocket-Key of 16 base64 bytes")
    return {"Sec-WebSocket-Accept": accept_key(key)}


WEBSOCKET = Upgrade("websocket", _handshake, WsCodec)


def _exec_args(params: dict[str, str]) -> tuple[str, bool, list[str]]:
    """(task, tty, command) of Nomad's exec query; HttpError 400 naming what is wrong."""
    usage = 'command must be a JSON list of strings, e.g. ["/bin/sh"]'
    try:
        command = json.loads(params.get("command", "[]"))
    except ValueError:
        raise HttpError(400, usage) from None
    if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
        raise HttpError(400, usage)
    if not params.get("task"):
        raise HttpError(400, "missing task name")
    return params["task"], params.get("tty", "false").lower() == "true", command


def exec_stream(api: NomadApi) -> tuple[str, str, StreamOpener, Upgrade]:
    """`GET /v1/client/allocation/:id/exec` as `nomad alloc exec` opens it."""
    core = api.core

    def open_session(groups: tuple[str, ...], body: bytes) -> Response | ExecSession:
        try:
            name, tty, command = _exec_args(query_params())
        except HttpError as exc:
            return text(exc.status, str(exc))

        def find() -> tuple[Any, Any, str, dict[str, str]]:
            from agent.nomadapi.clientroutes import managed_alloc

            r = managed_alloc(core, unquote(groups[0]))  # an adopted alloc: 409 saying how to end it
            task = next((t for t in r.group.tasks if t.name == name), None)
            if task is None:
                raise NotFound(f"task {name!r} not found in alloc {r.id}")
            handle = r.state.handle(task.name)
            if handle is None or not r.task_running(task):
                raise Conflict(f"task {name} of alloc {r.id} is not running")
            return r.driver(task), handle, r.id, r.exec_env(task)

        try:
            driver, handle, alloc_id, env = core.call(find)
            log.info(
                "nomad exec in alloc=%s task=%s: %s (%d args, tty %s)",
                alloc_id[:8],
                name,
                command[0],
                len(command) - 1,
                tty,
            )
            session: ExecSession = driver.exec_session(handle, command, tty=tty, rows=24, cols=80, env=env)
            return session
        except NotFound as exc:
            return text(404, str(exc))
        except (Conflict, DriverError) as exc:
            return text(409, str(exc))
        except AgentError as exc:
            return text(400, str(exc))

    return "GET", r"/v1/client/allocation/([^/]+)/exec", open_session, WEBSOCKET
