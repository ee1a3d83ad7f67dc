"""Stale conntrack flows after an alloc's address changes (agent/network/conntrack.py, issue 12).

- the entry filter (`stale_flow`) over plain tuples, the CLI line parser, and what `BridgeNetwork` asks
  to be flushed at DEL and ADD: no root;
- the real flow (marked `root`): the real CNI plugins (bridge, host-local, firewall, portmap) on a bridge
  of this test's own (`flct0`, 10.213.246.0/24), a TCP server in the alloc's netns behind a host port, a
  client on the node connecting from a FIXED source port to the host port (portmap's OUTPUT DNAT, in the
  node's netns, where the conntrack entry lives). The client then loses its connection silently (as a
  restarted client does), the alloc moves (CNI DEL, new netns, CNI ADD: a new address), and the client
  reconnects from the same source port. Through the lower layer (`CniNetwork`, no cleanup) the SYN
  matches the old entry and goes to the old address; through `BridgeNetwork` it reaches the new one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.network import conntrack, netns
from agent.network.bridge import BridgeNetwork
from agent.network.cni import CniNetwork
from agent.network.conntrack import FlowEntry, FlowTarget, parse_cli_line, select_stale, stale_flow
from agent.network.result import CachedAttachment, CniError, CniResult, DelReport, PortMapping
from agent.structs.records import PortAlloc
from tests.cniconf import bridge_conflist, scrub_test_network

TCP, UDP, ICMP = socket.IPPROTO_TCP, socket.IPPROTO_UDP, socket.IPPROTO_ICMP
NODE = "10.213.246.1"  # the bridge's (gateway) address: one of the node's own
OLD, NEW = "10.213.246.2", "10.213.246.3"
HOST_PORT = 24680


def _dnat(proto: int, sport: int, to: str, *, dport: int = HOST_PORT, src: str = "10.213.9.9") -> FlowEntry:
    """A client's flow to the node's host port, DNATed to `to`:8080."""
    return FlowEntry(proto, src, NODE, sport, dport, to, src, 8080, sport)


# -- the filter (pure) ---------------------------------------------------------------------------


def test_at_del_every_flow_of_the_old_address_and_every_dnat_from_its_host_ports_is_stale() -> None:
    target = FlowTarget.of(addresses=[OLD + "/24"], host_ports=[HOST_PORT])
    assert target.addresses == {OLD}
    stale = [
        _dnat(TCP, 40000, OLD),  # the client's flow through the host port
        _dnat(UDP, 40001, OLD),
        _dnat(TCP, 40002, "10.213.246.77"),  # DNATed from the alloc's host port to anything else
        FlowEntry(TCP, "10.213.246.9", OLD, 5555, 9999, OLD, "10.213.246.9", 9999, 5555),  # direct
        FlowEntry(TCP, OLD, "192.0.2.7", 33000, 443, "192.0.2.7", NODE, 443, 33000),  # its own, masqueraded
        FlowEntry(ICMP, NODE, OLD, None, None, OLD, NODE, None, None),
        # translated to the old address by some other rule (found by reply source only)
        FlowEntry(TCP, "10.213.9.9", NODE, 40003, 7777, OLD, "10.213.9.9", 8080, 40003),
    ]
    kept = [
        # the node's own flow to a remote service that listens on a port with the host port's number
        FlowEntry(TCP, NODE, "192.0.2.7", 41000, HOST_PORT, "192.0.2.7", NODE, HOST_PORT, 41000),
        # a flow to the node itself on that port, never translated
        FlowEntry(TCP, "10.213.9.9", NODE, 41001, HOST_PORT, NODE, "10.213.9.9", HOST_PORT, 41001),
        _dnat(TCP, 41002, "10.213.246.50", dport=HOST_PORT + 1),  # another alloc's host port
        FlowEntry(UDP, "10.213.246.50", "192.0.2.53", 5353, 53, "192.0.2.53", NODE, 53, 5353),
    ]
    assert [stale_flow(e, target) for e in stale] == [True] * len(stale)
    assert [stale_flow(e, target) for e in kept] == [False] * len(kept)
    assert select_stale(kept + stale, target) == stale


def test_after_add_only_host_port_flows_not_sent_to_the_new_address_are_stale() -> None:
    target = FlowTarget.of(host_ports=[HOST_PORT], keep=[NEW + "/24"])
    assert target.keep == {NEW} and not target.addresses
    assert stale_flow(_dnat(TCP, 40000, OLD), target)
    assert stale_flow(_dnat(UDP, 40000, OLD), target)
    assert not stale_flow(_dnat(TCP, 40001, NEW), target)  # already to the new address: a live flow
    assert not stale_flow(_dnat(TCP, 40002, OLD, dport=HOST_PORT + 1), target)
    # an address to keep is never an old one, even if the caller names it as both
    both = FlowTarget.of(addresses=[NEW, OLD], host_ports=[HOST_PORT], keep=[NEW])
    assert both.addresses == {OLD}
    assert not stale_flow(_dnat(TCP, 40001, NEW), both)


def test_target_normalises_and_an_empty_one_selects_nothing() -> None:
    assert not FlowTarget.of(addresses=["", "not-an-address"], host_ports=[0, 70000])
    assert not FlowTarget()
    t = FlowTarget.of(addresses=["fd00::0002/64", "10.213.246.2"], host_ports=[80, 80])
    assert t.addresses == {"fd00::2", OLD} and t.host_ports == {80}
    assert "addresses" in t.describe() and "host ports 80" in t.describe()


def test_cli_lines_parse_into_entries() -> None:
    line = (
        "tcp      6 431998 ESTABLISHED src=10.213.246.1 dst=10.213.246.1 sport=40000 dport=24680 "
        "src=10.213.246.2 dst=10.213.246.1 sport=8080 dport=40000 [ASSURED] mark=0 use=1"
    )
    assert parse_cli_line(line) == FlowEntry(TCP, NODE, NODE, 40000, HOST_PORT, OLD, NODE, 8080, 40000)
    udp = "udp      17 29 src=10.213.9.9 dst=10.213.246.1 sport=5000 dport=24680 [UNREPLIED] src=10.213.246.2 dst=10.213.9.9 sport=53 dport=5000 mark=0 use=1"  # noqa: E501
    assert parse_cli_line(udp) == FlowEntry(
        UDP, "10.213.9.9", NODE, 5000, HOST_PORT, OLD, "10.213.9.9", 53, 5000
    )
    assert (
        parse_cli_line("icmp     1 29 src=1.1.1.1 dst=2.2.2.2 type=8 code=0 id=1 src=2.2.2.2 dst=1.1.1.1")
        is None
    )
    assert parse_cli_line("conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.") is None
    assert parse_cli_line("tcp 6 10 CLOSE src=1.1.1.1 dst=2.2.2.2 sport=1 dport=2") is None


def test_cleanup_never_raises_and_says_when_it_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    target = FlowTarget.of(addresses=[OLD], host_ports=[HOST_PORT])

    def unavailable(t: FlowTarget, r: conntrack.FlushReport) -> None:
        raise conntrack.ConntrackUnavailable("cannot open a ctnetlink socket: [Errno 93] no protocol")

    def boom(t: FlowTarget, r: conntrack.FlushReport) -> None:
        raise RuntimeError("surprise")

    monkeypatch.setattr(conntrack, "_netlink_flush", unavailable)
    monkeypatch.setattr(conntrack.shutil, "which", lambda name: None)
    with caplog.at_level(logging.INFO, logger="agent.network.conntrack"):
        report = conntrack.flush_stale_flows(target, owner="alloc a1")
    assert report.via == "" and report.deleted == 0
    assert report.errors == [
        "conntrack unavailable: netlink: cannot open a ctnetlink socket: [Errno 93] no protocol; "
        "CLI: the conntrack CLI is not installed"
    ]
    assert "falling back to the conntrack CLI" in caplog.text
    assert "alloc a1" in caplog.text and "deleted 0 of 0" in caplog.text

    monkeypatch.setattr(conntrack, "_netlink_flush", boom)
    report = conntrack.flush_stale_flows(target)
    assert report.errors == ["conntrack cleanup: RuntimeError: surprise"]
    assert conntrack.flush_stale_flows(FlowTarget()).via == ""  # nothing to clear: nothing tried


# -- what BridgeNetwork asks for (fake CNI) ----------------------------------------------------------


def _result(address: str) -> CniResult:
    return CniResult.from_dict(
        {
            "cniVersion": "0.4.0",
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
            "ips": [{"address": address + "/24", "interface": 0}],
        }
    )


class FakeCni:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.att: CachedAttachment | None = None

    def add(self, cid: str, ns: Any, port_mappings: Any = (), cni_args: str = "") -> CniResult:
        self.calls.append("ADD")
        return _result(NEW)

    def delete(self, cid: str, ns: Any) -> DelReport:
        self.calls.append("DEL")
        self.att = None
        return DelReport(cid, "eth0", had_cached_result=True, plugin_errors=["portmap: boom"])

    def cached_attachment(self, cid: str) -> CachedAttachment | None:
        if cid == "corrupt":
            raise CniError("unreadable cached CNI result")
        return self.att


def _bridge_with_fakes() -> tuple[BridgeNetwork, FakeCni, list[tuple[str, FlowTarget]]]:
    cni = FakeCni()
    flushed: list[tuple[str, FlowTarget]] = []

    def flush(target: FlowTarget, *, owner: str = "", why: str = "") -> None:
        cni.calls.append("FLUSH")
        flushed.append((why, target))

    return BridgeNetwork(cni, "flct0", run_check=False, flush_flows=flush), cni, flushed  # type: ignore[arg-type]


def test_bridge_network_clears_flows_after_del_and_after_add() -> None:
    net, cni, flushed = _bridge_with_fakes()
    cni.att = CachedAttachment(
        "flct", "a1", "eth0", "/run/netns/x", (PortMapping(HOST_PORT, 8080),), 0.0, _result(OLD)
    )
    # the recorded address is stale (another alloc's by now): the kept ADD result wins
    errors = net.delete(
        "a1", Path("/run/netns/x"), address="10.213.246.99", ports=[PortAlloc("http", 24681, 80)]
    )
    assert errors == ["portmap: boom"]
    assert cni.calls == ["DEL", "FLUSH"]
    assert flushed[-1] == ("after CNI DEL", FlowTarget.of([OLD], [HOST_PORT, 24681]))

    assert net.add("a1", Path("/run/netns/y"), [PortAlloc("http", HOST_PORT, 8080)]) == NEW
    assert cni.calls[-2:] == ["ADD", "FLUSH"]
    assert flushed[-1] == ("after CNI ADD", FlowTarget.of(host_ports=[HOST_PORT], keep=[NEW]))

    net.add("a2", Path("/run/netns/z"), [])  # no host port: nothing can be stale
    assert cni.calls[-1] == "ADD"


def test_bridge_network_uses_the_record_when_the_kept_result_is_gone() -> None:
    net, _, flushed = _bridge_with_fakes()
    net.delete("corrupt", None, address=OLD, ports=[PortAlloc("http", HOST_PORT, 8080)])
    assert flushed[-1] == ("after CNI DEL", FlowTarget.of([OLD], [HOST_PORT]))
    net.delete("gone", None)
    assert not flushed[-1][1]  # nothing known: nothing to clear


# -- the real flow (root) --------------------------------------------------------------------------

PLUGIN_DIR = Path("/usr/lib/cni")
NETWORK = "flct"
BRIDGE = "flct0"
SUBNET_PREFIX = "10.213.246."
ADMIN_CHAIN = "FLCT-ADMIN"
CONTAINER_PORT = 8080
TCP_REPAIR = getattr(socket, "TCP_REPAIR", 19)
BLACKHOLE_WAIT = 4.0  # how long a reconnect may take before it counts as blackholed

SERVER = textwrap.dedent(
    f"""
    import socket
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", {CONTAINER_PORT}))
    s.listen(16)
    print("ready", flush=True)
    held = []
    while True:
        c, _ = s.accept()
        c.sendall(("hello " + c.getsockname()[0] + "\\n").encode())
        held.append(c)  # keep every connection open, as a long-lived service does
    """
)


def _why_not_ready() -> str | None:
    if os.geteuid() != 0:
        return "needs root (netns, bridge, iptables, conntrack)"
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
    return conntrack.why_unavailable()


def _scrub() -> None:
    scrub_test_network(network=NETWORK, subnet_prefix=SUBNET_PREFIX, admin_chain=ADMIN_CHAIN, bridge=BRIDGE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    tmp: Path
    net: BridgeNetwork
    netns_names: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    servers: list[subprocess.Popen[str]] = field(default_factory=list)
    host_ports: list[int] = field(default_factory=list)
    addresses: set[str] = field(default_factory=set)

    def netns(self) -> Path:
        name = f"flct-{uuid.uuid4().hex[:8]}"
        self.netns_names.append(name)
        return netns.create(name)

    def serve(self, ns: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True
        )
        self.servers.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready and proc.stdout.readline().strip() == "ready"
        return proc


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    reason = _why_not_ready()
    if reason:
        pytest.skip(reason)
    _scrub()
    ipam = tmp_path / "ipam"
    conf = bridge_conflist(
        tmp_path / f"{NETWORK}.conflist",
        network=NETWORK,
        bridge=BRIDGE,
        subnet=SUBNET_PREFIX + "0/24",
        ipam_dir=ipam,
        admin_chain=ADMIN_CHAIN,
    )
    cni = CniNetwork(conf, PLUGIN_DIR, tmp_path / "cache")
    lab = Lab(tmp_path, BridgeNetwork(cni, BRIDGE, run_check=False))
    try:
        yield lab
    finally:
        for proc in lab.servers:
            proc.kill()
            proc.wait()
        for cid in lab.ids:
            with contextlib.suppress(CniError):
                cni.delete(cid)
        for name in lab.netns_names:
            netns.delete(name)
        # what the "without" runs left behind: this test's flows only
        conntrack.flush_stale_flows(FlowTarget.of(lab.addresses, lab.host_ports), owner="test leftovers")
        _scrub()


def _connect(sport: int, host_port: int, timeout: float) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(timeout)
    try:
        s.bind(("0.0.0.0", sport))
        s.connect((NODE, host_port))
    except OSError:
        s.close()
        raise
    return s


def _hello(s: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(100)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def _vanish(s: socket.socket) -> None:
    """Close without a FIN or RST on the wire (TCP repair mode): the client side of the flow is gone
    as after a client restart, and the node's conntrack entry stays ESTABLISHED."""
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)
    s.close()


def _entries_of(sport: int) -> list[Any]:
    from pyroute2 import Conntrack
    from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

    with Conntrack() as ct:
        return list(ct.dump_entries(tuple_orig=NFCTAttrTuple(proto=TCP, sport=sport)))


@dataclass
class Reconnect:
    ok: bool
    seconds: float
    answer: str


def _reconnect(sport: int, host_port: int) -> Reconnect:
    t0 = time.monotonic()
    try:
        with _connect(sport, host_port, BLACKHOLE_WAIT) as s:
            answer = _hello(s)
            ok = answer.startswith("hello ")
    except OSError as exc:
        answer = (
            f"{type(exc).__name__}: {exc.strerror or exc}" if exc.errno != errno.ETIMEDOUT else "timed out"
        )
        ok = False
    return Reconnect(ok, time.monotonic() - t0, answer)


def _move(lab: Lab, *, cleanup: str) -> tuple[str, str, int, int]:
    """An alloc with a host port and a client connected to it from a fixed source port; the client
    vanishes, the alloc moves to a new address. `cleanup`: "none" runs the lower layer (CniNetwork)
    for DEL and ADD, "del"/"add" run BridgeNetwork for that step only, "both" for both.
    Returns the old and the new address, the host port and the client's source port."""
    net, cni = lab.net, lab.net.cni
    cid = f"flct{uuid.uuid4().hex[:12]}"
    lab.ids.append(cid)
    host_port, sport = _free_port(), _free_port()
    lab.host_ports.append(host_port)
    ports = [PortAlloc("http", host_port, CONTAINER_PORT)]
    mappings = [PortMapping(host_port, CONTAINER_PORT)]

    ns1 = lab.netns()
    old = net.add(cid, ns1, ports)
    lab.addresses.add(old)
    server1 = lab.serve(ns1)
    with _connect(sport, host_port, 5) as s:
        assert _hello(s) == f"hello {old}"
        live = _entries_of(sport)
        assert [e.tuple_reply.saddr for e in live] == [old], live
        _vanish(s)

    # the recovery: DEL of the old attachment, the old netns gone, ADD in a new one
    if cleanup in ("del", "both"):
        assert net.delete(cid, ns1) == []
    else:
        assert cni.delete(cid, ns1).ok
    server1.kill()  # its FIN goes nowhere: the veth is gone
    server1.wait()
    netns.delete(ns1.name)
    ns2 = lab.netns()
    if cleanup in ("add", "both"):
        new = net.add(cid, ns2, ports)
    else:
        new = cni.add(cid, ns2, port_mappings=mappings).primary_ip or ""
    lab.addresses.add(new)
    assert new and new != old
    lab.serve(ns2)
    return old, new, host_port, sport


@pytest.mark.root
def test_without_the_cleanup_a_reconnect_from_the_same_source_port_is_blackholed(lab: Lab) -> None:
    old, new, host_port, sport = _move(lab, cleanup="none")
    stale = _entries_of(sport)
    assert [(e.tuple_reply.saddr, e.protoinfo.state_name()) for e in stale] == [(old, "ESTABLISHED")], stale
    print(f"\nstale entry left by the move: {stale[0]} timeout={stale[0].timeout}s")

    # another source port reaches the new address at once: the DNAT rules are right, the entry is not
    other = _reconnect(_free_port(), host_port)
    assert other.ok and other.answer == f"hello {new}", other

    blackholed = _reconnect(sport, host_port)
    print(f"reconnect from the same source port WITHOUT cleanup: {blackholed}")
    assert not blackholed.ok, blackholed
    assert [e.tuple_reply.saddr for e in _entries_of(sport)] == [old]  # still pointed at the old address

    # the cleanup alone (what BridgeNetwork runs) is what makes the difference
    report = conntrack.flush_stale_flows(FlowTarget.of(host_ports=[host_port], keep=[new]), owner="test")
    assert report.ok and report.via == "netlink" and report.deleted >= 1, report
    after = _reconnect(sport, host_port)
    print(f"reconnect after the cleanup: {after}")
    assert after.ok and after.answer == f"hello {new}", after
    assert after.seconds < 1.0, after


@pytest.mark.root
@pytest.mark.parametrize("cleanup", ["both", "del", "add"])
def test_with_the_cleanup_the_reconnect_reaches_the_new_address_at_once(
    lab: Lab, cleanup: str, caplog: pytest.LogCaptureFixture
) -> None:
    """ "del": what recovery and teardown clear; "add": what the next ADD on the host port clears
    (a later alloc reusing the port after an agent that left the entries)."""
    with caplog.at_level(logging.INFO, logger="agent.network.conntrack"):
        _, new, host_port, sport = _move(lab, cleanup=cleanup)
    assert "via netlink" in caplog.text and "deleted 1 of 1" in caplog.text, caplog.text
    assert _entries_of(sport) == []
    result = _reconnect(sport, host_port)
    print(f"\nreconnect from the same source port WITH cleanup ({cleanup}): {result}")
    assert result.ok and result.answer == f"hello {new}", result
    assert result.seconds < 1.0, result
    assert [e.tuple_reply.saddr for e in _entries_of(sport)] == [new]
