"""Nomad's job plan (`PUT /v1/job/:id/plan`, what `nomad job plan` asks): what registering the job
would do on this node, decided as a register decides it and changing nothing.

The answer is Nomad's api.JobPlanResponse: the job's current JobModifyIndex (0 for a new job: the
`-check-index` of `nomad job run`), the JobDiff from the running version (agent.nomadapi.jobdiff)
annotated as Nomad's scheduler annotates it, the per-group DesiredTGUpdates (agent.decide.jobupdate:
placed, stopped, replaced, updated in place, ignored), and FailedTGAllocs for the groups this node
would not take (a driver it does not run, a datacenter it is not in, a constraint it fails: the
reasons a register is refused for, as one node's AllocationMetric). No evaluation is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agent.api.handler import Handler, Response
from agent.decide.jobupdate import desired_updates, plan_job_update
from agent.nomadapi.context import CorePort, JobViews, NodeParts
from agent.nomadapi.http import answer, meta_headers
from agent.nomadapi.jobdiff import annotate, job_diff
from agent.nomadapi.joblists import NO_NODE_METRIC
from agent.nomadapi.jobwrites import read_job_write
from agent.structs.model import Job


class PlanPort(CorePort, NodeParts, JobViews, Protocol):
    pass


# (the running version as api.Job or {}, the new one, DesiredTGUpdates, JobModifyIndex, refusals)
_Decided = tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, int]], int, list[tuple[str, str]]]
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time: no periodic launch


def failed_groups(job: Job, reasons: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """FailedTGAllocs: each group a reason names (a job-level reason names every group), as one
    node's api.AllocationMetric with that node filtered out by those reasons (pure)."""
    prefix = f"job.{job.id}.group."
    by_group: dict[str, list[str]] = {}
    for path, why in reasons:
        names = [g.name for g in job.groups if path.startswith(prefix + g.name)]
        for name in names or [g.name for g in job.groups]:
            by_group.setdefault(name, []).append(why)
    return {
        name: {
            **NO_NODE_METRIC,
            "NodesEvaluated": 1,
            "NodesFiltered": 1,
            "NodesInPool": 1,
            "ConstraintFiltered": dict.fromkeys(whys, 1),
        }
        for name, whys in by_group.items()
    }


def plan_response(
    index: int,
    diff: dict[str, Any] | None,
    desired: Mapping[str, Mapping[str, int]],
    failed: Mapping[str, Any],
    warnings: tuple[str, ...] | list[str],
) -> dict[str, Any]:
    """api.JobPlanResponse (pure): no evaluation created, no periodic launch, no preemption."""
    return {
        "JobModifyIndex": index,
        "CreatedEvals": None,
        "Diff": diff,
        "Annotations": {
            "DesiredTGUpdates": {g: dict(d) for g, d in desired.items()},
            "PreemptedAllocs": None,
        },
        "FailedTGAllocs": dict(failed) or None,
        "NextPeriodicLaunch": ZERO_TIME,
        "Warnings": "\n".join(warnings),
    }


def job_plan_routes(api: PlanPort) -> list[tuple[str, str, Handler]]:
    def plan(groups: tuple[str, ...], body: bytes) -> Response:
        data, job_id, parsed, _ = read_job_write(api, groups, body, "job plan")
        new = parsed.job

        def decide() -> _Decided:
            old = api.jobs.get(job_id)
            live: dict[str, list[str]] = {}
            for r in api.allocs.running(job_id):
                live.setdefault(r.group.name, []).append(r.id)
            update = plan_job_update(old, new, live, api.bugs) if old is not None and live else None
            desired = desired_updates(old, new, live, update)
            before = api.job_dict(old) if old is not None else {}
            after = {**api.job_dict(new, allocs=[]), "Version": before.get("Version", 0)}
            refused = api.job_registry.refusals(new)
            index = api.changes.of("job", job_id) if old is not None else 0
            return before, after, desired, index, refused

        before, after, desired, index, refused = api.call(decide)
        diff = None
        if data.get("Diff") is True:
            diff = annotate(job_diff(before, after), desired)
            if not before:
                diff["Type"] = "Added"
        out = plan_response(index, diff, desired, failed_groups(new, refused), parsed.warnings)
        current = api.changes.current()
        meta_headers(current)
        return answer({**out, "Index": current, "LastContact": 0, "KnownLeader": True})

    return [("PUT", r"/v1/job/([^/]+)/plan", plan), ("POST", r"/v1/job/([^/]+)/plan", plan)]
