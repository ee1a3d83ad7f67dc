"""A small websocket client (RFC 6455) over the agent's mTLS: what `nomad alloc exec` opens on
`GET /v1/client/allocation/:id/exec` (agent.nomadapi.wsexec is the agent's side).

The handshake is a GET with `Upgrade: websocket` and a random Sec-WebSocket-Key; the agent's 101
must carry the matching Sec-WebSocket-Accept. Client frames are masked (5.1), the agent's are not;
a message may come in fragments, pings are answered with pongs. Messages are Nomad's JSON objects.
`Decoder` is the pure part (bytes in, frames out)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import ssl
import struct
import urllib.parse
from dataclasses import dataclass
from typing import Any

from agent.api.client import ApiClient, read_body
from agent.cli.calls import CallError, reason
from agent.errors import AgentError

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0
MAX_MESSAGE = 4 * 1024 * 1024  # bytes of one message from the agent (its output comes in 16 KiB pieces)
MAX_HEAD = 64 * 1024  # bytes of the handshake's answer head
RECV_SIZE = 64 * 1024


class WsError(AgentError):
    """The agent's side broke the websocket format."""


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode(), usedforsecurity=False).digest()).decode()


def client_frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """A final, masked client frame."""
    mask = mask if mask is not None else os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))


@dataclass(frozen=True)
class Closed:
    """The agent's close frame: its status code (1005 when it gave none) and reason."""

    code: int
    reason: str


class Decoder:
    """The agent's frames from bytes as they arrive: whole messages (the payload of a text or binary
    message, its fragments joined), pings, and the close."""

    def __init__(self) -> None:
        self.buffer = b""
        self.parts: list[bytes] = []

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(opcode, payload) of each whole frame in what came so far: TEXT (a whole message), PING,
        PONG, CLOSE."""
        self.buffer += data
        out: list[tuple[int, bytes]] = []
        while True:
            got = self._frame()
            if got is None:
                return out
            final, opcode, payload = got
            if opcode in (PING, PONG, CLOSE):
                out.append((opcode, payload))
                continue
            if opcode not in (TEXT, BINARY, CONT):
                raise WsError(f"the agent sent websocket opcode {opcode}")
            self.parts.append(payload)
            if sum(len(p) for p in self.parts) > MAX_MESSAGE:
                raise WsError(f"the agent sent a websocket message over {MAX_MESSAGE} bytes")
            if final:
                out.append((TEXT, b"".join(self.parts)))
                self.parts = []

    def _frame(self) -> tuple[bool, int, bytes] | None:
        buf = self.buffer
        if len(buf) < 2:
            return None
        b0, b1 = buf[0], buf[1]
        if b1 & 0x80:
            raise WsError("the agent sent a masked frame (a server's frames are not masked)")
        n, at = b1 & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                return None
            (n,) = struct.unpack(">H", buf[2:4])
            at = 4
        elif n == 127:
            if len(buf) < 10:
                return None
            (n,) = struct.unpack(">Q", buf[2:10])
            at = 10
        if n > MAX_MESSAGE:
            raise WsError(f"the agent sent a websocket frame of {n} bytes")
        if len(buf) < at + n:
            return None
        self.buffer = buf[at + n :]
        return bool(b0 & 0x80), b0 & 0x0F, buf[at : at + n]


def parse_close(payload: bytes) -> Closed:
    if len(payload) < 2:
        return Closed(1005, "")
    (code,) = struct.unpack(">H", payload[:2])
    return Closed(code, payload[2:].decode(errors="replace"))


class WebSocket:
    """One websocket to the agent: `send` a JSON message, `receive` what arrived (blocking until
    something does), `fileno` to wait on it with select (mind `pending`: TLS may hold bytes)."""

    def __init__(self, sock: ssl.SSLSocket, early: bytes) -> None:
        self.sock = sock
        self.decoder = Decoder()
        self.early = early

    @classmethod
    def connect(cls, api: ApiClient, path: str, what: str) -> WebSocket:
        """Open `path` as a websocket; CallError with the agent's reason when it refuses (the alloc
        or task not found, the command not a JSON list, too many sessions)."""
        ctx = api._context()
        url = urllib.parse.urlsplit(api.address)
        host, port = url.hostname or "127.0.0.1", url.port or 443
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        try:
            raw = socket.create_connection((host, port), timeout=api.timeout)
            sock = ctx.wrap_socket(raw, server_hostname=host)
            sock.sendall(request.encode())
            got = b""
            while b"\r\n\r\n" not in got:
                more = sock.recv(RECV_SIZE)
                if not more:
                    raise ConnectionError("the agent closed the connection before it answered")
                got += more
                if len(got) > MAX_HEAD:
                    raise ConnectionError("the agent's answer has no end of its head")
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(f"cannot reach the agent at {api.address}: {exc}") from None
        head, _, rest = got.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        if status != 101:
            body = _rest_of_body(sock, headers, rest)
            sock.close()
            try:
                parsed: Any = json.loads(body)
            except ValueError:
                parsed = body.decode(errors="replace") or lines[0]
            raise CallError(what, status, reason(parsed))
        if headers.get("sec-websocket-accept") != accept_key(key):
            sock.close()
            raise WsError(f"{what}: the agent's websocket handshake does not answer the key")
        sock.settimeout(None)
        return cls(sock, rest)

    def fileno(self) -> int:
        return self.sock.fileno()

    def pending(self) -> bool:
        return bool(self.early) or self.sock.pending() > 0

    def send(self, message: dict[str, Any]) -> None:
        self._send(TEXT, json.dumps(message, separators=(",", ":")).encode())

    def _send(self, opcode: int, payload: bytes) -> None:
        try:
            self.sock.sendall(client_frame(opcode, payload))
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(f"the exec session's connection broke: {exc}") from None

    def receive(self) -> tuple[list[dict[str, Any]], Closed | None]:
        """The messages that came with one read, and the close if it came; a ping is answered.
        AgentError when the connection broke or ended without a close."""
        if self.early:
            data, self.early = self.early, b""
        else:
            try:
                data = self.sock.recv(RECV_SIZE)
            except (OSError, ssl.SSLError) as exc:
                raise AgentError(f"the exec session's connection broke: {exc}") from None
            if not data:
                raise AgentError("the agent ended the exec session without the command's exit code")
        messages: list[dict[str, Any]] = []
        for opcode, payload in self.decoder.feed(data):
            if opcode == PING:
                self._send(PONG, payload)
            elif opcode == CLOSE:
                return messages, parse_close(payload)
            elif opcode == TEXT:
                try:
                    message = json.loads(payload)
                except ValueError:
                    raise WsError("the agent sent a websocket message that is not JSON") from None
                if isinstance(message, dict):
                    messages.append(message)
        return messages, None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _rest_of_body(sock: ssl.SSLSocket, headers: dict[str, str], got: bytes) -> bytes:
    raw = headers.get("content-length", "")
    return read_body(sock, got, int(raw) if raw.isdigit() else MAX_HEAD)
