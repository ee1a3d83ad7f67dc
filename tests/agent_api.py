"""An agent on a fake node serving Nomad's HTTP API over real mTLS, and the operator's flags for it:
the fixture the CLI's and the job writes' tests drive (`from tests.agent_api import agent`)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from agent import __version__
from agent.api.handler import Response
from agent.api.server import ApiServer
from agent.client.core import Core
from agent.command.config import Config, TLSConfig
from agent.command.daemon import health_stats
from agent.node.nodeinfo import driver_health
from agent.nomadapi import structs
from agent.nomadapi.http import answer
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.nomadapi.wsexec import exec_stream
from tests.fakes import FakeNode
from tests.pki import Issued, TestCA

OPERATOR = "controller.operator.fieldlab"
NODE_ID = "5f8e2d1c-0000-4000-8000-000000000001"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Agent:
    node: FakeNode
    core: Core
    flags: list[str]  # -address, -ca-cert, -client-cert, -client-key
    health: dict[str, Any]  # what the agent's stats["fieldlab"] is made of
    api: NomadApi | None = None


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    for key in (
        "FIELDLAB_AGENT_ADDR",
        "FIELDLAB_AGENT_CACERT",
        "FIELDLAB_AGENT_CLIENT_CERT",
        "FIELDLAB_AGENT_CLIENT_KEY",
    ):
        monkeypatch.delenv(key, raising=False)
    node = FakeNode(tmp_path)
    core = node.core()
    threading.Thread(target=core.loop.run, daemon=True).start()
    ca = TestCA(tmp_path)
    srv = ca.issue("client1.agent.fieldlab", server=True)
    op: Issued = ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=free_port(),
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
    )
    health: dict[str, Any] = {
        "status": "ok",
        "node": "client1",
        "version": __version__,
        "uptime_seconds": 3.0,
        "vault": {"configured": False, "authenticated": False, "error": ""},
        "restore_seconds": 0.125,
        "sweeps": 1,
    }

    def agent_health() -> Response:  # as the daemon's: 500 with the reason while degraded
        ok = health["status"] == "ok"
        return answer(structs.health(ok, "ok" if ok else "templates are not rendered"), 200 if ok else 500)

    nomad = NomadApi(
        core,
        NodeIdentity(NODE_ID, "client1", "dc1", "global", "127.0.0.1:4646"),
        driver_health=lambda: driver_health(core.drivers.all()),
        agent_health=agent_health,
        agent_stats=lambda: health_stats(health),
    )
    server = ApiServer(cfg, {}, build_nomad_routes(nomad), [exec_stream(nomad)])
    server.start()
    flags = [
        f"-address=https://127.0.0.1:{server.port}",
        "-ca-cert",
        str(ca.ca_file),
        "-client-cert",
        str(op.cert),
        "-client-key",
        str(op.key),
    ]
    yield Agent(node, core, flags, health, nomad)
    server.stop(5)
    core.stop()


def nomad_http(agent: Agent) -> tuple[str, dict[str, Any], requests.Session]:
    """(the agent's address, the operator's TLS settings for requests, a session): Nomad's API by hand."""
    flags = dict(zip(agent.flags[1::2], agent.flags[2::2], strict=True))
    base = agent.flags[0].split("=", 1)[1]
    tls: dict[str, Any] = {"verify": flags["-ca-cert"], "cert": (flags["-client-cert"], flags["-client-key"])}
    return base, tls, requests.Session()
