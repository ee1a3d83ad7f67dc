"""What `fieldlab-agent alloc status` prints, laid out as `nomad alloc status` (Nomad's
command/alloc_status.go): the alloc's `Key = value` block (ID, Eval ID, Name, Node ID, Node Name,
Job ID, Job Version, Client/Desired Status and Description, Created, Modified, the replacement),
its addresses, then a block per task (lifecycle tasks first): `Task "t" is "running"`, its
resources (the usage from the alloc's stats when there are some), its times and restarts, and its
recent events (Time, Type, Description), newest first. Pure: the caller fetches the alloc and its
stats.

What only this agent says is added where it belongs: an adopted alloc's `Adopted` line and its
tasks' handles (a `Handle` line in the task's block; with -verbose a docker task's container too)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from agent.cli.format import (
    RECENT_EVENTS,
    adopted_event,
    adopted_handles,
    ago,
    alloc_state,
    go_time_seconds,
    kv,
    seconds,
    short,
    table,
    task_drivers,
)

MIB = 1024 * 1024
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def ibytes(n: float) -> str:
    """Bytes as Nomad's CLI prints them (go-humanize's IBytes): "0 B", "5.0 MiB", "256 MiB"."""
    if n < 10:
        return f"{int(n)} B"
    e = min(math.floor(math.log(n, 1024)), len(_UNITS) - 1)
    val = math.floor(n / 1024**e * 10 + 0.5) / 10
    return f"{val:.1f} {_UNITS[e]}" if val < 10 else f"{val:.0f} {_UNITS[e]}"


def iso_time(when: float | None) -> str:
    """A time as Nomad's CLI prints it (formatTime: ISO 8601 in local time); "" for none."""
    if not when or when < 1:
        return ""
    return datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds").replace("+00:00", "Z")


def task_time(when: float | None) -> str:
    """formatTaskTimes: "N/A" for a time not yet reached."""
    return iso_time(when) or "N/A"


def lifecycles(alloc: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """{task: (hook, sidecar)} of the group's lifecycle tasks, from the Job the alloc carries."""
    for g in (alloc.get("Job") or {}).get("TaskGroups") or []:
        if g.get("Name") == alloc.get("TaskGroup"):
            return {
                str(t.get("Name")): (str(lc.get("Hook")), bool(lc.get("Sidecar")))
                for t in g.get("Tasks") or []
                if (lc := t.get("Lifecycle") or {}).get("Hook")
            }
    return {}


def task_order(names: Sequence[str], lcs: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Nomad's order (sortedTaskStateIterator): by name, lifecycle tasks before main ones, a
    non-sidecar lifecycle task before a sidecar."""
    return sorted(sorted(names), key=lambda n: (n not in lcs, n in lcs and lcs[n][1]))


def lifecycle_name(lc: tuple[str, bool] | None) -> str:
    if lc is None:
        return "main"
    return lc[0] + (" sidecar" if lc[1] else "")


def header(alloc: Mapping[str, Any], now: float, verbose: bool) -> str:
    """formatAllocBasicInfo; -verbose: full ids and absolute times."""
    job = alloc.get("Job") or {}

    def when(t: float | None) -> str:
        return iso_time(t) if verbose else ago(t, now)

    pairs: list[tuple[str, object]] = [
        ("ID", alloc.get("ID")),
        ("Eval ID", short(alloc.get("EvalID"), verbose)),
        ("Name", alloc.get("Name")),
        ("Node ID", short(alloc.get("NodeID"), verbose)),
        ("Node Name", alloc.get("NodeName")),
        ("Job ID", alloc.get("JobID")),
        ("Job Version", job.get("Version") if job else None),
        ("Client Status", alloc_state(alloc)),
        ("Client Description", alloc.get("ClientDescription")),
        ("Desired Status", alloc.get("DesiredStatus")),
        ("Desired Description", alloc.get("DesiredDescription")),
        ("Created", when(seconds(alloc.get("CreateTime")))),
        ("Modified", when(seconds(alloc.get("ModifyTime")))),
    ]
    if alloc.get("NextAllocation"):
        pairs.append(("Replacement Alloc ID", short(alloc["NextAllocation"], verbose)))
    adopted = adopted_event(alloc)
    if adopted is not None:
        state_db = (adopted.get("Details") or {}).get("state_db") or "?"
        since = ago(seconds(adopted.get("Time")), now)
        pairs.append(("Adopted", f"{since}, state database moved to {state_db}"))
    return kv(pairs)


def addresses(alloc: Mapping[str, Any]) -> str | None:
    """formatAllocNetworkInfo: the group network's ports (None when it has none)."""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    nets = shared.get("Networks") or []
    if not nets:
        return None
    net = nets[0]
    rows = []

    def row(label: object, value: object, to: Any, ip: object) -> list[object]:
        return [label, "yes", f"{ip}:{value}" + (f" -> {to}" if int(to or 0) > 0 else "")]

    if shared.get("Ports"):
        rows = [
            row(f"*{p.get('Label')}", p.get("Value"), p.get("To"), p.get("HostIP")) for p in shared["Ports"]
        ]
    else:
        ports = [*(net.get("DynamicPorts") or []), *(net.get("ReservedPorts") or [])]
        rows = [row(p.get("Label"), p.get("Value"), p.get("To"), net.get("IP")) for p in ports]
    if not rows:
        return None
    mode = f' (mode = "{net["Mode"]}")' if net.get("Mode") else ""
    return f"Allocation Addresses{mode}:\n" + table(["Label", "Dynamic", "Address"], rows)


def resources(alloc: Mapping[str, Any], task: str, usage: Mapping[str, Any] | None) -> str | None:
    """outputTaskResources: CPU (MHz; used/reserved with stats), Memory, Disk, Addresses."""
    res = (alloc.get("TaskResources") or {}).get(task)
    if res is None:
        return None
    addr = [
        f"{p.get('Label')}: {nw.get('IP')}:{p.get('Value')}"
        for nw in res.get("Networks") or []
        for p in [*(nw.get("DynamicPorts") or []), *(nw.get("ReservedPorts") or [])]
    ]
    cores = int(res.get("Cores") or 0)
    cpu = str(int(res.get("CPU") or 0))
    reserved = int(res.get("MemoryMB") or 0)
    mem = ibytes(reserved * MIB)
    mem_max = int(res.get("MemoryMaxMB") or 0)
    if usage:
        if cs := usage.get("CpuStats"):
            cpu = f"{math.floor(float(cs.get('TotalTicks') or 0))}/{cpu}"
        if ms := usage.get("MemoryStats"):
            used = int(ms.get("RSS") or 0)
            if not used and "RSS" not in (ms.get("Measured") or []):
                used = int(ms.get("Usage") or 0)
            mem = f"{ibytes(used)}/{mem}"
    disk = ibytes(int((alloc.get("Resources") or {}).get("DiskMB") or 0) * MIB)
    rows = [
        ["CPU" + (f" ({cores} cores)" if cores else ""), "Memory", "Disk", "Addresses"],
        [f"{cpu} MHz", mem, disk, addr[0] if addr else ""],
    ]
    extra_mem = f"Max: {ibytes(mem_max * MIB)}" if mem_max and mem_max != reserved else ""
    if extra_mem or len(addr) > 1:
        rows.append(["", extra_mem, "", addr[1] if len(addr) > 1 else ""])
    rows += [["", "", "", a] for a in addr[2:]]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "Task Resources:\n" + "\n".join(lines)


def task_events(state: Mapping[str, Any], verbose: bool) -> str:
    """outputTaskStatus: the task's times and restarts, then its recent events, newest first
    (RECENT_EVENTS of them unless -verbose, as Nomad's client keeps its last 10)."""
    times = kv(
        [
            ("Started At", task_time(go_time_seconds(state.get("StartedAt")))),
            ("Finished At", task_time(go_time_seconds(state.get("FinishedAt")))),
            ("Total Restarts", int(state.get("Restarts") or 0)),
            ("Last Restart", task_time(go_time_seconds(state.get("LastRestart")))),
        ]
    )
    events = sorted(state.get("Events") or [], key=lambda e: int(e.get("Time") or 0), reverse=True)
    shown = events if verbose else events[:RECENT_EVENTS]
    rows = [
        [iso_time(seconds(e.get("Time"))), e.get("Type"), e.get("DisplayMessage") or e.get("Message") or ""]
        for e in shown
    ]
    lines = ["Task Events:", times, "", "Recent Events:", table(["Time", "Type", "Description"], rows)]
    if len(shown) < len(events):
        lines.append(f"({len(events) - len(shown)} older events not shown: -verbose shows every one)")
    return "\n".join(lines)


def alloc_status(
    alloc: Mapping[str, Any], now: float, verbose: bool = False, stats: Mapping[str, Any] | None = None
) -> str:
    """`alloc status`: the alloc (GET /v1/allocation/:id) and its stats (GET
    /v1/client/allocation/:id/stats, None when there are none) as `nomad alloc status` lays them out."""
    out = [header(alloc, now, verbose)]
    if (where := addresses(alloc)) is not None:
        out += ["", where]
    states: Mapping[str, Mapping[str, Any]] = alloc.get("TaskStates") or {}
    lcs = lifecycles(alloc)
    handles = adopted_handles(adopted_event(alloc))
    drivers = task_drivers(alloc)
    usage = (stats or {}).get("Tasks") or {}
    for task in task_order(list(states), lcs):
        state = states[task]
        mark = f" ({lifecycle_name(lcs[task])})" if task in lcs else ""
        out += ["", f'Task "{task}"{mark} is "{state.get("State")}"']
        if (res := resources(alloc, task, (usage.get(task) or {}).get("ResourceUsage"))) is not None:
            out.append(res)
        handle = handles.get(task) or (
            f"container {task}-{alloc.get('ID')}" if verbose and drivers.get(task) == "docker" else ""
        )
        if handle:
            out.append(kv([("Handle", handle)]))
        out += ["", task_events(state, verbose)]
    return "\n".join(out)
