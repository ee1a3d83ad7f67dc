"""cni/<name> networks (agent.network.networks, issue 52 item 3): the conflist found by its name in the
client's CNI config dir as Nomad finds it, CNI_ARGS as Nomad's network hook builds them, port mappings
only where the conflist has portmap, the network an alloc is on read back from its kept result after a
restart, and the sweeper given the cni/<name> networks' orphans.

Two halves: fake plugins (a Python script in tmp, no root) for the decisions; the real plugins in
/usr/lib/cni (root, marked `root`) for ADD/CHECK/DEL of a macvlan network (on a dummy parent of the
test's own) and a second bridge network, and the sweeper cleaning a cni/<name> alloc's leftovers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.decide.placement import NodeFacts, refusals
from agent.drivers.base import NO_SANDBOX, Sandbox, TaskContext
from agent.drivers.docker import DockerDriver
from agent.drivers.dockernames import etc_hosts, pause_name, pause_sandbox
from agent.errors import AgentError
from agent.jobspec import JobspecError, parse_jobspec
from agent.network import iptables, netns
from agent.network.base import BRIDGE, AttachSpec, plan_cni_args
from agent.network.bridge import BridgeNetwork
from agent.network.cni import CniNetwork
from agent.network.networks import NetworkSet, bridge_of, find_conflist
from agent.network.result import CniError
from agent.node.sweeper import Sweeper, plan_sweep
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, Network, Task
from agent.structs.records import AllocRecord, PortAlloc
from tests.cniconf import bridge_conflist, scrub_test_network
from tests.fakes import FakeNetwork, FakeNode

FAKE_PLUGIN = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import json, os, sys
    conf = json.load(sys.stdin)
    cmd = os.environ["CNI_COMMAND"]
    with open(conf["log"], "a") as f:
        f.write(json.dumps({"type": conf["type"], "cmd": cmd, "args": os.environ.get("CNI_ARGS", ""),
                            "rc": conf.get("runtimeConfig")}) + "\\n")
    if cmd == "ADD":
        print(json.dumps({"cniVersion": conf["cniVersion"], "ips": [
            {"version": "4", "address": conf["addr"], "interface": 0}],
            "interfaces": [{"name": "eth0", "sandbox": os.environ["CNI_NETNS"]}]}))
    """
)
HOST_NETNS = Path("/proc/self/ns/net")
ALLOC = "6b235529-8111-4bbe-520b-d639b1d2a94e"


class FakeDir:
    def __init__(self, tmp: Path) -> None:
        self.conf = tmp / "net.d"
        self.plugins = tmp / "plugins"
        self.cache = tmp / "cache"
        self.log = tmp / "calls.log"
        self.conf.mkdir()
        self.plugins.mkdir()
        for name in ("fakenet", "fakepm"):
            (self.plugins / name).write_text(FAKE_PLUGIN)
            (self.plugins / name).chmod(0o755)

    def write(self, file: str, name: str, *, portmap: bool = False, addr: str = "10.77.0.2/24") -> Path:
        plugins: list[dict[str, Any]] = [{"type": "fakenet", "log": str(self.log), "addr": addr}]
        if portmap:
            plugins.append(
                {"type": "fakepm", "log": str(self.log), "addr": addr, "capabilities": {"portMappings": True}}
            )
        path = self.conf / file
        path.write_text(json.dumps({"cniVersion": "0.4.0", "name": name, "plugins": plugins}))
        return path

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def networks(self, bridge: BridgeNetwork | None = None) -> NetworkSet:
        return NetworkSet(bridge, self.conf, self.plugins, self.cache, run_check=True)


@pytest.fixture
def fake(tmp_path: Path) -> FakeDir:
    return FakeDir(tmp_path)


# --- the conflist by its name ------------------------------------------------------------------------


def test_the_conflist_is_found_by_its_name_not_its_file_name_first_sorted_wins(fake: FakeDir) -> None:
    fake.write("10-other.conflist", "other")
    fake.write("20-lab.conflist", "lab-net", addr="10.77.0.2/24")
    fake.write("30-lab.json", "lab-net", addr="10.88.0.2/24")
    (fake.conf / "README").write_text("not a CNI file")
    assert find_conflist(fake.conf, "lab-net") == fake.conf / "20-lab.conflist"
    assert find_conflist(fake.conf, "other") == fake.conf / "10-other.conflist"


def test_a_missing_name_a_single_plugin_conf_and_bad_json_are_refused_naming_them(fake: FakeDir) -> None:
    with pytest.raises(CniError, match="no CNI network config found in"):
        find_conflist(fake.conf, "x")
    fake.write("10-a.conflist", "a")
    with pytest.raises(CniError, match='CNI network config not found for name "x"'):
        find_conflist(fake.conf, "x")
    (fake.conf / "20-single.conf").write_text(json.dumps({"cniVersion": "0.4.0", "name": "one", "type": "x"}))
    with pytest.raises(CniError, match="single-plugin config"):
        find_conflist(fake.conf, "one")
    (fake.conf / "00-bad.json").write_text("{")
    with pytest.raises(CniError, match=r"failed to load CNI config file .*00-bad\.json"):
        find_conflist(fake.conf, "a")


def test_cni_args_as_nomads_network_hook_builds_them() -> None:
    args = dict(
        plan_cni_args(
            {"IgnoreUnknown": "false", "NOMAD_JOB_ID": "spoofed", "K8S_POD_NAME": "web"},
            region="global",
            namespace="default",
            job_id="j;1",  # holds the separator: left out, as Nomad does
            group="g",
            alloc_id=ALLOC,
        )
    )
    assert args == {
        "IgnoreUnknown": "false",  # a custom arg replaces Nomad's IgnoreUnknown=true
        "K8S_POD_NAME": "web",
        "NOMAD_JOB_ID": "spoofed",  # the workload's own value was left out: the custom one stays
        "NOMAD_REGION": "global",
        "NOMAD_NAMESPACE": "default",
        "NOMAD_GROUP_NAME": "g",
        "NOMAD_ALLOC_ID": ALLOC,
    }
    plain = dict(plan_cni_args((), region="r", namespace="n", job_id="j", group="g", alloc_id="a"))
    assert plain["IgnoreUnknown"] == "true" and plain["NOMAD_JOB_ID"] == "j"
    over = dict(
        plan_cni_args({"NOMAD_ALLOC_ID": "x"}, region="r", namespace="n", job_id="j", group="g", alloc_id="a")
    )
    assert over["NOMAD_ALLOC_ID"] == "a"  # "Add NOMAD_* after custom args so it cannot be overridden"


# --- ADD/CHECK/DEL routed by mode, and read back after a restart --------------------------------------


def test_a_cni_alloc_runs_its_conflist_with_its_args_and_is_found_again_after_a_restart(
    fake: FakeDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the agent's own check of the kernel's view is the root tests' (the fake plugins attach nothing)
    monkeypatch.setattr("agent.network.bridge.verify_network", lambda *a, **kw: [])
    fake.write("lab.conflist", "lab-net")
    spec = AttachSpec("cni/lab-net", (("IgnoreUnknown", "true"), ("NOMAD_ALLOC_ID", ALLOC)))
    ports = [PortAlloc("http", 25000, 80)]
    assert fake.networks().add(ALLOC, HOST_NETNS, ports, spec=spec) == "10.77.0.2"
    add = fake.calls()
    # no portmap in the conflist: the ports reach no plugin, and nothing fails (as Nomad's libcni)
    assert [(c["type"], c["cmd"], c["args"], c["rc"]) for c in add] == [
        ("fakenet", "ADD", f"IgnoreUnknown=true;NOMAD_ALLOC_ID={ALLOC}", None)
    ]
    assert (fake.cache / f"lab-net:{ALLOC}:eth0.json").is_file()

    after = fake.networks()  # an agent restart: nothing loaded, the mode not given
    assert after.has_result(ALLOC) and after.held_by(ALLOC) == "lab-net"
    fake.log.unlink()
    assert after.check(ALLOC, HOST_NETNS, ports, spec=spec) == []
    assert [(c["cmd"], c["args"]) for c in fake.calls()] == [("CHECK", spec.cni_args())]
    assert after.delete(ALLOC, HOST_NETNS, spec=BRIDGE) == []  # the kept result names the network
    assert [(c["cmd"], c["args"]) for c in fake.calls()][-1] == ("DEL", "")  # DEL: no args, as Nomad
    assert not after.has_result(ALLOC)


def test_ports_are_mapped_where_the_conflist_has_portmap(fake: FakeDir) -> None:
    fake.write("pm.conflist", "pm-net", portmap=True)
    fake.networks().add(ALLOC, HOST_NETNS, [PortAlloc("http", 25000, 80)], spec=AttachSpec("cni/pm-net"))
    mapped = [c["rc"] for c in fake.calls() if c["type"] == "fakepm"]
    assert mapped == [{"portMappings": [{"hostPort": 25000, "containerPort": 80, "protocol": "tcp"}]}]


def test_an_unknown_network_fails_the_add_and_bridge_mode_needs_the_bridge(fake: FakeDir) -> None:
    fake.write("lab.conflist", "lab-net")
    with pytest.raises(CniError, match=r"CNI network config not found for name \"nope\""):
        fake.networks().add(ALLOC, HOST_NETNS, [], spec=AttachSpec("cni/nope"))
    with pytest.raises(AgentError, match="bridge networking needs a CNI conflist"):
        fake.networks().add(ALLOC, HOST_NETNS, [], spec=BRIDGE)


def test_the_bridge_conflist_by_name_is_the_bridge_network_itself(fake: FakeDir) -> None:
    path = fake.write("nomad.conflist", "nomad")
    bridge = BridgeNetwork(CniNetwork(path, fake.plugins, fake.cache), "br0", run_check=False)
    assert fake.networks(bridge).named("nomad") is bridge


def test_the_restore_check_looks_for_a_bridge_only_where_the_conflist_has_one(tmp_path: Path) -> None:
    fake = FakeDir(tmp_path)
    for binary in ("macvlan", "bridge"):
        (fake.plugins / binary).write_text(FAKE_PLUGIN)
        (fake.plugins / binary).chmod(0o755)
    for name, plugin in (("mv", {"type": "macvlan"}), ("br", {"type": "bridge", "bridge": "fl9"})):
        (fake.conf / f"{name}.conflist").write_text(
            json.dumps({"cniVersion": "0.4.0", "name": name, "plugins": [plugin]})
        )
    assert bridge_of(CniNetwork(fake.conf / "mv.conflist", fake.plugins, fake.cache)) is None
    assert bridge_of(CniNetwork(fake.conf / "br.conflist", fake.plugins, fake.cache)) == "fl9"
    assert fake.networks().named("br").bridge == "fl9" and fake.networks().named("mv").bridge is None


def test_the_sweeper_is_given_the_cni_networks_with_kept_results(fake: FakeDir) -> None:
    fake.write("lab.conflist", "lab-net")
    fake.write("idle.conflist", "idle")
    fake.networks().add(ALLOC, HOST_NETNS, [], spec=AttachSpec("cni/lab-net"))
    restarted = fake.networks()
    assert [n.name for n in restarted.sweep_networks()] == ["lab-net"]
    sweeper = Sweeper(None, None, fake.cache.parent, more_networks=restarted.sweep_networks)
    assert [n.name for n in sweeper.networks] == ["lab-net"]
    assert [k.container_id for n in sweeper.networks for k in n.cached_ids()] == [ALLOC]


# --- the real plugins (root) --------------------------------------------------------------------------

PLUGIN_DIR = Path("/usr/lib/cni")
MV_NET, BR_NET = "flcnimv", "flcnibr"
MV_PARENT = "flcnidum0"
BR_BRIDGE = "flcnibr0"
MV_PREFIX, BR_PREFIX = "10.213.248.", "10.213.249."
ADMIN_CHAIN = "FLCNI-ADMIN"


def _why_not_root_ready() -> str | None:
    if os.geteuid() != 0:
        return "needs root (netns, links, iptables)"
    missing = [
        p for p in ("loopback", "macvlan", "bridge", "host-local", "portmap") if not (PLUGIN_DIR / p).exists()
    ]
    if missing:
        return f"CNI plugins missing in {PLUGIN_DIR}: {', '.join(missing)}"
    return None if shutil.which("ip") and shutil.which("iptables") else "ip or iptables is not installed"


def _scrub() -> None:
    scrub_test_network(network=BR_NET, subnet_prefix=BR_PREFIX, admin_chain=ADMIN_CHAIN, bridge=BR_BRIDGE)
    for c in iptables.list_cni_chains():
        if c.network == MV_NET:
            iptables.remove_chain(c.table, c.name)
    subprocess.run(["ip", "link", "del", MV_PARENT], capture_output=True, check=False)


class RealLab:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.conf = tmp / "net.d"
        self.conf.mkdir()
        self.ipam = tmp / "ipam"
        self.cache = tmp / "data" / "cni"
        self.spaces: list[str] = []
        self.ids: list[str] = []
        # the macvlan's parent: one end of a veth pair of the test's own (no dummy module needed)
        subprocess.run(
            ["ip", "link", "add", MV_PARENT, "type", "veth", "peer", "name", MV_PARENT[:-1] + "1"],
            check=True,
            capture_output=True,
        )
        subprocess.run(["ip", "link", "set", MV_PARENT, "up"], check=True, capture_output=True)
        macvlan = {
            "cniVersion": "0.4.0",
            "name": MV_NET,
            "plugins": [
                {"type": "loopback"},
                {
                    "type": "macvlan",
                    "master": MV_PARENT,
                    "mode": "bridge",
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": MV_PREFIX + "0/24"}]],
                        "dataDir": str(self.ipam),
                    },
                },
            ],
        }
        (self.conf / "40-macvlan.conflist").write_text(json.dumps(macvlan))
        bridge_conflist(
            self.conf / "50-bridge2.conflist",
            network=BR_NET,
            bridge=BR_BRIDGE,
            subnet=BR_PREFIX + "0/24",
            ipam_dir=self.ipam,
            admin_chain=ADMIN_CHAIN,
        )

    def networks(self) -> NetworkSet:
        return NetworkSet(None, self.conf, PLUGIN_DIR, self.cache, run_check=False)

    def alloc(self) -> tuple[str, Path]:
        alloc = str(uuid.uuid4())
        name = f"flcni-{alloc[:8]}"
        self.ids.append(alloc)
        self.spaces.append(name)
        return alloc, netns.create(name)

    def reserved(self, net: str) -> dict[str, str]:
        d = self.ipam / net
        return (
            {p.name: p.read_text().splitlines()[0] for p in d.iterdir() if p.name[0].isdigit()}
            if d.is_dir()
            else {}
        )


@pytest.fixture
def real(tmp_path: Path) -> Iterator[RealLab]:
    if reason := _why_not_root_ready():
        pytest.skip(reason)
    _scrub()
    lab = RealLab(tmp_path)
    try:
        yield lab
    finally:
        nets = lab.networks()
        for alloc in lab.ids:
            with contextlib.suppress(AgentError):
                nets.delete(alloc, None)
        for name in lab.spaces:
            netns.delete(name)
        _scrub()


@pytest.mark.root
@pytest.mark.parametrize("net", [MV_NET, BR_NET])
def test_add_check_del_of_a_cni_network_with_the_real_plugins(real: RealLab, net: str) -> None:
    alloc, ns = real.alloc()
    spec = AttachSpec(
        f"cni/{net}",
        plan_cni_args(
            {"LAB": "1"}, region="global", namespace="default", job_id="j", group="g", alloc_id=alloc
        ),
    )
    ports = [PortAlloc("http", 25731, 80)]
    address = real.networks().add(alloc, ns, ports, spec=spec)
    prefix = MV_PREFIX if net == MV_NET else BR_PREFIX
    assert address.startswith(prefix)
    assert real.reserved(net) == {address: alloc}

    restarted = real.networks()  # the agent's restart: the network is read from the kept result
    assert restarted.check(alloc, ns, ports, spec=spec) == []
    # the check is real: with the interface gone it says so (the restore then recreates the network)
    subprocess.run(
        ["ip", "netns", "exec", ns.name, "ip", "link", "del", "eth0"], check=True, capture_output=True
    )
    assert any("interface eth0 is missing" in d for d in restarted.check(alloc, ns, ports, spec=spec))
    assert restarted.delete(alloc, ns, spec=spec) == []
    assert real.reserved(net) == {} and not restarted.has_result(alloc)
    assert not [c for c in iptables.list_cni_chains() if c.network == net and c.container_id == alloc]


@pytest.mark.root
def test_the_sweeper_dels_a_dead_cni_allocs_result_reservation_and_chains(real: RealLab) -> None:
    alloc, ns = real.alloc()
    real.networks().add(alloc, ns, [PortAlloc("http", 25732, 80)], spec=AttachSpec(f"cni/{BR_NET}"))
    assert [c for c in iptables.list_cni_chains() if c.network == BR_NET and c.container_id == alloc]
    netns.delete(ns.name)  # the agent lost the alloc and its netns went with a reboot (nomad-12216)

    restarted = real.networks()
    sweeper = Sweeper(None, None, real.tmp / "data", more_networks=restarted.sweep_networks)
    observed = sweeper.observe()
    assert alloc in observed.cni_cache_ids
    # only this test's alloc is acted on: the controller may hold other agents' netns and cgroups
    planned = [r for r in plan_sweep([], observed) if r.owner == alloc]
    assert {r.kind for r in planned} == {"cni"}
    for r in planned:
        sweeper._remove(r)
    assert real.reserved(BR_NET) == {} and not restarted.has_result(alloc)
    assert not [c for c in iptables.list_cni_chains() if c.network == BR_NET and c.container_id == alloc]


# --- the group network's hostname and dns, and a cni/<name> alloc in the runner ------------------------


def _group_job(network: str, driver: str = "docker") -> str:
    body = "\n".join(network.split("; "))
    return f"""job "j" {{
  group "g" {{
    network {{
{body}
    }}
    task "t" {{
      driver = "{driver}"
      config {{
        image = "fieldlab/busybox:latest"
        command = "httpd"
      }}
    }}
  }}
}}"""


def test_hostname_and_dns_are_taken_for_a_bridge_or_cni_group_of_docker_tasks() -> None:
    dns = 'dns {\nservers = ["192.0.2.53"]\nsearches = ["lab.example"]\noptions = ["ndots:2"]\n}'
    for mode in ("bridge", "cni/lab-net"):
        net = (
            parse_jobspec(_group_job(f'mode = "{mode}"; hostname = "web-1"; {dns}'), source="t")
            .job.groups[0]
            .network
        )
        assert net is not None and net.hostname == "web-1"
        assert (net.dns_servers, net.dns_searches, net.dns_options) == (
            ("192.0.2.53",),
            ("lab.example",),
            ("ndots:2",),
        )


@pytest.mark.parametrize(
    ("network", "driver", "where", "said"),
    [
        ('mode = "host"; hostname = "web"', "docker", "hostname", 'cannot be set on task group using "host"'),
        (
            'mode = "bridge"; hostname = "web"',
            "exec",
            "hostname",
            "hostname is not currently supported on driver exec",
        ),
        (
            'mode = "bridge"; dns {\nservers = ["192.0.2.53"]\n}',
            "exec",
            "dns",
            "does not write a exec task's resolv.conf",
        ),
        (
            'mode = "bridge"; hostname = "not a name"',
            "docker",
            "hostname",
            "Hostname is not a valid DNS name",
        ),
        ('mode = "bridge"; hostname = "${NOMAD_ALLOC_INDEX}"', "docker", "hostname", "interpolation"),
        (
            'mode = "bridge"; dns {\nservers = ["dns.example"]\n}',
            "docker",
            "dns.servers[0]",
            "not an IP address",
        ),
    ],
)
def test_hostname_and_dns_where_there_is_no_pause_container_or_bad_are_refused(
    network: str, driver: str, where: str, said: str
) -> None:
    with pytest.raises(JobspecError) as err:
        parse_jobspec(_group_job(network, driver), source="t")
    assert any(p == f"job.j.group.g.network.{where}" and said in why for p, why in err.value.problems), (
        err.value.problems
    )


def test_the_pause_container_is_created_with_the_hostname_and_the_dns_set() -> None:
    assert pause_sandbox(NO_SANDBOX) == {}
    assert pause_sandbox(Sandbox("web", ("192.0.2.53",), (), ("ndots:2",))) == {
        "hostname": "web",
        "dns": ["192.0.2.53"],
        "dns_opt": ["ndots:2"],  # searches unset: the node's search line stays, as Nomad's
    }


def test_the_runner_gives_the_owner_the_sandbox_and_the_network_its_mode_and_args(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    network = FakeNetwork()
    net = Network(mode="cni/lab-net", cni_args=(("A", "1"),), hostname="web", dns_servers=("192.0.2.53",))
    group = Group(name="g", tasks=(Task(name="t", driver="docker", config={"image": "x"}),), network=net)
    job = Job(id="web", groups=(group,))
    rec = AllocRecord(id=ALLOC, job="web", group="g")
    runner = AllocRunner(node.deps(network), rec, job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    assert runner.bridge and node.pause.created  # a cni/<name> group has a netns of its own, as bridge
    assert node.pause.sandboxes == [Sandbox("web", ("192.0.2.53",))]
    (spec,) = network.specs
    assert spec.mode == "cni/lab-net" and spec.cni_name == "lab-net"
    args = dict(spec.args)
    assert args["A"] == "1" and args["NOMAD_ALLOC_ID"] == ALLOC and args["NOMAD_JOB_ID"] == "web"
    assert args["IgnoreUnknown"] == "true" and args["NOMAD_GROUP_NAME"] == "g"


@pytest.mark.root
def test_a_task_joining_the_pause_container_sees_its_hostname_resolv_conf_and_hosts(tmp_path: Path) -> None:
    from tests.agent_lab import build_workload_images, why_not_ready

    if reason := why_not_ready():
        pytest.skip(reason)
    build_workload_images(tmp_path)
    driver = DockerDriver(node_name="client9")
    alloc = str(uuid.uuid4())
    task_dir = tmp_path / "alloc" / "web"
    for d in ("local", "secrets"):
        (task_dir / d).mkdir(parents=True)
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    script = "hostname; cat /etc/resolv.conf; cat /etc/hosts"
    task = Task(
        "web", "docker", config={"image": "fieldlab/busybox:lab", "command": "sh", "args": ["-c", script]}
    )
    try:
        pause = driver.start_pause(
            "web", "g", alloc, sandbox=Sandbox("web-1", ("192.0.2.53",), ("lab.example",))
        )
        ctx = TaskContext(
            job="web",
            group="g",
            alloc_id=alloc,
            task=task,
            task_dir=task_dir,
            env={"NOMAD_ALLOC_IP": "10.9.0.7"},
            network_mode="bridge",
            netns_owner=pause,
        )
        handle = driver.start(ctx)
        c = driver.client.containers.get(handle.id)
        c.wait(timeout=30)
        lines = c.logs().decode().splitlines()
    finally:
        for name in (pause_name(alloc), f"web-{alloc}"):
            with contextlib.suppress(Exception):
                driver.client.containers.get(name).remove(force=True)
    assert lines[0] == "web-1"
    assert "nameserver 192.0.2.53" in lines and "search lab.example" in lines
    # Nomad's /etc/hosts of a group network: the alloc's address under the group's hostname
    assert "10.9.0.7 web-1" in lines and "127.0.0.1 localhost" in lines
    assert (task_dir / "hosts").read_text() == etc_hosts("10.9.0.7", "web-1")


def test_dns_is_taken_for_docker_tasks_in_any_mode_and_a_port_on_a_missing_host_network_fails_placement() -> (
    None
):
    dns = 'dns {\nservers = ["192.0.2.53"]\n}'
    job = parse_jobspec(
        _group_job(f'mode = "host"; {dns}; port "http" {{\nhost_network = "public"\n}}'), source="t"
    ).job
    net = job.groups[0].network
    assert net is not None and net.dns_servers == ("192.0.2.53",) and net.ports[0].host_network == "public"
    node = NodeFacts(id="n", name="client9", datacenter="dc1")
    assert refusals(job, node) == [
        (
            "job.j.group.g.network.port.http.host_network",
            'missing host network "public" for port "http": this client has only the "default" host'
            " network; Nomad would not place it here",
        )
    ]
    assert refusals(job, replace(node, host_networks=frozenset({"public"}))) == []


@pytest.mark.root
def test_a_docker_task_outside_a_pause_container_gets_the_groups_dns(tmp_path: Path) -> None:
    from tests.agent_lab import build_workload_images, why_not_ready

    if reason := why_not_ready():
        pytest.skip(reason)
    build_workload_images(tmp_path)
    driver = DockerDriver(node_name="client9")
    alloc = str(uuid.uuid4())
    task_dir = tmp_path / "alloc" / "web"
    for d in ("local", "secrets"):
        (task_dir / d).mkdir(parents=True)
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    task = Task(
        "web",
        "docker",
        config={"image": "fieldlab/busybox:lab", "command": "cat", "args": ["/etc/resolv.conf"]},
    )
    ctx = TaskContext(
        job="web",
        group="g",
        alloc_id=alloc,
        task=task,
        task_dir=task_dir,
        env={},
        network_mode="none",
        sandbox=Sandbox("", ("192.0.2.54",), (), ("ndots:3",)),
    )
    try:
        c = driver.client.containers.get(driver.start(ctx).id)
        c.wait(timeout=30)
        lines = c.logs().decode().splitlines()
    finally:
        with contextlib.suppress(Exception):
            driver.client.containers.get(f"web-{alloc}").remove(force=True)
    assert "nameserver 192.0.2.54" in lines and "options ndots:3" in lines
