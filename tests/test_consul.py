"""Service registration in Consul. The definitions are checked here without I/O; the round trip
needs a real Consul agent, and none can be installed on these machines: it skips with that reason."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest
import requests

from agent.consul.catalog import ConsulClient, registrations
from agent.structs.model import Check, Service
from lab.waits import wait_until

SVC = Service(
    name="web",
    port="http",
    tags=("v1",),
    checks=(
        Check(name="alive", type="http", path="/health", interval=10, timeout=2),
        Check(name="tcp", type="tcp", interval=5, timeout=1),
    ),
)


def test_registration_uses_the_node_address_and_the_mapped_host_port() -> None:
    [reg] = registrations("a1", "http", [SVC], "10.213.0.11", [{"label": "http", "host": 20001, "to": 8001}])
    assert reg["ID"] == "_fieldlab-a1-http-web"
    assert (reg["Name"], reg["Address"], reg["Port"], reg["Tags"]) == ("web", "10.213.0.11", 20001, ["v1"])
    assert reg["Checks"] == [
        {"Name": "alive", "Interval": "10s", "Timeout": "2s", "HTTP": "http://10.213.0.11:20001/health"},
        {"Name": "tcp", "Interval": "5s", "Timeout": "1s", "TCP": "10.213.0.11:20001"},
    ]


CONSUL = shutil.which("consul")


@pytest.fixture
def consul_agent() -> Iterator[str]:
    if CONSUL is None:
        pytest.skip("no Consul binary: none can be installed on these machines (no HashiCorp repo reachable)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [CONSUL, "agent", "-dev", "-bind=127.0.0.1", "-client=127.0.0.1", f"-http-port={port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    addr = f"http://127.0.0.1:{port}"

    def leader() -> tuple[bool | None, str]:
        try:
            return (True if requests.get(f"{addr}/v1/status/leader", timeout=1).json() else None), "no leader"
        except requests.RequestException as exc:
            return None, str(exc)

    wait_until(leader, timeout=30, what="consul dev agent leader")
    yield addr
    proc.terminate()
    proc.wait(10)


def test_register_and_deregister_round_trip(consul_agent: str) -> None:
    c = ConsulClient(consul_agent)
    [reg] = registrations("a1", "http", [SVC], "127.0.0.1", [{"label": "http", "host": 20001, "to": 8001}])
    c.register(reg)
    assert reg["ID"] in requests.get(f"{consul_agent}/v1/agent/services", timeout=5).json()
    c.deregister(reg["ID"])
    assert reg["ID"] not in requests.get(f"{consul_agent}/v1/agent/services", timeout=5).json()


def test_templates_read_keys_and_services_from_consul(consul_agent: str) -> None:
    from agent.consul.catalog import ConsulData

    requests.put(f"{consul_agent}/v1/kv/fieldlab/greeting", data=b"hi", timeout=5)
    data = ConsulData(consul_agent)
    assert data.key("fieldlab/greeting") == "hi"
    assert data.service("consul") != []
    assert data.key("fieldlab/no-such-key") is None
    requests.put(f"{consul_agent}/v1/kv/fieldlab/app/a", data=b"1", timeout=5)
    requests.put(f"{consul_agent}/v1/kv/fieldlab/app/sub/b", data=b"2", timeout=5)
    assert [(p["Key"], p["Value"]) for p in data.ls("fieldlab/app")] == [("a", "1")]
    assert [(p["Key"], p["Value"]) for p in data.tree("fieldlab/app")] == [("a", "1"), ("sub/b", "2")]
    assert "consul" in [s["Name"] for s in data.services()]
