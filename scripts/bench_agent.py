"""`make bench-agent`: restore time after an agent restart with N running allocs, the task restarts
that restart caused (must be 0) and the agent's RSS. Runs the real daemon (`fieldlab-agent run`)
on the controller against real dockerd and CNI, on the test bridge 10.213.251.0/24.

Prints figures; asserts nothing about speed (these machines are noisy): targets are 50 allocs
restored within 3 s and RSS under 80 MB.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agent_lab import AgentLab, Daemon, build_workload_images, why_not_ready
from tests.pki import TestCA

JOB = """job "bench-{i}" {{
  group "g" {{
    network {{
      mode = "bridge"
      port "http" {{ to = 80 }}
    }}
    task "web" {{
      driver = "docker"
      config {{
        image   = "fieldlab/busybox:latest"
        command = "httpd"
        args    = ["-f", "-p", "80"]
        ports   = ["http"]
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
  }}
}}
"""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(sizes: list[int]) -> int:
    reason = why_not_ready()
    if reason:
        print(f"bench-agent: cannot run: {reason}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="fieldlab-bench-"))
    build_workload_images(root)
    rows = []
    for n in sizes:
        lab = AgentLab(root / f"lab-{n}")
        ca = TestCA(lab.root)
        d = Daemon(lab, ca, lab.root)
        try:
            d.start()
            t0 = time.monotonic()
            for i in range(n):
                d.api.request("POST", "/v1/jobs", {"jobspec": JOB.format(i=i)})
            setup = time.monotonic() - t0
            allocs = d.api.request("GET", "/v1/allocations")
            assert sum(a["status"] == "running" for a in allocs) == n, [a["status"] for a in allocs]
            d.stop()
            wall = d.start()
            restore = d.metric("fieldlab_agent_restore_seconds")
            allocs = d.api.request("GET", "/v1/allocations")
            restarts = sum(t["restarts"] for a in allocs for t in a["tasks"].values())
            running = sum(a["status"] == "running" for a in allocs)
            rss = _rss_mb(d.proc.pid) if d.proc else 0.0
            rows.append((n, setup, restore, wall, running, restarts, rss))
            print(
                f"  {n:>3} allocs: started in {setup:6.1f}s; after restart: restore {restore:5.2f}s, "
                f"agent up in {wall:5.2f}s, {running}/{n} running, task restarts {restarts}, "
                f"RSS {rss:5.1f} MB",
                flush=True,
            )
        finally:
            for i in range(n):
                try:
                    d.api.request("DELETE", f"/v1/job/bench-{i}")
                except Exception as exc:
                    print(f"  cleanup bench-{i}: {exc}")
            d.stop()
            lab.cleanup()
    print(
        "\nallocs  restore_s  agent_up_s  running  task_restarts  rss_mb"
        "   (targets: 50 in <3 s, 0 restarts, <80 MB)"
    )
    for n, _setup, restore, wall, running, restarts, rss in rows:
        print(f"{n:>6}  {restore:9.2f}  {wall:10.2f}  {running:>7}  {restarts:>13}  {rss:6.1f}")
    return 0 if all(r[5] == 0 and r[4] == r[0] for r in rows) else 1


if __name__ == "__main__":
    sizes = [int(x) for x in os.environ.get("BENCH_ALLOCS", "1,10,50").split(",")]
    sys.exit(run(sizes))
