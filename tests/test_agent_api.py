"""The agent's API over real mTLS: a client with a cert from the CA gets answers, others are refused."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import Config, TLSConfig, VaultConfig
from agent.daemon import Agent
from tests.openbao_server import OpenBaoServer
from tests.pki import TestCA


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def running_agent(tmp_path: Path) -> Iterator[tuple[Agent, TestCA, int]]:
    ca = TestCA(tmp_path)
    srv = ca.issue("client1.agent.fieldlab", server=True)
    port = _free_port()
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=port,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        jobs_enabled=False,
    )
    agent = Agent(cfg)
    agent.startup()
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    yield agent, ca, port
    agent.stop()
    t.join(5)
    agent.shutdown()


def _ctx(ca: TestCA, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def test_health_answers_a_client_with_a_lab_cert(running_agent: tuple[Agent, TestCA, int]) -> None:
    _, ca, port = running_agent
    op = ca.issue("operator.fieldlab", server=False)
    with urllib.request.urlopen(
        f"https://127.0.0.1:{port}/v1/agent/health", context=_ctx(ca, op.cert, op.key), timeout=5
    ) as resp:
        body = json.loads(resp.read())
    assert resp.status == 200
    assert body["status"] == "ok" and body["node"] == "client1"
    assert body["vault"] == {"configured": False, "authenticated": False, "error": ""}


def test_metrics_are_prometheus_text(running_agent: tuple[Agent, TestCA, int]) -> None:
    _, ca, port = running_agent
    op = ca.issue("operator.fieldlab", server=False)
    with urllib.request.urlopen(
        f"https://127.0.0.1:{port}/v1/metrics", context=_ctx(ca, op.cert, op.key), timeout=5
    ) as resp:
        text = resp.read().decode()
    assert "# TYPE fieldlab_agent_up gauge\nfieldlab_agent_up 1\n" in text


def test_client_without_a_cert_is_refused_at_tls(running_agent: tuple[Agent, TestCA, int]) -> None:
    _, ca, port = running_agent
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/v1/agent/health", context=_ctx(ca), timeout=5)


def test_client_with_a_cert_from_another_ca_is_refused(
    running_agent: tuple[Agent, TestCA, int], tmp_path: Path
) -> None:
    _, ca, port = running_agent
    other = TestCA(tmp_path, cn="stranger CA")
    bad = other.issue("intruder", server=False)
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(
            f"https://127.0.0.1:{port}/v1/agent/health", context=_ctx(ca, bad.cert, bad.key), timeout=5
        )


def test_health_shows_the_start_up_vault_login_of_the_agents_one_client(
    tmp_path: Path, openbao: OpenBaoServer
) -> None:
    ca = TestCA(tmp_path)
    srv = ca.issue("client1.agent.fieldlab", server=True)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=_free_port(),
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        vault=VaultConfig(openbao.address, openbao.approle_file),
        jobs_enabled=False,
    )
    agent = Agent(cfg)
    agent.startup()
    try:
        op = ca.issue("operator.fieldlab", server=False)
        with urllib.request.urlopen(
            f"https://127.0.0.1:{cfg.port}/v1/agent/health", context=_ctx(ca, op.cert, op.key), timeout=5
        ) as resp:
            body = json.loads(resp.read())
        assert body["vault"] == {"configured": True, "authenticated": True, "error": ""}
        # One login, by the client the core would be given for templates (not a throwaway one).
        assert agent.vault_client is not None and agent.vault_client.logins == 1
    finally:
        agent.shutdown()
