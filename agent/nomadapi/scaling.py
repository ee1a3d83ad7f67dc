"""Nomad's scaling policies (command/agent/scaling_endpoint.go: `/v1/scaling/policies`,
`/v1/scaling/policy/:id`): each group's `scaling` block (agent.structs.model.Scaling) as Nomad's server keeps
it, read from the jobs the agent has, its ID named by the job and group
(agent.nomadapi.jobjson.scaling_policy_id: the same after a restart and at every version of the
job). A job's scale and scale status are agent.nomadapi.jobscale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.errors import NotFound
from agent.nomadapi.context import Changes, Jobs, OnLoop
from agent.nomadapi.http import answer, blocking, check_scope
from agent.nomadapi.jobjson import scaling_policy, scaling_stub
from agent.nomadapi.node import NodeIdentity


class PolicyPort(OnLoop, Changes, Jobs, Protocol):
    """The jobs and their change indexes, read on the loop."""


class ScalingPort(PolicyPort, Protocol):
    node: NodeIdentity


def policies(api: PolicyPort) -> list[dict[str, Any]]:
    """On the loop: every group's scaling policy (structs.ScalingPolicy), by ID."""
    out = []
    for job_id, job in api.jobs.items():
        index = api.changes.of("job", job_id)
        for g in job.groups:
            if g.scaling is not None:
                out.append(scaling_policy(job_id, g.name, g.scaling, create_index=index, modify_index=index))
    return sorted(out, key=lambda p: str(p["ID"]))


def listed(found: list[dict[str, Any]], params: Mapping[str, str]) -> list[dict[str, Any]]:
    """Scaling.ListPolicies' choice: `prefix` of the ID, else `job` (its ID exactly) and `type` (a
    prefix of the policy's type)."""
    prefix, job, kind = params.get("prefix", ""), params.get("job", ""), params.get("type", "")
    if prefix:
        return [scaling_stub(p) for p in found if str(p["ID"]).startswith(prefix)]
    return [
        scaling_stub(p)
        for p in found
        if (not job or p["Target"]["Job"] == job) and str(p["Type"]).startswith(kind)
    ]


def scaling_routes(api: ScalingPort) -> list[tuple[str, str, Handler]]:
    def scaling_policies(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        return answer(
            blocking(api.changes, ("job",), lambda: listed(api.call(lambda: policies(api)), params))
        )

    def scaling_policy_one(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        policy_id = unquote(groups[0])

        def read() -> dict[str, Any]:
            found = [p for p in api.call(lambda: policies(api)) if p["ID"] == policy_id]
            if not found:
                raise NotFound("policy not found")
            return found[0]

        return answer(blocking(api.changes, ("job",), read))

    return [
        ("GET", r"/v1/scaling/policies", scaling_policies),
        ("GET", r"/v1/scaling/policy/([^/]+)", scaling_policy_one),
    ]
