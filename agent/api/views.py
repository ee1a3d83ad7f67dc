"""Pure views beside an alloc's own (agent.runner.view): a job's status as Nomad derives it from its
allocs, and alloc counts per status (a job summary's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

ALLOC_STATUSES = ("pending", "running", "failed", "complete", "adopted")
_LIVE = frozenset({"pending", "running", "adopted"})


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
