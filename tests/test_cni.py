"""agent.network: the CNI plugins called per the spec, netns, the agent's own verification, CNI chains.

Two halves:

- fake plugins (small Python scripts in tmp, no root): how the agent drives a plugin chain (env vars,
  config on stdin, prevResult, runtimeConfig, reverse DEL, errors, timeouts, the result cache);
- the real plugins in /usr/lib/cni (root, marked `root`): a conflist written here with its own bridge
  `fltest0`, subnet 10.213.250.0/24 and host-local dataDir in tmp, in network namespaces created here.
  Each test documents what Debian's plugins 1.1.1 actually do on this machine. Traffic only goes to
  the test's own bridge address and its own netns. Fixture teardown removes the netns, the bridge, the
  test network's chains and rules and the files, also when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.errors import AgentError
from agent.network import iptables, netns
from agent.network.cni import CniNetwork
from agent.network.plugins import Version, check_supported, plugin_version
from agent.network.result import (
    CniAlreadyAdded,
    CniCheckFailed,
    CniError,
    CniPluginError,
    CniTimeout,
    PortMapping,
)
from agent.network.verify import verify_network
from tests.cniconf import bridge_conflist, scrub_test_network

# ---------------------------------------------------------------------------------------------------
# Fake plugins: one script, behaviour from its own config section.

FAKE_PLUGIN = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import json, os, subprocess, sys, time
    conf = json.load(sys.stdin)
    cmd = os.environ.get("CNI_COMMAND")
    env = {k: v for k, v in os.environ.items() if k.startswith("CNI_") or k == "PATH"}
    with open(conf["log"], "a") as f:
        f.write(json.dumps({"type": conf["type"], "cmd": cmd, "env": env, "conf": conf}) + "\\n")
    if conf.get("hang") == cmd:
        child = subprocess.Popen(["sleep", "60"])
        open(conf["log"] + ".child", "w").write(str(child.pid))
        time.sleep(60)
    fail = (conf.get("fail") or {}).get(cmd)
    if fail:
        print(json.dumps({"cniVersion": conf["cniVersion"], **fail}))
        sys.exit(1)
    if cmd == "ADD":
        print(json.dumps(conf.get("result") or conf["prevResult"]))
    """
)

FAKE_RESULT = {
    "cniVersion": "0.4.0",
    "interfaces": [
        {"name": "br9", "mac": "aa:bb:cc:00:00:01"},
        {"name": "veth9", "mac": "aa:bb:cc:00:00:02"},
        {"name": "eth0", "mac": "aa:bb:cc:00:00:03", "sandbox": "/proc/self/ns/net"},
    ],
    "ips": [{"version": "4", "interface": 2, "address": "10.9.0.2/24", "gateway": "10.9.0.1"}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {},
}
HOST_NETNS = "/proc/self/ns/net"  # a real netns path; fake plugins never touch it


@dataclass
class Fake:
    dir: Path
    log: Path
    plugin_dir: Path
    cache_dir: Path

    def conflist(self, *plugins: dict[str, Any], name: str = "fakenet", extra: Any = None) -> Path:
        doc = {"cniVersion": "0.4.0", "name": name, "plugins": [{"log": str(self.log), **p} for p in plugins]}
        doc.update(extra or {})
        path = self.dir / f"{name}.conflist"
        path.write_text(json.dumps(doc))
        return path

    def network(self, *plugins: dict[str, Any], timeout: float = 10.0) -> CniNetwork:
        return CniNetwork(
            self.conflist(*plugins), self.plugin_dir, self.cache_dir, timeout=timeout, clean_iptables=False
        )

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    for name in ("fakea", "fakeb", "fakepm"):
        p = plugin_dir / name
        p.write_text(FAKE_PLUGIN)
        p.chmod(0o755)
    return Fake(tmp_path, tmp_path / "calls.jsonl", plugin_dir, tmp_path / "cache")


def _chain3(**over: Any) -> tuple[dict[str, Any], ...]:
    a = {"type": "fakea", "result": FAKE_RESULT, **over.get("a", {})}
    b = {"type": "fakeb", **over.get("b", {})}
    pm = {"type": "fakepm", "capabilities": {"portMappings": True}, **over.get("pm", {})}
    return a, b, pm


def test_conflist_errors_name_the_file_and_the_plugin(fake: Fake) -> None:
    bad = fake.dir / "bad.conflist"
    bad.write_text('{"cniVersion": "0.4.0",\n "name": "x", plugins: []}')
    with pytest.raises(
        CniError, match=r"bad\.conflist: invalid JSON at line 2 column 15: Expecting property name"
    ):
        CniNetwork(bad, fake.plugin_dir, fake.cache_dir)

    missing = fake.conflist({"type": "fakea"}, {"type": "firewall"})
    with pytest.raises(
        CniError, match=r"fakenet\.conflist: plugins\[1\] \(firewall\): plugin binary .*/plugins/firewall"
    ):
        CniNetwork(missing, fake.plugin_dir, fake.cache_dir)

    ipam = fake.conflist({"type": "fakea", "ipam": {"type": "host-local"}})
    with pytest.raises(CniError, match=r"plugins\[0\]\.ipam: plugin binary .*/host-local is missing"):
        CniNetwork(ipam, fake.plugin_dir, fake.cache_dir)

    ok = fake.conflist({"type": "fakea"})
    with pytest.raises(
        CniError, match=r"CNI plugin dir /nonexistent/cni does not exist \(needed by .*fakenet\.conflist\)"
    ):
        CniNetwork(ok, "/nonexistent/cni", fake.cache_dir)

    with pytest.raises(CniError, match=r"nope\.conflist: cannot read"):
        CniNetwork(fake.dir / "nope.conflist", fake.plugin_dir, fake.cache_dir)

    old = fake.conflist({"type": "fakea"}, extra={"cniVersion": "0.2.0"})
    with pytest.raises(CniError, match=r"cniVersion '0\.2\.0' is not supported"):
        CniNetwork(old, fake.plugin_dir, fake.cache_dir)

    single = fake.dir / "single.conf"
    single.write_text(json.dumps({"cniVersion": "0.4.0", "name": "x", "type": "fakea"}))
    with pytest.raises(CniError, match="not a CNI network configuration list"):
        CniNetwork(single, fake.plugin_dir, fake.cache_dir)
    assert issubclass(CniError, AgentError)


def test_add_runs_the_chain_per_spec_and_persists_the_result(fake: Fake) -> None:
    net = fake.network(*_chain3())
    pm = [PortMapping(28080, 8080), PortMapping(5353, 53, "udp")]
    result = net.add("ctr-1", HOST_NETNS, "eth0", pm, cni_args="IgnoreUnknown=1")

    calls = fake.calls()
    assert [(c["type"], c["cmd"]) for c in calls] == [("fakea", "ADD"), ("fakeb", "ADD"), ("fakepm", "ADD")]
    for c in calls:
        assert c["env"]["CNI_CONTAINERID"] == "ctr-1"
        assert c["env"]["CNI_NETNS"] == HOST_NETNS
        assert c["env"]["CNI_IFNAME"] == "eth0"
        assert c["env"]["CNI_PATH"] == str(fake.plugin_dir)
        assert c["env"]["CNI_ARGS"] == "IgnoreUnknown=1"
        assert "/usr/sbin" in c["env"]["PATH"].split(":")  # portmap and firewall exec iptables
        assert c["conf"]["name"] == "fakenet" and c["conf"]["cniVersion"] == "0.4.0"
    assert "prevResult" not in calls[0]["conf"]
    assert calls[1]["conf"]["prevResult"] == FAKE_RESULT
    assert calls[2]["conf"]["prevResult"] == FAKE_RESULT
    # runtimeConfig only for the plugin whose capabilities ask for portMappings
    assert "runtimeConfig" not in calls[0]["conf"] and "runtimeConfig" not in calls[1]["conf"]
    assert calls[2]["conf"]["runtimeConfig"] == {
        "portMappings": [
            {"hostPort": 28080, "containerPort": 8080, "protocol": "tcp"},
            {"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
        ]
    }

    assert result.primary_ip == "10.9.0.2"
    assert [i.name for i in result.host_interfaces()] == ["br9", "veth9"]
    assert result.sandbox_interface("eth0") is not None
    assert [p.address for p in result.ips_of("eth0")] == ["10.9.0.2/24"]
    assert result.routes[0].dst == "0.0.0.0/0"

    files = list(fake.cache_dir.iterdir())
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(fake.cache_dir.stat().st_mode) == 0o700
    # an agent restart: a new instance reads the same result, netns and mappings back
    again = CniNetwork(net.conflist_path, fake.plugin_dir, fake.cache_dir, clean_iptables=False)
    att = again.cached_attachment("ctr-1", "eth0")
    assert att is not None and att.result == result and att.netns == HOST_NETNS
    assert list(att.port_mappings) == pm
    assert again.cached_ids() == [("ctr-1", "eth0")]


def test_second_add_without_del_is_refused_before_any_plugin_runs(fake: Fake) -> None:
    net = fake.network(*_chain3())
    net.add("ctr-1", HOST_NETNS)
    n = len(fake.calls())
    with pytest.raises(CniAlreadyAdded, match=r"already attached .* DEL it before adding it again"):
        net.add("ctr-1", HOST_NETNS)
    assert len(fake.calls()) == n


def test_check_passes_the_cached_result_and_reports_each_failing_plugin(fake: Fake) -> None:
    fail = {"CHECK": {"code": 999, "msg": "could not check ipv6 dnat: chain CNI-DN-x not found"}}
    net = fake.network(*_chain3(pm={"fail": fail}))
    with pytest.raises(CniError, match="no cached ADD result"):
        net.check("ctr-1", HOST_NETNS)
    net.add("ctr-1", HOST_NETNS, port_mappings=[PortMapping(28080, 8080)])
    with pytest.raises(CniCheckFailed) as exc:
        net.check("ctr-1")  # netns defaults to the cached one
    assert [(f.plugin, f.command, f.code) for f in exc.value.failures] == [("fakepm", "CHECK", 999)]
    assert "fakepm: could not check ipv6 dnat: chain CNI-DN-x not found" in str(exc.value)
    checks = [c for c in fake.calls() if c["cmd"] == "CHECK"]
    assert [c["type"] for c in checks] == ["fakea", "fakeb", "fakepm"]
    assert all(c["conf"]["prevResult"] == FAKE_RESULT for c in checks)
    assert all(c["env"]["CNI_NETNS"] == HOST_NETNS for c in checks)
    assert checks[2]["conf"]["runtimeConfig"]["portMappings"][0]["hostPort"] == 28080


def test_check_is_skipped_when_the_conflist_disables_it(fake: Fake) -> None:
    path = fake.conflist(
        *_chain3(pm={"fail": {"CHECK": {"code": 1, "msg": "x"}}}), extra={"disableCheck": True}
    )
    net = CniNetwork(path, fake.plugin_dir, fake.cache_dir, clean_iptables=False)
    net.add("ctr-1", HOST_NETNS)
    net.check("ctr-1")
    assert not [c for c in fake.calls() if c["cmd"] == "CHECK"]


def test_del_runs_in_reverse_goes_on_past_a_failure_and_drops_the_cache(fake: Fake) -> None:
    net = fake.network(
        *_chain3(b={"fail": {"DEL": {"code": 11, "msg": "try again later", "details": "busy"}}})
    )
    net.add("ctr-1", HOST_NETNS, port_mappings=[PortMapping(28080, 8080)])
    report = net.delete("ctr-1", HOST_NETNS)
    dels = [c for c in fake.calls() if c["cmd"] == "DEL"]
    assert [c["type"] for c in dels] == ["fakepm", "fakeb", "fakea"]
    assert all(c["conf"]["prevResult"] == FAKE_RESULT for c in dels)
    assert dels[0]["conf"]["runtimeConfig"]["portMappings"][0]["containerPort"] == 8080
    assert not report.ok and report.had_cached_result
    assert report.plugin_errors == [
        "CNI fakeb DEL for container ctr-1 failed: try again later (code 11): busy"
    ]
    assert net.cached_result("ctr-1") is None and net.cached_ids() == []

    # repeated, without a cache: still runs every plugin, without prevResult, and does not raise
    again = net.delete("ctr-1", HOST_NETNS)
    assert not again.had_cached_result
    last = [c for c in fake.calls() if c["cmd"] == "DEL"][-3:]
    assert [c["type"] for c in last] == ["fakepm", "fakeb", "fakea"]
    assert all("prevResult" not in c["conf"] for c in last)


def test_a_del_never_runs_in_the_hosts_netns_through_a_pid_that_is_another_process_now(fake: Fake) -> None:
    """A pause container's netns as /proc/<pid>/ns/net: once the container is gone its pid may be a
    host process's (seen in a rehearsal: the host's lo was taken down). Such a path is refused, and
    a DEL without a netns of its own does not fall back to the ADD's /proc path."""
    host_process = subprocess.Popen(["sleep", "60"])
    try:
        stale = f"/proc/{host_process.pid}/ns/net"
        net = fake.network(*_chain3())
        with pytest.raises(CniError, match=r"refusing CNI ADD in /proc/\d+/ns/net: .* agent's own network"):
            net.add("ctr-1", stale)
        assert fake.calls() == [], "a plugin ran in the host's netns"

        net.add("ctr-2", f"/proc/{os.getpid()}/ns/net")  # (fake plugins touch no netns)
        report = net.delete("ctr-2", None)  # the alloc's netns is gone: no path of its own
        dels = [c for c in fake.calls() if c["cmd"] == "DEL"]
        assert [c["env"]["CNI_NETNS"] for c in dels] == ["", "", ""], "DEL fell back to the ADD's /proc path"
        assert report.had_cached_result

        report = net.delete("ctr-3", stale)
        assert len(report.plugin_errors) == 3 and all("refusing CNI DEL" in e for e in report.plugin_errors)
        assert len([c for c in fake.calls() if c["cmd"] == "DEL"]) == 3, "a plugin ran in the host's netns"
    finally:
        host_process.kill()
        host_process.wait()


def test_plugin_error_object_becomes_cni_error_and_add_cleans_up(fake: Fake) -> None:
    fail = {"ADD": {"code": 999, "msg": "failed to allocate for range 0: boom"}}
    net = fake.network(*_chain3(b={"fail": fail}))
    with pytest.raises(CniPluginError) as exc:
        net.add("ctr-1", HOST_NETNS)
    err = exc.value
    assert (err.plugin, err.command, err.code, err.msg) == (
        "fakeb",
        "ADD",
        999,
        "failed to allocate for range 0: boom",
    )
    assert (
        str(err)
        == "CNI fakeb ADD for container ctr-1 failed: failed to allocate for range 0: boom (code 999)"
    )
    # per the spec: DEL for every plugin of the list in reverse order, with the partial result
    dels = [c for c in fake.calls() if c["cmd"] == "DEL"]
    assert [c["type"] for c in dels] == ["fakepm", "fakeb", "fakea"]
    assert dels[0]["conf"]["prevResult"] == FAKE_RESULT
    assert err.cleanup_errors == [] and net.cached_ids() == []


def test_non_json_failure_and_bad_output_are_reported(fake: Fake) -> None:
    (fake.plugin_dir / "fakea").write_text("#!/bin/sh\necho 'plain failure' >&2\nexit 3\n")
    net = fake.network({"type": "fakea"})
    with pytest.raises(
        CniPluginError, match="fakea ADD for container c1 failed: exit status 3: plain failure"
    ):
        net.add("c1", HOST_NETNS, cleanup_on_failure=False)
    (fake.plugin_dir / "fakea").write_text("#!/bin/sh\necho 'not json'\n")
    with pytest.raises(CniError, match="fakea ADD for container c1 printed invalid JSON"):
        net.add("c1", HOST_NETNS, cleanup_on_failure=False)


def test_hanging_plugin_is_killed_with_its_children(fake: Fake) -> None:
    net = fake.network({"type": "fakea", "result": FAKE_RESULT, "hang": "ADD"}, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(
        CniTimeout, match=r"CNI fakea ADD for container c1 did not finish within 1s and was killed"
    ):
        net.add("c1", HOST_NETNS, cleanup_on_failure=False)
    assert time.monotonic() - started < 8
    child = int(Path(str(fake.log) + ".child").read_text())
    deadline = time.monotonic() + 3
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_invalid_arguments(fake: Fake) -> None:
    net = fake.network(*_chain3())
    with pytest.raises(CniError, match="invalid container id"):
        net.add("../x", HOST_NETNS)
    with pytest.raises(CniError, match="invalid interface name"):
        net.add("c1", HOST_NETNS, "averylonginterfacename")
    with pytest.raises(CniError, match="is not a network namespace"):
        net.add("c1", fake.dir / "no-such-netns")
    with pytest.raises(CniError, match="not a port number"):
        PortMapping(0, 80)
    only_a = fake.network({"type": "fakea", "result": FAKE_RESULT})
    with pytest.raises(CniError, match="no plugin has the portMappings capability"):
        only_a.add("c1", HOST_NETNS, port_mappings=[PortMapping(28080, 80)])


def test_versions_and_the_check_gate(fake: Fake) -> None:
    assert Version.parse("1.1.1+ds1-3+b5") == Version(1, 1, 1)
    assert Version.parse("1:1.4.0-1") == Version(1, 4, 0)
    assert Version.parse("v1.3.0") == Version(1, 3, 0)
    assert Version.parse("unknown") is None
    assert not check_supported(None)
    assert not check_supported(Version(1, 2, 9))
    assert check_supported(Version(1, 3, 0)) and check_supported(Version(2, 0, 0))
    # plugins outside any Debian package: their --version's first line, protocol versions ignored
    bridge = fake.plugin_dir / "bridge"
    bridge.write_text(
        "#!/bin/sh\necho 'CNI bridge plugin v1.3.0'\necho 'CNI protocol versions supported: 0.1.0, 1.0.0'\n"
    )
    bridge.chmod(0o755)
    assert plugin_version(fake.plugin_dir) == Version(1, 3, 0)
    bridge.write_text(
        "#!/bin/sh\necho 'CNI bridge plugin version unknown'\necho 'CNI protocol versions supported: 1.0.0'\n"
    )
    assert plugin_version(fake.plugin_dir) is None
    assert plugin_version(fake.plugin_dir, declared="1.4.1") == Version(1, 4, 1)
    assert plugin_version(fake.dir / "nothing") is None


def test_plugin_version_of_the_debian_package() -> None:
    if not (Path("/usr/lib/cni/bridge").exists() and shutil.which("dpkg-query")):
        pytest.skip("no Debian containernetworking-plugins on this machine")
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "containernetworking-plugins"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    if not out:
        pytest.skip("containernetworking-plugins is not installed as a Debian package")
    # 1.1.1's own --version says "version unknown"; the package knows (1.1.1+ds1-3+b5 here)
    said = subprocess.run(["/usr/lib/cni/bridge", "--version"], capture_output=True, text=True, check=False)
    assert "version unknown" in said.stdout + said.stderr  # on stderr
    assert plugin_version("/usr/lib/cni") == Version.parse(out)


# ---------------------------------------------------------------------------------------------------
# Real plugins, real netns (root).

PLUGIN_DIR = Path("/usr/lib/cni")
NETWORK = "fltest"
BRIDGE = "fltest0"
SUBNET_PREFIX = "10.213.250."
GATEWAY = "10.213.250.1"
ADMIN_CHAIN = "FLTEST-ADMIN"
CONTAINER_PORT = 8080


def _why_not_root_ready() -> str | None:
    if os.geteuid() != 0:
        return "needs root (netns, bridge, iptables)"
    missing = [
        p
        for p in ("loopback", "bridge", "host-local", "firewall", "portmap")
        if not (PLUGIN_DIR / p).exists()
    ]
    if missing:
        return f"CNI plugins missing in {PLUGIN_DIR}: {', '.join(missing)}"
    for tool in ("ip", "iptables", "iptables-save"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


def _conflist(tmp: Path, ipam_dir: Path, *, portmap: bool = True) -> Path:
    path = tmp / (f"{NETWORK}.conflist" if portmap else f"{NETWORK}-noportmap.conflist")
    return bridge_conflist(
        path,
        network=NETWORK,
        bridge=BRIDGE,
        subnet=SUBNET_PREFIX + "0/24",
        ipam_dir=ipam_dir,
        admin_chain=ADMIN_CHAIN,
        portmap=portmap,
    )


def _scrub() -> None:
    scrub_test_network(network=NETWORK, subnet_prefix=SUBNET_PREFIX, admin_chain=ADMIN_CHAIN, bridge=BRIDGE)


@dataclass
class Lab:
    tmp: Path
    ipam_dir: Path
    net: CniNetwork
    netns_names: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def netns(self) -> Path:
        name = f"fltest-{uuid.uuid4().hex[:8]}"
        self.netns_names.append(name)
        return netns.create(name)

    def cid(self) -> str:
        cid = f"fltest{uuid.uuid4().hex[:12]}"
        self.ids.append(cid)
        return cid

    def reservations(self) -> dict[str, str]:
        d = self.ipam_dir / NETWORK
        if not d.is_dir():
            return {}
        return {p.name: p.read_bytes().decode() for p in d.iterdir() if p.name.startswith(SUBNET_PREFIX)}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    reason = _why_not_root_ready()
    if reason:
        pytest.skip(reason)
    _scrub()  # leftovers of an interrupted earlier run
    ipam_dir = tmp_path / "ipam"
    lab = Lab(tmp_path, ipam_dir, CniNetwork(_conflist(tmp_path, ipam_dir), PLUGIN_DIR, tmp_path / "cache"))
    try:
        yield lab
    finally:
        for cid in lab.ids:
            with contextlib.suppress(CniError):
                lab.net.delete(cid)
        for name in lab.netns_names:
            netns.delete(name)
        _scrub()


def _ip_netns(name: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", name, "ip", *args], check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _nat_chains() -> set[str]:
    return set(iptables.read_table("nat").chains)


needs_root = pytest.mark.root


@pytest.mark.root
def test_a_del_falls_back_to_the_adds_netns_only_while_it_still_is_one(fake: Fake) -> None:
    """A DEL given no netns runs in the ADD's (a named netns, docker's sandbox) while that path is
    still a live netns; once it is gone (docker removes a dead container's sandbox file, or leaves it
    a plain file for a while), the plugins get none and release the address only."""
    name = f"fl-del-{os.getpid()}"
    path = str(netns.create(name))
    try:
        net = fake.network(*_chain3())
        net.add("ctr-live", path)
        net.add("ctr-gone", path)
        net.delete("ctr-live", None)
        live = [c["env"]["CNI_NETNS"] for c in fake.calls() if c["cmd"] == "DEL"]
        assert live == [path] * 3, "a DEL without a path of its own must run in the ADD's live netns"
    finally:
        netns.delete(name)
    net.delete("ctr-gone", None)
    gone = [c["env"]["CNI_NETNS"] for c in fake.calls() if c["cmd"] == "DEL"][3:]
    assert gone == ["", "", ""], f"DEL ran in a netns that is no more: {gone}"


@needs_root
def test_netns_create_identity_and_idempotent_delete(lab: Lab) -> None:
    path = lab.netns()
    name = path.name
    assert netns.exists(name) and name in netns.list_names() and netns.is_netns(path)
    with pytest.raises(netns.NetnsError, match="already exists"):
        netns.create(name)
    assert netns.create(name, exist_ok=True) == path
    proc = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while netns.pid_netns_id(proc.pid) != netns.netns_id(path) and time.monotonic() < deadline:
            time.sleep(0.02)  # until ip has setns'd and exec'd
        assert netns.pid_netns_id(proc.pid) == netns.netns_id(path)
        assert netns.pid_netns_id(os.getpid()) != netns.netns_id(path)
        assert netns.same_netns(f"/proc/{proc.pid}/ns/net", path)
    finally:
        proc.kill()
        proc.wait()
    assert netns.delete(name) is True
    assert netns.delete(name) is False
    assert not netns.exists(name) and not netns.same_netns(path, "/proc/self/ns/net")
    with pytest.raises(netns.NetnsError, match="invalid name"):
        netns.netns_path("../etc")


@needs_root
def test_a_socket_made_inside_a_netns_sees_that_netns_and_no_thread_stays_there(lab: Lab) -> None:
    from pyroute2 import IPRoute

    path = lab.netns()
    _ip_netns(path.name, "link", "add", "flnsa", "type", "veth", "peer", "name", "flnsb")
    host = netns.netns_id("/proc/thread-self/ns/net")
    seen: dict[str, object] = {}

    def inspect(tag: str) -> None:
        ipr = netns.create_inside(path, IPRoute)
        with ipr:
            seen[tag] = bool(ipr.link_lookup(ifname="flnsa"))
        seen[tag + " back home"] = netns.netns_id("/proc/thread-self/ns/net") == host

    inspect("main")
    worker = threading.Thread(target=inspect, args=("worker",))
    worker.start()
    worker.join(10)
    assert seen == {"main": True, "main back home": True, "worker": True, "worker back home": True}
    with IPRoute() as ipr:  # the interface exists only inside: the host's socket does not see it
        assert not ipr.link_lookup(ifname="flnsa")
    with pytest.raises(netns.NetnsError, match="cannot open"):
        netns.create_inside(lab.tmp / "no-such-netns", IPRoute)
    assert netns.netns_id("/proc/thread-self/ns/net") == host


@needs_root
def test_add_gives_an_address_a_reservation_and_verifies_clean(lab: Lab) -> None:
    path, cid = lab.netns(), lab.cid()
    pm = [PortMapping(_free_port(), CONTAINER_PORT)]
    result = lab.net.add(cid, path, "eth0", pm)
    ip = result.primary_ip
    assert ip is not None and ip.startswith(SUBNET_PREFIX) and ip != GATEWAY
    assert result.ips[0].gateway == GATEWAY
    assert {i.name for i in result.host_interfaces()} >= {BRIDGE}
    # host-local 1.1.1 writes "<container id>\r\n<ifname>" into <dataDir>/<network>/<ip>
    assert lab.reservations() == {ip: f"{cid}\r\neth0"}
    assert [(r.ip, r.container_id, r.ifname) for r in lab.net.ipam_reservations()] == [(ip, cid, "eth0")]
    assert lab.net.cached_result(cid) == result
    assert verify_network(path, result, BRIDGE, pm) == []
    names = iptables.chain_names(NETWORK, cid)
    chains = {(c.name, c.kind, c.container_id) for c in iptables.list_cni_chains() if c.network == NETWORK}
    assert chains == {(names["masq"], "masq", cid), (names["dnat"], "dnat", cid)}


@needs_root
def test_verify_reports_exactly_what_differs(lab: Lab) -> None:
    path, cid = lab.netns(), lab.cid()
    pm = [PortMapping(_free_port(), CONTAINER_PORT)]
    result = lab.net.add(cid, path, "eth0", pm)
    ip = result.ips[0].address

    _ip_netns(path.name, "route", "del", "default")
    assert verify_network(path, result, BRIDGE, pm) == [f"no IPv4 default route inside netns {path}"]
    _ip_netns(path.name, "route", "add", "default", "via", GATEWAY)
    assert verify_network(path, result, BRIDGE, pm) == []

    # Deleting the address also takes the default route with it (the kernel drops routes whose
    # gateway is no longer reachable): two differences, both named.
    _ip_netns(path.name, "addr", "del", ip, "dev", "eth0")
    assert verify_network(path, result, BRIDGE, pm) == [
        f"interface eth0 inside netns {path} lacks address {ip} (has: none)",
        f"no IPv4 default route inside netns {path}",
    ]
    _ip_netns(path.name, "addr", "add", ip, "dev", "eth0")
    _ip_netns(path.name, "route", "add", "default", "via", GATEWAY)
    assert verify_network(path, result, BRIDGE, pm) == []

    veth = next(i.name for i in result.host_interfaces() if i.name != BRIDGE)
    subprocess.run(["ip", "link", "set", veth, "nomaster"], check=True)
    assert verify_network(path, result, BRIDGE, pm) == [
        f"host veth {veth} is not on bridge {BRIDGE} (it is on no bridge)"
    ]
    subprocess.run(["ip", "link", "set", veth, "master", BRIDGE], check=True)
    assert verify_network(path, result, BRIDGE, pm) == []

    # The interface by its name inside (one request): down, then under another name, then back.
    _ip_netns(path.name, "link", "set", "eth0", "down")  # the kernel drops its routes with it
    assert verify_network(path, result, BRIDGE, pm) == [
        f"interface eth0 inside netns {path} is down",
        f"no IPv4 default route inside netns {path}",
    ]
    _ip_netns(path.name, "link", "set", "eth0", "name", "eth9")
    assert verify_network(path, result, BRIDGE, pm) == [f"interface eth0 is missing inside netns {path}"]
    _ip_netns(path.name, "link", "set", "eth9", "name", "eth0")
    _ip_netns(path.name, "link", "set", "eth0", "up")
    _ip_netns(path.name, "route", "add", "default", "via", GATEWAY)
    assert verify_network(path, result, BRIDGE, pm) == []
    # The bridge by its name on the host: a bridge of another name is not there.
    assert verify_network(path, result, BRIDGE + "x", pm) == [f"bridge {BRIDGE}x is missing on the host"]

    dn = iptables.chain_names(NETWORK, cid)["dnat"]
    removed = iptables.remove_chain("nat", dn)
    assert removed[-1] == f"chain nat/{dn}" and len(removed) == 2  # the chain and its CNI-HOSTPORT-DNAT jump
    assert verify_network(path, result, BRIDGE, pm) == [
        f"no portmap DNAT rule for tcp host port {pm[0].host_port} -> {result.primary_ip}:{CONTAINER_PORT}"
    ]

    netns.delete(path.name)  # as after a reboot: the netns, its eth0 and the veth pair are gone
    assert verify_network(path, result, BRIDGE, pm) == [
        f"netns {path} is missing",
        f"no portmap DNAT rule for tcp host port {pm[0].host_port} -> {result.primary_ip}:{CONTAINER_PORT}",
    ]


@needs_root
def test_check_on_plugins_1_1_1(lab: Lab) -> None:
    """What CNI CHECK does with Debian's plugins 1.1.1 here: why the agent gates it off (< 1.3.0)."""
    version = plugin_version(PLUGIN_DIR)
    assert not check_supported(version)
    if version != Version(1, 1, 1):
        pytest.skip(f"documents plugins 1.1.1; {PLUGIN_DIR} has {version}")
    path, cid = lab.netns(), lab.cid()
    lab.net.add(cid, path, "eth0", [PortMapping(_free_port(), CONTAINER_PORT)])
    with pytest.raises(CniCheckFailed) as exc:
        lab.net.check(cid, path)
    failures = {f.plugin: f for f in exc.value.failures}
    # portmap CHECK always fails on an IPv4-only setup (fixed upstream in 1.3.0):
    dn = iptables.chain_names(NETWORK, cid)["dnat"]
    assert failures["portmap"].msg == f"could not check ipv6 dnat: chain {dn} not found in iptables table nat"
    assert failures["portmap"].code == 999
    udev = Path("/run/udev/control").exists()
    if udev:
        # with udevd's MACAddressPolicy=persistent the host veth MAC changes after ADD
        assert set(failures) <= {"portmap", "bridge"}
        if "bridge" in failures:
            assert "Mac doesn't match" in failures["bridge"].msg
    else:
        # no udevd on this controller: bridge, host-local, loopback and firewall CHECK pass
        assert set(failures) == {"portmap"}

        no_pm = CniNetwork(_conflist(lab.tmp, lab.ipam_dir, portmap=False), PLUGIN_DIR, lab.tmp / "cache2")
        cid2 = lab.cid()
        ns2 = lab.netns()
        no_pm.add(cid2, ns2)
        no_pm.check(cid2, ns2)  # without portmap, CHECK passes
        assert no_pm.delete(cid2, ns2).ok


@needs_root
def test_mapped_port_answers_through_the_bridge_address(lab: Lab) -> None:
    """portmap's DNAT applies to locally generated traffic through OUTPUT -> CNI-HOSTPORT-DNAT for any
    local address. The test connects to the host's own address on its bridge (the gateway,
    10.213.250.1) rather than 127.0.0.1: that stays on the test's bridge and needs no route_localnet."""
    path, cid = lab.netns(), lab.cid()
    host_port = _free_port()
    result = lab.net.add(cid, path, "eth0", [PortMapping(host_port, CONTAINER_PORT)])
    server = textwrap.dedent(
        f"""
        import socket
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", {CONTAINER_PORT}))
        s.listen(1)
        s.settimeout(15)
        print("ready", flush=True)
        c, peer = s.accept()
        c.sendall(("hello " + peer[0]).encode())
        c.close()
        """
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", path.name, sys.executable, "-c", server], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready and proc.stdout.readline().strip() == "ready"
        with socket.create_connection((GATEWAY, host_port), timeout=5) as conn:
            answer = conn.recv(100).decode()
        # the connection arrives from the bridge address (portmap's SNAT mark + masquerade)
        assert answer == f"hello {GATEWAY}", answer
        assert result.primary_ip is not None
    finally:
        proc.kill()
        proc.wait()


@needs_root
def test_del_removes_reservation_chains_and_cache_and_repeats(lab: Lab) -> None:
    path, cid = lab.netns(), lab.cid()
    lab.net.add(cid, path, "eth0", [PortMapping(_free_port(), CONTAINER_PORT)])
    names = iptables.chain_names(NETWORK, cid)
    assert set(names.values()) <= _nat_chains()

    report = lab.net.delete(cid, path)
    assert report.ok and report.had_cached_result
    # the plugins removed everything themselves; the agent only dropped its cache
    assert report.cleaned_up == [f"cached result {lab.net.cache_dir}/{NETWORK}:{cid}:eth0.json"]
    assert lab.reservations() == {}
    assert not set(names.values()) & _nat_chains()
    assert lab.net.cached_ids() == []
    link = subprocess.run(
        ["ip", "netns", "exec", path.name, "ip", "link", "show", "eth0"], capture_output=True, check=False
    )
    assert link.returncode != 0  # bridge DEL removed the veth pair

    again = lab.net.delete(cid, path)
    assert again.ok and not again.had_cached_result and again.cleaned_up == []


@needs_root
def test_del_after_the_netns_is_gone_cleans_ipam_and_iptables(lab: Lab) -> None:
    """As after a reboot or a dead pause container: the netns is gone, DEL must still clean up."""
    path, cid = lab.netns(), lab.cid()
    lab.net.add(cid, path, "eth0", [PortMapping(_free_port(), CONTAINER_PORT)])
    names = iptables.chain_names(NETWORK, cid)
    netns.delete(path.name)

    report = lab.net.delete(cid, path)
    assert report.ok, report.plugin_errors
    # bridge 1.1.1 DEL returns success without tearing down its ipMasq chain when the netns is gone
    # (nomad-6385 family); the agent removed it and the POSTROUTING jump itself:
    assert f"chain nat/{names['masq']}" in report.cleaned_up
    assert any(item.startswith("jump -t nat -A POSTROUTING") for item in report.cleaned_up)
    assert lab.reservations() == {}
    assert not set(names.values()) & _nat_chains()
    assert not [c for c in iptables.list_cni_chains() if c.container_id == cid]
    assert lab.net.delete(cid, path).ok


@needs_root
def test_second_add_for_the_same_id_trips_host_local(lab: Lab) -> None:
    """nomad-11272/12216: a new netns for the same container id while its reservation is still held."""
    cid = lab.cid()
    first = lab.net.add(cid, lab.netns())
    ns2 = lab.netns()
    with pytest.raises(CniAlreadyAdded):  # the agent's guard: its own cached result says "DEL first"
        lab.net.add(cid, ns2)

    lab.net.cache_path(cid).unlink()  # the cache is lost, the reservation is not
    with pytest.raises(CniPluginError) as exc:
        lab.net.add(cid, ns2)
    assert (exc.value.plugin, exc.value.command, exc.value.code) == ("bridge", "ADD", 999)
    assert exc.value.msg == (
        f"failed to allocate for range 0: {first.primary_ip} has been allocated to {cid}, "
        "duplicate allocation is not allowed"
    )
    # the remedy: DEL (releases the id's reservation and chains), then ADD again
    lab.net.delete(cid, ns2)
    again = lab.net.add(cid, ns2)
    assert again.primary_ip is not None and lab.reservations() == {again.primary_ip: f"{cid}\r\neth0"}


@needs_root
def test_iptables_helper_finds_owners_and_removes_chains_with_their_jumps(lab: Lab) -> None:
    dead, live = "fltestdeadbeef", "fltestalive01"
    masq = iptables.chain_names(NETWORK, dead)["masq"]
    stray_dn = iptables.chain_names(NETWORK, "fltestnocomment")["dnat"]
    live_dn = iptables.chain_names(NETWORK, live)["dnat"]
    comment = f'name: "{NETWORK}" id: "{dead}"'
    cmds = [
        ["-t", "nat", "-N", masq],
        [
            "-t",
            "nat",
            "-A",
            masq,
            "-d",
            SUBNET_PREFIX + "0/24",
            "-m",
            "comment",
            "--comment",
            comment,
            "-j",
            "ACCEPT",
        ],
        [
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            SUBNET_PREFIX + "250/32",
            "-m",
            "comment",
            "--comment",
            comment,
            "-j",
            masq,
        ],
        ["-t", "nat", "-N", stray_dn],
        ["-t", "nat", "-N", live_dn],
    ]
    for args in cmds:
        subprocess.run(["iptables", "-w", *args], check=True)
    try:
        assert iptables.chain_owner("nat", masq) == (NETWORK, dead)
        orphans = {c.name for c in iptables.orphan_chains(NETWORK, [live])}
        assert {masq, stray_dn} <= orphans and live_dn not in orphans

        removed = iptables.remove_chain("nat", masq)
        assert removed[0].startswith("jump -t nat -A POSTROUTING -s 10.213.250.250/32")
        assert removed[-1] == f"chain nat/{masq}"
        nat = iptables.read_table("nat")
        assert masq not in nat.chains and not nat.jumps_to(masq)
        assert iptables.remove_chain("nat", masq) == []  # idempotent
        assert iptables.cleanup_container(NETWORK, "fltestnocomment") == [f"chain nat/{stray_dn}"]
        with pytest.raises(iptables.IptablesError, match="refusing"):
            iptables.remove_chain("nat", "CNI-HOSTPORT-DNAT")
    finally:
        for chain in (masq, stray_dn, live_dn):
            iptables.remove_chain("nat", chain)


@needs_root
def test_teardown_when_plugin_dels_fail_still_leaves_nothing(lab: Lab) -> None:
    """bridge and firewall DEL fail (plugins swapped for failing ones after ADD): DEL goes on, the agent
    removes the chains, the firewall's CNI-FORWARD rules and the host-local reservation itself."""
    plugin_dir = lab.tmp / "plugins"
    plugin_dir.mkdir()
    for p in PLUGIN_DIR.iterdir():
        (plugin_dir / p.name).symlink_to(p)
    net = CniNetwork(lab.net.conflist_path, plugin_dir, lab.tmp / "cache-swapped")
    path, cid = lab.netns(), lab.cid()
    result = net.add(cid, path, "eth0", [PortMapping(_free_port(), CONTAINER_PORT)])
    ip = f"{result.primary_ip}/32"
    assert [r for r in iptables.read_table("filter").rules_in("CNI-FORWARD") if r.option("-s", "-d") == ip]
    for name in ("bridge", "firewall"):
        (plugin_dir / name).unlink()
        (plugin_dir / name).write_text(
            '#!/bin/sh\necho \'{"code": 100, "msg": "simulated DEL failure"}\'\nexit 1\n'
        )
        (plugin_dir / name).chmod(0o755)

    report = net.delete(cid, path)
    assert report.plugin_errors == [
        f"CNI firewall DEL for container {cid} failed: simulated DEL failure (code 100)",
        f"CNI bridge DEL for container {cid} failed: simulated DEL failure (code 100)",
    ]
    names = iptables.chain_names(NETWORK, cid)
    assert f"chain nat/{names['masq']}" in report.cleaned_up  # bridge's ipMasq chain
    assert f"reservation {lab.ipam_dir}/{NETWORK}/{result.primary_ip}" in report.cleaned_up
    assert len([c for c in report.cleaned_up if c.startswith("rule -t filter -A CNI-FORWARD")]) == 2
    assert lab.reservations() == {} and net.cached_ids() == []
    assert not [c for c in iptables.list_cni_chains() if c.container_id == cid]
    assert not [
        r for r in iptables.read_table("filter").rules_in("CNI-FORWARD") if r.option("-s", "-d") == ip
    ]
