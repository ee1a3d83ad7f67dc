"""What the suites read of an allocation, from Nomad's API and the node itself (pure but for nothing:
the node's part comes in as the text of HANDLES_SCRIPT's run).

The harness speaks Nomad's HTTP API only, so that it reads a Nomad client the same way it reads this
project's agent. Nomad's api.Allocation has no task handle (which container, which process), so the
harness finds each task's handle on the node, by what a Nomad client leaves there:

    docker task     the container named `<task>-<alloc id>` (Nomad's docker driver's name)
    pause           the container `nomad_init_<alloc id>` (Nomad's; `fieldlab_init_` on nodes
                    whose pause containers this agent started before it took Nomad's name)
    exec, raw_exec  the process group of the earliest started live process whose environment
                    holds NOMAD_ALLOC_ID and NOMAD_TASK_NAME (signals go to the group; an `alloc
                    exec` session started later has the same environment, in a group of its own)

The suites' view of an alloc keeps the names they always read (`id`, `status`, `network`, `tasks`
with `container` ...); `alloc_view` builds it from api.Allocation, `alloc_events` flattens the
TaskStates' events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PAUSE_PREFIXES = ("nomad_init_", "fieldlab_init_")

# Prints one JSON object: {"containers": [[id, name, state, created]], "procs": [[process group,
# alloc, task, start ticks]]}: every live process with the task environment, by its process group.
# Runs with the node's python3 (every lab node has it: Ansible needs it).
HANDLES_SCRIPT = r"""
import json, os, subprocess
out = {"containers": [], "procs": []}
try:
    ps = subprocess.run(
        ["docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}}\t{{.Names}}\t{{.State}}\t{{.CreatedAt}}"],
        capture_output=True, text=True, timeout=30,
    )
    out["containers"] = [line.split("\t") for line in ps.stdout.splitlines() if line.count("\t") == 3]
except (OSError, subprocess.SubprocessError):
    pass
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        continue
    alloc, task = env.get(b"NOMAD_ALLOC_ID"), env.get(b"NOMAD_TASK_NAME")
    if alloc and task:
        out["procs"].append([int(fields[2]), alloc.decode(), task.decode(), int(fields[19])])
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Handles:
    """One alloc's handles on its node: {task: container id or pid}, and its pause container."""

    tasks: dict[str, str] = field(default_factory=dict)
    pause: str = ""


def parse_handles(text: str) -> dict[str, Handles]:
    """{alloc id: Handles} from HANDLES_SCRIPT's output ({} when it printed nothing usable)."""
    try:
        raw = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except (json.JSONDecodeError, IndexError):
        return {}
    tasks: dict[str, dict[str, tuple[int, str]]] = {}  # alloc -> task -> (rank, handle)
    pause: dict[str, tuple[int, str]] = {}
    for cid, name, state, _created in raw.get("containers") or []:
        rank = 0 if state == "running" else 1
        prefix = next((p for p in PAUSE_PREFIXES if name.startswith(p)), "")
        if prefix:
            alloc = name[len(prefix) :]
            if alloc not in pause or rank < pause[alloc][0]:
                pause[alloc] = (rank, cid)
            continue
        task, sep, alloc = name[:-37], name[-37:-36], name[-36:]
        if sep != "-" or alloc.count("-") != 4 or not task:
            continue
        mine = tasks.setdefault(alloc, {})
        if task not in mine or rank < mine[task][0]:
            mine[task] = (rank, cid)
    for group, alloc, task, _started in sorted(raw.get("procs") or [], key=lambda p: p[3]):
        mine = tasks.setdefault(alloc, {})
        if task not in mine:  # a container of the task wins; else the earliest started process
            mine[task] = (2, str(group))
    allocs = set(tasks) | set(pause)
    return {
        a: Handles({t: h for t, (_, h) in (tasks.get(a) or {}).items()}, (pause.get(a) or (0, ""))[1])
        for a in allocs
    }


def _network(a: Mapping[str, Any]) -> dict[str, Any]:
    shared = (a.get("AllocatedResources") or {}).get("Shared") or {}
    nets = shared.get("Networks") or a.get("Resources", {}).get("Networks") or []
    net = nets[0] if nets else {}
    status = a.get("NetworkStatus") or {}
    ports = [
        {"label": p.get("Label", ""), "host": int(p.get("Value") or 0), "to": int(p.get("To") or 0)}
        for p in shared.get("Ports") or []
    ]
    return {
        "mode": str(net.get("Mode") or ("none" if not nets else "host")),
        "address": str(status.get("Address") or net.get("IP") or ""),
        "ports": ports,
    }


def _group_tasks(a: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for g in (a.get("Job") or {}).get("TaskGroups") or []:
        if g.get("Name") == a.get("TaskGroup"):
            return list(g.get("Tasks") or [])
    return []


def _drivers(a: Mapping[str, Any]) -> dict[str, str]:
    return {str(t.get("Name")): str(t.get("Driver") or "") for t in _group_tasks(a)}


def _lifecycles(a: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{task: {"hook", "sidecar"}} of the group's lifecycle tasks (api.TaskLifecycle)."""
    return {
        str(t.get("Name")): {"hook": str(lc.get("Hook") or ""), "sidecar": bool(lc.get("Sidecar"))}
        for t in _group_tasks(a)
        if (lc := t.get("Lifecycle") or {}).get("Hook")
    }


def alloc_view(a: Mapping[str, Any], handles: Handles | None = None) -> dict[str, Any]:
    """The suites' view of one api.Allocation (or AllocationListStub), with its handles on the node."""
    h = handles or Handles()
    drivers = _drivers(a)
    lifecycles = _lifecycles(a)
    net = _network(a)
    net["pause_container"] = h.pause or None
    tasks = {}
    for name, ts in (a.get("TaskStates") or {}).items():
        handle = h.tasks.get(name, "")
        tasks[name] = {
            "driver": drivers.get(name) or ("docker" if len(handle) == 64 else ""),
            "state": str(ts.get("State") or "pending"),
            "restarts": int(ts.get("Restarts") or 0),
            "failed": bool(ts.get("Failed")),
            "container": handle or None,
        }
        if name in lifecycles:  # only a lifecycle task carries it: {"hook", "sidecar"}
            tasks[name]["lifecycle"] = lifecycles[name]
    return {
        "id": str(a["ID"]),
        "job": str(a.get("JobID") or ""),
        "group": str(a.get("TaskGroup") or ""),
        "status": str(a.get("ClientStatus") or ""),
        "desired": str(a.get("DesiredStatus") or ""),
        "reason": str(a.get("ClientDescription") or ""),
        "replaced_by": a.get("NextAllocation") or None,
        "followup_eval_id": a.get("FollowupEvalID") or "",  # a reschedule owed (Nomad's follow-up eval)
        "replaces": a.get("PreviousAllocation") or None,
        "created": int(a.get("CreateTime") or 0) / 1e9,
        "network": net,
        "tasks": tasks,
    }


def alloc_events(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every task event of the alloc in time order, each {task, type, time (s), message, details}.
    Nomad puts an event of the whole alloc in each task's list: one found in every task's list (the
    same type, time and message) is kept once, with task "" (with one task there is no telling, and
    it stays the task's)."""
    states: Mapping[str, Any] = a.get("TaskStates") or {}
    seen: dict[tuple[str, int, str], list[str]] = {}
    first: dict[tuple[str, int, str], Mapping[str, Any]] = {}
    order: list[tuple[str, int, str, str]] = []
    for task, ts in states.items():
        for ev in ts.get("Events") or []:
            key = (str(ev.get("Type") or ""), int(ev.get("Time") or 0), str(ev.get("DisplayMessage") or ""))
            seen.setdefault(key, []).append(task)
            first.setdefault(key, ev)
            order.append((*key, task))
    wide = {k for k, tasks in seen.items() if len(states) > 1 and set(tasks) == set(states)}
    out: list[dict[str, Any]] = []
    done: set[tuple[str, int, str]] = set()
    for type_, t, msg, of in sorted(order, key=lambda o: o[1]):
        key = (type_, t, msg)
        if key in wide:
            if key in done:
                continue
            done.add(key)
        out.append(
            {
                "task": "" if key in wide else of,
                "type": type_,
                "time": t / 1e9,
                "message": msg,
                "details": dict(first[key].get("Details") or {}),
            }
        )
    return out


def alloc_ids(allocs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(a["ID"]) for a in allocs]


NODE_NAME_TARGET = "${node.unique.name}"


def pinned(job: Mapping[str, Any], node_name: str) -> dict[str, Any]:
    """The api.Job with a constraint that places it on the client `node_name` only (a Nomad
    scheduler may place a job on any client of the cluster; the suites read the node they chose).
    Its own constraints stay; one of the same kind already there is replaced, not doubled."""
    own = [
        c
        for c in job.get("Constraints") or []
        if not (c.get("LTarget") == NODE_NAME_TARGET and c.get("Operand") in ("=", "==", "is"))
    ]
    pin = {"LTarget": NODE_NAME_TARGET, "RTarget": node_name, "Operand": "="}
    return {**job, "Constraints": [*own, pin]}
