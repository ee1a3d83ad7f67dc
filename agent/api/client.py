"""A small client for the agent's mTLS API, used by the `fieldlab-agent job|alloc|node` commands."""

from __future__ import annotations

import json
import os
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

import h11

from agent.errors import AgentError

NOT_CARRIED_OUT = 503  # the agent withdrew the request before acting: a retry is safe
RETRY_PAUSE = 0.5  # seconds, times the attempt number


def read_body(sock: ssl.SSLSocket, got: bytes, length: int) -> bytes:
    """The `length` bytes of a body of which `got` came with the head: what the peer sends until then
    (less when it closes or the socket fails first)."""
    try:
        while len(got) < length:
            more = sock.recv(65536)
            if not more:
                break
            got += more
    except OSError:
        pass
    return got[:length]


class ApiError(AgentError):
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.body = status, body
        msg = body.get("error") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {msg}")


class _NamedContext(ssl.SSLContext):
    """A client context that names the server `server_name` (SNI and the cert's check) whatever
    host the connection went to, as Nomad's TLSServerName."""

    def __new__(cls, server_name: str) -> _NamedContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def __init__(self, server_name: str) -> None:
        self.server_name = server_name

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(sock, *args, **kwargs)


@dataclass(frozen=True)
class ApiClient:
    address: str  # https://host:4646
    ca_file: str
    cert_file: str
    key_file: str
    timeout: float = 60.0
    attempts: int = 3  # tries of a write (same Idempotency-Key) on a broken connection or a 503
    server_name: str = ""  # the name the agent's cert is checked against, and SNI ("": the address's host)
    skip_verify: bool = False  # no check of the agent's cert at all (Nomad's -tls-skip-verify)

    @classmethod
    def from_env(
        cls,
        *,
        address: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> ApiClient:
        """From FIELDLAB_AGENT_ADDR, _CACERT, _CLIENT_CERT and _CLIENT_KEY; an argument given (the
        CLI's -address, -ca-cert, -client-cert, -client-key) wins over its variable."""
        env = os.environ
        given = {
            "FIELDLAB_AGENT_ADDR": address,
            "FIELDLAB_AGENT_CACERT": ca_file,
            "FIELDLAB_AGENT_CLIENT_CERT": cert_file,
            "FIELDLAB_AGENT_CLIENT_KEY": key_file,
        }
        value = {k: v if v else env.get(k, "") for k, v in given.items()}
        flags = {
            "FIELDLAB_AGENT_CACERT": "-ca-cert",
            "FIELDLAB_AGENT_CLIENT_CERT": "-client-cert",
            "FIELDLAB_AGENT_CLIENT_KEY": "-client-key",
        }
        missing = [f"{k} (or {flag})" for k, flag in flags.items() if not value[k]]
        if missing:
            raise AgentError(f"set {', '.join(missing)} (the lab's ca.pem, operator.crt, operator.key)")
        return cls(
            value["FIELDLAB_AGENT_ADDR"] or "https://127.0.0.1:4646",
            value["FIELDLAB_AGENT_CACERT"],
            value["FIELDLAB_AGENT_CLIENT_CERT"],
            value["FIELDLAB_AGENT_CLIENT_KEY"],
        )

    def _context(self) -> ssl.SSLContext:
        if not self.address.startswith("https://"):
            raise AgentError(f"agent address {self.address!r} must be an https:// URL (the API is mTLS only)")
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.server_name:
            named = _NamedContext(self.server_name)
            named.load_verify_locations(cafile=self.ca_file)
            named.verify_flags = ctx.verify_flags
            ctx = named
        if self.skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def upgrade(self, path: str, body: Any, protocol: str) -> tuple[ssl.SSLSocket, bytes]:
        """POST `body` to `path` asking to switch to `protocol` (an interactive exec session): the
        TLS socket once the agent has answered 101, and what it sent after its answer's head.
        ApiError with the agent's answer when it refused. HTTP/1.1 is h11's."""
        ctx = self._context()
        url = urllib.parse.urlsplit(self.address)
        host, port = url.hostname or "127.0.0.1", url.port or 443
        data = json.dumps(body).encode()
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=65536)
        headers = [
            ("Host", url.netloc),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Connection", "Upgrade"),
            ("Upgrade", protocol),
        ]
        request = conn.send(h11.Request(method="POST", target=path, headers=headers)) or b""
        request += (conn.send(h11.Data(data=data)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
        answer: list[bytes] = []
        try:
            raw = socket.create_connection((host, port), timeout=self.timeout)
            sock = ctx.wrap_socket(raw, server_hostname=host)
            sock.sendall(request)
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(sock.recv(65536))
                elif isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                    sock.settimeout(None)
                    return sock, bytes(conn.trailing_data[0])
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    answer.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
        except h11.RemoteProtocolError as exc:
            raise AgentError(
                f"the agent at {self.address} answered no HTTP/1.1 this client reads: {exc}"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(f"cannot reach the agent at {self.address}: {exc}") from None
        sock.close()
        text = b"".join(answer)
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text.decode(errors="replace") or f"HTTP {status}"
        raise ApiError(status, parsed)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(self.request_raw(method, path, body)[1] or b"null")

    def request_raw(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """The status and body of a response as they came (for answers that are not JSON: metrics).

        A write carries an Idempotency-Key and is tried up to `attempts` times when the connection
        fails or times out or the agent answers 503 (not carried out): every try has the same key,
        so the agent acts once however many reach it (agent.api.idempotency).
        An empty `cert_file` presents no client certificate (to check that the agent refuses that)."""
        ctx = self._context()
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        write = method != "GET"
        if write:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        tries = self.attempts if write else 1
        for attempt in range(1, tries + 1):
            req = urllib.request.Request(  # noqa: S310 - https only, checked above
                self.address + path, data=data, method=method, headers=headers
            )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=self.timeout) as resp:  # noqa: S310
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError:
                    parsed = raw.decode(errors="replace")
                if exc.code == NOT_CARRIED_OUT and attempt < tries:
                    time.sleep(RETRY_PAUSE * attempt)  # backoff between tries, not a synchronisation
                    continue
                raise ApiError(exc.code, parsed) from None
            except (urllib.error.URLError, OSError) as exc:
                broken = isinstance(getattr(exc, "reason", exc), ConnectionError | TimeoutError)
                if broken and attempt < tries:  # not a TLS refusal: that answer would not change
                    time.sleep(RETRY_PAUSE * attempt)
                    continue
                raise AgentError(f"cannot reach the agent at {self.address}: {exc}") from None
        raise AssertionError("unreachable: the last try returns or raises")
