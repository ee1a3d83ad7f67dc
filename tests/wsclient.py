"""A small RFC 6455 client for the tests: what `nomad alloc exec` does on the wire (masked client
frames, Nomad's JSON messages), over the agent's mTLS."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
from typing import Any

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WsClient:
    def __init__(self, host: str, port: int, path: str, ctx: ssl.SSLContext, timeout: float = 30.0) -> None:
        raw = socket.create_connection((host, port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        self.close_code: int | None = None  # the close frame's status code, once messages() saw it
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError(f"closed during the handshake: {head!r}")
            head += chunk
        self.status = int(head.split(b" ", 2)[1])
        self.head = head.decode("latin-1")
        want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.accepted = self.status == 101 and f"Sec-WebSocket-Accept: {want}" in self.head
        self.body = b""
        if self.status != 101:
            self.sock.settimeout(2)
            try:
                while chunk := self.sock.recv(65536):
                    self.body += chunk
            except (TimeoutError, OSError):
                pass

    def send(self, message: dict[str, Any]) -> None:
        self.send_frame(0x1, json.dumps(message).encode())

    def send_frame(self, opcode: int, payload: bytes, *, masked: bool = True) -> None:
        n = len(payload)
        b1 = 0x80 if masked else 0
        head = (
            struct.pack(">BB", 0x80 | opcode, b1 | n)
            if n < 126
            else struct.pack(">BBH", 0x80 | opcode, b1 | 126, n)
        )
        mask = os.urandom(4)
        body = bytes(c ^ mask[i % 4] for i, c in enumerate(payload)) if masked else payload
        self.sock.sendall(head + (mask if masked else b"") + body)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def recv(self) -> tuple[int, bytes]:
        b0, b1 = self._exact(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack(">H", self._exact(2))
        elif n == 127:
            (n,) = struct.unpack(">Q", self._exact(8))
        return b0 & 0x0F, self._exact(n)

    def messages(self) -> list[dict[str, Any]]:
        """Every JSON message until the close frame."""
        out: list[dict[str, Any]] = []
        while True:
            opcode, payload = self.recv()
            if opcode == 0x8:
                self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                return out
            out.append(json.loads(payload))

    def close(self) -> None:
        self.sock.close()
