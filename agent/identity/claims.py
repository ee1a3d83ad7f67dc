"""A task's workload identity claims, as Nomad's (nomad/structs/workload_id.go and identity.go):
the job's namespace, id and alloc id, the task's name; `sub` is
region:namespace:job:group:task:identity; `aud` the identity's audience; `iat` and `nbf` now, `exp`
now + ttl; `jti` unique per token. One difference: an identity without a ttl (Nomad: no `exp`, a
token valid forever, a warning only) gets the client's `identity_default_ttl`, so no token the agent
signs lacks an `exp`. Pure: the caller gives the time, the token id and the default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.structs.model import WorkloadIdentity

DEFAULT_IDENTITY_TTL = 3600.0
"""Seconds a token of an identity without a ttl lives (config identity_default_ttl): Nomad signs such
a token without `exp`, forever valid; this agent gives it this ttl, the one of Nomad's docs' examples
(identity block, vault.default_identity: 1h)."""
DEFAULT_REGION = "global"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Workload:
    """Where a task sits: what its claims name."""

    job_id: str
    group: str
    alloc_id: str
    task: str
    namespace: str = DEFAULT_NAMESPACE
    region: str = DEFAULT_REGION


def workload_job_id(job_id: str, parent_id: str, bugs: Bugs = NO_BUGS) -> str:
    """The job a workload identity names (`nomad_job_id`, `sub`): a dispatched or periodic child's
    parent, as Nomad's Job.GetIDforWorkloadIdentity (PR #13748 for the job claim, #23902 for `sub`):
    a child's ID has a random or time part no policy or role can name. `identity-claims-child-job-id`
    is nomad-13748: the child's own ID is signed."""
    return parent_id if parent_id and not bugs.identity_claims_child_job_id else job_id


def effective_ttl(ttl: float, default_ttl: float = DEFAULT_IDENTITY_TTL) -> float:
    """The seconds a token of an identity with `ttl` lives: its own ttl, or the client's default when
    it has none (Nomad signs that one without `exp`: a stolen token would be good forever)."""
    return ttl if ttl > 0 else default_ttl


def identity_claims(
    w: Workload,
    wid: WorkloadIdentity,
    now: float,
    token_id: str,
    default_ttl: float = DEFAULT_IDENTITY_TTL,
) -> dict[str, Any]:
    issued = int(now)
    claims: dict[str, Any] = {
        "nomad_namespace": w.namespace,
        "nomad_job_id": w.job_id,
        "nomad_allocation_id": w.alloc_id,
        "nomad_task": w.task,
        "sub": ":".join((w.region, w.namespace, w.job_id, w.group, w.task, wid.name)),
        "aud": list(wid.audience),
        "iat": issued,
        "nbf": issued,
        "jti": token_id,
    }
    claims["exp"] = issued + max(1, int(effective_ttl(wid.ttl, default_ttl)))
    return claims


def renew_at(issued: float, ttl: float) -> float | None:
    """When a token with `ttl` signed at `issued` is signed again: half way to its expiry (Nomad's
    widmgr renews well before it; a token without ttl never: give it `effective_ttl`)."""
    return issued + ttl / 2 if ttl > 0 else None
