"""What `job plan` and `job history` print (pure): an api.JobDiff as Nomad's CLI lays one out (a
marker per changed thing, `+` added, `-` deleted, `+/-` edited; fields aligned; the scheduler's
annotations in parentheses), the plan's dry run and its check-index hint, and a job's versions.
Plain text: no colours, so a diff pasted into a bug report reads the same."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent.cli.format import kv, seconds

MARKERS = {"Added": "+", "Deleted": "-", "Edited": "+/-"}


def _marker(kind: object) -> str:
    """The marker and its space ("+/- "), or "" for an unchanged thing."""
    m = MARKERS.get(str(kind), "")
    return f"{m} " if m else ""


def _width(kind: object) -> int:
    return len(_marker(kind))


def _list(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _field_line(f: Mapping[str, Any], indent: int, marker_w: int, name_w: int) -> str:
    kind = str(f.get("Type") or "None")
    old, new = str(f.get("Old") or ""), str(f.get("New") or "")
    value = {"Added": f'"{new}"', "Deleted": f'"{old}"', "Edited": f'"{old}" => "{new}"'}.get(
        kind, f'"{new}"'
    )
    marker = _marker(kind)
    name = str(f.get("Name") or "")
    line = (
        f"{' ' * indent}{marker}{' ' * (marker_w - len(marker))}{name}: {' ' * (name_w - len(name))}{value}"
    )
    notes = [str(a) for a in f.get("Annotations") or ()]
    return f"{line} ({', '.join(notes)})" if notes else line


def _fields_and_objects(
    fields: list[Mapping[str, Any]], objects: list[Mapping[str, Any]], indent: int
) -> list[str]:
    """A level's changed fields, then its objects, their names and markers aligned."""
    name_w = max((len(str(f.get("Name") or "")) for f in fields), default=0)
    marker_w = max((_width(x.get("Type")) for x in [*fields, *objects]), default=0)
    out = [_field_line(f, indent, marker_w, name_w) for f in fields]
    for o in objects:
        marker = _marker(o.get("Type"))
        pad = " " * (marker_w - len(marker))
        out.append(f"{' ' * indent}{marker}{pad}{o.get('Name')} {{")
        out += _fields_and_objects(_list(o.get("Fields")), _list(o.get("Objects")), indent + len(pad) + 2)
        out.append(f"{' ' * (indent + len(marker) + len(pad))}}}")
    return out


def _shown(d: Mapping[str, Any], verbose: bool) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The fields and objects a level shows: its changed ones (all of them with -verbose)."""
    fields = [f for f in _list(d.get("Fields")) if verbose or f.get("Type") != "None"]
    objects = [o for o in _list(d.get("Objects")) if verbose or o.get("Type") != "None"]
    return fields, objects


def diff_text(diff: Mapping[str, Any], verbose: bool = False) -> str:
    """An api.JobDiff as `nomad job plan` prints it (without colours)."""
    lines = [f'{_marker(diff.get("Type"))}Job: "{diff.get("ID")}"']
    groups = _list(diff.get("TaskGroups"))
    if diff.get("Type") == "Edited" or verbose:
        lines += _fields_and_objects(*_shown(diff, verbose), 0)
    group_w = max((_width(g.get("Type")) for g in groups), default=0)
    for g in groups:
        lines += _group_lines(g, group_w - _width(g.get("Type")), verbose)
    return "\n".join(lines)


def _group_lines(g: Mapping[str, Any], pad: int, verbose: bool) -> list[str]:
    updates = g.get("Updates") or {}
    counts = ", ".join(f"{updates[k]} {k}" for k in sorted(updates)) if isinstance(updates, Mapping) else ""
    head = f'{_marker(g.get("Type"))}{" " * pad}Task Group: "{g.get("Name")}"'
    lines = [f"{head} ({counts})" if counts else head]
    inner = pad + 2
    if g.get("Type") == "Edited" or verbose:
        lines += _fields_and_objects(*_shown(g, verbose), inner)
    tasks = _list(g.get("Tasks"))
    task_w = max((_width(t.get("Type")) for t in tasks), default=0)
    for t in tasks:
        kind = t.get("Type")
        notes = ", ".join(str(a) for a in t.get("Annotations") or ())
        line = f'{" " * inner}{_marker(kind)}{" " * (task_w - _width(kind))}Task: "{t.get("Name")}"'
        lines.append(f"{line} ({notes})" if notes else line)
        if kind == "Edited" or (verbose and kind in ("Added", "Deleted")):
            lines += _fields_and_objects(*_shown(t, verbose), inner + 2)
    return lines


def plan_exit_code(plan: Mapping[str, Any]) -> int:
    """As `nomad job plan`: 1 when allocations would be created or destroyed, else 0."""
    if (plan.get("Diff") or {}).get("Type") == "None":
        return 0
    desired = (plan.get("Annotations") or {}).get("DesiredTGUpdates") or {}
    moves = ("Stop", "Place", "Migrate", "DestructiveUpdate", "Canary")
    return int(any(sum(int(u.get(k) or 0) for k in moves) > 0 for u in desired.values()))


def plan_text(
    plan: Mapping[str, Any], job_type: str, rerun: str, verbose: bool = False, diff: bool = True
) -> str:
    """The whole of `job plan`'s report: the diff, the scheduler's dry run, warnings, and the index
    to run the job with (`rerun`: the `job run -check-index N ...` command line)."""
    out: list[str] = []
    if diff and plan.get("Diff"):
        out += [diff_text(plan["Diff"], verbose), ""]
    out.append("Scheduler dry-run:")
    failed = plan.get("FailedTGAllocs") or {}
    if not failed:
        out.append("- All tasks successfully allocated.")
    else:
        system = job_type == "system"
        out.append(
            f"- WARNING: Failed to place {'allocations on all nodes' if system else 'all allocations'}."
        )
        for name in sorted(failed):
            metric = failed[name] or {}
            n = int(metric.get("CoalescedFailures") or 0) + 1
            out.append(f'  Task Group "{name}" (failed to place {n} allocation{"s" if n > 1 else ""}):')
            out += _metric_lines(metric)
    out.append("")
    if plan.get("Warnings"):
        out += ["Job Warnings:", str(plan["Warnings"]), ""]
    index = int(plan.get("JobModifyIndex") or 0)
    out += [
        f"Job Modify Index: {index}",
        "To submit the job with version verification run:",
        "",
        rerun,
        "",
        "When running the job with the check-index flag, the job will only be run if the",
        "job modify index given matches the agent's version. If the index has changed,",
        "another user has modified the job and the plan's results are potentially invalid.",
    ]
    return "\n".join(out)


def _metric_lines(metric: Mapping[str, Any]) -> list[str]:
    """An api.AllocationMetric's reasons, one a line (the node's filters, exhausted dimensions)."""
    lines = []
    for key, label in (("ConstraintFiltered", "Constraint"), ("ClassFiltered", "Class")):
        for what, n in sorted((metric.get(key) or {}).items()):
            lines.append(f'    * {label} "{what}": {n} nodes excluded by filter')
    for what, n in sorted((metric.get("DimensionExhausted") or {}).items()):
        lines.append(
            f'    * Resources exhausted on {n} nodes\n    * Dimension "{what}" exhausted on {n} nodes'
        )
    if not lines and metric.get("NodesEvaluated") == 0:
        lines.append("    * No nodes were eligible for evaluation")
    return lines


def history_text(versions: Sequence[Mapping[str, Any]], diffs: Sequence[Mapping[str, Any]] | None) -> str:
    """`job history` (with -p, each version's diff to the one before it), newest first."""
    blocks = []
    for i, job in enumerate(versions):
        submitted = seconds(job.get("SubmitTime"))
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(submitted)) if submitted else None
        pairs: list[tuple[str, object]] = [
            ("Version", job.get("Version")),
            ("Stable", str(bool(job.get("Stable"))).lower()),
            ("Submit Date", when),
        ]
        block = kv(pairs)
        d = diffs[i] if diffs is not None and i < len(diffs) else None
        if d and d.get("Type") != "None":
            block += "\nDiff        =\n" + diff_text(d)
        blocks.append(block)
    return "\n\n".join(blocks)
