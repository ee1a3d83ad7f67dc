"""The job list's and the evaluations' views: Nomad's api.JobListStub and api.JobSummary of a job as
agent.nomadapi.jobjson writes it, and api.Evaluation of the one-node agent's placements (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.nomadapi.gojson import ZERO_TIME, ns

# The agent's alloc statuses -> the TaskGroupSummary counter they count in (adopted: found running).
_SUMMARY_FIELD = {
    "pending": "Starting",
    "running": "Running",
    "failed": "Failed",
    "complete": "Complete",
    "adopted": "Running",
}


def job_stub(job_json_dict: Mapping[str, Any], *, status: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    """api.JobListStub (api/jobs.go) of a job as `job_json` writes it; `summary` is `job_summary`'s.
    `Namespace` and `Meta` are `omitempty`: left out when empty."""
    out: dict[str, Any] = {
        "ID": job_json_dict["ID"],
        "ParentID": job_json_dict.get("ParentID") or "",
        "Name": job_json_dict["Name"],
    }
    if job_json_dict.get("Namespace"):
        out["Namespace"] = job_json_dict["Namespace"]
    out |= {
        "Datacenters": list(job_json_dict.get("Datacenters") or []),
        "Type": job_json_dict["Type"],
        "Priority": job_json_dict["Priority"],
        "Periodic": job_json_dict.get("Periodic") is not None,
        "ParameterizedJob": job_json_dict.get("ParameterizedJob") is not None,
        "Stop": bool(job_json_dict.get("Stop")),
        "Status": status,
        "StatusDescription": job_json_dict.get("StatusDescription") or "",
        "JobSummary": dict(summary),
        "CreateIndex": job_json_dict["CreateIndex"],
        "ModifyIndex": job_json_dict["ModifyIndex"],
        "JobModifyIndex": job_json_dict["JobModifyIndex"],
        "SubmitTime": job_json_dict["SubmitTime"],
    }
    if job_json_dict.get("Meta"):
        out["Meta"] = dict(job_json_dict["Meta"])
    return out


def job_summary(
    job_id: str,
    namespace: str,
    counts: Mapping[str, Mapping[str, int]],
    create_index: int,
    modify_index: int,
    *,
    children: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """api.JobSummary (api/jobs.go): `counts` is {group: {agent alloc status: n}}; pending allocs count
    as Starting, running and adopted ones as Running. A one-node agent queues nothing and loses nothing.
    `children`: a parameterized or periodic job's child jobs by status (api.JobChildrenSummary)."""
    summary: dict[str, dict[str, int]] = {}
    for group, by_status in counts.items():
        tg = dict.fromkeys(("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown"), 0)
        for status, n in by_status.items():
            if status in _SUMMARY_FIELD:
                tg[_SUMMARY_FIELD[status]] += n
        summary[group] = tg
    return {
        "JobID": job_id,
        "Namespace": namespace,
        "Summary": summary,
        "Children": {"Pending": 0, "Running": 0, "Dead": 0, **(children or {})},
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
    }


def evaluation(
    eval_id: str,
    *,
    job_id: str,
    namespace: str,
    triggered_by: str,
    status: str = "complete",
    create_index: int,
    modify_index: int,
    create_time: float,
    type_: str,
    priority: int = 50,
    job_modify_index: int = 0,
    failed_tg_allocs: Mapping[str, int] | None = None,
    blocked_eval: str = "",
    previous_eval: str = "",
    node_id: str = "",
) -> dict[str, Any]:
    """api.Evaluation (api/evaluations.go): the one-node agent places at once, so an evaluation is
    complete when it is answered; unless the node is ineligible (agent.nomadapi.nodeverbs): then
    FailedTGAllocs says so per group (no node evaluated: the CLI's "No nodes were eligible for
    evaluation") and BlockedEval names the evaluation that waits for the node."""
    failed = {g: {**NO_NODE_METRIC, "CoalescedFailures": n - 1} for g, n in (failed_tg_allocs or {}).items()}
    out = {
        "ID": eval_id,
        "Priority": priority,
        "Type": type_,
        "TriggeredBy": triggered_by,
        "Namespace": namespace,
        "JobID": job_id,
        "JobModifyIndex": job_modify_index,
        "NodeID": "",
        "NodeModifyIndex": 0,
        "DeploymentID": "",
        "Status": status,
        "StatusDescription": "",
        "Wait": 0,
        "WaitUntil": ZERO_TIME,
        **dict.fromkeys(("NextEval", "PreviousEval", "BlockedEval"), ""),
        **dict.fromkeys(("RelatedEvals", "FailedTGAllocs", "PlanAnnotations", "ClassEligibility"), None),
        "EscapedComputedClass": False,
        "QuotaLimitReached": "",
        "MissingNonNodeResources": None,
        "AnnotatePlan": False,
        "QueuedAllocations": None,
        "SnapshotIndex": 0,
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
        "CreateTime": ns(create_time),
        "ModifyTime": ns(create_time),
    }
    if failed:
        queued = dict(failed_tg_allocs or {})
        out |= {"FailedTGAllocs": failed, "QueuedAllocations": queued, "BlockedEval": blocked_eval}
    return (
        out
        | ({"PreviousEval": previous_eval} if previous_eval else {})
        | ({"NodeID": node_id} if node_id else {})
    )


# api.AllocationMetric of a group no node was evaluated for (the only node is ineligible); the plan's
# failed groups (agent.nomadapi.jobplan) fill in the one node filtered out
NO_NODE_METRIC: dict[str, Any] = {
    "NodesEvaluated": 0,
    "NodesFiltered": 0,
    "NodesInPool": 0,
    "NodePool": "default",
    "NodesAvailable": {},
    "ClassFiltered": None,
    "ConstraintFiltered": None,
    "NodesExhausted": 0,
    "ClassExhausted": None,
    "DimensionExhausted": None,
    "QuotaExhausted": None,
    "ResourcesExhausted": None,
    "Scores": None,
    "AllocationTime": 0,
    "CoalescedFailures": 0,
    "ScoreMetaData": None,
}
