"""The agent's Vault requests, paced and counted (`VaultLoad`, one per agent), and what the last
request says about Vault itself (`VaultCallStatus`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hvac
import hvac.adapters
import hvac.exceptions
import requests

from agent.decide.vaultrate import RateBucket, plan_rate_cap
from agent.errors import RateLimited
from agent.vault.errors import VaultDenied, VaultNotFound, VaultRateLimited, VaultUnavailable

log = logging.getLogger(__name__)

OPS = {"get": "read", "post": "write", "list": "list"}  # the operation named in errors

# What the last request says about Vault itself (not about the request's own merits).
VAULT_OK = "ok"  # Vault answered (a 400 or 404 is the request's problem, not Vault's)
VAULT_SEALED = "sealed"  # 503: sealed
VAULT_UNREACHABLE = "unreachable"  # connection refused, reset, timed out
VAULT_DENIED = "denied"  # 403, or the AppRole credentials were refused or cannot be read
VAULT_ERROR = "error"  # 5xx, 429, anything else


class VaultLoad:
    """The agent's Vault requests, paced and counted: one per agent, shared by its own client and every
    task's (`VaultClient.token_client`), so one cap covers them all.

    With `max_requests_per_second` (> 0) every request first takes a slot of a token bucket
    (agent.decide.vaultrate.plan_rate_cap, burst 1): requests are spaced 1/rate apart, waiting on the
    calling thread; one whose slot is more than `max_wait` away is refused as VaultRateLimited
    without being sent (retried by its caller like a 429). 0: no cap. Thread-safe."""

    def __init__(
        self,
        max_requests_per_second: float = 0.0,
        *,
        max_wait: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_requests_per_second < 0:
            raise ValueError(f"max_requests_per_second {max_requests_per_second}: need >= 0")
        self.rate = float(max_requests_per_second)
        self.max_wait = max_wait
        self.clock, self.sleep = clock, sleep
        self._lock = threading.Lock()
        self._bucket = RateBucket(tokens=1.0, at=clock())
        self.requests = 0  # sent to Vault
        self.rate_limited = 0  # answered 429 by Vault
        self.waited = 0  # requests that waited for their slot under the cap
        self.wait_seconds = 0.0  # ... in all
        self.refused = 0  # requests the cap refused to send (their slot was too far away)

    def take(self, op: str, path: str) -> None:
        """Before a request: wait for its slot under the cap (none: go at once), then count it."""
        wait = 0.0
        with self._lock:
            if self.rate > 0:
                plan = plan_rate_cap(self._bucket, self.clock(), self.rate, self.max_wait)
                self._bucket = plan.bucket
                if not plan.granted:
                    self.refused += 1
                    raise VaultRateLimited(
                        op,
                        path,
                        f"rate limited by the agent's own cap of {self.rate:g} requests/s "
                        f"(vault.max_requests_per_second): no slot within {self.max_wait:g}s",
                        plan.wait,
                    )
                wait = plan.wait
                if wait > 0:
                    self.waited += 1
                    self.wait_seconds += wait
            self.requests += 1
        if wait > 0:
            self.sleep(wait)

    def note_rate_limited(self) -> None:
        with self._lock:
            self.rate_limited += 1


@dataclass(frozen=True)
class VaultCallStatus:
    """The outcome of one request to Vault: `state` (VAULT_*), when (the client's clock), which
    operation and path, and the error text ("" when it succeeded). Names no secret."""

    state: str
    at: float
    op: str
    path: str
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "at": self.at, "op": self.op, "path": self.path, "error": self.error}


def state_of(exc: Exception | None) -> str:
    """VAULT_* for what a request raised (None: it succeeded)."""
    answered = (hvac.exceptions.InvalidPath, hvac.exceptions.InvalidRequest, VaultNotFound)
    if exc is None or isinstance(exc, answered):
        return VAULT_OK
    if isinstance(exc, requests.RequestException):
        return VAULT_UNREACHABLE
    if isinstance(exc, VaultDenied | hvac.exceptions.Forbidden | hvac.exceptions.Unauthorized):
        return VAULT_DENIED
    if isinstance(exc, hvac.exceptions.VaultDown) or (
        isinstance(exc, VaultUnavailable) and "sealed" in exc.reason
    ):
        return VAULT_SEALED
    if (
        isinstance(exc, VaultUnavailable)
        and not isinstance(exc, RateLimited)  # a 429: Vault answered, refusing for now (an error)
        and not exc.reason.startswith("server error")
    ):
        return VAULT_UNREACHABLE
    return VAULT_ERROR


def health_state(code: int) -> tuple[str, str]:
    """VAULT_* and the error text for a sys/health status code."""
    if code in (200, 429, 472, 473):  # active; standby; DR / performance standby
        return VAULT_OK, ""
    if code == 503:
        return VAULT_SEALED, "sealed (sys/health 503)"
    if code == 501:
        return VAULT_ERROR, "not initialised (sys/health 501)"
    return VAULT_ERROR, f"sys/health answered HTTP {code}"
