"""Garbage collection of terminal allocs, as Nomad's client GC does it.

A stopped or failed alloc keeps its records, events and alloc dir once it has ended, so that it is
still listed and its events and logs can be read, by a restarted agent too. The GC removes them when
more allocs are tracked (live and terminal) than gc_max_allocs, or while the alloc dirs' filesystem
is over its disk or inode threshold (measured again after each alloc), oldest first; every terminal
alloc when forced (`POST /v1/client/gc`). Which ones go is the pure `agent.decide.decisions.plan_gc`; this
module measures, collects and removes. One alloc's records, events and dir go together, then every
job none of whose allocs is left. Never an alloc whose replacement is owed or that still has a
step off the main loop. `job stop -purge` removes one job and its allocs the same way.

Everything here runs on the main loop: the Core (agent.client.core) holds one `GarbageCollector` and
delegates to it; what the GC uses of the Core is `GcHost`. Nomad's client collects on a goroutine of
its own; here a long backlog (10,000 allocs of an earlier run: seconds of deletes) is collected in
turns of at most `GC_TURN` seconds, the loop's other work (API calls, restarts) served between them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.decide.decisions import GcCandidate, GcLimits, plan_gc
from agent.errors import AgentError, Conflict, NotFound
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.state import StateStore, drop_alloc
from agent.structs.model import Job

log = logging.getLogger(__name__)

TERMINAL_STATUSES = ("complete", "failed")  # the allocs the GC may collect (the status column)
GC_TURN = 0.25  # seconds of collecting per turn of the loop, for the periodic GC


@dataclass(frozen=True)
class GcReport:
    collected: list[str]
    jobs_purged: list[str]
    disk_used: float  # percent, after
    inodes_used: float
    more: bool = False  # the turn ended before the pass did: more is owed now


class GcHost(Protocol):
    """What the GC uses of the Core (agent.client.core.Core): its store, runners and jobs, where the alloc
    dirs are (deps), its limits and its timers."""

    store: StateStore
    deps: RunnerDeps
    gc_limits: GcLimits
    runners: dict[str, AllocRunner]
    jobs: dict[str, Job]

    def schedule(self, delay: float, fn: Callable[[], None]) -> None: ...


def alloc_fs_usage(data_dir: Path) -> tuple[float, float]:
    """Percent of blocks and of inodes used on the filesystem of the alloc dirs."""
    where = data_dir / "alloc"
    try:
        st = os.statvfs(where if where.exists() else data_dir)
    except OSError:
        return 0.0, 0.0
    disk = 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks if st.f_blocks else 0.0
    inodes = 100.0 * (st.f_files - st.f_favail) / st.f_files if st.f_files else 0.0
    return disk, inodes


class GarbageCollector:
    """The Core's GC. `usage` measures the alloc dirs' filesystem (percent of blocks and of inodes
    used: alloc_fs_usage of the Core's data dir), before collecting and again after each pass."""

    def __init__(self, core: GcHost, usage: Callable[[], tuple[float, float]]) -> None:
        self.core = core
        self.usage = usage
        self._owed_jobs: set[str] = set()  # of a pass's turns so far: purged once the pass ends

    def gc(self, *, force: bool = False, turn: float | None = None) -> GcReport:
        """Collect terminal allocs as Nomad's client GC does (agent.decide.decisions.plan_gc): each one's
        records, events and alloc dir go together; then the jobs none of whose allocs is left.
        Never an alloc whose replacement is owed or that still has a step off the loop. `turn`:
        stop after that many seconds (the report says `more`), the rest for a later call."""
        core = self.core
        deadline = time.monotonic() + turn if turn is not None else None
        more = False
        rows = core.store.index("alloc", TERMINAL_STATUSES)
        keep = {
            a
            for a, r in core.runners.items()
            if r.rec.live or r.rec.replace_pending or r.serial.busy or r.serial.waiting
        }
        tracked = len(rows) + sum(1 for r in core.runners.values() if r.rec.live)
        left = {row.key: row for row in rows if row.key not in keep}
        collected: list[str] = []
        jobs: set[str] = set()
        disk, inodes = self.usage()
        for _ in range(len(left) + 1):  # each pass collects at least one, or ends
            candidates = [GcCandidate(k, row.updated_at) for k, row in left.items()]
            todo = plan_gc(
                candidates,
                tracked - len(collected),
                core.gc_limits,
                disk_used=disk,
                inodes_used=inodes,
                force=force,
            )
            if not todo:
                break
            for alloc_id in todo:
                jobs.add(self._collect(alloc_id))
                collected.append(alloc_id)
                left.pop(alloc_id, None)
                if deadline is not None and time.monotonic() >= deadline:
                    more = True
                    break
            disk, inodes = self.usage()
            if more:
                break
        if more:  # the jobs left without allocs go when the pass ends (a listing of every alloc)
            self._owed_jobs |= jobs
            purged = []
        else:
            purged = self._purge_jobs_without_allocs((jobs | self._owed_jobs) - {""})
            self._owed_jobs.clear()
        if collected:
            log.info(
                "GC: collected %d terminal alloc(s), %d job(s)%s",
                len(collected),
                len(purged),
                " (more in the next turn)" if more else "",
            )
        return GcReport(collected, purged, disk, inodes, more)

    def collect_one(self, alloc_id: str) -> list[str]:
        """Nomad's `GET /v1/client/allocation/:id/gc`: one terminal alloc now (never one whose
        replacement is owed or that still has a step off the loop), then its job if nothing of it
        is left; the jobs purged."""
        r = self.core.runners.get(alloc_id)
        if r is not None and (r.rec.live or r.rec.replace_pending or r.serial.busy or r.serial.waiting):
            raise AgentError(f"alloc {alloc_id} is not done yet: it cannot be collected")
        job = self._collect(alloc_id)
        return self._purge_jobs_without_allocs({job} - {""})

    def _collect(self, alloc_id: str) -> str:
        """Remove one terminal alloc for good; the job it belonged to."""
        core = self.core
        runner = core.runners.pop(alloc_id, None)
        job = runner.job.id if runner else ""
        if not job:
            with contextlib.suppress(AgentError):
                job = str((core.store.get("alloc", alloc_id) or {}).get("job", ""))
        drop_alloc(core.store, alloc_id)
        core.deps.task_dirs.remove(core.deps.data_dir / "alloc" / alloc_id)
        return job

    def _purge_jobs_without_allocs(self, candidates: set[str]) -> list[str]:
        if not candidates:
            return []
        core = self.core
        remaining = {str(r.get("job", "")) for r in core.store.list("alloc").records.values()}
        purged = sorted(
            j for j in candidates if (j not in remaining and j in core.jobs) or j not in remaining
        )
        for job_id in purged:
            core.store.delete("job", job_id)
            core.jobs.pop(job_id, None)
        return purged

    def start_periodic_gc(self, interval: float) -> None:
        """A pass every `interval` seconds, each in turns of GC_TURN: a pass that did not end
        goes on at the loop's next turn (after what is queued on it), not an interval later."""

        def tick() -> None:
            more = False
            try:
                more = self.gc(turn=GC_TURN).more
            finally:
                self.core.schedule(0.0 if more else interval, tick)

        self.core.schedule(interval, tick)

    def purge_job(self, job_id: str) -> list[str]:
        """`job stop -purge`: once the job's allocs are stopped, they and the job are removed."""

        core = self.core
        if job_id not in core.jobs:
            raise NotFound(f"no job {job_id}")
        mine = [a for a, r in core.runners.items() if r.job.id == job_id]
        busy = [a for a in mine if core.runners[a].rec.live or core.runners[a].serial.busy]
        if busy:
            raise Conflict(f"job {job_id}: alloc(s) {', '.join(b[:8] for b in busy)} still stopping")
        for a in mine:
            self._collect(a)
        for row in core.store.index("alloc", TERMINAL_STATUSES):  # those of earlier agent runs
            rec = core.store.get("alloc", row.key) or {}
            if rec.get("job") == job_id:
                self._collect(row.key)
        core.store.delete("job", job_id)
        core.jobs.pop(job_id, None)
        return mine
