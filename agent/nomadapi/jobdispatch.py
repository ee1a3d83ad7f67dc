"""Nomad's job verbs beside register: dispatch of a parameterized job (`POST /v1/job/:id/dispatch`)
and a job's evaluation (`POST /v1/job/:id/evaluate`), as Nomad's server answers them (nomad/
job_endpoint.go Dispatch, validateDispatchRequest, Evaluate; command/agent/job_endpoint.go).

A dispatch checks the request against the parent's `parameterized` block (payload optional, required
or forbidden, at most 16 KiB; meta keys required and permitted) and registers a child job
`<parent>/dispatch-[<IdPrefixTemplate>-]<unix>-<8 hex>`: the parent's copy with `ParentID`,
`Dispatched`, the dispatch's meta over the parent's and its payload (written to each task's
`dispatch_payload` file, agent.runner.dispatchhook); `POST /v1/job/:id/dispatch/payload` takes the
request's body as the payload, without meta. The child is a job as any: listed, read,
stopped, purged. A token (`?idempotency_token=`, or the body's `IdempotencyToken`) already used by a
child of the parent answers that child, as Nomad's. Errors of the RPC are Nomad's texts with its
status, 500.

An evaluation of a job creates an evaluation ("job-register", as Nomad's Job.Evaluate) and places
what Nomad's scheduler would: on this one node a job's allocs are placed at its register and
replaced by the agent as they fail, so nothing more. `EvalOptions.ForceReschedule` is refused: the
agent has no reschedule policy to force (the group's `reschedule` is not implemented).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from agent.api.handler import Handler, Response, query_params
from agent.jobspec import ParsedJob
from agent.nomadapi.context import Allocs, Changes, Jobs, NodeParts, OnLoop, job_id_of
from agent.nomadapi.http import HttpError, answer, body_json, check_scope, meta_headers
from agent.nomadapi.jobjson import DEFAULT_PRIORITY, parsed_job_json
from agent.nomadapi.jobperiodic import periodic_routes
from agent.nomadapi.node import Eval, NodeIdentity
from agent.structs.model import Job

DISPATCH_PAYLOAD_LIMIT = 16 * 1024  # nomad/job_endpoint.go DispatchPayloadSizeLimit
DISPATCH_SUFFIX = "/dispatch-"  # structs.DispatchLaunchSuffix
MAX_PRIORITY = 100  # the server's default job_max_priority
MIN_PRIORITY = 1  # structs.JobMinPriority


class DispatchPort(OnLoop, Changes, Jobs, Allocs, NodeParts, Protocol):
    node: NodeIdentity

    def evaluate(
        self, job_id: str, trigger: str, job_type: str, placed: tuple[str, ...] = (), *, priority: int = 50
    ) -> Eval: ...

    def job_or_404(self, job_id: str) -> Job: ...

    def stopped(self, job_id: str) -> bool: ...


@dataclasses.dataclass(frozen=True)
class DispatchRequest:
    """structs.JobDispatchRequest, read from the body (raw bytes of the payload)."""

    payload: bytes
    meta: Mapping[str, str]
    prefix: str
    priority: int
    token: str


def read_dispatch(job_id: str, data: Mapping[str, Any], params: Mapping[str, str]) -> DispatchRequest:
    """The body of `POST /v1/job/:id/dispatch` as Nomad's agent decodes it: 400 for a value of the
    wrong type (Go's JSON decoding), "Job ID does not match" for another job's JobID."""
    given = data.get("JobID")
    if given not in (None, "") and given != job_id:
        raise HttpError(400, "Job ID does not match")
    raw = data.get("Payload")
    if raw is None:
        payload = b""
    elif not isinstance(raw, str):
        raise HttpError(400, f'"Payload" must be a base64 string (Go []byte), not {json.dumps(raw)[:32]}')
    else:
        try:
            payload = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HttpError(400, f'"Payload" is not base64: {exc}') from None
    meta = data.get("Meta") or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise HttpError(400, '"Meta" must be an object of strings (Go map[string]string)')
    prefix = data.get("IdPrefixTemplate") or ""
    priority = data.get("Priority") or 0
    if not isinstance(prefix, str):
        raise HttpError(400, '"IdPrefixTemplate" must be a string')
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise HttpError(400, '"Priority" must be a whole number')
    token = params.get("idempotency_token") or data.get("IdempotencyToken") or ""
    if not isinstance(token, str):
        raise HttpError(400, '"IdempotencyToken" must be a string')
    return DispatchRequest(payload, dict(meta), prefix, priority, token)


def dispatch_problem(parent: Job, req: DispatchRequest) -> str | None:
    """Nomad's validateDispatchRequest: why the dispatch is refused, or None (pure)."""
    p = parent.parameterized
    assert p is not None
    if p.payload == "required" and not req.payload:
        return "Payload is not provided but required by parameterized job"
    if p.payload == "forbidden" and req.payload:
        return "Payload provided but forbidden by parameterized job"
    if len(req.payload) > DISPATCH_PAYLOAD_LIMIT:
        return f"Payload exceeds maximum size; {len(req.payload)} > {DISPATCH_PAYLOAD_LIMIT}"
    return _meta_problem(parent, req)


def _meta_problem(parent: Job, req: DispatchRequest) -> str | None:
    p = parent.parameterized
    assert p is not None
    permitted = set(p.meta_required) | set(p.meta_optional)
    unpermitted = sorted(k for k in req.meta if k not in permitted)
    if unpermitted:  # Go's %v of a []string: [a b]
        return f"Dispatch request included unpermitted metadata keys: [{' '.join(unpermitted)}]"
    missing = sorted(k for k in p.meta_required if k not in req.meta)
    if missing:
        return f"Dispatch did not provide required meta keys: [{' '.join(missing)}]"
    if not MIN_PRIORITY <= req.priority <= MAX_PRIORITY:
        return f"dispatch job priority must be between [{MIN_PRIORITY}, {MAX_PRIORITY}]"
    return None


def dispatched_id(parent_id: str, prefix: str, now: float) -> str:
    """structs.DispatchedID: `<parent>/dispatch-[<prefix>-]<unix>-<first 8 of a UUID>`."""
    short = str(uuid.uuid4())[:8]
    middle = f"{prefix}-" if prefix else ""
    return f"{parent_id}{DISPATCH_SUFFIX}{middle}{int(now)}-{short}"


def dispatched_job(parent: Job, req: DispatchRequest, child_id: str) -> Job:
    """The parent's copy Nomad's Dispatch registers: its ID and name the child's, the meta merged."""
    return dataclasses.replace(
        parent,
        id=child_id,
        name=child_id,
        parent_id=parent.id,
        dispatched=True,
        meta={**parent.meta, **req.meta},
        payload=base64.b64encode(req.payload).decode("ascii"),
        dispatch_token=req.token,
    )


def job_dispatch_routes(api: DispatchPort) -> list[tuple[str, str, Handler]]:
    job_rx = r"/v1/job/([^/]+)"
    (dispatch, dispatch_payload), evaluate = _dispatch(api), _evaluate(api)
    return [
        *periodic_routes(api, time.time),
        ("POST", job_rx + "/dispatch", dispatch),
        ("PUT", job_rx + "/dispatch", dispatch),
        ("POST", job_rx + "/dispatch/payload", dispatch_payload),
        ("PUT", job_rx + "/dispatch/payload", dispatch_payload),
        ("POST", job_rx + "/evaluate", evaluate),
        ("PUT", job_rx + "/evaluate", evaluate),
    ]


def _dispatch(api: DispatchPort) -> tuple[Handler, Handler]:
    def dispatch(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region)
        job_id = job_id_of(groups[0])
        return dispatched(job_id, read_dispatch(job_id, body_json(body), params))

    def dispatch_payload(groups: tuple[str, ...], body: bytes) -> Response:
        """Nomad's jobDispatchPayloadRequest: the body is the payload, as it is; no meta."""
        params = query_params()
        check_scope(params, api.node.region)
        token = params.get("idempotency_token", "")
        return dispatched(job_id_of(groups[0]), DispatchRequest(body, {}, "", 0, token))

    def dispatched(job_id: str, req: DispatchRequest) -> Response:
        def do() -> dict[str, Any]:  # one turn of the loop: no other write between check and commit
            parent = api.jobs.get(job_id)
            if parent is None:
                raise HttpError(500, "parameterized job not found")
            if not parent.parameterized_parent:
                raise HttpError(500, f'Specified job "{job_id}" is not a parameterized job')
            if api.stopped(job_id):
                raise HttpError(500, f'Specified job "{job_id}" is stopped')
            problem = dispatch_problem(
                parent, dataclasses.replace(req, priority=req.priority or DEFAULT_PRIORITY)
            )
            if problem:
                raise HttpError(500, problem)
            if req.token:
                for other in api.jobs.values():
                    if other.parent_id == job_id and other.dispatch_token == req.token:
                        index = api.changes.of("job", other.id)
                        return {
                            "DispatchedJobID": other.id,
                            "EvalID": "",
                            "EvalCreateIndex": 0,
                            "JobCreateIndex": index,
                            "Index": index,
                        }
            child = dispatched_job(parent, req, dispatched_id(job_id, req.prefix, time.time()))
            text = json.dumps({"Job": parsed_job_json(child, api.node.region)})
            done = api.job_registry.commit(ParsedJob(child, ()), text, "json", {}, f"job {child.id}")
            placed = tuple(str(a) for a in done.get("allocs") or ())
            ev = api.evaluate(
                child.id, "job-register", child.type, placed, priority=req.priority or DEFAULT_PRIORITY
            )
            index = api.changes.of("job", child.id)
            return {
                "DispatchedJobID": child.id,
                "EvalID": ev.id,
                "EvalCreateIndex": ev.create_index,
                "JobCreateIndex": index,
                "Index": index,
            }

        out = api.call(do)
        meta_headers(out["Index"])
        return answer({**out, "LastContact": 0, "KnownLeader": True})

    return dispatch, dispatch_payload


def _evaluate(api: DispatchPort) -> Handler:
    def evaluate(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region)
        job_id = job_id_of(groups[0])
        data = body_json(body) if body.strip() else {}
        if data:  # Nomad's agent: a body must name the job (an empty one is the old form)
            given = data.get("JobID")
            if not given:
                raise HttpError(400, "Job ID must be specified")
            if given != job_id:
                raise HttpError(400, "JobID not same as job name")
            options = data.get("EvalOptions") or {}
            if not isinstance(options, dict):
                raise HttpError(400, '"EvalOptions" must be an object')
            if options.get("ForceReschedule"):
                raise HttpError(
                    400,
                    "EvalOptions.ForceReschedule is not implemented by fieldlab-agent: it keeps no "
                    "reschedule policy to force (a failed alloc is replaced by the agent as it fails)",
                )

        def do() -> tuple[Eval, int]:
            job = api.jobs.get(job_id)
            if job is None:
                raise HttpError(500, "job not found")
            if job.periodic is not None:
                raise HttpError(500, "can't evaluate periodic job")
            if job.parameterized_parent:
                raise HttpError(500, "can't evaluate parameterized job")
            return api.evaluate(job_id, "job-register", job.type), api.changes.of("job", job_id)

        ev, job_index = api.call(do)
        meta_headers(ev.create_index)
        return answer(
            {
                "EvalID": ev.id,
                "EvalCreateIndex": ev.create_index,
                "JobModifyIndex": job_index,
                "Warnings": "",
                "Index": ev.create_index,
                "LastContact": 0,
                "KnownLeader": True,
            }
        )

    return evaluate
