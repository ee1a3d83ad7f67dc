"""HTTP/1.1 for the agent's API on h11 (python-hyper's sans-I/O protocol): a request read from a
connection with its limits, and every answer (whole, chunked, 101) made by h11. The agent writes
no HTTP framing of its own; this module only moves bytes between h11 and the connection.

One request per connection: an answer says `Connection: close`. A request's head may be at most
`api_max_header_bytes` (more: 431); a body says its length with Content-Length (over the limit:
413) or says nothing, which is an empty body (as Nomad's agent takes a bodyless POST or PUT); a
chunked request body is refused (400). h11's refusals (a malformed request line or header, a bad
or conflicting Content-Length) are 400s naming what h11 found.
"""

from __future__ import annotations

import asyncio
import http
import http.client
import json
from dataclasses import dataclass
from typing import Any

import h11

READ = 64 * 1024  # bytes read from a connection at once

Response = tuple[int, str, bytes]


def json_response(status: int, body: Any) -> Response:
    return status, "application/json", json.dumps(body, indent=2, default=str).encode()


class ClientError(Exception):
    """A request answered with a 4xx (or 5xx) JSON error and one WARNING line."""

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}  # sent with the answer (Retry-After)
        self.extra = extra  # more fields of the JSON error

    def response(self) -> Response:
        return json_response(self.status, {"error": str(self), **self.extra})


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    version: str
    headers: http.client.HTTPMessage
    query: str = ""  # what followed "?" in the request target (query_params reads it in a handler)


class Exchange:
    """One request and its answer on a connection, through an h11 server connection."""

    def __init__(self, reader: asyncio.StreamReader, max_head: int) -> None:
        self.reader, self.max_head = reader, max_head
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self._fed = 0  # bytes handed to h11

    async def _next(self) -> object:
        """h11's next event, reading from the connection as it needs; ClientError for what h11
        refuses (its status hint: 400, or 431 for a head over the limit)."""
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                if exc.error_status_hint == 431:
                    raise ClientError(431, f"request head is over {self.max_head} bytes") from None
                raise ClientError(exc.error_status_hint, f"malformed request: {exc}") from None
            if event is h11.NEED_DATA:
                data = await self.reader.read(READ)
                self._fed += len(data)
                self.conn.receive_data(data)
                continue
            return event

    async def request(self) -> Request:
        """The request's line and headers; IncompleteReadError when the client closed before one."""
        event = await self._next()
        if not isinstance(event, h11.Request):
            raise asyncio.IncompleteReadError(b"", None)  # ConnectionClosed: no request at all
        # h11 bounds a head still coming; one that came whole in a read is measured here.
        if self._fed - len(self.conn.trailing_data[0]) > self.max_head:
            raise ClientError(431, f"request head is over {self.max_head} bytes")
        headers = http.client.HTTPMessage()
        for name, value in event.headers:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        path, _, query = event.target.decode("latin-1").partition("?")
        return Request(event.method.decode("ascii"), path, event.http_version.decode("ascii"), headers, query)

    @staticmethod
    def check_body(request: Request, limit: int) -> None:
        """Refuse a body the agent does not read before reading it: chunked (400), over `limit` (413)."""
        if request.headers.get("Transfer-Encoding") is not None:
            raise ClientError(400, "Transfer-Encoding is not accepted: send the body with a Content-Length")
        length = request.headers.get("Content-Length")
        if length is not None and int(length) > limit:  # h11 has checked it is one count of digits
            raise ClientError(413, f"request body of {int(length)} bytes is over the limit of {limit} bytes")

    async def body(self, limit: int) -> bytes:
        """The request's body (b"" when it said no length); ClientError past `limit` bytes."""
        parts: list[bytes] = []
        size = 0
        while True:
            event = await self._next()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise ClientError(413, f"request body is over the limit of {limit} bytes")
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                return b"".join(parts)
            else:
                raise ClientError(400, "the request ended before its body")

    def continue_100(self) -> bytes:
        """`100 Continue` when the client waits for it before sending its body (Expect: 100-continue)."""
        if self.conn.client_is_waiting_for_100_continue:
            return self.conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
        return b""

    def _answering(self) -> h11.Connection:
        """The connection while it can still send a response; else a new one (an error found where
        h11's state allows no answer, e.g. after a broken body: the answer is made alike)."""
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            return self.conn
        return h11.Connection(h11.SERVER)

    def response(self, answer: Response, extra: dict[str, str] | None = None) -> bytes:
        """A whole answer with its Content-Length; the connection closes after it."""
        status, ctype, body = answer
        conn = self._answering()
        head = [("Content-Type", ctype), ("Content-Length", str(len(body))), *(extra or {}).items()]
        out = conn.send(_response(status, [*head, ("Connection", "close")])) or b""
        return out + (conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b"")

    def stream_head(self, status: int, ctype: str, extra: dict[str, str]) -> bytes:
        """The head of an answer sent as it is made (chunked to an HTTP/1.1 client)."""
        head = [("Content-Type", ctype), *extra.items(), ("Connection", "close")]
        return self.conn.send(_response(status, head)) or b""

    def chunk(self, data: bytes) -> bytes:
        return self.conn.send(h11.Data(data=data)) or b""

    def end(self) -> bytes:
        return self.conn.send(h11.EndOfMessage()) or b""

    def switch(self, protocol: str, extra: dict[str, str]) -> tuple[bytes, bytes]:
        """`101 Switching Protocols` to `protocol`, and what the client sent after its request (the
        first bytes of the new protocol)."""
        headers = [("Upgrade", protocol), ("Connection", "Upgrade"), *extra.items()]
        out = self.conn.send(h11.InformationalResponse(status_code=101, headers=_headers(headers))) or b""
        trailing, _ = self.conn.trailing_data
        return out, bytes(trailing)


def _response(status: int, headers: list[tuple[str, str]]) -> h11.Response:
    try:
        reason = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        reason = b"Unknown"
    return h11.Response(status_code=status, reason=reason, headers=_headers(headers))


def _headers(items: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in items]
