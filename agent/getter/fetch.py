"""An artifact's download: http(s) only, from the hosts the client allows only (each redirect checked
as the first request), through no proxy, within a size limit and a read timeout, its checksum
computed as it streams. A server that does not answer or answers 5xx is `Unavailable` (the setup is
tried again later); anything else is an ArtifactError."""

from __future__ import annotations

import hashlib
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from agent.errors import Unavailable
from agent.getter.plan import ArtifactError, Checksum, host_allowed

CHUNK = 1 << 16
MAX_REDIRECTS = 5


class ArtifactUnavailable(Unavailable):
    """The artifact's server did not answer (or answered 5xx): worth trying again."""


def resolve(host: str) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})
    except OSError:
        return []


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int = 100 * 1024 * 1024
    timeout: float = 60.0  # seconds without a byte, and to connect
    allowed_hosts: Sequence[str] = ()


def _check_host(host: str, limits: FetchLimits, lookup: Callable[[str], list[str]]) -> None:
    why = host_allowed(host, lookup(host), limits.allowed_hosts)
    if why is not None:
        raise ArtifactError(why)


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def __init__(self, limits: FetchLimits, lookup: Callable[[str], list[str]]) -> None:
        self.limits = limits
        self.lookup = lookup

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        target = urllib.parse.urlsplit(newurl)
        if target.scheme not in ("http", "https") or not target.hostname:
            raise ArtifactError(f"redirected to {newurl}: only http and https are followed")
        _check_host(target.hostname, self.limits, self.lookup)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


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
) -> int:
    """Write the body of `url` to `out`; the number of bytes. Checks the host (and every redirect's),
    the size limit while streaming, and the checksum at the end."""
    _check_host(host, limits, lookup)
    context = ssl.create_default_context(cafile=cafile)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=context),
        _Redirects(limits, lookup),
    )
    request = urllib.request.Request(url, headers={"User-Agent": "fieldlab-agent", **headers})  # noqa: S310 - http(s) only (plan_fetch)
    digest = hashlib.new(checksum.kind) if checksum else None
    total = 0
    try:
        with opener.open(request, timeout=limits.timeout) as response:
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limits.max_bytes:
                raise ArtifactError(
                    f"{int(length)} bytes, more than the client's limit of {limits.max_bytes}"
                )
            while chunk := response.read(CHUNK):
                total += len(chunk)
                if total > limits.max_bytes:
                    raise ArtifactError(f"more than the client's limit of {limits.max_bytes} bytes")
                if digest is not None:
                    digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise ArtifactUnavailable(f"bad response code: {exc.code}") from None
        raise ArtifactError(f"bad response code: {exc.code}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ArtifactError):
            raise reason from None
        raise ArtifactUnavailable(f"{reason}") from None
    except (TimeoutError, ConnectionError) as exc:
        raise ArtifactUnavailable(str(exc) or type(exc).__name__) from None
    if digest is not None and checksum is not None and digest.hexdigest() != checksum.digest:
        raise ArtifactError(
            f"checksums did not match: expected {checksum.kind}:{checksum.digest}, got {digest.hexdigest()}"
        )
    return total
