"""The client's `host_network` blocks (issue 52 item 3): the config block, the node's host networks as
Nomad's fingerprint derives them (an address's aliases), placement of a port naming one (present,
absent, its reserved_ports), and the port's HostIP where Nomad's client uses it: the alloc's JSON,
NOMAD_IP_/NOMAD_ADDR_ and their HOST_ twins, the bridge's CNI portmap and docker's port bindings.
On the real Core and loop with a fake node; the root test binds a real container's port."""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from agent.command.config import load_config
from agent.decide.placement import NodeFacts, refusals
from agent.drivers.dockeropts import published
from agent.errors import ConfigError
from agent.jobspec import parse_jobspec
from agent.network.bridge import port_mappings
from agent.node.hostnetworks import (
    HostNetwork,
    alias_addresses,
    derive_aliases,
    node_networks,
    parse_port_ranges,
)
from agent.structs.records import AllocRecord, PortAlloc
from tests.agent_lab import NODE as LAB_NODE
from tests.agent_lab import run_job
from tests.fakes import FakeNode
from tests.test_routes_ops import Api

A = ipaddress.ip_address


@dataclass(frozen=True)
class Addr:
    interface: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    default_route: bool = False


HOST = [
    Addr("lo", A("127.0.0.1")),
    Addr("lo", A("::1")),
    Addr("eth0", A("10.1.2.3"), default_route=True),
    Addr("eth0", A("fe80::1"), default_route=True),
    Addr("eth1", A("192.168.5.9")),
    Addr("eth2", A("fe80::2")),
]


# -- deriveAddressAliases and the node's networks ----------------------------------------------------


def test_an_address_gets_the_alias_of_each_host_network_it_is_in_by_cidr_interface_both_or_none() -> None:
    nets = (
        HostNetwork("by-cidr", cidr="192.168.0.0/16, 10.0.0.0/8"),
        HostNetwork("by-iface", interface="lo"),
        HostNetwork("both", cidr="10.1.0.0/16", interface="eth0"),
        HostNetwork("both-wrong-iface", cidr="10.1.0.0/16", interface="eth1"),
        HostNetwork("any"),  # neither: every address (as Nomad)
    )
    assert derive_aliases("eth0", A("10.1.2.3"), nets, "eth0") == ["by-cidr", "both", "any", "default"]
    assert derive_aliases("lo", A("127.0.0.1"), nets, "eth0") == ["by-iface", "any"]
    assert derive_aliases("eth1", A("192.168.5.9"), nets, "eth0") == ["by-cidr", "any"]
    assert derive_aliases("eth1", A("::1"), nets[:2], "eth0") == []  # a v4 cidr never holds a v6 address
    assert derive_aliases("eth9", A("172.16.0.1"), (), "") == []


def test_the_nodes_networks_are_per_interface_with_each_address_under_its_aliases() -> None:
    nets = node_networks(HOST, (HostNetwork("loopback", interface="lo", reserved_ports="22,80-81"),))
    assert [
        (n.device, [(a.alias, a.address, a.family, a.reserved_ports) for a in n.addresses]) for n in nets
    ] == [
        ("lo", [("loopback", "127.0.0.1", "ipv4", "22,80-81"), ("loopback", "::1", "ipv6", "22,80-81")]),
        ("eth0", [("default", "10.1.2.3", "ipv4", "")]),  # link-local only where there is no other
    ]
    assert {k: [a.address for a in v] for k, v in alias_addresses(nets).items()} == {
        "loopback": ["127.0.0.1", "::1"],
        "default": ["10.1.2.3"],
    }
    only_link_local = node_networks(HOST, (HostNetwork("ll", interface="eth2"),))
    assert [(n.device, n.addresses[0].address) for n in only_link_local if n.device == "eth2"] == [
        ("eth2", "fe80::2")
    ]
    assert nets[0].json()["Addresses"][0] == {
        "Family": "ipv4",
        "Alias": "loopback",
        "Address": "127.0.0.1",
        "ReservedPorts": "22,80-81",
        "Gateway": "",
    }


def test_port_ranges_are_parsed_as_nomads_parse_port_ranges() -> None:
    assert parse_port_ranges("") == []
    assert parse_port_ranges("22, 80-82") == [22, 80, 81, 82]
    for spec, why in (
        ("0", "port must be > 0"),
        ("90-80", "invalid range: ending value (80) less than starting (90) value"),
        ("70000", "port must be < 65536 but found 70000"),
        ("1-2-3", "can only parse single port numbers or port ranges"),
        ("22,", "can't specify empty port"),
        ("http", 'parsing "http": invalid syntax'),
    ):
        with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
            parse_port_ranges(spec)


# -- the config block ---------------------------------------------------------------------------------


def _load(tmp_path: Path, host_networks: object) -> object:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"node_name": "n1", "host_networks": host_networks}))
    return load_config(path)


def test_the_config_takes_host_network_blocks(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        {"loopback": {"interface": "lo"}, "lan": {"cidr": "10.0.0.0/8,fd00::/8", "reserved_ports": "22"}},
    )
    assert cfg.host_networks == (  # type: ignore[attr-defined]
        HostNetwork("lan", cidr="10.0.0.0/8,fd00::/8", reserved_ports="22"),
        HostNetwork("loopback", interface="lo"),
    )


@pytest.mark.parametrize(
    ("blocks", "where", "why"),
    [
        (
            {"lan": {"cidr": "10.0.0.0/33"}},
            'host_networks."lan".cidr',
            "not a comma-separated list of networks",
        ),
        ({"lan": {"cidr": "10.0.0.1"}}, 'host_networks."lan".cidr', "has no prefix length"),
        (
            {"lan": {"reserved_ports": "22-"}},
            'host_networks."lan".reserved_ports',
            "error parsing reserved_ports",
        ),
        (
            {"lan": {"interface": '{{ GetDefaultInterfaces | attr "name" }}'}},
            'host_networks."lan".interface',
            "go-sockaddr",
        ),
        ({"lan": {"cidrs": "10.0.0.0/8"}}, 'host_networks."lan".cidrs', "not a host_network field"),
        ({"lan": {"interface": 1}}, 'host_networks."lan".interface', "must be a string"),
        ({"default": {"interface": "lo"}}, 'host_networks."default"', "interface of the default route"),
        ({"a b": {}}, 'host_networks."a b"', "letters, digits"),
        (["lan"], "host_networks", "must be an object"),
    ],
)
def test_a_bad_host_network_block_is_a_config_error_naming_it(
    tmp_path: Path, blocks: object, where: str, why: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, blocks)
    assert err.value.key == where and why in err.value.reason


# -- placement ----------------------------------------------------------------------------------------

LOOPBACK = node_networks(HOST, (HostNetwork("loopback", interface="lo", reserved_ports="8000-8010"),))
NODE = NodeFacts(
    id="n",
    name="client9",
    datacenter="dc1",
    host_networks=frozenset({"loopback"}),
    node_networks=LOOPBACK,
    host_network_config=(HostNetwork("loopback", interface="lo", reserved_ports="8000-8010"),),
)


def _job(ports: str, driver: str = "docker") -> str:
    return f"""
job "j" {{
  group "g" {{
    network {{
      {ports}
    }}
    task "t" {{
      driver = "{driver}"
      config {{
        image = "x"
        ports = ["http"]
      }}
    }}
  }}
}}
"""


def test_a_port_is_placed_on_a_host_network_the_node_has_not_one_it_lacks_nor_on_its_reserved_ports() -> None:
    ok = parse_jobspec(_job('port "http" {\nstatic = 8080\nhost_network = "loopback"\n}'), source="t").job
    assert refusals(ok, NODE) == []
    lacking = parse_jobspec(_job('port "http" {\nhost_network = "public"\n}'), source="t").job
    assert refusals(lacking, NODE) == [
        (
            "job.j.group.g.network.port.http.host_network",
            'missing host network "public" for port "http": this client has the host networks "default",'
            ' "loopback"; Nomad would not place it here',
        )
    ]
    reserved = parse_jobspec(
        _job('port "http" {\nstatic = 8005\nhost_network = "loopback"\n}'), source="t"
    ).job
    assert refusals(reserved, NODE) == [
        (
            "job.j.group.g.network.port.http.static",
            'reserved port collision http=8005: port 8005 is in the reserved_ports "8000-8010" of host'
            ' network "loopback"; Nomad would not place it here',
        )
    ]
    on_default = parse_jobspec(_job('port "http" {\nstatic = 8005\n}'), source="t").job
    assert refusals(on_default, NODE) == []  # another host network's reserved ports are its own


# -- the alloc: HostIP, env, node JSON ----------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    node = FakeNode(tmp_path)
    core = node.core(node=NODE)
    threading.Thread(target=core.loop.run, daemon=True).start()
    yield Api(node, core)
    core.stop()


PORTS = """
port "http" {
  static = 8080
  host_network = "loopback"
}
port "admin" {
  host_network = "loopback"
}
port "plain" {}
"""


def test_a_port_on_a_host_network_has_its_address_as_host_ip_in_the_alloc_and_the_tasks_env(api: Api) -> None:
    (alloc_id,) = run_job(api.request, _job(PORTS))
    alloc = api.request("GET", f"/v1/allocation/{alloc_id}")
    shared = alloc["AllocatedResources"]["Shared"]
    ports = {p["Label"]: p for p in shared["Ports"]}
    assert ports["http"]["HostIP"] == "127.0.0.1" and ports["http"]["Value"] == 8080
    assert ports["admin"]["HostIP"] == "127.0.0.1"
    assert ports["admin"]["Value"] not in range(8000, 8011) and ports["admin"]["Value"] >= 20000
    assert ports["plain"]["HostIP"] != "127.0.0.1"  # the default network's, as before
    (net,) = shared["Networks"]
    networks = {p["Label"]: p["HostNetwork"] for p in net["ReservedPorts"] + net["DynamicPorts"]}
    assert networks == {"http": "loopback", "admin": "loopback", "plain": "default"}

    deadline = time.monotonic() + 5.0
    while not api.node.docker.starts:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)
    ctx = api.node.docker.starts[0]
    admin = ports["admin"]["Value"]
    for key, want in (
        ("NOMAD_IP_http", "127.0.0.1"),
        ("NOMAD_HOST_IP_http", "127.0.0.1"),
        ("NOMAD_ADDR_http", "127.0.0.1:8080"),
        ("NOMAD_HOST_ADDR_http", "127.0.0.1:8080"),
        ("NOMAD_ADDR_admin", f"127.0.0.1:{admin}"),
    ):
        assert ctx.env.get(key) == want, (key, ctx.env.get(key))
    assert "NOMAD_IP_plain" not in ctx.env  # no advertise_address: as before
    assert dict(ctx.port_host_ips) == {"http": "127.0.0.1", "admin": "127.0.0.1"}


def test_the_node_shows_its_host_networks_and_addresses_by_alias(api: Api) -> None:
    node = api.request("GET", f"/v1/node/{LAB_NODE.id}")
    assert node["HostNetworks"] == {
        "loopback": {"Name": "loopback", "CIDR": "", "Interface": "lo", "ReservedPorts": "8000-8010"}
    }
    by_alias = {
        (a["Alias"], a["Address"]) for n in node["NodeResources"]["NodeNetworks"] for a in n["Addresses"]
    }
    assert by_alias == {("loopback", "127.0.0.1"), ("loopback", "::1"), ("default", "10.1.2.3")}


def test_a_job_naming_a_host_network_the_node_lacks_is_refused_with_nomads_reason(api: Api) -> None:
    job = api.request("POST", "/v1/jobs/parse", {"JobHCL": _job('port "http" {\nhost_network = "public"\n}')})
    status, out = api.call("PUT", "/v1/jobs", {"Job": job})
    assert status >= 400 and 'missing host network "public" for port "http"' in str(out)


def test_the_port_record_keeps_its_host_ip() -> None:
    rec = AllocRecord(
        "a1", "j", "g", ports=(PortAlloc("http", 8080, 80, "127.0.0.1"), PortAlloc("x", 20001, 20001))
    )
    back = AllocRecord.from_record(rec.to_record())
    assert back.ports == rec.ports
    assert "host_ip" not in rec.to_record()["ports"][1]  # a record as earlier agents wrote it


# -- where the client binds it --------------------------------------------------------------------------


def test_the_bridge_portmap_binds_a_host_network_port_on_its_address_only() -> None:
    maps = port_mappings([PortAlloc("http", 8080, 80, "127.0.0.1"), PortAlloc("plain", 20001, 8081)])
    assert [m.to_cni() for m in maps] == [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "127.0.0.1"},
        {"hostPort": 20001, "containerPort": 8081, "protocol": "tcp"},
    ]


def test_docker_publishes_a_host_network_port_on_its_address() -> None:
    ports = [("http", 8080, 80), ("plain", 20001, 0)]
    out = published(ports, ["http", "plain"], {}, "10.1.2.3", {"http": "127.0.0.1"})
    assert out == {
        "80/tcp": ("127.0.0.1", 8080),
        "80/udp": ("127.0.0.1", 8080),
        "20001/tcp": ("10.1.2.3", 20001),
        "20001/udp": ("10.1.2.3", 20001),
    }


@pytest.mark.root
def test_a_docker_task_with_a_port_on_the_loopback_host_network_is_bound_on_127_0_0_1_only(
    tmp_path: Path,
) -> None:
    """A host-mode group's docker task (docker's own bridge, the port published): dockerd binds the
    port on the host network's address only, as Nomad's driver binds the mapping's HostIP."""
    import contextlib
    import uuid

    import docker

    from agent.drivers.base import TaskContext
    from agent.drivers.docker import DockerDriver
    from agent.structs.model import Resources, Task

    driver = DockerDriver(publish_address="")
    task = Task("web", "docker", config={"image": "fieldlab/pause:lab", "ports": ["http", "plain"]})
    task = replace(task, resources=Resources(cpu=100, memory=32))
    task_dir = tmp_path / "alloc1" / "web"
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    ctx = TaskContext(
        job="hostnet", group="g", alloc_id=str(uuid.uuid4()), task=task, task_dir=task_dir, env={},
        network_mode="host", ports=(("http", 28080, 80), ("plain", 28081, 81)),
        port_host_ips={"http": "127.0.0.1"},
    )  # fmt: skip
    handle = driver.start(ctx)
    try:
        attrs = driver.client.api.inspect_container(handle.id)
        bindings = attrs["HostConfig"]["PortBindings"]
        bound = attrs["NetworkSettings"]["Ports"]["80/tcp"]  # what dockerd bound
        assert bound == [{"HostIp": "127.0.0.1", "HostPort": "28080"}], bound
        assert bindings["80/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": "28080"}], bindings
        assert bindings["81/tcp"] == [{"HostIp": "", "HostPort": "28081"}], bindings  # the default: any
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            driver.client.containers.get(handle.id).remove(force=True)


def test_a_service_and_a_check_of_a_host_network_port_use_its_address() -> None:
    from agent.client.checktarget import CheckTarget, check_target, service_address

    ports = [PortAlloc("lan", 8080, 80, "192.168.5.9"), PortAlloc("lo", 8081, 81, "127.0.0.1")]
    got = service_address(
        mode="host", custom="", label="lan", ports=ports, alloc_address="", node_address="10.1.2.3"
    )
    assert got == ("192.168.5.9", 8080)
    got = service_address(
        mode="auto", custom="", label="lo", ports=ports, alloc_address="", node_address="10.1.2.3"
    )
    assert got == ("127.0.0.1", 8081)
    kw = {"mode": "host", "ports": ports, "alloc_address": "", "node_address": "10.1.2.3"}
    assert check_target(label="lan", **kw) == CheckTarget("192.168.5.9", 8080)  # type: ignore[arg-type]
    refused = check_target(label="lo", **kw)  # type: ignore[arg-type]
    assert refused == 'port "lo" is bound on 127.0.0.1 (its host network): checks never go to loopback'
