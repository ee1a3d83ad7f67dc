"""What `fieldlab-agent alloc list|status|stop` print, from Nomad's api.Allocation and
api.AllocationListStub (pure; the helpers that read an alloc are agent.cli.format's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.cli.format import (
    RECENT_EVENTS,
    adopted_event,
    adopted_handles,
    ago,
    alloc_events,
    alloc_row,
    alloc_state,
    go_time_seconds,
    is_live,
    kv,
    seconds,
    short,
    table,
    task_drivers,
)


def alloc_list(allocs: Sequence[Mapping[str, Any]], now: float, verbose: bool = False) -> str:
    """`alloc list`: GET /v1/allocations (api.AllocationListStub), newest first."""
    if not allocs:
        return "No allocations"
    rows = [
        alloc_row(a, now, verbose, job=True)
        for a in sorted(allocs, key=lambda a: int(a.get("CreateTime") or 0), reverse=True)
    ]
    return table(["ID", "Job ID", "Task Group", "Version", "Desired", "Status", "Created", "Modified"], rows)


def network(alloc: Mapping[str, Any]) -> tuple[str, str]:
    """("mode[, address]", "label host -> to, ...") of the alloc's shared network."""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    nets = shared.get("Networks") or (alloc.get("Resources") or {}).get("Networks") or []
    net = nets[0] if nets else {}
    mode = str(net.get("Mode") or "none")
    address = str((alloc.get("NetworkStatus") or {}).get("Address") or net.get("IP") or "")
    ports = ", ".join(
        f"{p.get('Label')} {p.get('Value')} -> {p.get('To')}" for p in shared.get("Ports") or []
    )
    return (f"{mode}, {address}" if address else mode), ports


def alloc_status(alloc: Mapping[str, Any], now: float, verbose: bool = False) -> str:
    """`alloc status`: the alloc (GET /v1/allocation/:id), its tasks, its recent events."""
    where, ports = network(alloc)
    job = alloc.get("Job") or {}
    pairs: list[tuple[str, object]] = [
        ("ID", alloc.get("ID")),
        ("Name", alloc.get("Name")),
        ("Job ID", alloc.get("JobID")),
        ("Job Version", job.get("Version") if job else None),
        ("Task Group", alloc.get("TaskGroup")),
        ("Client Status", alloc_state(alloc)),
        ("Client Description", alloc.get("ClientDescription")),
        ("Desired Status", alloc.get("DesiredStatus")),
    ]
    if alloc.get("DesiredDescription"):
        pairs.append(("Desired Description", alloc["DesiredDescription"]))
    pairs += [
        ("Created", ago(seconds(alloc.get("CreateTime")), now)),
        ("Modified", ago(seconds(alloc.get("ModifyTime")), now)),
        ("Network", where),
    ]
    if ports:
        pairs.append(("Ports", ports))
    for key, label in (("PreviousAllocation", "Replaces"), ("NextAllocation", "Replaced By")):
        if alloc.get(key):
            pairs.append((label, alloc[key]))
    adopted = adopted_event(alloc)
    if adopted is not None:
        state_db = (adopted.get("Details") or {}).get("state_db") or "?"
        when = ago(seconds(adopted.get("Time")), now)
        pairs.append(("Adopted", f"{when}, state database moved to {state_db}"))
    out = [kv(pairs), "", "Tasks", _tasks(alloc, now, verbose), ""]
    out += recent_events(alloc_events(alloc), now, verbose)
    return "\n".join(out)


def _tasks(alloc: Mapping[str, Any], now: float, verbose: bool) -> str:
    """The task table: each task's driver (from the Job), state, restarts, whether it failed and
    when it last started; its container or cgroup where that is known (an adopted alloc's, from
    its event; with -verbose a docker task's container, by the name Nomad's docker driver gives it)."""
    states: Mapping[str, Mapping[str, Any]] = alloc.get("TaskStates") or {}
    if not states:
        return "No tasks"
    drivers = task_drivers(alloc)
    handles = adopted_handles(adopted_event(alloc))
    if verbose:
        for name in states:
            if drivers.get(name) == "docker" and name not in handles:
                handles[name] = f"{name}-{alloc.get('ID')}"
    headers = ["Name", "Driver", "State", "Restarts", "Failed", "Started"]
    rows: list[list[object]] = [
        [
            name,
            drivers.get(name),
            t.get("State"),
            t.get("Restarts", 0),
            "true" if t.get("Failed") else "false",
            ago(go_time_seconds(t.get("StartedAt")), now),
        ]
        for name, t in states.items()
    ]
    if handles:
        headers.append("Container")
        for row in rows:
            row.append(handles.get(str(row[0])))
    return table(headers, rows)


def recent_events(events: Sequence[Mapping[str, Any]], now: float, verbose: bool = False) -> list[str]:
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


def alloc_stopped(alloc_id: str, answer: Mapping[str, Any], after: Mapping[str, Any] | None) -> str:
    """`alloc stop`: POST /v1/allocation/:id/stop's answer (EvalID), and the alloc after it (None:
    gone, as an adopted alloc once its tasks are removed)."""
    if after is None:
        head = f'==> Allocation "{short(alloc_id)}" stopped (adopted: its tasks were removed)'
    else:
        head = f'==> Allocation "{short(alloc_id)}" ' + ("stopping" if is_live(after) else "stopped")
    lines = [head, f'    Evaluation "{short(answer.get("EvalID"))}" finished with status "complete"']
    if after is not None and after.get("NextAllocation"):
        lines.append(f'    Allocation "{short(after["NextAllocation"])}" replaces it')
    return "\n".join(lines)
