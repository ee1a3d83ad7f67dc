"""Nomad's allocation endpoints on the server side (command/agent/alloc_endpoint.go): the
allocations list, an allocation, and its stop (a write: the alloc stopped and, for a service job,
replaced, answered with an EvalID). What acts inside an alloc on its client (restart, signal, GC,
stats, checks) is agent.nomadapi.clientroutes; its files and logs agent.nomadapi.clientfs."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.server import Handler, Response, query_params
from agent.nomadapi.context import (
    ALLOC_KINDS,
    AllocViews,
    CorePort,
    EvalWrites,
    JobViews,
    find_alloc,
    listing_order,
    prefix_of,
    reverse_of,
)
from agent.nomadapi.http import answer, answer_list, blocking, check_scope, meta_headers
from agent.nomadapi.node import Eval


class AllocPort(CorePort, AllocViews, JobViews, EvalWrites, Protocol):
    pass


def alloc_routes(api: AllocPort) -> list[tuple[str, str, Handler]]:
    core = api.core

    def allocs(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        prefix = prefix_of(params)
        # `?resources=true`: each stub with its AllocatedResources (Nomad's list_allocations)
        resources = params.get("resources", "false").lower() in ("true", "1")
        start = core.changes.start  # the CreateIndex of an alloc whose record did not keep one

        def views() -> list[dict[str, Any]]:
            return listing_order(
                [v for v in core.call(api.all_alloc_views) if str(v["id"]).startswith(prefix)],
                by_id=bool(prefix),
                reverse=reverse_of(params),
                id_of=lambda v: str(v["id"]),
                create_of=lambda v: int(v.get("create_index") or 0) or start,
            )

        return answer_list(
            blocking(
                core.changes,
                ALLOC_KINDS,
                lambda: api.alloc_dicts(views(), stub=True, resources=resources),
            )
        )

    def alloc(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        ref = unquote(groups[0])

        def gather() -> tuple[dict[str, Any], dict[str, Any] | None]:
            adopted = core.adoption.find(ref)
            if adopted is not None:
                view = adopted.view()
                job = core.jobs.get(str(view.get("job")))
                return view, api.job_dict(job) if job is not None else None
            runner = find_alloc(core, ref)  # its Job is the version it was placed for, as Nomad's
            view = runner.view()
            return view, {**api.job_dict(runner.job), "Version": runner.rec.job_version}

        def read() -> dict[str, Any]:
            view, job = core.call(gather)
            return api.alloc_dict(view, stub=False, job=job)

        return answer(blocking(core.changes, ALLOC_KINDS, read))

    def stop(groups: tuple[str, ...], body: bytes) -> Response:
        ref = unquote(groups[0])

        def do() -> Eval:
            adopted = core.adoption.find(ref)
            if adopted is not None:
                core.stop_alloc(adopted.id)
                return api.evals.create(adopted.job, "alloc-stop", "service")
            r = find_alloc(core, ref)
            new = core.stop_and_replace(r.id)
            return api.evaluate(r.job.id, "alloc-stop", r.job.type, (new,) if new else ())

        ev = core.call(do)
        index = core.changes.current()
        meta_headers(index)
        return answer({"EvalID": ev.id, "Index": index})

    return [
        ("GET", r"/v1/allocations", allocs),
        ("GET", r"/v1/allocation/([^/]+)", alloc),
        ("PUT", r"/v1/allocation/([^/]+)/stop", stop),
        ("POST", r"/v1/allocation/([^/]+)/stop", stop),
    ]
