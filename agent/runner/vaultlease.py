"""What the agent keeps of a task's Vault token (`TokenLease`: its accessor and TTL, never the
token) and the pure decision over it (`plan_token`: wait, renew, derive a new one, or nothing ever)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from agent.errors import AgentError
from agent.vault import RENEW_FRACTION, TokenGrant

CAPPED_SLACK = 1.0  # seconds: a renewal granting less than the first TTL by more is capped


@dataclass(frozen=True)
class TokenLease:
    """What the agent keeps about a task's token in the state store: no secret, only its accessor,
    its policies and the TTL it has left as of `granted_at` (our clock)."""

    accessor: str
    policies: tuple[str, ...]
    ttl: float
    granted_at: float
    renewable: bool
    first_ttl: float  # as granted at derivation
    capped: bool = False  # the last renewal granted less than first_ttl: the token's max TTL is near

    @property
    def expires_at(self) -> float:
        return self.granted_at + self.ttl

    @classmethod
    def from_grant(cls, grant: TokenGrant) -> TokenLease:
        return cls(grant.accessor, grant.policies, grant.ttl, grant.granted_at, grant.renewable, grant.ttl)

    def renewed(self, grant: TokenGrant) -> TokenLease:
        """After a renewal: the TTL it granted, and whether the token's max TTL capped it."""
        capped = grant.ttl < self.first_ttl - CAPPED_SLACK
        return replace(
            self, ttl=grant.ttl, granted_at=grant.granted_at, renewable=grant.renewable, capped=capped
        )

    def looked_up(self, grant: TokenGrant) -> TokenLease:
        """After a lookup: the TTL the token has left (not a renewal: says nothing of its max TTL)."""
        return replace(self, ttl=grant.ttl, granted_at=grant.granted_at, renewable=grant.renewable)

    def to_record(self) -> dict[str, Any]:
        return {
            "accessor": self.accessor,
            "policies": list(self.policies),
            "ttl": self.ttl,
            "granted_at": self.granted_at,
            "renewable": self.renewable,
            "first_ttl": self.first_ttl,
            "capped": self.capped,
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TokenLease:
        try:
            return cls(
                accessor=str(rec["accessor"]),
                policies=tuple(str(p) for p in rec["policies"]),
                ttl=float(rec["ttl"]),
                granted_at=float(rec["granted_at"]),
                renewable=bool(rec["renewable"]),
                first_ttl=float(rec["first_ttl"]),
                capped=bool(rec.get("capped", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AgentError(f"vault token record: {type(exc).__name__}: {exc}") from None


class TokenAction(Enum):
    WAIT = "wait"  # nothing to do until `at`
    RENEW = "renew"  # renew-self now
    DERIVE = "derive"  # a new token now (there is none, or this one cannot be renewed)
    NEVER = "never"  # the token does not expire: nothing to do, ever


@dataclass(frozen=True)
class TokenPlan:
    action: TokenAction
    at: float  # when (our clock): now for RENEW and DERIVE
    reason: str


def plan_token(lease: TokenLease | None, now: float, fraction: float = RENEW_FRACTION) -> TokenPlan:
    """What to do about a task's token at `now`: renew once `fraction` of its TTL has passed (as the
    agent renews its own, VaultClient.renew); derive a new one when there is none, when it has
    expired by our clock, or when it is due and cannot be renewed (not renewable, or the last
    renewal was capped by its max TTL, so renewing again would only shrink it)."""
    if not 0 < fraction < 1:
        raise ValueError(f"renew fraction {fraction}: need 0 < fraction < 1")
    if lease is None:
        return TokenPlan(TokenAction.DERIVE, now, "no token yet")
    if lease.ttl <= 0:
        return TokenPlan(TokenAction.NEVER, now, "the token does not expire")
    due = lease.granted_at + lease.ttl * fraction
    if now < due:
        return TokenPlan(TokenAction.WAIT, due, f"renewal due at {fraction:.0%} of its TTL")
    if now >= lease.expires_at:
        why = "the token expired"
    elif not lease.renewable:
        why = "the token is not renewable"
    elif lease.capped:
        why = "the token is near its max TTL"
    else:
        return TokenPlan(TokenAction.RENEW, now, f"{fraction:.0%} of its TTL passed")
    return TokenPlan(TokenAction.DERIVE, now, why)
