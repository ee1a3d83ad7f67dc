"""`nomad alloc exec` over a websocket (`GET /v1/client/allocation/:id/exec?task=&tty=&command=[...]`):
Nomad's messages on it (api/allocations.go: ExecStreamingInput/Output), framed by wsproto (RFC 6455).

From the client: `{"stdin": {"data": <base64>}}`, `{"stdin": {"close": true}}`,
`{"tty_size": {"height": H, "width": W}}`, `{}` (a heartbeat). To the client: `{"stdout": {"data":
...}}`, `{"stderr": {"data": ...}}`, then `{"exited": true, "result": {"exit_code": N}}` and a close
frame. wsproto refuses what RFC 6455 refuses (an unmasked client frame, a control frame over 125
bytes, bad UTF-8 in a text message): the agent closes with wsproto's code (1002, 1007) and the
session ends as a broken format (the command is killed). A message over the configured size
(`api_ws_max_message_bytes`) is closed 1009, counted as its fragments come. Pings are answered;
a client whose answers pile up unsent past `api_write_buffer_bytes` (it does not read) is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import threading
from collections import deque
from collections.abc import Iterator
from email.message import Message
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import generate_accept_token

from agent.api.handler import Response, StreamOpener, Upgrade, query_params
from agent.api.stream import Limits, Reader
from agent.drivers import execframes as ef
from agent.drivers.base import DriverError
from agent.drivers.session import ExecSession
from agent.errors import AgentError, Conflict, NotFound
from agent.nomadapi.http import HttpError, text

if TYPE_CHECKING:
    from agent.nomadapi.routes import NomadApi

log = logging.getLogger(__name__)

OUT_CHUNK = 16 * 1024  # bytes of output per message
READ_CHUNK = 64 * 1024  # bytes read from the client at once


def valid_key(key: str) -> bool:
    try:
        return len(base64.b64decode(key.strip(), validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


def _input(message: bytes) -> tuple[bytes, bytes] | None:
    """A client message as (kind, payload) of agent.drivers.execframes; None for a heartbeat."""
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
    return None  # {}: a heartbeat


class WsCodec:
    """agent.api.stream.Codec for Nomad's exec websocket: a wsproto server connection on the API's
    own connection. The output side runs in the session's output thread, the input side on the
    loop: a lock keeps their uses of the wsproto connection apart."""

    def __init__(self, reader: Reader, writer: asyncio.StreamWriter, limits: Limits) -> None:
        self.reader, self.writer, self.limits = reader, writer, limits
        self._ws = Connection(ConnectionType.SERVER)
        self._lock = threading.Lock()
        self._inputs: deque[tuple[bytes, bytes]] = deque()
        self._parts: list[bytes] = []  # the fragments of a message still coming
        self._size = 0  # their bytes

    def _send(self, event: Event) -> bytes:
        """`event` on the wire; nothing once the websocket is closing (the session's last output
        after a refused frame goes nowhere)."""
        with self._lock:
            if self._ws.state is not ConnectionState.OPEN and not (
                isinstance(event, CloseConnection) and self._ws.state is ConnectionState.REMOTE_CLOSING
            ):
                return b""
            return self._ws.send(event)

    def _message(self, data: dict[str, object]) -> bytes:
        return self._send(TextMessage(json.dumps(data, separators=(",", ":"))))

    def output(self, kind: bytes, data: bytes) -> Iterator[bytes]:
        name = "stdout" if kind == ef.STDOUT else "stderr"
        for i in range(0, len(data), OUT_CHUNK):
            yield self._message({name: {"data": base64.b64encode(data[i : i + OUT_CHUNK]).decode()}})

    def exit(self, code: int, error: str | None = None) -> bytes:
        """The exit, then a normal close (an error is said in the close's reason, as Nomad's client
        reads it)."""
        exited = self._message(
            {"exited": True, "result": {"exit_code": max(code, 0) if error is None else -1}}
        )
        status = CloseReason.NORMAL_CLOSURE if error is None else CloseReason.INTERNAL_ERROR
        reason = (error or "").encode()[:120].decode(errors="ignore")
        return exited + self._send(CloseConnection(status, reason))

    async def receive(self) -> tuple[bytes, bytes] | None:
        """The client's next input; None when it closed (its close answered)."""
        while not self._inputs:
            data = await self.reader.read(READ_CHUNK)
            if not data:
                return None
            self._ws.receive_data(data)
            out = b""
            try:
                for event in self._ws.events():
                    answer, closed = self._on(event)
                    out += answer
                    if closed:
                        self._write(out)
                        return None
            except ef.FrameError as exc:  # refused by wsproto or by its size, or not Nomad's message
                code = exc.code if isinstance(exc, _Refused) else CloseReason.POLICY_VIOLATION
                self._write(out + self._send(CloseConnection(code, str(exc)[:120])))
                raise
            self._write(out)
        return self._inputs.popleft()

    def _on(self, event: Event) -> tuple[bytes, bool]:
        """What to answer `event` with, and whether the client closed."""
        if isinstance(event, Ping):
            return self._send(event.response()), False
        if isinstance(event, CloseConnection):
            if self._ws.state is ConnectionState.OPEN:  # wsproto refused a frame: fail the websocket
                raise _Refused(event.code, event.reason or "a malformed websocket frame")
            return self._send(event.response()), True
        if isinstance(event, TextMessage | BytesMessage):
            chunk = event.data.encode() if isinstance(event.data, str) else bytes(event.data)
            self._size += len(chunk)
            if self._size > self.limits.max_message:
                raise _Refused(
                    CloseReason.MESSAGE_TOO_BIG, f"a websocket message over {self.limits.max_message} bytes"
                )
            self._parts.append(chunk)
            if event.message_finished:
                parts, self._parts, self._size = self._parts, [], 0
                got = _input(b"".join(parts))
                if got is not None:
                    self._inputs.append(got)
        return b"", False  # a pong

    def _write(self, data: bytes) -> None:
        """Write what the codec answers itself; past the write bound the client does not read: it is
        dropped (its connection aborted), never buffered on."""
        if not data:
            return
        self.writer.write(data)
        unsent = self.writer.transport.get_write_buffer_size()
        if unsent > self.limits.write_buffer:
            self.writer.transport.abort()
            why = (
                f"the client does not read: {unsent} bytes unsent, "
                f"over the bound of {self.limits.write_buffer}"
            )
            log.warning("exec websocket from %s dropped: %s", self.writer.get_extra_info("peername"), why)
            raise ConnectionAbortedError(why)


class _Refused(ef.FrameError):
    """A frame or message the websocket refuses, with the close code that says why."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def _handshake(headers: Message) -> dict[str, str]:
    key = headers.get("Sec-WebSocket-Key", "")
    if headers.get("Sec-WebSocket-Version", "").strip() != "13":
        raise ValueError("a websocket needs Sec-WebSocket-Version: 13")
    if not valid_key(key):
        raise ValueError("a websocket needs a Sec-WebSocket-Key of 16 base64 bytes")
    return {"Sec-WebSocket-Accept": generate_accept_token(key.strip().encode()).decode()}


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

    def open_session(groups: tuple[str, ...], body: bytes) -> Response | ExecSession:
        try:
            name, tty, command = _exec_args(query_params())
        except HttpError as exc:
            return text(exc.status, str(exc))

        def find() -> tuple[Any, Any, str, dict[str, str]]:
            from agent.nomadapi.clientroutes import managed_alloc

            r = managed_alloc(api, unquote(groups[0]))  # an adopted alloc: 409 saying how to end it
            task = next((t for t in r.group.tasks if t.name == name), None)
            if task is None:
                raise NotFound(f"task {name!r} not found in alloc {r.id}")
            handle = r.state.handle(task.name)
            if handle is None or not r.tasks[task.name].running():
                raise Conflict(f"task {name} of alloc {r.id} is not running")
            return r.driver(task), handle, r.id, r.tasks[task.name].exec_env()

        try:
            driver, handle, alloc_id, env = api.call(find)
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
