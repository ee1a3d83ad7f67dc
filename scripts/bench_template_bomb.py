"""`python scripts/bench_template_bomb.py`: what a hostile task's templates cost the agent itself.

Two bombs, each submitted to a real Core (its real main loop thread, threaded offload, the real
render worker) on fake drivers (tests/fakes.py: no docker, no root needed), each in a fresh Python
process so that the figures are its own:

- `env-bomb`: a template of about 250 bytes that doubles a string to 16 MiB in the render worker
  and asks `env` for nine variables named after it: every call is a frame to the agent, which the agent reads,
  parses and serves outside the template's own budget.
- `heavy`: six templates that each compute for most of `template_render_timeout` (calibrated on
  this machine), all rendered at the task's setup.

For each it prints the agent's peak and settled RSS (MB, /proc/self/status VmHWM and VmRSS after the
alloc settled), the main loop's longest stall (the longest a no-op posted to the loop every 5 ms
waited), how the alloc ended and its last template event. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ENV_BOMB = (
    '{{ $s := "x" }}{{ range loop 24 }}{{ $s = print $s $s }}{{ end }}'
    "{{ range $i := loop 9 }}{{ env (print $s $i) }}{{ end }}"
)
HEAVY_TEMPLATES = 6
HEAVY_SHARE = 0.6  # of the render budget each heavy template computes for
SETTLE_TIMEOUT = 600.0


def _status(field: str) -> float:
    """A VmRSS/VmHWM figure of this process, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _job(templates: list[str]) -> str:
    blocks = "\n".join(
        f"""      template {{
        data        = <<EOT
{text}
EOT
        destination = "local/t{i}.txt"
        change_mode = "noop"
      }}"""
        for i, text in enumerate(templates)
    )
    return f"""job "bomb" {{
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "docker"
      config {{ image = "x" }}
{blocks}
    }}
  }}
}}
"""


def _calibrate(budget: float) -> int:
    """Iterations of an empty `range loop` that take about HEAVY_SHARE of `budget` in the worker."""
    from agent.structs.model import Template
    from agent.templates.render import render

    n = 200_000
    with tempfile.TemporaryDirectory() as tmp:
        tpl = Template("local/c.txt", data=f"{{{{ range loop {n} }}}}{{{{ end }}}}")
        render(tpl, Path(tmp), {}, timeout=60.0)  # the worker starts
        t0 = time.monotonic()
        render(tpl, Path(tmp), {}, timeout=60.0)
        took = time.monotonic() - t0
    return max(1, int(n * budget * HEAVY_SHARE / took))


def one(scenario: str) -> dict[str, Any]:
    from agent.structs.records import AllocStatus
    from tests.fakes import FakeNode

    budget = 2.0
    templates = (
        [ENV_BOMB]
        if scenario == "env-bomb"
        else [f"{{{{ range loop {_calibrate(budget)} }}}}{{{{ end }}}}{i}" for i in range(HEAVY_TEMPLATES)]
    )
    with tempfile.TemporaryDirectory() as tmp:
        node = FakeNode(Path(tmp))
        core = node.core()
        loop = threading.Thread(target=core.loop.run, name="main-loop", daemon=True)
        loop.start()
        # A warm agent: the render worker is up before the bomb arrives.
        core.call(
            lambda: core.job_registry.submit(_job(["warm"]).replace('"bomb"', '"warm"'), "hcl"), timeout=60
        )
        gc.collect()
        rss_before = _status("VmRSS")
        stalls: list[float] = []
        stop = threading.Event()

        def ticker() -> None:
            while not stop.is_set():
                posted = time.monotonic()
                core.loop._q.put(lambda posted=posted: stalls.append(time.monotonic() - posted))
                time.sleep(0.005)

        tick = threading.Thread(target=ticker, daemon=True)
        tick.start()
        t0 = time.monotonic()
        result = core.call(lambda: core.job_registry.submit(_job(templates), "hcl"), timeout=SETTLE_TIMEOUT)
        alloc = result["allocs"][0]
        runner = core.runners[alloc]
        while runner.rec.status is AllocStatus.PENDING and time.monotonic() - t0 < SETTLE_TIMEOUT:
            time.sleep(0.05)
        settled = time.monotonic() - t0
        time.sleep(0.5)
        stop.set()
        tick.join(5)
        gc.collect()
        events = [e for e in core.store.events(alloc) if e.type.startswith(("Template", "Setup"))]
        out = {
            "scenario": scenario,
            "templates": len(templates),
            "template_bytes": max(len(t) for t in templates),
            "rss_before_mb": round(rss_before, 1),
            "rss_peak_mb": round(_status("VmHWM"), 1),
            "rss_after_mb": round(_status("VmRSS"), 1),
            "loop_stall_max_s": round(max(stalls, default=0.0), 3),
            "settled_s": round(settled, 2),
            "status": runner.rec.status.value,
            "last_event": f"{events[-1].type}: {events[-1].message[:160]}" if events else "",
        }
        core.stop()
        loop.join(5)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", choices=("env-bomb", "heavy"), help="run one scenario in this process")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    for scenario in ("env-bomb", "heavy"):
        proc = subprocess.run(
            [sys.executable, __file__, "--one", scenario], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            print(f"{scenario}: failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
            continue
        fig = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{scenario:9} {fig['templates']} template(s) of <= {fig['template_bytes']} bytes: "
            f"RSS {fig['rss_before_mb']} -> peak {fig['rss_peak_mb']}, held {fig['rss_after_mb']} MB; "
            f"main loop's longest stall {fig['loop_stall_max_s']:.3f}s; alloc {fig['status']} "
            f"after {fig['settled_s']}s; {fig['last_event']}"
        )


if __name__ == "__main__":
    main()
