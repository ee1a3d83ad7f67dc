"""`make bench-agent`: restore time after an agent restart with N running allocs, the task restarts
that restart caused (must be 0) and the agent's RSS. Runs the real daemon (`fieldlab-agent run`)
on the controller against real dockerd and CNI, on the test bridge 10.213.251.0/24.

Prints figures; asserts nothing about speed (these machines are noisy): targets are 50 allocs
restored within 3 s and RSS under 80 MB.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.client import ApiClient
from lab.waits import wait_until
from tests.agent_lab import BRIDGE, NETWORK, AgentLab, build_workload_images, why_not_ready
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


class Daemon:
    def __init__(self, lab: AgentLab, ca: TestCA, root: Path) -> None:
        srv = ca.issue("bench.agent.fieldlab", server=True)
        op = ca.issue("operator.fieldlab", server=False)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.config = root / "config.json"
        self.config.write_text(
            json.dumps(
                {
                    "node_name": "bench",
                    "data_dir": str(lab.data_dir),
                    "bind_address": "127.0.0.1",
                    "port": self.port,
                    "tls": {"cert_file": str(srv.cert), "key_file": str(srv.key), "ca_file": str(ca.ca_file)},
                    "cni_conf_dir": str(lab.root),
                    "cni_network": NETWORK,
                    "cni_bridge": BRIDGE,
                    "log_level": "WARNING",
                }
            )
        )
        self.api = ApiClient(f"https://127.0.0.1:{self.port}", str(ca.ca_file), str(op.cert), str(op.key))
        self.log = root / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        t0 = time.monotonic()
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "fieldlab-agent"), "--config", str(self.config), "run"],
                stdout=fh,
                stderr=fh,
            )

        def healthy() -> tuple[bool | None, str]:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited {self.proc.returncode}; see {self.log}")
            try:
                self.api.request("GET", "/v1/jobs")
                return True, "up"
            except Exception as exc:
                return None, str(exc)

        wait_until(healthy, timeout=300, what="agent API", interval=0.1)
        return time.monotonic() - t0

    def metric(self, name: str) -> float:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context(cafile=self.api.ca_file)
        ctx.load_cert_chain(self.api.cert_file, self.api.key_file)
        with urllib.request.urlopen(f"{self.api.address}/v1/metrics", context=ctx, timeout=10) as r:  # noqa: S310
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return float("nan")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


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
