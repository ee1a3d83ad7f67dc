"""The floors `make bench` divides its figures by, measured in the same sitting on the controller:
one CNI ADD of the lab's plugin chain (real plugins, a netns of its own, on the agent bench's test
bridge 10.213.251.0/24), one PKI issue from a real OpenBao (pki_int, 2048-bit RSA as the lab
issues), and a bare agent start (the real daemon, empty state, until its API answers). Each is the
median of a few runs; the bare node boot is measured by scripts/bench_lab.py with the lab.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.network import netns
from agent.network.cni import CniNetwork
from scripts.benchlib import AGENT_START, CNI_ADD, PKI_ISSUE, Figure, record
from tests.agent_lab import PLUGIN_DIR, AgentLab, Daemon, why_not_ready
from tests.openbao_server import OpenBaoServer
from tests.pki import TestCA

RUNS = 5


def _median(f: Callable[[], float], runs: int = RUNS) -> tuple[float, list[float]]:
    got = [f() for _ in range(runs)]
    return statistics.median(got), got


def cni_add(lab: AgentLab) -> float:
    net = CniNetwork(lab.conflist, PLUGIN_DIR, lab.root / "cni-cache")
    name = f"flbench-{uuid.uuid4().hex[:8]}"
    path = netns.create(name)
    cid = f"flbench{uuid.uuid4().hex[:12]}"
    try:
        t0 = time.monotonic()
        net.add(cid, path)
        return time.monotonic() - t0
    finally:
        net.delete(cid)
        netns.delete(name)


def pki_issue(bao: OpenBaoServer) -> float:
    body = json.dumps({"common_name": "floor.service.fieldlab", "ttl": "1h"}).encode()
    req = urllib.request.Request(  # noqa: S310 - the bench's own OpenBao on 127.0.0.1
        f"{bao.address}/v1/pki_int/issue/fieldlab-workload",
        data=body,
        headers={"X-Vault-Token": bao.root_token, "Content-Type": "application/json"},
        method="POST",
    )
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
        data = json.load(resp)
    took = time.monotonic() - t0
    if "certificate" not in data.get("data", {}):
        raise RuntimeError(f"PKI issue returned no certificate: {sorted(data)}")
    return took


def agent_start(root: Path) -> float:
    lab = AgentLab(root / f"agent-{uuid.uuid4().hex[:6]}")
    d = Daemon(lab, TestCA(lab.root), lab.root)
    try:
        return d.start()
    finally:
        d.stop()
        lab.cleanup()


def main() -> int:
    reason = why_not_ready()
    if reason:
        print(f"bench-floors: cannot run: {reason}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="fieldlab-bench-floors-"))
    lab = AgentLab(root / "cni")
    try:
        cni, cni_runs = _median(lambda: cni_add(lab))
    finally:
        lab.cleanup()
    print(f"  one CNI ADD: median {cni * 1000:.0f} ms of {[round(x * 1000) for x in cni_runs]}", flush=True)
    record(Figure(CNI_ADD, cni * 1000, "ms"))
    (root / "openbao").mkdir()
    bao = OpenBaoServer(root / "openbao")
    bao.start()
    try:
        pki, pki_runs = _median(lambda: pki_issue(bao))
    finally:
        bao.stop()
    print(f"  one PKI issue: median {pki * 1000:.0f} ms of {[round(x * 1000) for x in pki_runs]}", flush=True)
    record(Figure(PKI_ISSUE, pki * 1000, "ms"))
    start, start_runs = _median(lambda: agent_start(root), runs=3)
    print(f"  bare agent start: median {start:.2f} s of {[round(x, 2) for x in start_runs]}", flush=True)
    record(Figure(AGENT_START, start, "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
