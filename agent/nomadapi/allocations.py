"""Nomad's allocation endpoints on the server side (command/agent/alloc_endpoint.go): the
allocations list, an allocation, and its stop (a write: the alloc stopped and, for a service job,
replaced, answered with an EvalID). What acts inside an alloc on its client (restart, signal, GC,
stats, checks) is agent.nomadapi.clientroutes; its files and logs agent.nomadapi.clientfs."""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, Streamed, query_params
from agent.nomadapi.context import (
    ALLOC_KINDS,
    AllocViews,
    CorePort,
    EvalWrites,
    JobViews,
    find_alloc,
    prefix_of,
    reverse_of,
)
from agent.nomadapi.http import answer, blocking, check_scope, meta_headers
from agent.nomadapi.node import Eval
from agent.nomadapi.stubcache import CHUNK, StubCache, release_freed_memory
from agent.nomadapi.stubcache import chunks as stub_chunks


class AllocPort(CorePort, AllocViews, JobViews, EvalWrites, Protocol):
    def deployment_of(self, alloc_id: str) -> dict[str, Any]: ...


def alloc_routes(api: AllocPort) -> list[tuple[str, str, Handler]]:
    cache = StubCache()  # the terminal allocs' encoded stubs (agent.nomadapi.stubcache)

    def allocs(groups: tuple[str, ...], body: bytes) -> Response | Streamed:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        prefix = prefix_of(params)
        # `?resources=true`: each stub with its AllocatedResources (Nomad's list_allocations)
        resources = params.get("resources", "false").lower() in ("true", "1")
        start = api.changes.start  # the CreateIndex of an alloc whose record did not keep one

        def read() -> tuple[list[tuple[bytes, bool]], int]:
            listing = api.call(lambda: cache.gather(api, api.deployment_of, prefix, resources))
            items, size = cache.encode_listing(
                listing,
                lambda view, events: api.alloc_dict(view, stub=True, resources=resources, events=events),
                api.store.events_by_alloc,
                api.store.events,
                start,
                resources,
            )
            # Nomad's order, as listing_order: the ID index for a prefix, else CreateIndex then ID
            items.sort(key=itemgetter(1) if prefix else itemgetter(0, 1), reverse=reverse_of(params))
            return [(data, packed) for _, _, data, packed in items], size

        encoded, size = blocking(api.changes, ALLOC_KINDS, read)
        pieces = stub_chunks(encoded, cache.unpack)
        if size <= CHUNK:  # small: whole, with its Content-Length
            return 200, "application/json", b"".join(pieces)
        # each piece joined as it is sent; what they took given back once sent
        return Streamed(200, "application/json", pieces, _give_back)

    def alloc(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        ref = unquote(groups[0])

        def gather() -> tuple[dict[str, Any], dict[str, Any] | None]:
            adopted = api.adoption.find(ref)
            if adopted is not None:
                view = adopted.view()
                job = api.jobs.get(str(view.get("job")))
                return view, api.job_dict(job) if job is not None else None
            runner = find_alloc(api, ref)  # its Job is the version it was placed for, as Nomad's
            view = runner.view()
            return view, {**api.job_dict(runner.job), "Version": runner.rec.job_version}

        def read() -> dict[str, Any]:
            view, job = api.call(gather)
            return api.alloc_dict(view, stub=False, job=job)

        return answer(blocking(api.changes, ALLOC_KINDS, read))

    def stop(groups: tuple[str, ...], body: bytes) -> Response:
        ref = unquote(groups[0])

        def do() -> Eval:
            adopted = api.adoption.find(ref)
            if adopted is not None:
                api.allocs.stop_alloc(adopted.id)
                return api.evals.create(adopted.job, "alloc-stop", "service")
            r = find_alloc(api, ref)
            new = api.allocs.stop_and_replace(r.id)
            return api.evaluate(r.job.id, "alloc-stop", r.job.type, (new,) if new else ())

        ev = api.call(do)
        index = api.changes.current()
        meta_headers(index)
        return answer({"EvalID": ev.id, "Index": index})

    return [
        ("GET", r"/v1/allocations", allocs),
        ("GET", r"/v1/allocation/([^/]+)", alloc),
        ("PUT", r"/v1/allocation/([^/]+)/stop", stop),
        ("POST", r"/v1/allocation/([^/]+)/stop", stop),
    ]


def _give_back() -> None:
    """After a long listing is sent: the memory its pieces took back to the system."""
    release_freed_memory()
