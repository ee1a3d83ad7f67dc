"""Nomad's job writes: register (`PUT /v1/jobs`, `/v1/job/:id`), parse HCL (`/v1/jobs/parse`),
validate (`/v1/validate/job`) and deregister (`DELETE /v1/job/:id`, `?purge=true`).

A register takes the job as Nomad's API JSON (`{"Job": {...}}`, what `nomad job run` sends after
parsing), parses it in the handler's thread as any jobspec (agent.jobspec) and commits it on the
main loop; each write answers an EvalID. The same job registered again while it runs is a no-op,
as in Nomad; a changed one is a new version (agent.decide.jobupdate decides what its allocs become). The
register's options are Nomad's JobRegisterRequest's: `EnforceIndex` with `JobModifyIndex` (`nomad
job run -check-index`: written only over that version of the job, else refused with Nomad's
message), `PreserveCounts` (`-preserve-counts`: the running groups keep their counts),
`PreserveResources` (the tasks the registered job has keep their resources) and `EvalPriority`
(`-eval-priority`: the evaluation's priority, 1 to 100). A deregister takes `?eval_priority=`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.client.jobs import parse_submission
from agent.decide.jobupdate import UpdatePlan
from agent.errors import NotFound
from agent.jobspec import JobspecError, ParsedJob
from agent.nomadapi.context import NS, CorePort, EvalWrites, JobViews, NodeParts, go_bool, go_int, job_id_of
from agent.nomadapi.http import HttpError, answer, body_json, check_scope, meta_headers
from agent.nomadapi.jobjson import DEFAULT_PRIORITY, parsed_job_json
from agent.nomadapi.node import Eval
from agent.structs.records import DesiredStatus

STOP_MARGIN = 30.0  # seconds a job stop may take past the longest kill_timeout before it answers
ENFORCE_INDEX_PREFIX = "Enforcing job modify index"  # api.RegisterEnforceIndexErrPrefix (api/jobs.go)
MAX_EVAL_PRIORITY = 100  # command/agent/job_endpoint.go: validateEvalPriorityOpt


class JobWriter(CorePort, NodeParts, EvalWrites, Protocol):
    """What a write of a job needs (write_job): the core's parts, and the evaluation it makes."""


class JobWritePort(JobWriter, JobViews, Protocol):
    """The job write routes': a write's, and the job as api.Job (a register's PreserveResources)."""


def register_body(data: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    job = data.get("Job")
    if not isinstance(job, dict):
        raise HttpError(
            400, f'{where}: the body needs "Job": the job as Nomad\'s API JSON (nomad job run -output)'
        )
    ns = job.get("Namespace") or NS
    if ns != NS:
        raise HttpError(
            400, f'job namespace "{str(ns)[:64]}" not found: this agent has only the "default" namespace'
        )
    job_id = job.get("ID")
    if not isinstance(job_id, str) or not job_id:
        raise HttpError(400, f'{where}: "Job" has no "ID"')
    return job_id, job


def register_options(data: Mapping[str, Any]) -> tuple[int | None, bool]:
    """(the JobModifyIndex to enforce, or None; PreserveCounts) of a register's body, as Nomad's
    JobRegisterRequest carries them; 400 naming the field for a value of the wrong type (a check
    that silently did nothing would let a stale plan overwrite another user's job)."""
    enforce, index, preserve = (data.get(k) for k in ("EnforceIndex", "JobModifyIndex", "PreserveCounts"))
    keep = data.get("PreserveResources")
    for name, value in (("EnforceIndex", enforce), ("PreserveCounts", preserve), ("PreserveResources", keep)):
        if value is not None and not isinstance(value, bool):
            raise HttpError(
                400, f'job register: "{name}" must be true or false, not {json.dumps(value)[:32]}'
            )
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise HttpError(
            400, f'job register: "JobModifyIndex" must be a whole number >= 0, not {json.dumps(index)[:32]}'
        )
    return (int(index or 0) if enforce else None), bool(preserve)


def eval_priority(given: Any) -> int:
    """The priority of the evaluation a write creates: the request's `EvalPriority` (Nomad's
    agent refuses one outside 1..100 with a 400, command/agent/job_endpoint.go), else the job's,
    which is always Nomad's default here (a jobspec's `priority` is refused as unimplemented)."""
    if given is None or given == 0:
        return DEFAULT_PRIORITY
    if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= MAX_EVAL_PRIORITY:
        raise HttpError(400, "Eval priority must be between 1 and 100 inclusively")
    return given


def enforce_index(current: int | None, given: int) -> str | None:
    """Nomad's Job.EnforceIndex (nomad/structs/job.go): why a register with `EnforceIndex` may not
    write, or None. `current` is the job's JobModifyIndex, None when there is no such job (never
    registered, or purged); 0 asks that the job not exist yet."""
    if current is not None:
        if given == 0:
            return f"{ENFORCE_INDEX_PREFIX} 0: job already exists"
        if given != current:
            return f"{ENFORCE_INDEX_PREFIX} {given}: job exists with conflicting job modify index: {current}"
    elif given != 0:
        return f"{ENFORCE_INDEX_PREFIX} {given}: job does not exist"
    return None


def preserved_counts(job: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, Any]:
    """The job's API JSON with each task group that the registered job has keeping that group's
    count (Nomad's `PreserveCounts`: nomad/state/state_store.go); new groups keep their own."""
    groups = job.get("TaskGroups")
    if not counts or not isinstance(groups, list):
        return dict(job)
    kept = [
        {**g, "Count": counts[g["Name"]]} if isinstance(g, dict) and g.get("Name") in counts else g
        for g in groups
    ]
    return {**job, "TaskGroups": kept}


def preserved_resources(job: Mapping[str, Any], prev: Mapping[str, Any]) -> dict[str, Any]:
    """The job's API JSON with each task the registered job (`prev`, its API JSON) has keeping that
    task's `Resources` (Nomad's `PreserveResources`: nomad/state/state_store.go); new tasks keep
    their own."""
    had = {
        (g.get("Name"), t.get("Name")): t.get("Resources")
        for g in prev.get("TaskGroups") or []
        for t in g.get("Tasks") or []
    }
    groups = job.get("TaskGroups")
    if not had or not isinstance(groups, list):
        return dict(job)

    def task(g: Mapping[str, Any], t: Any) -> Any:
        key = (g.get("Name"), t.get("Name")) if isinstance(t, dict) else None
        return {**t, "Resources": had[key]} if key in had else t

    kept = [
        {**g, "Tasks": [task(g, t) for t in g.get("Tasks") or []]} if isinstance(g, dict) else g
        for g in groups
    ]
    return {**job, "TaskGroups": kept}


def _submission(data: Mapping[str, Any], text: str) -> tuple[str, str, dict[str, object]]:
    """(source, format, variables) kept with the job for `job inspect`: the Submission Nomad's CLI
    sends along (the jobspec as written, its -var flags), else the Job JSON registered."""
    sub = data.get("Submission")
    if not isinstance(sub, dict) or not isinstance(sub.get("Source"), str) or not sub["Source"]:
        return text, "json", {}
    fmt = "json" if str(sub.get("Format", "")).lower() == "json" else "hcl"
    flags = sub.get("VariableFlags")
    given: dict[str, object] = {str(k): str(v) for k, v in flags.items()} if isinstance(flags, dict) else {}
    return str(sub["Source"]), fmt, given


def parse_job(api: NodeParts, job: Mapping[str, Any], source: str) -> tuple[ParsedJob, str]:
    text = json.dumps({"Job": job})
    return parse_submission(text, "json", source, {}, api.limits), text


def read_job_write(
    api: NodeParts,
    groups: tuple[str, ...],
    body: bytes,
    where: str,
    adjust: Callable[[Mapping[str, Any], str, dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], str, ParsedJob, str]:
    """A register's or a plan's request: (its body, the job's ID, the job parsed as a jobspec, its
    JSON text). The ID in the path, when there is one, must be the body's. `adjust(body, ID, job)`
    changes the job's JSON before it is parsed (a register's PreserveCounts)."""
    check_scope(query_params(), api.node.region)
    data = body_json(body)
    job_id, job = register_body(data, where)
    if groups and groups[0] and unquote(groups[0]) != job_id:
        # Nomad's text (command/agent/job_endpoint.go), which its tools match on
        raise HttpError(400, "Job ID does not match name")
    if adjust is not None:
        job = adjust(data, job_id, job)
    parsed, text = parse_job(api, job, f"job {job_id}")
    return data, job_id, parsed, text


def write_job(
    api: JobWriter,
    job_id: str,
    parsed: ParsedJob,
    text: str,
    data: Mapping[str, Any],
    enforced: int | None,
    trigger: str,
    priority: int = DEFAULT_PRIORITY,
) -> dict[str, Any]:
    """Register `parsed` as the job's next version (or nothing, when the same job runs already) and
    answer Nomad's JobRegisterResponse fields; `enforced`: the JobModifyIndex the job must have
    (None: any), `trigger` the evaluation's TriggeredBy. What a register, a scale and a revert share."""
    source = f"job {job_id}"

    def prepare() -> tuple[str | None, bool, UpdatePlan | None, list[str]]:
        """(why the write may not happen, the same job runs already, the update's plan, allocs
        of the job being stopped): decided in one turn of the loop, so no other write comes
        between the index check and the commit's decision."""
        if enforced is not None:
            current = api.changes.of("job", job_id) if job_id in api.jobs else None
            refused = enforce_index(current, enforced)
            if refused is not None:
                return refused, False, None, []
        same = api.jobs.get(job_id) == parsed.job and bool(api.allocs.running(job_id))
        plan = None if same else api.job_registry.plan_update(parsed, source)
        stopping = [
            r.id
            for r in api.runners.values()
            if r.job.id == job_id and r.rec.live and r.rec.desired is DesiredStatus.STOP
        ]
        return None, same, plan, stopping

    refused, same, plan, stopping = api.call(prepare)
    if refused is not None:  # Nomad answers the RPC's error: 500 with the message
        raise HttpError(500, refused)
    warnings = "\n".join(parsed.warnings)
    if not same:
        # A new version stops what it replaces first (a one-node cluster cannot place the new
        # allocs beside the old: static ports), bounded as a job stop is.
        left = api.allocs.await_stopped(stopping, api.limits.max_kill_timeout + STOP_MARGIN)
        if left:
            raise HttpError(
                500, f"job {job_id}: allocs {', '.join(a[:8] for a in left)} did not stop in time"
            )
        shown, fmt, given = _submission(data, text)

        def commit() -> Eval:  # one turn of the loop: no alloc is ever read without its EvalID
            done = api.job_registry.commit(parsed, shown, fmt, given, source, plan=plan)
            placed = tuple(str(a) for a in done.get("allocs") or ())
            return api.evaluate(job_id, trigger, parsed.job.type, placed, priority=priority)

        ev = api.call(commit)
    else:  # the same job again places nothing, as Nomad's no-op eval
        ev = api.call(lambda: api.evaluate(job_id, trigger, parsed.job.type, (), priority=priority))
    out = {
        "EvalID": ev.id,
        "EvalCreateIndex": ev.create_index,
        "JobModifyIndex": api.changes.of("job", job_id),
        "Warnings": "" if same else warnings,
    }
    return out


def job_write_routes(api: JobWritePort) -> list[tuple[str, str, Handler]]:
    def counts_kept(data: Mapping[str, Any], job_id: str, job: dict[str, Any]) -> dict[str, Any]:
        def counts() -> dict[str, int]:
            old = api.jobs.get(job_id)
            return {g.name: g.count for g in old.groups} if old is not None else {}

        _, preserve = register_options(data)
        if preserve:
            job = preserved_counts(job, api.call(counts))
        if data.get("PreserveResources") is True:
            old = api.call(lambda: api.jobs.get(job_id))
            job = preserved_resources(job, api.job_dict(old)) if old is not None else job
        return job

    def register(groups: tuple[str, ...], body: bytes) -> Response:
        data, job_id, parsed, text = read_job_write(api, groups, body, "job register", counts_kept)
        enforced, _ = register_options(data)
        priority = eval_priority(data.get("EvalPriority"))

        out = write_job(api, job_id, parsed, text, data, enforced, "job-register", priority)
        meta_headers(api.changes.current())
        return answer({**out, "Index": out["JobModifyIndex"], "LastContact": 0, "KnownLeader": True})

    def deregister(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region)
        job_id = job_id_of(groups[0])
        purge = go_bool(params, "purge")
        priority = eval_priority(go_int(params, "eval_priority"))

        def stop() -> tuple[list[str], Eval]:
            # A job known only by its adopted allocs (found running after the state database was
            # lost, agent.runner.adopt: the jobspec went with it) is stopped too: their event tells
            # the operator to `nomad job stop` it, there is no other job-wide way to end them.
            job = api.jobs.get(job_id)
            if job is None and not api.adoption.of_job(job_id):
                raise NotFound("job not found")
            kind = job.type if job is not None else "service"
            return api.job_registry.stop_job(job_id), api.evals.create(
                job_id, "job-deregister", kind, priority=priority
            )

        stopped, ev = api.call(stop)
        # As Nomad's: the answer comes once the stop is decided (the allocs' desired status is
        # "stop"), while their tasks are still being killed; `nomad job stop` then watches them. A
        # purge waits for them to end first (their records go with the job): then the job is gone
        # when the answer comes, as it is at once on Nomad's server.
        if purge and not api.allocs.await_stopped(stopped, api.limits.max_kill_timeout + STOP_MARGIN):
            api.call(lambda: api.collector.purge_job(job_id) if job_id in api.jobs else [])
        index = api.changes.current()
        meta_headers(index)
        return answer(
            {
                "EvalID": ev.id,
                "EvalCreateIndex": ev.create_index,
                "JobModifyIndex": index,
                "Index": index,
                "LastContact": 0,
                "KnownLeader": True,
            }
        )

    job_rx = r"/v1/job/([^/]+)"
    return [
        ("PUT", r"/v1/jobs", register),
        ("POST", r"/v1/jobs", register),
        *_parse_routes(api),
        ("PUT", job_rx, register),
        ("POST", job_rx, register),
        ("DELETE", job_rx, deregister),
    ]


def _parse_routes(api: NodeParts) -> list[tuple[str, str, Handler]]:
    def parse(groups: tuple[str, ...], body: bytes) -> Response:
        data = body_json(body)
        hcl = data.get("JobHCL")
        if not isinstance(hcl, str) or not hcl.strip():
            raise HttpError(400, 'the body needs "JobHCL": the jobspec\'s text')
        var_text = data.get("Variables") or ""
        if not isinstance(var_text, str):
            raise HttpError(400, '"Variables" must be a string: the text of a variables file')
        variables: dict[str, object] = {}
        if var_text.strip():
            from agent.jobspec.hclvars import parse_var_file

            variables = dict(parse_var_file(var_text, "Variables"))
        parsed = parse_submission(hcl, "hcl", "JobHCL", variables, api.limits)
        return answer(parsed_job_json(parsed.job, api.node.region))

    def validate(groups: tuple[str, ...], body: bytes) -> Response:
        data = body_json(body)
        job_id, job = register_body(data, "job validate")
        try:
            parsed, _ = parse_job(api, job, f"job {job_id}")
        except JobspecError as exc:
            errors = [f"{p or '(job)'}: {r}" for p, r in exc.problems] or [str(exc)]
            return answer(
                {
                    "DriverConfigValidated": False,
                    "ValidationErrors": errors,
                    "Error": "\n".join(errors),
                    "Warnings": "",
                }
            )
        return answer(
            {
                "DriverConfigValidated": True,
                "ValidationErrors": None,
                "Error": "",
                "Warnings": "\n".join(parsed.warnings),
            }
        )

    return [
        ("PUT", r"/v1/jobs/parse", parse),
        ("POST", r"/v1/jobs/parse", parse),
        ("PUT", r"/v1/validate/job", validate),
        ("POST", r"/v1/validate/job", validate),
    ]
