"""Nomad's agent, status, regions and system endpoints, as a one-node Nomad agent answers them for
itself (the workload identities' key set beside them). Handed the narrow port it reads, not the
routes' whole shared context (agent.nomadapi.routes.NomadApi satisfies it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from agent import __version__
from agent.api.handler import Handler, Response, query_params
from agent.nomadapi import structs
from agent.nomadapi.context import Changes, NodeParts, OnLoop
from agent.nomadapi.http import answer, check_scope, meta_headers
from agent.nomadapi.node import NodeIdentity


class AgentPort(OnLoop, Changes, NodeParts, Protocol):
    node: NodeIdentity
    agent_health: Callable[[], Response]  # /v1/agent/health's answer (the daemon's)
    agent_stats: Callable[[], dict[str, str]]  # Stats["fieldlab"] of /v1/agent/self


def agent_routes(api: AgentPort) -> list[tuple[str, str, Handler]]:
    node = api.node

    def self_(groups: tuple[str, ...], body: bytes) -> Response:
        meta_headers(api.changes.current())
        config = {
            "Datacenter": node.datacenter,
            "NodeName": node.name,
            "Region": node.region,
            "Version": {"Version": __version__},
        }
        return answer(
            structs.agent_self(
                node_name=node.name,
                datacenter=node.datacenter,
                region=node.region,
                version=__version__,
                config=config,
                node_id=node.id,
                addr=node.http_addr,
                extra_stats={"fieldlab": api.agent_stats()},
            )
        )

    def health(groups: tuple[str, ...], body: bytes) -> Response:
        return api.agent_health()

    def members(groups: tuple[str, ...], body: bytes) -> Response:
        member = structs.agent_member(
            node_name=node.name,
            datacenter=node.datacenter,
            region=node.region,
            version=__version__,
            addr=node.http_addr,
        )
        return answer(
            {
                "ServerName": node.name,
                "ServerRegion": node.region,
                "ServerDC": node.datacenter,
                "Members": [member],
            }
        )

    def leader(groups: tuple[str, ...], body: bytes) -> Response:
        return answer(node.http_addr.rsplit(":", 1)[0] + ":4647")

    def peers(groups: tuple[str, ...], body: bytes) -> Response:
        return answer([node.http_addr.rsplit(":", 1)[0] + ":4647"])

    def regions(groups: tuple[str, ...], body: bytes) -> Response:
        return answer([node.region])

    def jwks(groups: tuple[str, ...], body: bytes) -> Response:
        """The public keys of the workload identities this agent signs (Nomad's JWKSPath)."""
        keyring = api.deps.keyring
        assert keyring is not None  # RunnerDeps makes one
        return answer(keyring.jwks())

    def system_gc(groups: tuple[str, ...], body: bytes) -> Response:
        """`nomad system gc`: Nomad's servers collect every terminal alloc and dead job at once
        (force); on one node that is the client's forced GC pass (terminal allocs collected, the jobs
        left without allocs purged). Nomad answers 200 with no body."""
        check_scope(query_params(), node.region)
        api.call(lambda: api.collector.gc(force=True))
        return 200, "text/plain; charset=utf-8", b""

    def reconcile(groups: tuple[str, ...], body: bytes) -> Response:
        """`nomad system reconcile summaries`: a job's summary is computed from its allocs at every read
        here, so there is none to bring back in line; 200 with no body, as Nomad's."""
        check_scope(query_params(), node.region)
        return 200, "text/plain; charset=utf-8", b""

    return [
        ("PUT", r"/v1/system/gc", system_gc),
        ("PUT", r"/v1/system/reconcile/summaries", reconcile),
        ("GET", r"/\.well-known/jwks\.json", jwks),
        ("GET", r"/v1/agent/self", self_),
        ("GET", r"/v1/agent/health", health),
        ("GET", r"/v1/agent/members", members),
        ("GET", r"/v1/status/leader", leader),
        ("GET", r"/v1/status/peers", peers),
        ("GET", r"/v1/regions", regions),
    ]
