"""Pure views the API answers with beside an alloc's own (agent.runner.view): a job with its allocs
(`GET /v1/job/<id>`), the job's status as Nomad derives it, and alloc counts (`GET /v1/node`)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from agent.model import Job

ALLOC_STATUSES = ("pending", "running", "failed", "complete", "adopted")
_LIVE = frozenset({"pending", "running", "adopted"})


def plain(value: Any) -> Any:
    """A model value as JSON data: dataclasses to objects, mappings to objects, tuples to lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def job_status(alloc_statuses: Iterable[str]) -> str:
    """As Nomad: "running" while an alloc runs, "pending" while the live ones are all pending,
    "dead" when every alloc is terminal (or there is none)."""
    live = [s for s in alloc_statuses if s in _LIVE]
    if not live:
        return "dead"
    return "pending" if all(s == "pending" for s in live) else "running"


def alloc_counts(allocs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """{status: count} over ALLOC_STATUSES (every one present, 0 when none)."""
    seen = Counter(str(a.get("status", "")) for a in allocs)
    return {s: seen.get(s, 0) for s in ALLOC_STATUSES} | {
        s: n for s, n in sorted(seen.items()) if s not in ALLOC_STATUSES
    }


def job_view(
    job_id: str, job: Job | None, record: Mapping[str, Any] | None, allocs: list[dict[str, Any]]
) -> dict[str, Any]:
    """`GET /v1/job/<id>`: what the job is (None when only adopted allocs remain of it: the jobspec
    went with the lost state database), its status, a per-group summary and its allocs."""
    groups: list[dict[str, Any]] = []
    if job is not None:
        groups = [
            {
                "name": g.name,
                "count": g.count,
                "tasks": [{"name": t.name, "driver": t.driver} for t in g.tasks],
            }
            for g in job.groups
        ]
    names = [g["name"] for g in groups] + sorted(
        {str(a.get("group", "")) for a in allocs} - {g["name"] for g in groups}
    )
    summary = {n: alloc_counts(a for a in allocs if a.get("group") == n) for n in names}
    return {
        "id": job_id,
        "name": (job.name or job.id) if job is not None else job_id,
        "type": job.type if job is not None else "",
        "datacenters": list(job.datacenters) if job is not None else [],
        "status": job_status(str(a.get("status", "")) for a in allocs),
        "groups": groups,
        "summary": summary,
        "allocs": sorted(allocs, key=lambda a: float(a.get("created") or 0.0), reverse=True),
        "spec": plain(job) if job is not None else None,
        "submission": (
            {
                "format": record.get("format"),
                "source": record.get("source", ""),
                "warnings": list(record.get("warnings") or []),
                "variables": dict(record.get("variables") or {}),
            }
            if record is not None
            else None
        ),
    }
