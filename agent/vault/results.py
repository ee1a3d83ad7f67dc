"""What Vault answers, as the agent keeps it: a secret with its lease, a token's grant; when a dynamic
secret is issued again (`reissue_at`) and the backoff between retries."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

RENEW_FRACTION = 2 / 3
REISSUE_FRACTION = (0.6, 0.8)
BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0
LOGIN_PATH = "auth/approle/login"

JITTER_RNG = random.Random()  # noqa: S311 - jitter, not secrets


@dataclass(frozen=True)
class SecretResult:
    """What a read or write returned: `data` is the response's `data`; `ttl` is the lease duration,
    or for a certificate the seconds from `fetched_at` until its `expiration` (0: not dynamic)."""

    data: dict[str, Any]
    ttl: float
    renewable: bool
    fetched_at: float
    lease_id: str = ""
    warnings: tuple[str, ...] = field(default=())

    @property
    def expires_at(self) -> float | None:
        return self.fetched_at + self.ttl if self.ttl > 0 else None


@dataclass(frozen=True)
class TokenGrant:
    """A token as the server granted, renewed or looked it up: its accessor (not a secret: it names the
    token for lookup or revocation without granting its use), policies and TTL as of `granted_at`
    (our clock). `token` is the secret itself, only after a create; it never shows in a repr."""

    accessor: str
    ttl: float
    renewable: bool
    granted_at: float
    policies: tuple[str, ...] = ()
    token: str = field(default="", repr=False, compare=False)
    warnings: tuple[str, ...] = field(default=())


def grant(info: dict[str, Any], granted_at: float, warnings: Any = None) -> TokenGrant:
    """A TokenGrant from an `auth` block (create, renew: lease_duration) or lookup `data` (ttl)."""
    ttl = info.get("lease_duration", info.get("ttl"))
    policies = info.get("token_policies") or info.get("policies") or ()
    return TokenGrant(
        accessor=str(info.get("accessor") or ""),
        ttl=float(ttl or 0),
        renewable=bool(info.get("renewable")),
        granted_at=granted_at,
        policies=tuple(str(p) for p in policies),
        token=str(info.get("client_token") or ""),
        warnings=tuple(str(w) for w in warnings or ()),
    )


def reissue_at(
    result: SecretResult,
    fraction: tuple[float, float] = REISSUE_FRACTION,
    rng: random.Random | None = None,
) -> float | None:
    """When a dynamic secret must be fetched again: a random point between fraction[0] and
    fraction[1] of its TTL after it was fetched (jitter, never a fixed interval). None for a static
    secret (no TTL), which only changes when it is written again."""
    lo, hi = fraction
    if not 0 < lo <= hi < 1:
        raise ValueError(f"reissue fraction {fraction}: need 0 < low <= high < 1")
    if result.ttl <= 0:
        return None
    return result.fetched_at + result.ttl * (rng or JITTER_RNG).uniform(lo, hi)


def backoff(
    attempt: int, *, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number `attempt` (0-based): exponential, capped, with jitter
    (between half and all of base * 2**attempt, never under `base` nor over `cap`)."""
    ceiling = min(cap, base * 2.0 ** min(max(attempt, 0), 32))
    return max(base, ceiling * (rng or JITTER_RNG).uniform(0.5, 1.0))
