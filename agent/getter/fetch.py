"""An artifact's download: http(s) only, from the hosts the client allows only, through no proxy,
within a size limit, a read timeout and a deadline for the whole download (redirects included:
Nomad's artifact `http_read_timeout`), its checksum computed as it streams.

Each host is resolved once: every address it resolved to is checked (agent.getter.plan.host_allowed)
and the connection is made to a checked address, with the Host header, the TLS server name and the
certificate's check for the URL's name (urllib3's connection with `server_hostname` and
`assert_hostname`), so a name that resolves elsewhere the second time (DNS rebinding) reaches
nothing unchecked. A redirect is followed by the same steps (at most MAX_REDIRECTS, as Go's client),
and the jobspec's Authorization and Cookie headers go to another host only as Go's client sends them
(the same host or one below it).

A server that does not answer, answers 5xx or does not finish within the deadline is `Unavailable`
(the setup is tried again later); anything else is an ArtifactError."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.util.ssl_match_hostname import CertificateError

from agent.errors import Unavailable
from agent.getter.plan import ArtifactError, Checksum, host_allowed

CHUNK = 1 << 16
MAX_REDIRECTS = 10  # Go's http.Client, which go-getter uses
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# dropped on a redirect to a host that is neither the same nor below it (Go's client)
SENSITIVE = frozenset({"authorization", "www-authenticate", "cookie", "cookie2"})


class ArtifactUnavailable(Unavailable):
    """The artifact's server did not answer (or answered 5xx, or too slowly): worth trying again."""


def resolve(host: str) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except OSError:
        return []


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int = 100 * 1024 * 1024
    timeout: float = 60.0  # seconds without a byte, and to connect
    allowed_hosts: Sequence[str] = ()
    deadline: float = 1800.0  # seconds the whole download may take (Nomad's http_read_timeout, 30m)


@dataclass(frozen=True)
class Target:
    """One request's URL, taken apart: where to connect, and what to say the host is."""

    scheme: str
    host: str  # the URL's name (or address), for the Host header, SNI and the certificate
    port: int
    path: str  # with its query

    @property
    def host_header(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return name if self.port == default else f"{name}:{self.port}"


def target(url: str) -> Target:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ArtifactError(f"{url}: only http and https URLs with a host are followed")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ArtifactError(f"{url}: not a valid port") from None
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return Target(parts.scheme, parts.hostname, port, path)


def redirect_headers(headers: Mapping[str, str], old: str, new: str) -> dict[str, str]:
    """The request's headers for a redirect from host `old` to `new`: Authorization and cookies only
    to the same host or one below it (Go's http.Client)."""
    old, new = old.lower(), new.lower()
    if new == old or new.endswith("." + old):
        return dict(headers)
    return {k: v for k, v in headers.items() if k.lower() not in SENSITIVE}


CANCEL_POLL = 0.1  # seconds between looks at a download's cancel event (the alloc stopping)


class _Deadline:
    """The whole download's deadline, and its cancellation: when the deadline passes or `cancel` is
    set (the alloc is being stopped: Nomad cancels the artifact hook's context), the connection in
    use is shut down, which ends any read blocked on it (a timeout is per read: a server trickling a
    byte per read never meets it)."""

    def __init__(self, seconds: float, cancel: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self.cancelled = False
        self._cancel = cancel
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._conn: HTTPConnection | None = None
        self._thread = threading.Thread(target=self._wait, name="artifact-deadline", daemon=True)

    def __enter__(self) -> _Deadline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _wait(self) -> None:
        if self._cancel is None:
            if not self._done.wait(self.seconds):
                self._expire(cancelled=False)
            return
        while not self._done.is_set():
            left = self.end - time.monotonic()
            if left <= 0:
                self._expire(cancelled=False)
                return
            if self._cancel.wait(min(left, CANCEL_POLL)):
                self._expire(cancelled=True)
                return

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0 or self.expired or (self._cancel is not None and self._cancel.is_set()):
            raise self.error()
        return left

    def error(self) -> ArtifactError | ArtifactUnavailable:
        if self.cancelled or (self._cancel is not None and self._cancel.is_set()):
            return ArtifactError("the download was cancelled: the alloc is being stopped")
        return ArtifactUnavailable(
            f"the download did not complete within the client's artifact_http_read_timeout "
            f"of {self.seconds:g}s"
        )

    def watch(self, conn: HTTPConnection | None) -> None:
        with self._lock:
            self._conn = conn
            if self.expired and conn is not None:
                _shutdown(conn)

    def _expire(self, *, cancelled: bool) -> None:
        with self._lock:
            self.expired = True
            self.cancelled = cancelled
            if self._conn is not None:
                _shutdown(self._conn)


def _shutdown(conn: HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _connect(
    where: Target, addresses: Sequence[str], timeout: float, context: ssl.SSLContext
) -> HTTPConnection:
    """A connection to the first of the checked `addresses` that answers, speaking for `where.host`."""
    last: Exception | None = None
    for address in addresses:
        conn: HTTPConnection
        if where.scheme == "https":
            name = where.host
            is_ip = _is_ip(name)
            conn = HTTPSConnection(
                address,
                where.port,
                timeout=timeout,
                ssl_context=context,
                server_hostname=None if is_ip else name,
                assert_hostname=name if context.verify_mode != ssl.CERT_NONE else False,
            )
        else:
            conn = HTTPConnection(address, where.port, timeout=timeout)
        try:
            conn.connect()
            return conn
        except (OSError, urllib3.exceptions.HTTPError, CertificateError) as exc:
            conn.close()
            last = exc
    raise ArtifactUnavailable(f"{where.host}: {_reason(last)}")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _reason(exc: BaseException | None) -> str:
    return (str(exc) or type(exc).__name__) if exc is not None else "no address"


def download(
    url: str,
    host: str,
    headers: dict[str, str],
    out: BinaryIO,
    limits: FetchLimits,
    checksum: Checksum | None,
    *,
    lookup: Callable[[str], list[str]] = resolve,
    cafile: str | None = None,
    cancel: threading.Event | None = None,
    insecure: bool = False,
) -> int:
    """Write the body of `url` to `out`; the number of bytes. Checks the host (and every redirect's),
    the size limit while streaming, the deadline throughout, and the checksum at the end; `cancel`
    set ends it at once (ArtifactError). `insecure` (the artifact's, go-getter's Insecure): https
    without checking the server's certificate or its name, as go-getter's InsecureSkipVerify; the
    host and address checks stay."""
    del host  # the plan's, the URL's own: every hop's host is taken from its URL
    context = ssl.create_default_context(cafile=cafile)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    sent = {k: v for k, v in headers.items() if k.lower() != "host"}  # the Host is the URL's (as Go)
    sent = {"User-Agent": "fieldlab-agent", **sent}
    with _Deadline(limits.deadline, cancel) as deadline:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            deadline.left()  # cancelled, or out of time, before the next hop
            where = target(current)
            addresses = lookup(where.host)
            why = host_allowed(where.host, addresses, limits.allowed_hosts)
            if why is not None:
                raise ArtifactError(why)
            got = _get(where, addresses, sent, out, limits, checksum, context, deadline)
            if isinstance(got, int):
                return got
            location = got
            following = urllib.parse.urljoin(current, location)
            if urllib.parse.urlsplit(following).scheme not in ("http", "https"):
                raise ArtifactError(f"redirected to {following}: only http and https are followed")
            sent = redirect_headers(sent, where.host, target(following).host)
            current = following
    raise ArtifactError(f"stopped after {MAX_REDIRECTS} redirects")


def _get(
    where: Target,
    addresses: Sequence[str],
    headers: Mapping[str, str],
    out: BinaryIO,
    limits: FetchLimits,
    checksum: Checksum | None,
    context: ssl.SSLContext,
    deadline: _Deadline,
) -> int | str:
    """One request to a checked address: the body written to `out` (its bytes), or a redirect's
    Location."""
    conn = _connect(where, addresses, min(limits.timeout, deadline.left()), context)
    deadline.watch(conn)
    try:
        conn.request(
            "GET",
            where.path,
            headers={"Host": where.host_header, **headers},
            preload_content=False,
            decode_content=False,  # the bytes as served (the checksum is of those), as urllib kept them
        )
        response = conn.getresponse()
        location = _status(response)
        if location is not None:
            return location
        total, digest = _stream(response, out, limits, checksum, deadline)
    except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException) as exc:
        if deadline.expired:
            raise deadline.error() from None
        raise ArtifactUnavailable(_reason(exc)) from None
    finally:
        deadline.watch(None)
        conn.close()
    if checksum is not None and digest != checksum.digest:
        raise ArtifactError(
            f"checksums did not match: expected {checksum.kind}:{checksum.digest}, got {digest}"
        )
    return total


def _status(response: urllib3.BaseHTTPResponse) -> str | None:
    """A redirect's Location, None for a body to read, or why not."""
    if response.status in REDIRECTS:
        location = response.headers.get("Location")
        if not location:
            raise ArtifactError(f"bad response code: {response.status} without a Location")
        return str(location)
    if response.status >= 500:
        raise ArtifactUnavailable(f"bad response code: {response.status}")
    if not 200 <= response.status < 300:
        raise ArtifactError(f"bad response code: {response.status}")
    return None


def _stream(
    response: urllib3.BaseHTTPResponse,
    out: BinaryIO,
    limits: FetchLimits,
    checksum: Checksum | None,
    deadline: _Deadline,
) -> tuple[int, str]:
    """The body into `out` within the limits: its bytes and hex digest ("" without a checksum)."""
    length = response.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > limits.max_bytes:
        raise ArtifactError(f"{int(length)} bytes, more than the client's limit of {limits.max_bytes}")
    digest = hashlib.new(checksum.kind) if checksum else None
    total = 0
    while chunk := response.read1(CHUNK):
        deadline.left()
        total += len(chunk)
        if total > limits.max_bytes:
            raise ArtifactError(f"more than the client's limit of {limits.max_bytes} bytes")
        if digest is not None:
            digest.update(chunk)
        out.write(chunk)
    deadline.left()
    if length and length.isdigit() and total < int(length):
        raise ArtifactUnavailable(f"the body ended after {total} of {length} bytes")
    return total, digest.hexdigest() if digest is not None else ""
