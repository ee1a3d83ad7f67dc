"""How long a ~1 MiB jobspec takes to parse, in each form (API JSON, HCL, HCL's JSON syntax): the aim is
under 2 s.

    .venv/bin/python scripts/bench_jobspec.py [--bytes N] [--runs N]

Prints one line per form: its size, the best and the median of the runs. Exits 1 when the best time of
a form is over 2 s (a report, not a test: machines differ).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.jobspec import Limits, parse_jobspec

GOAL = 2.0


def api_job(target: int) -> str:
    env = {f"VAR_{i}": "x" * 40 for i in range(200)}
    group = {
        "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "/bin/true"}, "Env": env}],
    }
    one = len(json.dumps(group)) + 20
    groups = [{"Name": f"g{i}", **group} for i in range(max(1, target // one))]
    return json.dumps({"Job": {"ID": "big", "TaskGroups": groups}})


def hcl_job(target: int) -> str:
    env = "\n".join(f'        VAR_{i} = "{"x" * 40}"' for i in range(200))
    group = (
        '  group "g{n}" {{\n    task "t" {{\n      driver = "exec"\n      config {{\n'
        '        command = "/bin/true"\n      }}\n      env {{\n'
        + env.replace("{", "{{").replace("}", "}}")
        + "\n"
        "      }}\n    }}\n  }}\n"
    )
    count = max(1, target // len(group.format(n=0)))
    return 'job "big" {\n' + "".join(group.format(n=n) for n in range(count)) + "}\n"


def hcl_json_job(target: int) -> str:
    env = {f"VAR_{i}": "x" * 40 for i in range(200)}
    task = {"t": {"driver": "exec", "config": {"command": "/bin/true"}, "env": env}}
    one = len(json.dumps({"task": task})) + 20
    groups = {f"g{i}": {"task": task} for i in range(max(1, target // one))}
    return json.dumps({"job": {"big": {"group": groups}}})


def bench(name: str, text: str, fmt: str, runs: int) -> float:
    limits = Limits(max_bytes=len(text.encode()) + 1)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        parse_jobspec(text, source=f"<bench-{name}>", fmt=fmt, limits=limits)
        times.append(time.perf_counter() - t0)
    best = min(times)
    print(
        f"{name:8s} {len(text.encode()):>9d} bytes: best {best:.3f}s, median {statistics.median(times):.3f}s"
    )
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    slow = [
        name
        for name, text, fmt in (
            ("json", api_job(args.bytes), "json"),
            ("hcl", hcl_job(args.bytes), "hcl"),
            ("hcl-json", hcl_json_job(args.bytes), "json"),
        )
        if bench(name, text, fmt, args.runs) > GOAL
    ]
    if slow:
        print(f"over {GOAL:g}s: {', '.join(slow)}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
