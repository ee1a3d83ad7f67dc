"""Nomad's job reads (command/agent/job_endpoint.go): the jobs list, a job, its allocations,
summary, versions (with their diffs), submission and evaluations, as a one-node Nomad agent in dev
mode answers them. The writes are in agent.nomadapi.jobwrites, plan, scale, dispatch and periodic
launches beside it.

Handlers are thin: they read the request in their own thread, gather plain data on the main loop
(`api.call`) and shape it with the pure views of agent.nomadapi.structs; reads are blocking
queries (agent.nomadapi.http)."""

from __future__ import annotations

from typing import Any, Protocol

from agent.api.handler import Handler, Response, query_params
from agent.errors import NotFound
from agent.nomadapi import structs
from agent.nomadapi.context import (
    ALLOC_KINDS,
    JOB_KINDS,
    NS,
    AllocViews,
    CorePort,
    JobViews,
    job_id_of,
    prefix_of,
    reverse_of,
)
from agent.nomadapi.http import HttpError, answer, blocking, check_scope
from agent.nomadapi.jobdiff import job_diff
from agent.nomadapi.node import Evals, eval_fields


class JobReadPort(CorePort, JobViews, AllocViews, Protocol):
    evals: Evals


def job_routes(api: JobReadPort) -> list[tuple[str, str, Handler]]:
    def jobs(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        prefix = prefix_of(params)
        reverse = reverse_of(params)  # Nomad lists jobs by ID (Job.List: JobsByNamespace)

        def read() -> list[dict[str, Any]]:
            by_job: dict[str, list[dict[str, Any]]] = {}
            for a in api.alloc_briefs():  # once, not once per job
                by_job.setdefault(str(a.get("job")), []).append(a)
            out = []
            for job_id in sorted(api.jobs, reverse=reverse):
                if job_id.startswith(prefix):
                    spec, allocs = api.jobs[job_id], by_job.get(job_id, [])
                    job = api.job_dict(spec, allocs)
                    summary = api.summary(job_id, [g.name for g in spec.groups], allocs)
                    out.append(structs.job_stub(job, status=job["Status"], summary=summary))
            return out

        return answer(blocking(api.changes, JOB_KINDS, lambda: api.call(read)))

    def job(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        job_id = job_id_of(groups[0])
        return answer(
            blocking(api.changes, JOB_KINDS, lambda: api.call(lambda: api.job_dict(api.job_or_404(job_id))))
        )

    def job_allocs(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        job_id = job_id_of(groups[0])

        def read() -> list[dict[str, Any]]:
            views = api.call(lambda: api.all_alloc_views(job_id))
            return [api.alloc_dict(v, stub=True) for v in views]  # events read here, off the loop

        return answer(blocking(api.changes, ALLOC_KINDS, read))

    def summary(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = job_id_of(groups[0])
        return answer(
            blocking(
                api.changes,
                JOB_KINDS,
                lambda: api.call(
                    lambda: api.summary(job_id, [g.name for g in api.job_or_404(job_id).groups])
                ),
            )
        )

    def versions(groups: tuple[str, ...], body: bytes) -> Response:
        """`?diffs=true`: Diffs[i] is Versions[i+1] -> Versions[i] (agent.nomadapi.jobdiff)."""
        job_id = job_id_of(groups[0])
        versions = blocking(api.changes, JOB_KINDS, lambda: api.call(lambda: api.job_versions(job_id)))
        index = api.changes.current(JOB_KINDS)
        diffs = None
        if query_params().get("diffs") == "true":
            diffs = [job_diff(versions[i + 1], versions[i]) for i in range(len(versions) - 1)]
        return answer(
            {"Versions": versions, "Diffs": diffs, "Index": index, "LastContact": 0, "KnownLeader": True}
        )

    def job_evals(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = job_id_of(groups[0])
        return answer(
            blocking(
                api.changes,
                ("eval",),
                lambda: [
                    structs.evaluation(**eval_fields(e), namespace=NS) for e in api.evals.of_job(job_id)
                ],
            )
        )

    job_rx = r"/v1/job/([^/]+)"
    return [
        ("GET", r"/v1/jobs", jobs),
        ("GET", job_rx, job),
        ("GET", job_rx + "/allocations", job_allocs),
        ("GET", job_rx + "/summary", summary),
        ("GET", job_rx + "/versions", versions),
        ("GET", job_rx + "/submission", _job_submission(api)),
        ("GET", job_rx + "/evaluations", job_evals),
    ]


def _job_submission(api: CorePort) -> Handler:
    """`GET /v1/job/:id/submission?version=N`: the jobspec as submitted (`nomad job inspect -hcl`),
    kept for the job's current version; 404 "job source not found" for any other, as Nomad."""

    def submission(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region)
        job_id = job_id_of(groups[0])
        raw = params.get("version", "")
        if not raw.isdigit() or len(raw) > 19:
            raise HttpError(400, "Unable to parse job submission version parameter")

        def read() -> dict[str, Any]:
            record = api.store.get("job", job_id) if job_id in api.jobs else None
            if record is None or int(record.get("version", 0)) != int(raw) or not record.get("source"):
                raise NotFound("job source not found")
            return structs.job_submission(
                str(record["source"]), record.get("format"), record.get("variables") or {}
            )

        return answer(blocking(api.changes, ("job",), lambda: api.call(read)))

    return submission
