"""`make bench-agent`: restore time after an agent restart with N running allocs, the task restarts
that restart caused (must be 0) and the agent's RSS. Runs the real daemon (`fieldlab-agent run`)
on the controller against real dockerd and CNI, on the test bridge 10.213.251.0/24.

With the largest N (50) two more rows follow on the same node: the same running allocs with 10,000
terminal allocs in state (written through the store's API, with their task records and events, as
a node that ran them would hold them), and 500 jobs submitted (count = 0: stored, nothing to run).
Each row prints restore time (the median of BENCH_RESTARTS=3 restarts), Nomad's `GET /v1/allocations` p50,
RSS; the history row also a cProfile top-10 of the restore (in-process, the same build_core as the
daemon) and the agent's import cost (`python -X importtime`).

Prints figures; asserts nothing about speed (these machines are noisy): targets are 50 allocs
restored within 0.5 s (issue 53's; 1.0 s before it), the same within 20 % with 10,000 terminal
allocs, 0 task restarts, RSS at most 60 MB with 50 allocs.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.benchlib import AGENT_START, Figure, record
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
        image   = "fieldlab/busybox:lab"
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


HISTORY = 10_000
RESTARTS = int(os.environ.get("BENCH_RESTARTS", "3"))  # restores per row: the median is printed
Row = tuple[str, float, float, float, int, int, float]  # label, restore, up, list p50, running, restarts, rss
JOBS = int(os.environ.get("BENCH_JOBS", "500"))  # jobs stored for the last row (0: no such row)
EMPTY_JOB = """job "stored-{i}" {{
  group "g" {{
    count = 0
    task "t" {{
      driver = "docker"
      config {{ image = "fieldlab/busybox:lab" }}
    }}
  }}
}}
"""


def _submit(d: Daemon, jobspec: str) -> None:
    """Register a jobspec as Nomad's CLI does: parse it (POST /v1/jobs/parse), PUT /v1/jobs."""
    job = d.api.request("POST", "/v1/jobs/parse", {"JobHCL": jobspec, "Canonicalize": True})
    d.api.request("PUT", "/v1/jobs", {"Job": job})


def _counts(allocs: list[dict[str, Any]]) -> tuple[int, int]:
    """(running allocs, task restarts) of Nomad's alloc stubs."""
    running = sum(a["ClientStatus"] == "running" for a in allocs)
    restarts = sum(int(t["Restarts"]) for a in allocs for t in (a.get("TaskStates") or {}).values())
    return running, restarts


def _list_p50(d: Daemon, n: int = 30, path: str = "/v1/allocations") -> float:
    """p50 of the listing from the request to its last byte (the agent's answer). The bench's own
    JSON decoding of it is timed apart (printed): Python's json.loads of the 22 MB of 10,050 stubs
    takes 0.3-0.4 s on these machines, a cost of this client, not of the agent."""
    took, decode, listed = [], [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        _, body = d.api.request_raw("GET", path)
        took.append(time.perf_counter() - t0)
        t1 = time.perf_counter()
        listed = len(json.loads(body))
        decode.append(time.perf_counter() - t1)
    print(
        f"  GET {path}: {listed} allocs, {len(body) / 1e6:.1f} MB (the last); p50 to the last byte "
        f"{statistics.median(took) * 1000:.0f} ms, the bench's json.loads of it "
        f"{statistics.median(decode) * 1000:.0f} ms",
        flush=True,
    )
    return statistics.median(took) * 1000


def _write_history(lab: AgentLab, n: int) -> float:
    """n terminal allocs of 100 jobs, each with a task record and three events, through the store."""
    from agent.state import SqliteStore, record_key
    from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, TaskRecord, TaskState

    t0 = time.monotonic()
    store = SqliteStore(lab.data_dir / "state" / "state.db")
    try:
        with store.transaction():
            for i in range(n):
                alloc = str(uuid.uuid4())
                status = AllocStatus.FAILED if i % 4 == 0 else AllocStatus.COMPLETE
                rec = AllocRecord(
                    id=alloc,
                    job=f"history-{i % 100}",
                    group="g",
                    created=time.time() - n + i,
                    status=status,
                    desired=DesiredStatus.STOP,
                    reason="job stopped" if status is AllocStatus.COMPLETE else "task t failed",
                )
                store.put("alloc", alloc, rec.to_record())
                store.put("task", record_key(alloc, "t"), TaskRecord(TaskState.DEAD).to_record())
                for kind in ("Received", "Started", "Killed"):
                    store.append_event(alloc, "t", kind, f"{kind} (bench history)")
    finally:
        store.close()
    return time.monotonic() - t0


def _profile_restore(lab: AgentLab) -> str:
    """The restore of this node's state in-process (the daemon's own build_core and restore) under
    cProfile, in CPU time (time.thread_time: what a loaded machine does not inflate) of every thread
    it runs on: the main loop's (agent.client.restore.Restore.restore) and the observation's pool
    (AllocRunner.observe, one profile per call, merged). The twelve functions with the most
    cumulative CPU time."""
    import threading

    from agent.client.restore import Restore
    from agent.runner.alloc import AllocRunner

    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original_restore, original_observe = Restore.restore, AllocRunner.observe

    def profiled(fn: Any) -> Any:
        def run(*args: Any) -> Any:
            profile = cProfile.Profile(time.thread_time)
            try:
                return profile.runcall(fn, *args)
            finally:
                with lock:
                    profiles.append(profile)

        return run

    Restore.restore = profiled(original_restore)  # type: ignore[method-assign]
    AllocRunner.observe = profiled(original_observe)  # type: ignore[method-assign]
    try:
        agent = lab.start_agent()
    finally:
        Restore.restore = original_restore  # type: ignore[method-assign]
        AllocRunner.observe = original_observe  # type: ignore[method-assign]
    agent.stop()
    out = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=out)
    for more in profiles[1:]:
        stats.add(more)
    stats.sort_stats("cumulative").print_stats(12)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start : start + 13])


def _import_cost() -> str:
    """`python -X importtime` of the daemon's module as `fieldlab-agent run` imports it (the unused
    SDKs left out first): the total, and the self time of imports summed by package (agent's own by
    subpackage), costliest first."""
    code = (
        "from agent.command.lean import leave_out_unused_sdks; leave_out_unused_sdks(); "
        "import agent.command.daemon"
    )
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    total = 0
    by_package: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        self_us, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not self_us.isdigit():
            continue  # the header line
        parts = name.split(".")
        package = ".".join(parts[:2]) if parts[0] == "agent" else parts[0]
        by_package[package] = by_package.get(package, 0) + int(self_us)
        if name == "agent.command.daemon":
            total = int(cumulative)
    worst = sorted(by_package.items(), key=lambda kv: -kv[1])[:8]
    return f"import agent.command.daemon: {total / 1000:.0f} ms; by package: " + ", ".join(
        f"{name} {us / 1000:.0f} ms" for name, us in worst
    )


def _restarts(d: Daemon) -> tuple[float, float, list[dict[str, Any]]]:
    """Restart the daemon RESTARTS times: the median restore and start-up, the allocs after the last.
    One restore is one sample of a figure that moves by 20 % between runs on these machines."""
    restores, walls = [], []
    for _ in range(RESTARTS):
        d.stop()
        walls.append(d.start())
        restores.append(d.metric("fieldlab_agent_restore_seconds"))
    allocs = d.api.request("GET", "/v1/allocations")
    return statistics.median(restores), statistics.median(walls), allocs


def _restart_row(d: Daemon, label: str, n: int) -> Row:
    restore, wall, allocs = _restarts(d)
    running, restarts = _counts(allocs)
    p50 = _list_p50(d)  # Nomad's AllocationListStub, TaskStates with their events
    rss = _rss_mb(d.proc.pid) if d.proc else 0.0
    print(
        f"  {label}: restore {restore:5.2f}s, agent up in {wall:5.2f}s, {running}/{n} running, "
        f"task restarts {restarts}, GET /v1/allocations p50 {p50:5.1f} ms, RSS {rss:5.1f} MB",
        flush=True,
    )
    record(Figure(f"agent: Nomad's GET /v1/allocations p50, {label}", p50, "ms", ""))
    return label, restore, wall, p50, running, restarts, rss


def _extra_rows(
    lab: AgentLab, d: Daemon, n: int, base: float
) -> list[tuple[str, float, float, float, int, int, float]]:
    rows = []
    d.stop()
    took = _write_history(lab, HISTORY)
    print(f"  wrote {HISTORY} terminal allocs (+ task records, 3 events each) in {took:.1f}s", flush=True)
    profile = _profile_restore(lab)
    print("  cProfile of the restore with that history (in-process, CPU time):\n" + profile, flush=True)
    d.start()
    row = _restart_row(d, f"{n} running + {HISTORY} terminal", n)  # the first GC pass is gc_interval away
    rows.append(row)
    print(f"  restore with history / without: {row[1] / base:.2f}x (target <= 1.20)", flush=True)
    record(Figure(f"agent: restore {n} running + {HISTORY} terminal", row[1], "s", "", AGENT_START))
    record(Figure("agent: restore with history / without", row[1] / base, "x", "<= 1.20x"))
    record(Figure(f"agent: RSS, {n} running + {HISTORY} terminal", row[6], "MB", ""))
    if not JOBS:
        return rows
    t0 = time.monotonic()
    for i in range(JOBS):
        _submit(d, EMPTY_JOB.format(i=i))
    took = time.monotonic() - t0
    print(f"  submitted {JOBS} jobs in {took:.1f}s ({JOBS / took:.0f}/s)", flush=True)
    jobs_row = _restart_row(d, f"{n} running + {JOBS} jobs", n)
    rows.append(jobs_row)
    record(Figure(f"agent: restore {n} running + {JOBS} jobs", jobs_row[1], "s", "", AGENT_START))
    for i in range(JOBS):
        d.api.request("DELETE", f"/v1/job/stored-{i}")
    return rows


def run(sizes: list[int]) -> int:
    reason = why_not_ready()
    if reason:
        print(f"bench-agent: cannot run: {reason}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="fieldlab-bench-"))
    build_workload_images(root)
    rows = []
    extra: list[Row] = []
    print(_import_cost(), flush=True)
    for n in sizes:
        lab = AgentLab(root / f"lab-{n}")
        ca = TestCA(lab.root)
        d = Daemon(lab, ca, lab.root)
        try:
            d.start()
            t0 = time.monotonic()
            for i in range(n):
                _submit(d, JOB.format(i=i))
            setup = time.monotonic() - t0
            allocs = d.api.request("GET", "/v1/allocations")
            assert _counts(allocs)[0] == n, [a["ClientStatus"] for a in allocs]
            restore, wall, allocs = _restarts(d)
            running, restarts = _counts(allocs)
            rss = _rss_mb(d.proc.pid) if d.proc else 0.0
            rows.append((n, setup, restore, wall, running, restarts, rss))
            record(
                Figure(
                    f"agent: restore {n} running", restore, "s", "<= 0.5 s" if n == 50 else "", AGENT_START
                )
            )
            record(Figure(f"agent: RSS, {n} running", rss, "MB", "<= 60 MB" if n == 50 else ""))
            record(Figure(f"agent: task restarts by the restore, {n} running", restarts, "count", "0"))
            print(
                f"  {n:>3} allocs: started in {setup:6.1f}s; after restart: restore {restore:5.2f}s, "
                f"agent up in {wall:5.2f}s, {running}/{n} running, task restarts {restarts}, "
                f"RSS {rss:5.1f} MB",
                flush=True,
            )
            if n == max(sizes) and os.environ.get("BENCH_HISTORY", "1") != "0":
                extra = _extra_rows(lab, d, n, restore)
        finally:
            for i in range(n):
                try:
                    d.api.request("DELETE", f"/v1/job/bench-{i}")
                except Exception as exc:
                    print(f"  cleanup bench-{i}: {exc}")
            d.stop()
            lab.cleanup()
    print(
        "\nallocs                      restore_s  agent_up_s  list_p50_ms  running  task_restarts  rss_mb"
        "   (targets: 50 in <= 0.5 s, with history within 20 %, 0 restarts, <= 60 MB)"
    )
    for n, _setup, restore, wall, running, restarts, rss in rows:
        print(f"{n:<26}  {restore:9.2f}  {wall:10.2f}  {'-':>11}  {running:>7}  {restarts:>13}  {rss:6.1f}")
    for label, restore, wall, p50, running, restarts, rss in extra:
        print(
            f"{label:<26}  {restore:9.2f}  {wall:10.2f}  {p50:11.1f}  {running:>7}  {restarts:>13}"
            f"  {rss:6.1f}"
        )
    ok = all(r[5] == 0 and r[4] == r[0] for r in rows) and all(e[5] == 0 for e in extra)
    return 0 if ok else 1


if __name__ == "__main__":
    sizes = [int(x) for x in os.environ.get("BENCH_ALLOCS", "1,10,50").split(",")]
    sys.exit(run(sizes))
