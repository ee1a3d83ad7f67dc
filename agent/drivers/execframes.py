"""The wire format of an interactive exec session (`alloc exec -i/-t`): pure framing, no I/O.

The session starts as an HTTP request, `POST /v1/allocation/<id>/exec` with `Connection: Upgrade`
and `Upgrade: fieldlab-exec` and the usual JSON body (cmd, task, tty, rows, cols). The agent
answers `101 Switching Protocols` and from then on both sides send frames on the same TLS stream:
one type byte, the payload's length as 4 bytes big-endian, the payload (at most MAX_PAYLOAD bytes).

From the client: STDIN (bytes for the command's stdin), CLOSE_STDIN (empty: stdin has ended),
RESIZE (JSON {"rows": R, "cols": C}: the terminal's size). From the agent: STDOUT, STDERR (bytes
the command wrote; with a tty everything comes as STDOUT) and EXIT (JSON {"exit_code": N}, with
"error" when the command could not run: -1), always the last frame.

Nomad streams the same kinds of message as JSON over a websocket; the agent's API speaks plain
HTTP/1.1 over mTLS, so the session takes the HTTP upgrade docker's exec attach also uses.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

PROTOCOL = "fieldlab-exec"
STDIN, CLOSE_STDIN, RESIZE = b"i", b"c", b"r"
STDOUT, STDERR, EXIT = b"o", b"e", b"x"
FROM_CLIENT = frozenset({STDIN, CLOSE_STDIN, RESIZE})
FROM_AGENT = frozenset({STDOUT, STDERR, EXIT})
HEADER = struct.Struct(">cI")
MAX_PAYLOAD = 64 * 1024
MAX_TERMINAL = 10_000  # rows or columns: anything larger is not a terminal


class FrameError(ValueError):
    """A frame that breaks the format: the session ends with this said."""


def encode(kind: bytes, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise FrameError(f"a frame of {len(payload)} bytes is over {MAX_PAYLOAD}")
    return HEADER.pack(kind, len(payload)) + payload


def chunks(kind: bytes, data: bytes) -> Iterator[bytes]:
    """`data` as frames of `kind`, each within MAX_PAYLOAD."""
    for start in range(0, len(data), MAX_PAYLOAD):
        yield encode(kind, data[start : start + MAX_PAYLOAD])


def resize(rows: int, cols: int) -> bytes:
    return encode(RESIZE, json.dumps({"rows": rows, "cols": cols}).encode())


def exit_frame(code: int, error: str | None = None) -> bytes:
    body: dict[str, Any] = {"exit_code": code}
    if error:
        body["error"] = error
    return encode(EXIT, json.dumps(body).encode())


def header(raw: bytes, accept: frozenset[bytes]) -> tuple[bytes, int]:
    """The kind and payload length of a frame's HEADER.size bytes; FrameError for a kind this side
    does not take or a payload over the limit."""
    kind, length = HEADER.unpack(raw)
    if kind not in accept:
        raise FrameError(f"unknown frame type {kind!r}")
    if length > MAX_PAYLOAD:
        raise FrameError(f"a frame of {length} bytes is over {MAX_PAYLOAD}")
    return kind, length


def parse_resize(payload: bytes) -> tuple[int, int]:
    """(rows, cols) of a RESIZE payload; FrameError unless both are whole numbers 1..MAX_TERMINAL."""
    try:
        data = json.loads(payload)
    except ValueError:
        raise FrameError("a resize frame is not JSON") from None
    if not isinstance(data, dict):
        raise FrameError('a resize frame must be {"rows": R, "cols": C}')
    rows, cols = data.get("rows"), data.get("cols")
    for name, value in (("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TERMINAL:
            raise FrameError(f"a resize frame's {name} must be a whole number from 1 to {MAX_TERMINAL}")
    assert isinstance(rows, int) and isinstance(cols, int)
    return rows, cols


def parse_exit(payload: bytes) -> tuple[int, str | None]:
    try:
        data = json.loads(payload)
        return int(data["exit_code"]), (str(data["error"]) if data.get("error") else None)
    except (ValueError, KeyError, TypeError):
        raise FrameError("an exit frame without an exit code") from None


@dataclass
class Decoder:
    """Frames out of a byte stream fed in pieces (the client's reads of its TLS socket)."""

    accept: frozenset[bytes]
    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buf += data
        out: list[tuple[bytes, bytes]] = []
        while len(self._buf) >= HEADER.size:
            kind, length = header(bytes(self._buf[: HEADER.size]), self.accept)
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            out.append((kind, bytes(self._buf[HEADER.size : end])))
            del self._buf[:end]
        return out

    @property
    def pending(self) -> int:
        """Bytes of a frame not complete yet (non-zero at the end of the stream: it was cut)."""
        return len(self._buf)
