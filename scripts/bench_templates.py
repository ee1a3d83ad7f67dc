"""`make bench-templates`: latency from a changed secret to the change_mode action delivered
(p50, p99 over at least BENCH_DELIVERIES=30 deliveries; splay 0) with 1 and 100 templates in one
agent, the render pass's length, and Vault requests per re-issue cycle and per agent restart (one
per dynamic template: no thundering herd). Real OpenBao, real exec tasks; prints figures, asserts
nothing about speed (target: 100 templates, p99 <= 500 ms)."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.vaultclient import VaultClient
from lab.waits import wait_until
from tests.agent_lab import AgentLab, why_not_ready
from tests.openbao_server import JOB_PROBE, OpenBaoServer

PKI = "pki_int/issue/fieldlab-workload"
TTL = os.environ.get("BENCH_TTL", "6s")
FIELD = "serial_number"  # re-issued at 60-80 % of the TTL: a cycle every ~4 s
DELIVERIES = int(os.environ.get("BENCH_DELIVERIES", "30"))  # at least this many before a p99 is printed
MEASURE_TIMEOUT = 900.0  # seconds to gather them (a named bound, polled)


def job(n: int) -> str:
    tpls = "\n".join(
        f"""      template {{
        data          = <<EOT
{{{{ with secret "{PKI}" "common_name=t{i}.service.fieldlab" "ttl={TTL}" -}}}}
{{{{ .Data.{FIELD} }}}}{{{{ end }}}}
EOT
        destination   = "secrets/t{i}"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "0s"
      }}"""
        for i in range(n)
    )
    return f"""job "bench-{n}" {{
  group "g" {{
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "trap '' HUP; exec /bin/busybox sleep 3600"]
      }}
      vault {{
        policies = ["{JOB_PROBE}"]
      }}
{tpls}
    }}
  }}
}}
"""


def _deliveries(events: list[Any]) -> tuple[list[float], list[float]]:
    """Per delivery: seconds from the render that finished the change to the action, and the render
    pass's own length (first to last render of the pass)."""
    lat: list[float] = []
    passes: list[float] = []
    first: float | None = None
    last: float | None = None
    for e in events:
        if e.type == "Started":
            first = last = None  # the first start reads everything: nothing is owed
        elif e.type == "Template Rendered":
            first = e.time if first is None else first
            last = e.time
        elif e.type == "Signaling" and last is not None and first is not None:
            lat.append(e.time - last)
            passes.append(last - first)
            first = last = None
    return lat, passes


def run(n: int, root: Path, bao: OpenBaoServer) -> dict[str, float]:
    lab = AgentLab(root / f"lab-{n}")
    vault = VaultClient(bao.address, bao.approle_file)
    agent = lab.start_agent(vault=vault)
    try:
        out = agent.core.call(lambda: agent.core.submit(job(n), None, source=f"bench-{n}"))
        alloc = out["allocs"][0]
        runner = agent.core.runners[alloc]
        tt = runner.templates(runner.group.tasks[0])

        def enough() -> tuple[bool | None, str]:
            got = len(_deliveries(agent.core.store.events(alloc))[0])
            return (True if got >= DELIVERIES else None), f"{got}/{DELIVERIES} deliveries"

        wait_until(enough, timeout=MEASURE_TIMEOUT, what=f"{DELIVERIES} deliveries", interval=1.0)
        lat, passes = _deliveries(agent.core.store.events(alloc))
        cycles = max(1, tt.passes - 1)
        per_cycle = (tt.fetches - n) / cycles if tt.passes > 1 else float("nan")
        agent.stop()
        before = tt.fetches
        agent = lab.start_agent(vault=vault)
        runner = agent.core.runners[alloc]
        tt2 = runner.templates(runner.group.tasks[0])
        wait_until(
            lambda: (True if tt2.passes >= 1 else None, "no pass yet"), timeout=60, what="restore render"
        )
        restart_fetches = tt2.fetches
        del before
        lat_ms = sorted(x * 1000 for x in lat)
        p99 = lat_ms[min(len(lat_ms) - 1, int(len(lat_ms) * 0.99))] if lat_ms else float("nan")
        return {
            "pass_ms": statistics.median(passes) * 1000 if passes else float("nan"),
            "templates": n,
            "deliveries": len(lat),
            "p50_ms": statistics.median(lat_ms) if lat_ms else float("nan"),
            "p99_ms": p99,
            "vault_per_cycle": per_cycle,
            "vault_on_restart": restart_fetches,
        }
    finally:
        agent.stop_job(f"bench-{n}")
        agent.stop()
        lab.cleanup()


def main() -> int:
    reason = why_not_ready()
    if reason:
        print(f"bench-templates: cannot run: {reason}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="fieldlab-bench-tpl-"))
    (root / "openbao").mkdir()
    bao = OpenBaoServer(root / "openbao")
    bao.start()
    rows = []
    try:
        for n in (1, 100):
            row = run(n, root, bao)
            rows.append(row)
            print(
                f"  {n:>3} templates: {row['deliveries']:.0f} deliveries, p50 {row['p50_ms']:.0f} ms, "
                f"p99 {row['p99_ms']:.0f} ms (render pass {row['pass_ms']:.0f} ms), "
                f"Vault requests per cycle {row['vault_per_cycle']:.0f}, "
                f"on agent restart {row['vault_on_restart']:.0f}",
                flush=True,
            )
    finally:
        bao.stop()
    print("\ntemplates  deliveries  p50_ms  p99_ms  pass_ms  vault/cycle  vault/restart")
    print(
        f"   (targets: 100 templates p99 <= 500 ms over >= {DELIVERIES} deliveries; one Vault request per"
        " dynamic template per cycle and per restart)"
    )
    for r in rows:
        print(
            f"{r['templates']:>9.0f}  {r['deliveries']:>10.0f}  {r['p50_ms']:>6.0f}  {r['p99_ms']:>6.0f}  "
            f"{r['pass_ms']:>7.0f}  "
            f"{r['vault_per_cycle']:>11.0f}  {r['vault_on_restart']:>13.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
