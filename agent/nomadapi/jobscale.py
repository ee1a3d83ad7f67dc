"""`nomad job scale` and `nomad job revert` (`/v1/job/:id/scale`, `/v1/job/:id/revert`): each is a
register of the job's next version, as on Nomad's servers (nomad/job_endpoint.go Scale, Revert),
through the register's own write (agent.nomadapi.jobwrites.write_job): the running job with one
group's count changed, or an earlier version of it as it was. Errors are Nomad's, with its codes.

A failed deployment of a group with `update { auto_revert = true }` rolls back through the same
revert (`roll_back`, handed to agent.nomadapi.deploywatch).

Scaling events (`GET /v1/job/:id/scale`'s Events) are kept in the agent's memory, the newest first
and at most SCALING_EVENTS a group, as Nomad's JobTrackedScalingEvents; unlike Nomad's (in its
state store), they do not outlive an agent restart.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agent.api.handler import Handler, Response
from agent.nomadapi.context import NS, AllocViews, JobViews, job_id_of
from agent.nomadapi.deploywatch import Deployments
from agent.nomadapi.http import HttpError, answer, body_json, meta_headers
from agent.nomadapi.jobwrites import JobWriter, enforce_index, parse_job, write_job


class ScalePort(JobWriter, JobViews, AllocViews, Protocol):
    deployments: Deployments  # its reverter is set here (a failed deployment's auto_revert)


log = logging.getLogger(__name__)
SCALING_EVENTS = 20  # kept a group (Nomad's JobTrackedScalingEvents)
TERMINAL = frozenset({"complete", "failed", "lost"})


def scale_request(data: Mapping[str, Any], job_id: str) -> tuple[str, int | None, str, bool]:
    """(the group, the count or None for an event only, the message, error) of an api.ScalingRequest;
    400 naming the field that is wrong, as Nomad's HTTP layer and JobScaleRequest.Validate."""
    target = data.get("Target")
    if not isinstance(target, dict) or not isinstance(target.get("Group"), str) or not target["Group"]:
        raise HttpError(400, 'missing task group name for scaling action: "Target": {"Group": "<name>"}')
    if target.get("Job") not in (None, "", job_id):
        raise HttpError(400, "job ID in payload did not match URL")
    count = data.get("Count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise HttpError(400, f'"Count" must be a whole number, not {json.dumps(count)[:32]}')
    if count is not None and count < 0:
        raise HttpError(400, "scaling action count can't be negative")
    error = data.get("Error", False)
    if count is not None and error is True:
        raise HttpError(400, "scaling action should not contain count if error is true")
    return target["Group"], count, str(data.get("Message") or ""), error is True


def scaled(job: Mapping[str, Any], group: str, count: int) -> dict[str, Any]:
    """The job's API JSON with `group` at `count`; 400 when the job has no such group (Nomad's)."""
    groups = [g for g in job.get("TaskGroups") or [] if isinstance(g, dict)]
    if not any(g.get("Name") == group for g in groups):
        raise HttpError(400, f'task group "{group}" specified for scaling does not exist in job')
    if job.get("Type") == "system" and count > 1:
        raise HttpError(400, 'jobs of type "system" can only be scaled between 0 and 1')
    policy = next((g.get("Scaling") for g in groups if g.get("Name") == group), None)
    if isinstance(policy, dict):  # the group's scaling block bounds its count (Nomad's Job.Scale)
        low, high = int(policy.get("Min") or 0), int(policy.get("Max") or 0)
        if count < low:
            raise HttpError(400, f"group count was less than scaling policy minimum: {count} < {low}")
        if high < count:
            raise HttpError(400, f"group count was greater than scaling policy maximum: {count} > {high}")
    return {**job, "TaskGroups": [{**g, "Count": count} if g.get("Name") == group else g for g in groups]}


def revert_target(
    versions: list[dict[str, Any]], job_id: str, version: int, prior: int | None
) -> dict[str, Any]:
    """The version a revert registers again (Nomad's Job.Revert checks, its messages: a 500 each)."""
    current = int(versions[0].get("Version") or 0)
    if version == current:
        raise HttpError(500, "can't revert to current version")
    if prior is not None and prior != current:
        raise HttpError(500, f"Current job has version {current}; enforcing version {prior}")
    for v in versions[1:]:
        if int(v.get("Version") or 0) == version:
            return v
    raise HttpError(500, f'job "{job_id}" in namespace "{NS}" at version {version} not found')


def _whole(data: Mapping[str, Any], name: str, required: bool) -> int | None:
    value = data.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HttpError(400, f'"{name}" must be a version number >= 0, not {json.dumps(value)[:32]}')
    return value


class ScalingEvents:
    """Each job's groups' scaling events, newest first (api.ScalingEvent), in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def add(self, job_id: str, group: str, event: dict[str, Any]) -> None:
        with self._lock:
            kept = self._events.setdefault(job_id, {}).setdefault(group, [])
            kept.insert(0, event)
            del kept[SCALING_EVENTS:]

    def of(self, job_id: str) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            return {g: list(e) for g, e in self._events.get(job_id, {}).items()}


def scale_status(
    job: Mapping[str, Any], allocs: Sequence[Mapping[str, Any]], events: Mapping[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """api.JobScaleStatusResponse: each group's desired count and its live allocs (placed, running);
    no deployments here, so no health."""
    groups: dict[str, dict[str, Any]] = {}
    for g in job.get("TaskGroups") or []:
        name = str(g.get("Name"))
        groups[name] = {
            "Desired": int(g.get("Count") or 0),
            "Placed": 0,
            "Running": 0,
            "Healthy": 0,
            "Unhealthy": 0,
            "Events": events.get(name) or None,
        }
    for a in allocs:
        tg = groups.get(str(a.get("group")))
        if tg is None or a.get("status") in TERMINAL or a.get("desired") == "stop":
            continue
        tg["Placed"] += 1
        tg["Running"] += a.get("status") == "running"
    return {
        "JobID": job.get("ID"),
        "Namespace": NS,
        "JobCreateIndex": job.get("CreateIndex"),
        "JobModifyIndex": job.get("ModifyIndex"),
        "JobStopped": bool(job.get("Stop")),
        "TaskGroups": groups,
    }


def rollback(api: ScalePort) -> Callable[[str, int], None]:
    """What agent.nomadapi.deploywatch calls, on the loop, when a deployment of a group with
    `auto_revert` failed: the job's newest stable `version` registered again off the loop, through
    the revert's own write, as Nomad's deployment watcher rolls back."""

    def roll_back(job_id: str, version: int) -> None:
        def run() -> None:
            try:
                versions = api.call(lambda: api.job_versions(job_id) if job_id in api.jobs else [])
                target = next((v for v in versions[1:] if int(v.get("Version") or 0) == version), None)
                if target is None:
                    return  # the version went (purged, or past the tracked ones) meanwhile
                parsed, text = parse_job(api, target, f"job {job_id} version {version}")
                write_job(api, job_id, parsed, text, {}, None, "deployment-watcher")
            except Exception:  # a rollback that cannot be made leaves the failed deployment as it is
                log.exception("job %s: rolling back to version %d failed", job_id, version)

        threading.Thread(target=run, name=f"rollback-{job_id}"[:64], daemon=True).start()

    return roll_back


def job_scale_routes(api: ScalePort) -> list[tuple[str, str, Handler]]:
    events = ScalingEvents()

    def current(job_id: str) -> dict[str, Any]:
        return api.call(lambda: api.job_dict(api.job_or_404(job_id)))

    def scale(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = job_id_of(groups[0])
        data = body_json(body)
        group, count, message, error = scale_request(data, job_id)
        job = current(job_id)
        before = next((g.get("Count") for g in job.get("TaskGroups") or [] if g.get("Name") == group), None)
        event: dict[str, Any] = {
            "Count": count,
            "PreviousCount": before or 0,
            "Error": error,
            "Message": message,
            "Meta": data.get("Meta") if isinstance(data.get("Meta"), dict) else None,
            "EvalID": None,
            "Time": time.time_ns(),
            "CreateIndex": 0,
        }
        if count is None:  # an event only (the autoscaler's report): no new version, no eval
            if before is None:
                raise HttpError(400, f'task group "{group}" specified for scaling does not exist in job')
            events.add(job_id, group, {**event, "CreateIndex": api.changes.current()})
            out = {"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": job["ModifyIndex"], "Warnings": ""}
        else:
            new = scaled(job, group, count)
            asked = _whole(data, "JobModifyIndex", False) or 0
            refused = enforce_index(job["JobModifyIndex"], asked) if asked else None  # 0: not checked
            if refused is not None:
                raise HttpError(500, refused)
            parsed, text = parse_job(api, new, f"job {job_id}")
            out = write_job(api, job_id, parsed, text, {}, job["JobModifyIndex"], "job-scaling")
            events.add(
                job_id, group, {**event, "EvalID": out["EvalID"], "CreateIndex": out["JobModifyIndex"]}
            )
        meta_headers(api.changes.current())
        return answer({**out, "Index": out["JobModifyIndex"], "LastContact": 0, "KnownLeader": True})

    def status(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = job_id_of(groups[0])

        def read() -> dict[str, Any]:
            job = api.job_dict(api.job_or_404(job_id))
            allocs = api.all_alloc_views(job_id)
            return scale_status(job, allocs, events.of(job_id))

        out = api.call(read)
        meta_headers(api.changes.current())
        return answer(out)

    def revert(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = job_id_of(groups[0])
        data = body_json(body)
        if not data.get("JobID"):
            raise HttpError(400, "JobID must be specified")
        if data.get("JobID") != job_id:
            raise HttpError(400, "Job ID does not match")
        version = _whole(data, "JobVersion", True)
        prior = _whole(data, "EnforcePriorVersion", False)
        versions = api.call(lambda: api.job_versions(job_id) if job_id in api.jobs else [])
        if not versions:
            raise HttpError(500, f'job "{job_id}" not found')
        target = revert_target(versions, job_id, int(version or 0), prior)
        parsed, text = parse_job(api, target, f"job {job_id} version {version}")
        out = write_job(api, job_id, parsed, text, {}, versions[0]["JobModifyIndex"], "job-register")
        meta_headers(api.changes.current())
        return answer({**out, "Index": out["JobModifyIndex"], "LastContact": 0, "KnownLeader": True})

    api.deployments.reverter = rollback(api)
    scale_rx, revert_rx = r"/v1/job/([^/]+)/scale", r"/v1/job/([^/]+)/revert"
    return [
        ("GET", scale_rx, status),
        ("PUT", scale_rx, scale),
        ("POST", scale_rx, scale),
        ("PUT", revert_rx, revert),
        ("POST", revert_rx, revert),
    ]
