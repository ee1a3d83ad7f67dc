"""What `fieldlab-agent` prints, as Nomad's CLI prints it: `Key = value` blocks, left-aligned
tables, short ids, times relative to now. Pure functions of the API's answers and `now`."""

from __future__ import annotations

import base64
import signal
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.apiviews import job_status as derived_status

SHORT_ID = 8
RECENT_EVENTS = 10  # events shown without -verbose, newest first
STATUS_COLUMNS = ("pending", "running", "failed", "complete", "adopted")


def short(ident: str | None, verbose: bool = False) -> str:
    if not ident:
        return "-"
    return ident if verbose else ident[:SHORT_ID]


def duration(seconds: float) -> str:
    """A span as Nomad prints one: 45s, 3m12s, 2h5m, 3d4h (two units at most)."""
    s = max(0, round(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def ago(when: float | None, now: float) -> str:
    """`when` (epoch seconds) relative to `now`: "just now", "12s ago", "3m12s ago", "in 5s"."""
    if not when:
        return "-"
    delta = now - when
    if abs(delta) < 1:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart (Nomad's columnize); no trailing spaces."""
    cells = [[str(h) for h in headers]] + [["-" if c is None or c == "" else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def kv(pairs: Iterable[tuple[str, object]]) -> str:
    """`Key = value` lines, the `=` aligned (Nomad's formatKV)."""
    items = [(k, "<none>" if v is None or v == "" else str(v)) for k, v in pairs]
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k.ljust(width)} = {v}" for k, v in items)


def signal_name(given: str) -> str:
    """SIGHUP for "SIGHUP", "hup", "HUP" or "1"; ValueError naming what is wrong otherwise."""
    text = given.strip()
    if text.isdigit():
        try:
            return signal.Signals(int(text)).name
        except ValueError:
            raise ValueError(f"signal {given!r}: no signal has that number") from None
    name = text.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    if name not in signal.Signals.__members__:
        raise ValueError(f"signal {given!r}: not a signal name like SIGHUP or HUP")
    return name


# -- jobs ---------------------------------------------------------------------------------------


def job_list(jobs: Sequence[Mapping[str, Any]], allocs: Sequence[Mapping[str, Any]]) -> str:
    """`job status` without an id: one row per job (GET /fieldlab/v1/jobs) with what its allocs are."""
    if not jobs:
        return "No running jobs"
    rows = []
    for j in sorted(jobs, key=lambda j: str(j.get("id"))):
        own = [a for a in allocs if a.get("job") == j.get("id")]
        running = sum(1 for a in own if a.get("status") == "running")
        status = derived_status(str(a.get("status", "")) for a in own)
        rows.append([j.get("id"), j.get("type", ""), status, f"{running}/{len(own)}"])
    return table(["ID", "Type", "Status", "Running/Allocs"], rows)


def job_status(job: Mapping[str, Any], now: float, verbose: bool = False) -> str:
    """`job status ID`: the job (GET /fieldlab/v1/job/<id>), a summary per task group, its allocations."""
    head = kv(
        [
            ("ID", job.get("id")),
            ("Name", job.get("name")),
            ("Type", job.get("type") or "<unknown: adopted allocs only>"),
            ("Datacenters", ",".join(job.get("datacenters") or []) or None),
            ("Status", job.get("status")),
        ]
    )
    summary = job.get("summary") or {}
    out = [head, "", "Summary"]
    out.append(
        table(
            ["Task Group", *(s.capitalize() for s in STATUS_COLUMNS)],
            [[g, *(counts.get(s, 0) for s in STATUS_COLUMNS)] for g, counts in summary.items()],
        )
        if summary
        else "No task groups"
    )
    allocs = job.get("allocs") or []
    out += ["", "Allocations"]
    if allocs:
        out.append(
            table(
                ["ID", "Task Group", "Desired", "Status", "Created"],
                [
                    [
                        short(a.get("id"), verbose),
                        a.get("group"),
                        a.get("desired"),
                        a.get("status"),
                        ago(a.get("created"), now),
                    ]
                    for a in allocs
                ],
            )
        )
    else:
        out.append("No allocations placed")
    return "\n".join(out)


def job_registered(
    job_id: str,
    version: object,
    answer: Mapping[str, Any],
    allocs: Sequence[Mapping[str, Any]],
    warnings: Sequence[str],
) -> str:
    """`job run`: Nomad's register answer (EvalID), the job's version and the evaluation's allocs."""
    lines = [f'==> Job "{job_id}" registered (version {version})']
    lines.append(f'    Evaluation "{short(answer.get("EvalID"))}" finished with status "complete"')
    lines += [f'    Allocation "{short(a.get("ID"))}" created' for a in allocs]
    lines += [f"    Warning: {w}" for w in dict.fromkeys(warnings)]
    return "\n".join(lines)


def job_stopped(job_id: str, answer: Mapping[str, Any]) -> str:
    """`job stop`: DELETE /fieldlab/v1/job/<id>'s answer."""
    stopped = answer.get("stopped") or []
    lines = [f'==> Job "{job_id}" stopped' + ("" if stopped else " (no allocation was running)")]
    lines += [f'    Allocation "{short(a)}" stopped' for a in stopped]
    lines += [f'    Allocation "{short(a)}" still stopping' for a in answer.get("still_stopping") or []]
    if "purged" in answer:
        lines.append(f'==> Job "{job_id}" purged ({len(answer["purged"])} allocation(s) removed)')
    return "\n".join(lines)


# -- allocs -------------------------------------------------------------------------------------


def alloc_list(allocs: Sequence[Mapping[str, Any]], now: float, verbose: bool = False) -> str:
    if not allocs:
        return "No allocations"
    rows = [
        [
            short(a.get("id"), verbose),
            a.get("job"),
            a.get("group"),
            a.get("desired"),
            a.get("status"),
            ago(a.get("created"), now),
        ]
        for a in sorted(allocs, key=lambda a: float(a.get("created") or 0.0), reverse=True)
    ]
    return table(["ID", "Job ID", "Task Group", "Desired", "Status", "Created"], rows)


def _network(alloc: Mapping[str, Any]) -> tuple[str, str]:
    net = alloc.get("network") or {}
    mode = str(net.get("mode") or "none")
    where = f"{mode}, {net['address']}" if net.get("address") else mode
    ports = ", ".join(f"{p.get('label')} {p.get('host')} -> {p.get('to')}" for p in net.get("ports") or [])
    return where, ports


def alloc_status(
    alloc: Mapping[str, Any], events: Sequence[Mapping[str, Any]], now: float, verbose: bool = False
) -> str:
    """`alloc status`: the alloc (GET /fieldlab/v1/allocation/<id>), its tasks, its recent events."""
    network, ports = _network(alloc)
    pairs: list[tuple[str, object]] = [
        ("ID", alloc.get("id")),
        ("Job ID", alloc.get("job")),
        ("Task Group", alloc.get("group")),
        ("Client Status", alloc.get("status")),
        ("Desired Status", alloc.get("desired")),
        ("Reason", alloc.get("reason")),
        ("Created", ago(alloc.get("created"), now)),
        ("Network", network),
    ]
    if ports:
        pairs.append(("Ports", ports))
    pause = (alloc.get("network") or {}).get("pause_container")
    if pause:
        pairs.append(("Pause Container", pause if verbose else str(pause)[:12]))
    for key, label in (("replaces", "Replaces"), ("replaced_by", "Replaced By")):
        if alloc.get(key):
            pairs.append((label, alloc[key]))
    adopted = alloc.get("adopted")
    if isinstance(adopted, Mapping):
        pairs.append(
            ("Adopted", f"{ago(adopted.get('at'), now)}, state database moved to {adopted.get('state_db')}")
        )
    out = [kv(pairs), "", "Tasks"]
    tasks = alloc.get("tasks") or {}
    out.append(
        table(
            ["Name", "State", "Restarts", "Failed", "Container"],
            [
                [
                    name,
                    t.get("state"),
                    t.get("restarts", 0),
                    "true" if t.get("failed") else "false",
                    _container(t, verbose),
                ]
                for name, t in tasks.items()
            ],
        )
        if tasks
        else "No tasks"
    )
    out += ["", *alloc_events(events, now, verbose)]
    return "\n".join(out)


def _container(task: Mapping[str, Any], verbose: bool) -> str:
    if task.get("container"):
        return str(task["container"]) if verbose else str(task["container"])[:12]
    if task.get("cgroup"):
        return f"cgroup {task['cgroup']}"
    return "-"


def alloc_events(events: Sequence[Mapping[str, Any]], now: float, verbose: bool = False) -> list[str]:
    """The "Recent Events" block: newest first, RECENT_EVENTS of them unless verbose."""
    if not events:
        return ["Recent Events:", "No events"]
    newest = sorted(events, key=lambda e: float(e.get("time") or 0.0), reverse=True)
    shown = newest if verbose else newest[:RECENT_EVENTS]
    lines = ["Recent Events:"]
    lines.append(
        table(
            ["Time", "Task", "Type", "Description"],
            [[ago(e.get("time"), now), e.get("task"), e.get("type"), e.get("message")] for e in shown],
        )
    )
    if len(shown) < len(newest):
        lines.append(f"({len(newest) - len(shown)} older events not shown: -verbose shows every one)")
    return lines


def last_lines(data: bytes, n: int) -> bytes:
    """The last `n` lines of `data` (a last line without its newline counts as one)."""
    if n <= 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-n:])


def log_bytes(answer: Mapping[str, Any]) -> bytes:
    """The bytes of a GET /fieldlab/v1/client/fs/logs answer."""
    return base64.b64decode(str(answer.get("data") or ""))


# -- the node -----------------------------------------------------------------------------------


def _vault(health: Mapping[str, Any]) -> str:
    vault = health.get("vault") or {}
    status = health.get("vault_status") or {}
    if not vault.get("configured"):
        return "not configured"
    state = str(status.get("state") or "unknown")
    error = status.get("error") or vault.get("error")
    return f"{state} ({error})" if error else state


def node_status(health: Mapping[str, Any], node: Mapping[str, Any] | None) -> str:
    """`node status`: GET /fieldlab/v1/agent/health and /fieldlab/v1/node (None: the agent runs no jobs)."""
    pairs: list[tuple[str, object]] = [
        ("Name", health.get("node")),
        ("Status", "ready" if health.get("status") == "ok" else health.get("status")),
        ("Version", health.get("version")),
        ("Uptime", duration(float(health.get("uptime_seconds") or 0.0))),
        ("Vault", _vault(health)),
    ]
    if health.get("state_recovered_from"):
        pairs.append(
            ("State DB", f"recovered: the corrupt one was moved to {health['state_recovered_from']}")
        )
    if node is None:
        why = "the agent has no GET /fieldlab/v1/node (jobs_enabled is off, or it is older than this CLI)"
        pairs.append(("Jobs", f"unknown: {why}"))
        return kv(pairs)
    pairs += [
        ("Datacenter", node.get("datacenter")),
        ("Jobs", node.get("jobs")),
        ("Restore Time", f"{float(node.get('restore_seconds') or 0.0):.3f}s"),
        ("Orphan Sweeps", node.get("sweeps")),
    ]
    drivers = node.get("drivers") or {}
    counts = node.get("allocs") or {}
    out = [kv(pairs), "", "Drivers"]
    out.append(
        table(
            ["Driver", "Healthy", "Detail"],
            [[n, "true" if d.get("healthy") else "false", d.get("detail")] for n, d in drivers.items()],
        )
    )
    out += ["", "Allocations"]
    out.append(table([s.capitalize() for s in STATUS_COLUMNS], [[counts.get(s, 0) for s in STATUS_COLUMNS]]))
    return "\n".join(out)
