"""What `fieldlab-agent` prints, as Nomad's CLI prints it: `Key = value` blocks, left-aligned
tables, short ids, times relative to now. Pure functions of Nomad's API answers (the JSON of its Go
`api` structs: times in nanoseconds, TaskState times as RFC 3339) and `now` (seconds).

What Nomad's structs do not say plainly is read the way the agent writes it: an alloc found running
after the state database was lost has an "Adopted" event (its details: where the database went, the
tasks' containers or cgroups), and an alloc-wide event is in every task's Events list (shown once,
without a task)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from agent.api.views import alloc_counts
from agent.api.views import job_status as derived_status

SHORT_ID = 8
RECENT_EVENTS = 10  # events shown without -verbose, newest first
STATUS_COLUMNS = ("pending", "running", "failed", "complete", "adopted")
# api.TaskGroupSummary's counts, in the order Nomad's `job status` prints them
SUMMARY_COLUMNS = ("Queued", "Starting", "Running", "Failed", "Complete", "Lost", "Unknown")
LIVE = frozenset({"pending", "running"})  # ClientStatus of an alloc that has not ended
ADOPTED_EVENT = "Adopted"  # agent.runner.adopt.EVENT_ADOPTED
_NS = 1_000_000_000


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


def seconds(nanos: object) -> float | None:
    """A Nomad time in Unix nanoseconds as seconds; None for 0 (unset) or what is not a number."""
    try:
        value = int(nanos)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return value / _NS if value > 0 else None


def go_time_seconds(text: object) -> float | None:
    """A Go time.Time in JSON (RFC 3339, nanoseconds) as Unix seconds; None for Go's zero time."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    head, _, rest = text.rstrip("Z").partition(".")
    try:
        whole = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    digits = "".join(c for c in rest if c.isdigit())[:9]
    return whole + (int(digits.ljust(9, "0")) / _NS if digits else 0.0)


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


# -- reading an alloc ----------------------------------------------------------------------------


def adopted_event(alloc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The alloc's "Adopted" event (it was found running after the state database was lost)."""
    for state in (alloc.get("TaskStates") or {}).values():
        for ev in (state or {}).get("Events") or []:
            if ev.get("Type") == ADOPTED_EVENT:
                found: Mapping[str, Any] = ev
                return found
    return None


def alloc_row(a: Mapping[str, Any], now: float, verbose: bool, *, job: bool = False) -> list[Any]:
    """One alloc stub as the alloc tables show it: ID, [Job,] Task Group, Version, Desired, Status,
    Created, Modified."""
    return [
        short(a.get("ID"), verbose),
        *([a.get("JobID")] if job else []),
        a.get("TaskGroup"),
        a.get("JobVersion"),
        a.get("DesiredStatus"),
        alloc_state(a),
        ago(seconds(a.get("CreateTime")), now),
        ago(seconds(a.get("ModifyTime")), now),
    ]


def alloc_state(alloc: Mapping[str, Any]) -> str:
    """The alloc's status as this CLI shows it: Nomad's ClientStatus, "adopted" for an adopted alloc
    that runs (Nomad's "running")."""
    status = str(alloc.get("ClientStatus") or "")
    return "adopted" if status == "running" and adopted_event(alloc) is not None else status


def is_live(alloc: Mapping[str, Any]) -> bool:
    return str(alloc.get("ClientStatus") or "") in LIVE


def task_names(alloc: Mapping[str, Any]) -> list[str]:
    """The alloc's tasks: its TaskStates, else its group's tasks in its Job."""
    names = list(alloc.get("TaskStates") or {})
    return names or list(task_drivers(alloc))


def task_drivers(alloc: Mapping[str, Any]) -> dict[str, str]:
    """{task: driver} from the Job the alloc carries ({} without one: an adopted alloc)."""
    for g in (alloc.get("Job") or {}).get("TaskGroups") or []:
        if g.get("Name") == alloc.get("TaskGroup"):
            return {str(t.get("Name")): str(t.get("Driver") or "") for t in g.get("Tasks") or []}
    return {}


def alloc_events(alloc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every task event of the alloc, oldest first, each {task, type, time (s), message, details}.
    An event found in every task's list (the same type, time and message) is the alloc's: kept once,
    with task "" (with one task there is no telling: it stays the task's)."""
    states: Mapping[str, Any] = alloc.get("TaskStates") or {}
    tasks_of: dict[tuple[str, int, str], list[str]] = {}
    first: dict[tuple[str, int, str], Mapping[str, Any]] = {}
    order: list[tuple[tuple[str, int, str], str]] = []
    for task, state in states.items():
        for ev in (state or {}).get("Events") or []:
            key = (str(ev.get("Type") or ""), int(ev.get("Time") or 0), str(ev.get("DisplayMessage") or ""))
            tasks_of.setdefault(key, []).append(task)
            first.setdefault(key, ev)
            order.append((key, task))
    wide = {k for k, of in tasks_of.items() if len(states) > 1 and set(of) == set(states)}
    out: list[dict[str, Any]] = []
    done: set[tuple[str, int, str]] = set()
    for key, task in sorted(order, key=lambda o: o[0][1]):
        if key in wide:
            if key in done:
                continue
            done.add(key)
        ev = first[key]
        out.append(
            {
                "task": "" if key in wide else task,
                "type": key[0],
                "time": key[1] / _NS,
                "message": key[2] or str(ev.get("Message") or ""),
                "details": dict(ev.get("Details") or {}),
            }
        )
    return out


def adopted_handles(event: Mapping[str, Any] | None) -> dict[str, str]:
    """{task: "container <id>" | "cgroup <name>"} from an Adopted event's details."""
    if event is None:
        return {}
    try:
        tasks = json.loads(str((event.get("Details") or {}).get("tasks") or "[]"))
    except ValueError:
        return {}
    out = {}
    for t in tasks if isinstance(tasks, list) else []:
        if isinstance(t, dict) and t.get("task") and t.get("role") != "pause":
            out[str(t["task"])] = f"{t.get('kind')} {t.get('target')}"
    return out


# -- jobs ---------------------------------------------------------------------------------------


def _running_of(summary: Mapping[str, Any]) -> tuple[int, int]:
    """(running, all) allocs of an api.JobSummary."""
    groups = (summary.get("Summary") or {}).values()
    running = sum(int(g.get("Running") or 0) for g in groups)
    total = sum(int(g.get(c) or 0) for g in groups for c in SUMMARY_COLUMNS if c != "Queued")
    return running, total


def job_list(jobs: Sequence[Mapping[str, Any]], now: float) -> str:
    """`job status` without an id: one row per job (GET /v1/jobs: api.JobListStub)."""
    if not jobs:
        return "No running jobs"
    rows = []
    for j in sorted(jobs, key=lambda j: str(j.get("ID"))):
        running, total = _running_of(j.get("JobSummary") or {})
        rows.append(
            [
                j.get("ID"),
                j.get("Type"),
                j.get("Priority"),
                j.get("Status"),
                f"{running}/{total}",
                ago(seconds(j.get("SubmitTime")), now),
            ]
        )
    return table(["ID", "Type", "Priority", "Status", "Running/Allocs", "Submitted"], rows)


def summary_of(job_id: str, allocs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An api.JobSummary counted from allocs (a job known only by its adopted allocs has none)."""
    field = {"pending": "Starting", "running": "Running", "failed": "Failed", "complete": "Complete"}
    field |= {"lost": "Lost", "unknown": "Unknown"}
    groups: dict[str, dict[str, int]] = {}
    for a in allocs:
        counts = groups.setdefault(str(a.get("TaskGroup")), dict.fromkeys(SUMMARY_COLUMNS, 0))
        name = field.get(str(a.get("ClientStatus")))
        if name:
            counts[name] += 1
    return {"JobID": job_id, "Summary": groups}


def job_status(
    job_id: str,
    job: Mapping[str, Any] | None,
    summary: Mapping[str, Any],
    allocs: Sequence[Mapping[str, Any]],
    now: float,
    verbose: bool = False,
) -> str:
    """`job status ID`: the job (api.Job; None: known only by adopted allocs), its summary per task
    group (api.JobSummary) and its allocations (api.AllocationListStub), newest first."""
    if job is None:
        pairs: list[tuple[str, object]] = [
            ("ID", job_id),
            ("Type", "<unknown: adopted allocs only>"),
            ("Status", derived_status(alloc_state(a) for a in allocs)),
        ]
    else:
        pairs = [
            ("ID", job.get("ID")),
            ("Name", job.get("Name")),
            ("Submit Date", ago(seconds(job.get("SubmitTime")), now)),
            ("Type", job.get("Type")),
            ("Priority", job.get("Priority")),
            ("Datacenters", ",".join(job.get("Datacenters") or []) or None),
            ("Status", job.get("Status")),
            ("Version", job.get("Version")),
        ]
    groups: Mapping[str, Mapping[str, Any]] = summary.get("Summary") or {}
    out = [kv(pairs), "", "Summary"]
    out.append(
        table(
            ["Task Group", *SUMMARY_COLUMNS],
            [[g, *(int(c.get(s) or 0) for s in SUMMARY_COLUMNS)] for g, c in sorted(groups.items())],
        )
        if groups
        else "No task groups"
    )
    out += ["", "Allocations"]
    if allocs:
        newest = sorted(allocs, key=lambda a: int(a.get("CreateTime") or 0), reverse=True)
        out.append(
            table(
                ["ID", "Task Group", "Version", "Desired", "Status", "Created", "Modified"],
                [alloc_row(a, now, verbose) for a in newest],
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


def job_stopped(
    job_id: str,
    answer: Mapping[str, Any],
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    purge: bool,
) -> str:
    """`job stop`: DELETE /v1/job/:id's answer (EvalID), with which of the allocs that ran before
    (`before`) have stopped by the job's allocs after it (`after`; none left once purged)."""
    live = [a for a in before if is_live(a)]
    still = {str(a.get("ID")) for a in after if is_live(a)}
    lines = [f'==> Job "{job_id}" stopped' + ("" if live else " (no allocation was running)")]
    lines.append(f'    Evaluation "{short(answer.get("EvalID"))}" finished with status "complete"')
    for a in live:
        ident = str(a.get("ID"))
        lines.append(
            f'    Allocation "{short(ident)}" ' + ("still stopping" if ident in still else "stopped")
        )
    if purge:
        lines.append(
            f'==> Job "{job_id}" not purged: allocations still stopping (stop it again with -purge)'
            if still
            else f'==> Job "{job_id}" purged'
        )
    return "\n".join(lines)


# -- the node -----------------------------------------------------------------------------------


def _vault(stats: Mapping[str, str]) -> str:
    if stats.get("vault_configured") != "true":
        return "not configured"
    state = stats.get("vault_status_state") or "unknown"
    error = stats.get("vault_status_error") or stats.get("vault_error")
    return f"{state} ({error})" if error else state


def _float(text: object) -> float:
    try:
        return float(str(text))
    except ValueError:
        return 0.0


def node_status(
    agent_self: Mapping[str, Any],
    health: Mapping[str, Any],
    node: Mapping[str, Any],
    allocs: Sequence[Mapping[str, Any]],
    jobs: int,
    verbose: bool = False,
) -> str:
    """`node status`: GET /v1/agent/self (its stats["fieldlab"]: the agent's own health, when it is
    this project's agent), /v1/agent/health, /v1/node/:id (api.Node) and the node's allocations."""
    config = agent_self.get("config") or {}
    stats: Mapping[str, str] = (agent_self.get("stats") or {}).get("fieldlab") or {}
    client = health.get("client") or {}
    status = str(node.get("Status") or "")
    if not client.get("ok", True):
        status = f"{stats.get('status') or 'unhealthy'} ({client.get('message') or 'no reason given'})"
    version = (config.get("Version") or {}).get("Version") or (node.get("Attributes") or {}).get(
        "nomad.version"
    )
    pairs: list[tuple[str, object]] = [
        ("Name", node.get("Name")),
        ("ID", short(str(node.get("ID") or ""), verbose)),
        ("Status", status),
        ("Version", version),
    ]
    if stats:
        pairs += [("Uptime", duration(_float(stats.get("uptime_seconds")))), ("Vault", _vault(stats))]
        worker = stats.get("template_worker_state")
        if worker:
            error = stats.get("template_worker_error")
            pairs.append(("Templates", f"{worker} ({error})" if error else worker))
        if stats.get("state_recovered_from"):
            pairs.append(
                ("State DB", f"recovered: the corrupt one was moved to {stats['state_recovered_from']}")
            )
    pairs += [("Datacenter", node.get("Datacenter")), ("Jobs", jobs)]
    if stats:
        pairs += [
            ("Restore Time", f"{_float(stats.get('restore_seconds')):.3f}s"),
            ("Orphan Sweeps", stats.get("sweeps")),
        ]
    drivers: Mapping[str, Mapping[str, Any]] = node.get("Drivers") or {}
    counts = alloc_counts({"status": alloc_state(a)} for a in allocs)
    columns = [*STATUS_COLUMNS, *(s for s in counts if s not in STATUS_COLUMNS)]
    out = [kv(pairs), "", "Drivers"]
    out.append(
        table(
            ["Driver", "Detected", "Healthy", "Detail"],
            [
                [
                    name,
                    "true" if d.get("Detected") else "false",
                    "true" if d.get("Healthy") else "false",
                    d.get("HealthDescription"),
                ]
                for name, d in sorted(drivers.items())
            ],
        )
        if drivers
        else "No drivers"
    )
    out += ["", "Allocations"]
    out.append(table([s.capitalize() for s in columns], [[counts.get(s, 0) for s in columns]]))
    return "\n".join(out)


def last_lines(data: bytes, n: int) -> bytes:
    """The last `n` lines of `data` (a last line without its newline counts as one)."""
    if n <= 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-n:])
