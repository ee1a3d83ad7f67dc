"""Nomad's node reads (command/agent/node_endpoint.go): the nodes list (this one node), the node
and its allocations. The node's writes (eligibility, drain, purge) are agent.nomadapi.nodeverbs;
its identity and evaluations agent.nomadapi.node."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.errors import NotFound
from agent.nomadapi.context import ALLOC_KINDS, AllocViews, CorePort, NodeViews, go_bool, prefix_of
from agent.nomadapi.http import answer, answer_list, blocking


class NodeReadPort(CorePort, NodeViews, AllocViews, Protocol):
    pass


def node_routes(api: NodeReadPort) -> list[tuple[str, str, Handler]]:
    def nodes(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        prefix = prefix_of(params)
        # Nomad's NodeStubFields (command/agent/http.go parseNodeListStubFields)
        resources, os = go_bool(params, "resources"), go_bool(params, "os")
        out = blocking(
            api.changes,
            ("node",),
            lambda: (
                [api.node_dict(stub=True, resources=resources, os=os)]
                if api.node.id.startswith(prefix)
                else []
            ),
        )
        return answer(out)

    def node(groups: tuple[str, ...], body: bytes) -> Response:
        if not api.node.id.startswith(unquote(groups[0])) or not groups[0]:
            raise NotFound("node not found")
        return answer(blocking(api.changes, ("node",), lambda: api.node_dict(stub=False)))

    def node_allocs(groups: tuple[str, ...], body: bytes) -> Response:
        if unquote(groups[0]) != api.node.id:
            raise NotFound("node not found")
        return answer_list(
            blocking(
                api.changes,
                ALLOC_KINDS,
                lambda: api.alloc_dicts(api.call(api.all_alloc_views), stub=False),
            )
        )

    return [
        ("GET", r"/v1/nodes", nodes),
        ("GET", r"/v1/node/([^/]+)", node),
        ("GET", r"/v1/node/([^/]+)/allocations", node_allocs),
    ]
