"""The websocket client of `fieldlab-agent alloc exec`, on wsproto over the agent's mTLS: what
`nomad alloc exec` opens on `GET /v1/client/allocation/:id/exec` (agent.nomadapi.wsexec is the
agent's side).

wsproto does the protocol (the upgrade request and the check of the agent's Sec-WebSocket-Accept,
masking, fragments, control frames, the close handshake); this module does the socket and Nomad's
messages (JSON objects). A refused upgrade (the agent's 4xx/5xx with its body) is the agent's reason.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from agent.api.client import ApiClient
from agent.cli.calls import CallError, reason
from agent.errors import AgentError

MAX_MESSAGE = 4 * 1024 * 1024  # bytes of one message from the agent (its output comes in 16 KiB pieces)
MAX_REFUSAL = 64 * 1024  # bytes of a refused upgrade's body kept for its reason
RECV_SIZE = 64 * 1024


class WsError(AgentError):
    """The agent's side broke the websocket protocol."""


@dataclass(frozen=True)
class Closed:
    """The agent's close: its status code (1005 when it gave none) and reason."""

    code: int
    reason: str


class Messages:
    """The pure part: wsproto's events in, Nomad's messages (whole, fragments joined) and the close
    out, with the bytes to send back (pongs, the close's answer)."""

    def __init__(self, conn: WSConnection) -> None:
        self.conn = conn
        self.parts: list[bytes] = []
        self.size = 0

    def feed(self, data: bytes | None) -> tuple[list[dict[str, Any]], Closed | None, bytes]:
        """What `data` (None: the connection ended) completes: messages, the close, bytes to send."""
        try:
            self.conn.receive_data(data)
            return self._drain()
        except (RemoteProtocolError, LocalProtocolError) as exc:
            raise WsError(f"the agent broke the websocket protocol: {exc}") from None

    def _drain(self) -> tuple[list[dict[str, Any]], Closed | None, bytes]:
        messages: list[dict[str, Any]] = []
        reply = b""
        for event in self.conn.events():
            if isinstance(event, Ping):
                reply += self.conn.send(event.response())
            elif isinstance(event, CloseConnection):
                if self.conn.state is not ConnectionState.REMOTE_CLOSING:
                    # not the agent's close frame: wsproto's verdict on a frame the agent got wrong
                    raise WsError(f"the agent broke the websocket protocol: {event.reason}")
                reply += self.conn.send(event.response())
                return messages, Closed(event.code, event.reason or ""), reply
            elif isinstance(event, TextMessage | BytesMessage):
                chunk = event.data.encode() if isinstance(event, TextMessage) else bytes(event.data)
                self.size += len(chunk)
                if self.size > MAX_MESSAGE:
                    raise WsError(f"the agent sent a websocket message over {MAX_MESSAGE} bytes")
                self.parts.append(chunk)
                if event.message_finished:
                    whole, self.parts, self.size = b"".join(self.parts), [], 0
                    messages.append(_message(whole))
        return [m for m in messages if m], None, reply


def _message(payload: bytes) -> dict[str, Any]:
    try:
        message = json.loads(payload)
    except ValueError:
        raise WsError("the agent sent a websocket message that is not JSON") from None
    return message if isinstance(message, dict) else {}


class WebSocket:
    """One websocket to the agent: `send` a JSON message, `receive` what arrived (blocking until
    something does), `fileno` to wait on it with select (mind `pending`: TLS may hold bytes)."""

    def __init__(self, sock: ssl.SSLSocket, conn: WSConnection) -> None:
        self.sock = sock
        self.conn = conn
        self.messages = Messages(conn)
        self.early = True  # the upgrade's answer may have brought frames: wsproto holds them

    @classmethod
    def connect(cls, api: ApiClient, path: str, what: str) -> WebSocket:
        """Open `path` as a websocket; CallError with the agent's reason when it refuses (the alloc
        or task not found, the command not a JSON list, too many sessions)."""
        ctx = api._context()
        url = urllib.parse.urlsplit(api.address)
        host, port = url.hostname or "127.0.0.1", url.port or 443
        conn = WSConnection(ConnectionType.CLIENT)
        try:
            raw = socket.create_connection((host, port), timeout=api.timeout)
            sock = ctx.wrap_socket(raw, server_hostname=host)
            sock.sendall(conn.send(Request(host=url.netloc, target=path)))
            answer = _upgrade_answer(sock, conn)
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(f"cannot reach the agent at {api.address}: {exc}") from None
        except (RemoteProtocolError, LocalProtocolError) as exc:
            raise WsError(f"{what}: the agent's websocket handshake is wrong: {exc}") from None
        if isinstance(answer, tuple):
            status, body = answer
            sock.close()
            try:
                parsed: Any = json.loads(body)
            except ValueError:
                parsed = body.decode(errors="replace") or f"HTTP {status}"
            raise CallError(what, status, reason(parsed))
        sock.settimeout(None)
        return cls(sock, conn)

    def fileno(self) -> int:
        return self.sock.fileno()

    def pending(self) -> bool:
        return self.early or self.sock.pending() > 0

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.sock.sendall(self.conn.send(TextMessage(json.dumps(message, separators=(",", ":")))))
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(f"the exec session's connection broke: {exc}") from None
        except LocalProtocolError:
            raise AgentError("the exec session is closing: nothing more can be sent") from None

    def receive(self) -> tuple[list[dict[str, Any]], Closed | None]:
        """The messages that came with one read, and the close if it came; a ping is answered.
        AgentError when the connection broke or ended without a close."""
        if self.early:
            self.early = False
            data: bytes | None = b""
        else:
            try:
                data = self.sock.recv(RECV_SIZE)
            except (OSError, ssl.SSLError) as exc:
                raise AgentError(f"the exec session's connection broke: {exc}") from None
            if not data:
                raise AgentError("the agent ended the exec session without the command's exit code")
        messages, closed, reply = self.messages.feed(data)
        if reply:
            with contextlib.suppress(OSError, ssl.SSLError):
                self.sock.sendall(reply)
        return messages, closed

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _upgrade_answer(sock: ssl.SSLSocket, conn: WSConnection) -> tuple[int, bytes] | None:
    """None when the agent accepted the upgrade, else its status and (the start of) its body."""
    status, body = 0, b""
    while True:
        data = sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("the agent closed the connection before it answered")
        conn.receive_data(data)
        for event in _handshake_events(conn):
            if isinstance(event, AcceptConnection):
                return None
            if isinstance(event, RejectConnection):
                status = event.status_code
                if not event.has_body:
                    return status, body
            elif isinstance(event, RejectData):
                body = (body + event.data)[:MAX_REFUSAL]
                if event.body_finished:
                    return status, body


def _handshake_events(conn: WSConnection) -> list[Event]:
    """The handshake's events so far; frames after an accept stay in wsproto for `receive`."""
    out: list[Event] = []
    for event in conn.events():
        out.append(event)
        if isinstance(event, AcceptConnection):
            break
    return out
