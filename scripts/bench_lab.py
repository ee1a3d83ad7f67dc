"""`make bench-lab`: what a lab costs on this machine, through the same `fieldlab lab` commands a user
types, on a lab of its own (`bench`, 10.213.102.0/24, a server and 2 clients):

- floor: the bare nodes boot (the `nodes` phase of `lab up --no-provision`: containers created and
  started, sshd answering on each);
- cold lab-up: the cached node images removed first (bare and baked), so the image build and the
  bake run (BENCH_COLD=0 skips it: it takes minutes and rebuilds the images other labs start from);
- warm lab-up: the images cached, nothing else (the lab was taken down); and, for comparison, a
  warm lab-up without the bake (`--no-bake`: every role on bare nodes, as before baking;
  BENCH_UNBAKED=0 skips it);
- converge: `lab up` again on the running lab (every role, site.yml, nothing left to change), the
  median of BENCH_CONVERGES=3;
- reboot -> reachable: a clean and a hard reboot of client1 until it answers with a new boot id.

Each lab-up's own phase table (timings.json) is printed. Prints figures with their targets (warm
lab-up <= 60 s, converge <= 20 s); asserts nothing about speed. Refuses to run while another lab is
up (two labs on 2 cores measure each other).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab.config import LabPaths
from lab.providers.docker import LABEL
from scripts.benchlib import NODE_BOOT, Figure, record

LAB = os.environ.get("BENCH_LAB", "bench")
SUBNET = os.environ.get("BENCH_SUBNET", "10.213.102.0/24")
COLD = os.environ.get("BENCH_COLD", "1") != "0"
UNBAKED = os.environ.get("BENCH_UNBAKED", "1") != "0"  # the lab-up before baking, for comparison
CONVERGES = int(os.environ.get("BENCH_CONVERGES", "3"))  # one converge moves by seconds: the median
FIELDLAB = str(Path(sys.executable).parent / "fieldlab")


def fieldlab(*args: str, lab: bool = True) -> float:
    """One `fieldlab lab ...` command (on the bench lab), its output shown as it comes; its wall time."""
    argv = [FIELDLAB, "lab", *args, *(["--lab", LAB] if lab else [])]
    print(f"\n$ {' '.join(argv[1:])}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.run(argv, check=False, env={**os.environ, "SUBNET": SUBNET}).returncode
    took = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"bench-lab: `{' '.join(argv[1:])}` exited {rc} after {took:.0f}s")
    return took


def last_run(paths: LabPaths) -> dict[str, Any]:
    runs = json.loads(paths.timings.read_text())
    return runs[-1] if runs else {}


def phase(run: dict[str, Any], name: str) -> float:
    for p in run.get("phases", []):
        if p["name"] == name:
            return float(p["seconds"])
    raise SystemExit(f"bench-lab: no phase {name!r} in the run's timings")


def phases(run: dict[str, Any]) -> str:
    return ", ".join(f"{p['name']} {p['seconds']:.0f}s" for p in run.get("phases", []) if not p.get("parent"))


def other_labs() -> list[str]:
    import docker

    client = docker.from_env()
    names = {c.labels.get(LABEL, "") for c in client.containers.list(filters={"label": LABEL})}
    return sorted(n for n in names if n and n != LAB)


def main() -> int:
    if os.geteuid() != 0:
        print("bench-lab: cannot run: the docker provider needs root")
        return 2
    others = other_labs()
    if others:
        print(f"bench-lab: cannot run while lab(s) {', '.join(others)} are up (make lab-down LAB=...)")
        return 2
    paths = LabPaths(LAB)
    if paths.lab_file.exists():
        fieldlab("down")
    results: list[str] = []
    try:
        _measure(paths, results)
    finally:
        if paths.lab_file.exists():
            fieldlab("down")
    print("\nbench-lab: " + ", ".join(results))
    return 0


def _measure(paths: LabPaths, results: list[str]) -> None:
    """Every figure in order, on the bench lab (taken down by the caller)."""
    fieldlab("image", lab=False)  # built now if missing: the floor is the boot, not the image build
    fieldlab("up", "--no-provision", "--clients", "2")
    boot = phase(last_run(paths), "nodes")
    record(Figure(NODE_BOOT, boot, "s"))
    results.append(f"bare nodes boot {boot:.1f}s")
    fieldlab("down")
    if COLD:
        fieldlab("down", "--image")
        cold = fieldlab("up", "--clients", "2")
        run = last_run(paths)
        print(f"  cold lab-up {cold:.1f}s: {phases(run)}", flush=True)
        record(Figure("lab-up, cold (images built and baked)", cold, "s", "", NODE_BOOT))
        results.append(f"cold {cold:.1f}s")
        fieldlab("down")
    warm = fieldlab("up", "--clients", "2")
    run = last_run(paths)
    print(f"  warm lab-up {warm:.1f}s: {phases(run)}", flush=True)
    record(Figure("lab-up, warm (images cached)", warm, "s", "<= 60 s", NODE_BOOT))
    results.append(f"warm {warm:.1f}s")
    if UNBAKED:
        fieldlab("down")
        unbaked = fieldlab("up", "--clients", "2", "--no-bake")
        print(f"  unbaked lab-up {unbaked:.1f}s: {phases(last_run(paths))}", flush=True)
        record(Figure("lab-up, warm without the bake (every role)", unbaked, "s", "", NODE_BOOT))
        results.append(f"unbaked {unbaked:.1f}s")
        fieldlab("down")
        fieldlab("up", "--clients", "2")
    converges = []
    for _ in range(CONVERGES):
        converges.append(fieldlab("up", "--clients", "2"))
        print(f"  converge {converges[-1]:.1f}s: {phases(last_run(paths))}", flush=True)
    conv = statistics.median(converges)
    record(Figure("converge (lab-up on the running lab)", conv, "s", "<= 20 s", NODE_BOOT))
    results.append(f"converge {conv:.1f}s (median of {', '.join(f'{c:.1f}' for c in converges)})")
    for hard in (False, True):
        kind = "hard" if hard else "clean"
        took = _reboot("client1", hard=hard)
        print(f"  {kind} reboot of client1 -> reachable with a new boot id: {took:.1f}s", flush=True)
        record(Figure(f"reboot -> reachable ({kind})", took, "s", "", NODE_BOOT))
        results.append(f"{kind} reboot {took:.1f}s")


def _reboot(node: str, *, hard: bool) -> float:
    from lab.cli import _need_record
    from lab.providers import provider_for

    paths = LabPaths(LAB)
    rec = _need_record(paths)
    return provider_for(rec.provider).reboot(rec, paths, node, hard=hard)


if __name__ == "__main__":
    sys.exit(main())
