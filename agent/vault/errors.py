"""What a Vault request can fail with, classified from hvac's and requests' exceptions (the reason
names no secret): unavailable (retry with backoff), rate limited (429, with Retry-After), denied,
not found."""

from __future__ import annotations

import email.utils
import logging
import time

import hvac
import hvac.adapters
import hvac.exceptions
import requests

from agent.errors import AgentError, RateLimited, Unavailable

log = logging.getLogger(__name__)


class VaultError(AgentError):
    """A Vault request failed; the message names the operation and the path, never a secret."""

    def __init__(self, op: str, path: str, reason: str) -> None:
        self.op, self.path, self.reason = op, path, reason
        super().__init__(f"vault {op} {path}: {reason}")


class VaultUnavailable(VaultError, Unavailable):
    """Vault cannot answer now (refused, timeout, sealed, 5xx, rate limited): retry with backoff."""


class VaultRateLimited(VaultUnavailable, RateLimited):
    """Vault refused the request over a rate-limit quota (429), or the agent's own cap refused to send
    it (`vault.max_requests_per_second`): retry after `retry_after` seconds (the server's Retry-After;
    None when it sent none), with backoff and jitter."""

    def __init__(self, op: str, path: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(op, path, reason)
        self.retry_after = retry_after


class VaultDenied(VaultError):
    """Permission denied on the path (403), or the AppRole credentials were refused: not retried."""


class VaultNotFound(VaultError):
    """Nothing at the path (404): no such secret, or a KV v2 version that was deleted."""


UNAVAILABLE = (
    hvac.exceptions.InternalServerError,  # 500
    hvac.exceptions.VaultNotInitialized,  # 501
    hvac.exceptions.BadGateway,  # 502
    hvac.exceptions.UnexpectedError,  # any other status
)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header as seconds: delay-seconds ("3") or an HTTP date; None when absent or
    unreadable. OpenBao sends delay-seconds, and only with `enable_rate_limit_response_headers`."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class JsonAdapter(hvac.adapters.JSONAdapter):  # type: ignore[misc]
    """hvac's JSON adapter, keeping a 429's Retry-After on the exception it raises (hvac's own
    exceptions carry no headers)."""

    def _raise_for_error(self, method: str, url: str, response: requests.Response) -> None:
        try:
            super()._raise_for_error(method, url, response)
        except hvac.exceptions.RateLimitExceeded as exc:
            exc.retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            raise


def classify(exc: Exception, op: str, path: str) -> VaultError:
    """One of our errors for an hvac or requests exception; the reason names no secret."""
    if isinstance(exc, requests.RequestException):
        if isinstance(exc, requests.Timeout):
            reason = "timed out (server hung or unreachable)"
        elif isinstance(exc, requests.ConnectionError):
            reason = "connection failed (server down or unreachable)"
        else:
            reason = type(exc).__name__
        return VaultUnavailable(op, path, reason)
    if not isinstance(exc, hvac.exceptions.VaultError):
        return VaultError(op, path, f"{type(exc).__name__}: {exc}")
    errors = "; ".join(" ".join(str(e).split()) for e in (exc.errors or []) if e) or type(exc).__name__
    cls: type[VaultError] = VaultError
    if isinstance(exc, hvac.exceptions.Forbidden):
        cls, errors = VaultDenied, f"permission denied ({errors})"
    elif isinstance(exc, hvac.exceptions.InvalidPath):
        cls, errors = VaultNotFound, "not found"
    elif isinstance(exc, hvac.exceptions.VaultDown):  # 503
        cls, errors = VaultUnavailable, f"sealed or unavailable ({errors})"
    elif isinstance(exc, hvac.exceptions.RateLimitExceeded):  # 429: a rate-limit quota
        after = getattr(exc, "retry_after", None)
        said = f"; Retry-After {after:g}s" if after is not None else ""
        return VaultRateLimited(op, path, f"rate limited (429: {errors}{said})", after)
    elif isinstance(exc, UNAVAILABLE):
        cls, errors = VaultUnavailable, f"server error ({errors})"
    return cls(op, path, errors)
