"""Nomad's evaluation reads (command/agent/eval_endpoint.go): the evaluations list, an evaluation
and the allocations it placed. A job's own evaluations are read with the job
(agent.nomadapi.jobs); the evaluations are made by the writes (agent.nomadapi.node.Evals)."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.errors import NotFound
from agent.nomadapi import structs
from agent.nomadapi.context import (
    ALLOC_KINDS,
    NS,
    AllocViews,
    Changes,
    OnLoop,
    listing_order,
    prefix_of,
    reverse_of,
)
from agent.nomadapi.http import answer, blocking
from agent.nomadapi.node import Evals, eval_fields


class EvalReadPort(OnLoop, Changes, AllocViews, Protocol):
    evals: Evals


def eval_routes(api: EvalReadPort) -> list[tuple[str, str, Handler]]:
    def evaluations(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        prefix = prefix_of(params)

        def read() -> list[dict[str, Any]]:
            found = listing_order(
                [e for e in api.evals.all() if e.id.startswith(prefix)],
                by_id=bool(prefix),
                reverse=reverse_of(params),
                id_of=lambda e: e.id,
                create_of=lambda e: e.create_index,
            )
            return [structs.evaluation(**eval_fields(e), namespace=NS) for e in found]

        return answer(blocking(api.changes, ("eval",), read))

    def evaluation(groups: tuple[str, ...], body: bytes) -> Response:
        def read() -> dict[str, Any]:
            ev = api.evals.find(unquote(groups[0]))
            if ev is None:
                raise NotFound("eval not found")
            return structs.evaluation(**eval_fields(ev), namespace=NS)

        return answer(blocking(api.changes, ("eval",), read))

    def eval_allocs(groups: tuple[str, ...], body: bytes) -> Response:
        ev = api.evals.find(unquote(groups[0]))
        if ev is None:
            raise NotFound("eval not found")
        return answer(
            blocking(
                api.changes,
                ALLOC_KINDS,
                lambda: [
                    api.alloc_dict(v, stub=True)
                    for v in api.call(lambda: api.all_alloc_views(ev.job_id))
                    if v.get("eval_id") == ev.id  # the allocs whose EvalID it is, as Nomad's
                ],
            )
        )

    return [
        ("GET", r"/v1/evaluations", evaluations),
        ("GET", r"/v1/evaluation/([^/]+)", evaluation),
        ("GET", r"/v1/evaluation/([^/]+)/allocations", eval_allocs),
    ]
