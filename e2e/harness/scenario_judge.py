"""Judging a scenario (e2e.harness.scenario reads one): what its checks find wrong in the alloc's
view, its events and the files they read, and whether a wait step holds. Pure: the runner
(e2e.harness.scenario_steps) fetches what `file_paths` names and hands it over."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from e2e.harness.scenario import Step


def file_paths(checks: tuple[Step, ...]) -> list[str]:
    """What the `file` and `logs` checks read (the runner fetches them for `check_problems`): an
    alloc-dir path, or `logs:TASK:STREAM` for a task's log."""
    paths = [
        c.arg["path"] if c.name == "file" else log_key(c.arg) for c in checks if c.name in ("file", "logs")
    ]
    return paths + [SWEPT_KEY] * any(c.name == "swept" for c in checks)


SWEPT_KEY = "agent:swept"  # file_paths' key for what the sweeper removed: "kind owner target" lines


def log_key(arg: dict[str, Any]) -> str:
    return f"logs:{arg['task']}:{arg.get('stream', 'stdout')}"


def check_problems(
    check: Step,
    alloc: dict[str, Any],
    events: list[dict[str, Any]],
    files: dict[str, str | None] | None = None,
) -> list[str]:
    """What `check` finds wrong in the alloc's view (e2e.harness.nomadview.alloc_view), its events
    (nomadview.alloc_events) and the files its `file` checks read (path -> text, None: no such
    file); [] when it holds. `invariants` is checked by the runner, not here."""
    name, arg = check.name, check.arg
    if name == "file":
        return _file_problems(arg, (files or {}).get(arg["path"]))
    if name == "logs":
        where = f"{arg['task']}'s {arg.get('stream', 'stdout')}"
        return _file_problems({**arg, "path": where}, (files or {}).get(log_key(arg)))
    aid = str(alloc.get("id", ""))[:8]
    if name == "swept":
        lines = ((files or {}).get(SWEPT_KEY) or "").splitlines()
        left = [line.split(" ", 2) for line in lines if line.split(" ")[1:2] == [str(alloc.get("id", ""))]]
        return [
            f"the agent's sweeper removed {kind} {target} of alloc {aid}: its teardown left it"
            for kind, _, target in left
        ]
    if name == "alloc":
        status = alloc.get("status")
        return (
            []
            if status == arg
            else [f"alloc {aid} is {status}, expected {arg} ({alloc.get('reason') or ''})"]
        )
    if name == "replaced":
        was = bool(alloc.get("replaced_by"))
        if was == arg:
            return []
        said = "was replaced" if was else "was not replaced"
        return [f"alloc {aid} {said}, expected {'' if arg else 'not '}replaced"]
    if name == "task":
        ts = (alloc.get("tasks") or {}).get(arg["name"])
        if ts is None:
            return [f"alloc {aid} has no task {arg['name']}"]
        return [
            f"task {arg['name']}: {key} is {ts.get(key)!r}, expected {arg[key]!r}"
            for key in ("state", "restarts", "failed")
            if key in arg and ts.get(key) != arg[key]
        ]
    if name == "starts":
        n = sum(1 for e in events if e["type"] == "Started" and e["task"] in (arg["task"], ""))
        if n == arg["count"]:
            return []
        seen = event_types(events, arg["task"])
        return [f"task {arg['task']} started {n} times, expected {arg['count']}: {seen}"]
    if name == "events":
        task = arg.get("task")
        types = [e["type"] for e in events if task is None or e["task"] in (task, "")]
        if arg.get("after"):
            if arg["after"] not in types:
                return [f"no {arg['after']!r} event: {types}"]
            types = types[len(types) - types[::-1].index(arg["after"]) :]
        problems = [f"no {t!r} event{_after(arg)}: {types}" for t in arg.get("has", []) if t not in types]
        problems += [f"a {t!r} event{_after(arg)}: {types}" for t in arg.get("lacks", []) if t in types]
        return problems
    return []


def _file_problems(arg: dict[str, Any], text: str | None) -> list[str]:
    where = arg["path"]
    if text is None:
        return [f"no file {where} in the alloc dir"] if arg.get("exists", True) else []
    if not arg.get("exists", True):
        return [f"file {where} exists, expected none"]
    shown = text.strip()[:200]
    problems = []
    if "contains" in arg and not re.search(str(arg["contains"]), text, re.MULTILINE):
        problems.append(f"file {where} does not match {arg['contains']!r}: {shown!r}")
    if "lacks" in arg and re.search(str(arg["lacks"]), text, re.MULTILINE):
        problems.append(f"file {where} matches {arg['lacks']!r}: {shown!r}")
    return problems


def _after(arg: dict[str, Any]) -> str:
    return f" after {arg['after']!r}" if arg.get("after") else ""


def event_types(events: list[dict[str, Any]], task: str) -> list[str]:
    return [e["type"] for e in events if e["task"] in (task, "")]


def wait_state(step: Step, alloc: dict[str, Any], events: list[dict[str, Any]]) -> tuple[bool, str]:
    """(reached, what is seen) of a wait step over the alloc's view and events (not `invariants`)."""
    arg = step.arg
    if "alloc" in arg:
        return alloc.get("status") == arg["alloc"], f"alloc {alloc.get('status')}"
    if "replaced" in arg:
        by = alloc.get("replaced_by") or ""
        return bool(by) == arg["replaced"], f"replaced by {by[:8]}" if by else "was not replaced"
    ts = (alloc.get("tasks") or {}).get(arg["task"]) or {}
    if "state" in arg:
        return ts.get("state") == arg["state"], f"task {arg['task']} {ts.get('state') or 'unknown'}"
    n = sum(1 for e in events if e["type"] == arg["event"] and e["task"] in (arg["task"], ""))
    return n >= arg.get("count", 1), f"{n} {arg['event']} event(s) of task {arg['task']}"


def family_problems(check: Step, job: str, children: list[dict[str, Any]], allocs: list[str]) -> list[str]:
    """What a `children` or `allocs` check finds wrong: `children` are the job's child jobs as
    {"id", "live"} (live: an alloc pending or running), `allocs` the IDs of the allocs of the job
    the scenario's alloc belongs to. Pure; [] when it holds."""
    arg = check.arg
    if check.name == "allocs":
        n = len(allocs)
        shown = ", ".join(a[:8] for a in allocs)
        return [] if n == arg["count"] else [f"{n} allocs of job {job}, expected {arg['count']}: {shown}"]
    out = []
    live = [c["id"] for c in children if c["live"]]
    if "count" in arg and len(children) != arg["count"]:
        ids = ", ".join(c["id"] for c in children)
        out.append(f"{len(children)} child jobs of {job}, expected {arg['count']}: {ids}")
    if "running" in arg and len(live) != arg["running"]:
        out.append(f"{len(live)} child jobs of {job} running, expected {arg['running']}: {', '.join(live)}")
    return out
