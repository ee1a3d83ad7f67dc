"""The startup restore: the allocs of the agent's last run, picked up again from the state store.

It is the main loop's first task. The jobs are rebuilt from their canonical form (no parsing); every
live alloc gets its runner back, and what its record says is compared with what is on the node
(containers, netns, CNI attachment) to reattach it, restart its dead tasks, recreate its network or
fail and replace it (agent.decide.decisions.plan_restore, acted on by AllocRunner.restore). Those reads are
independent per alloc, so they are done for all allocs at once, before any alloc is acted on. An
alloc the agent was killed while setting up is set up again, one it was killed while stopping is
stopped, a replacement still owed is started once (plan_owed_replacements), and an alloc whose
record is unreadable is replaced from its containers' labels. Only what restore acts on is read
(live allocs, failed ones owed a replacement, unreadable ones): terminal history costs nothing.
Last, what runs with no record at all (the state DB was lost) is adopted (agent.runner.adopt) and
the orphan sweep runs.

The Core (agent.client.core) holds one `Restore` and delegates to it; what the restore uses of the Core is
`RestoreHost`: the new allocs it starts are started by the Core's own `_new_alloc` and
`_replace` / `resume_reschedule`, as at run time.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

from agent.decide.decisions import ObservedAlloc, plan_owed_replacements, plan_restore_statuses
from agent.drivers.base import LABEL_GROUP, LABEL_JOB
from agent.drivers.registry import DriverRegistry
from agent.jobspec import JobspecError, Limits, parse_jobspec
from agent.jobspec.limits import stored_limits
from agent.network import iptables
from agent.node.names import seen_names
from agent.node.sweeper import SweepReport
from agent.runner.adopt import Adoption
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.state import StateStore
from agent.structs import layout
from agent.structs.jobcodec import JobCodecError, decode_job, encode_job
from agent.structs.layout import unrecorded_layout
from agent.structs.model import Job
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, RecordError

log = logging.getLogger(__name__)

LIVE_STATUSES = ("pending", "running")  # the allocs restore picks up (the status column)
RESTORE_PARALLEL = 8  # allocs observed at once


class RestoreHost(Protocol):
    """What the restore uses of the Core (agent.client.core.Core)."""

    store: StateStore
    drivers: DriverRegistry
    deps: RunnerDeps
    limits: Limits
    runners: dict[str, AllocRunner]
    jobs: dict[str, Job]
    adoption: Adoption
    restore_seconds: float

    @property
    def allocs(self) -> RestoreAllocs: ...

    def sweep(self) -> SweepReport | None: ...


class RestoreAllocs(Protocol):
    """What the restore uses of the alloc registry (agent.client.allocs.AllocRegistry)."""

    def new_alloc(self, job: Job, group_name: str, replaces: str = "") -> AllocRunner: ...

    def replace(self, failed: AllocRunner, reason: str) -> None: ...

    def resume_reschedule(self, failed: AllocRunner, reason: str) -> None: ...


class Restore:
    """The Core's startup restore (Core.restorer), run once, on the main loop."""

    def __init__(self, core: RestoreHost) -> None:
        self.core = core

    def restore(self) -> None:
        """The jobs, then every alloc restore acts on; its time is the Core's `restore_seconds`."""
        core = self.core
        t0 = time.monotonic()
        jobs = core.store.list("job")
        for bad in jobs.corrupt:
            log.error("state: job %s unreadable (%s): its allocs cannot be restored", bad.key, bad.reason)
        for job_id, job_rec in jobs.records.items():
            job = self._restore_job(job_id, job_rec)
            if job is not None:
                core.jobs[job_id] = job
        # Only what restore acts on is read (the status column is indexed): live allocs, failed ones
        # whose replacement is owed, and unreadable ones. Terminal history costs nothing here.
        live = core.store.list("alloc", tuple(s.value for s in plan_restore_statuses(core.deps.bugs)))
        owed = core.store.list("alloc", ("failed",), flag="replace_pending")
        corrupt = {bad.key: bad for bad in [*live.corrupt, *owed.corrupt]}
        unreadable = [(bad.key, bad.reason) for bad in corrupt.values()]
        records: list[AllocRecord] = []
        for alloc_id, raw in {**live.records, **owed.records}.items():
            try:
                rec = self._named(AllocRecord.from_record(raw, alloc_id))
                records.append(self._reopened(rec) if alloc_id in live.records else rec)
            except RecordError as exc:
                unreadable.append((alloc_id, exc.reason))
        for key, reason in unreadable:
            log.error("state: alloc %s unreadable (%s): replacing it", key, reason)
            core.store.append_event(key, "", "Restore Failed", f"alloc record unreadable: {reason}")
        observed = self._observe_all([r for r in records if r.live])
        for rec in records:
            if rec.live:
                self._restore_alloc(rec, *observed.get(rec.id, (None, None)))
        for alloc_id, _ in unreadable:
            self._replace_unreadable(alloc_id)
        self._start_owed_replacements(records)
        core.restore_seconds = time.monotonic() - t0
        log.info("restored %d alloc(s) in %.2fs", len(core.runners), core.restore_seconds)
        core.adoption.restore(core.runners)  # when the state DB was lost: what runs is adopted, not swept
        core.sweep()

    def _named(self, rec: AllocRecord) -> AllocRecord:
        """An alloc keeps the names it was made with (pinned: agent.structs.layout). A record an earlier agent
        wrote without them (the state schema upgrade) gets those found on the node, written back."""
        if rec.layout is None:
            candidates = layout.recognised()
            seen = seen_names(rec.id, candidates, self.core.deps.data_dir / "cni")
            rec = rec.with_(layout=unrecorded_layout(seen, candidates))
            self.core.store.put("alloc", rec.id, rec.to_record())
            log.info("state: alloc %s (an earlier agent's record) keeps its names %s", rec.id, rec.layout)
        assert rec.layout is not None
        layout.pin(rec.id, rec.layout)
        return rec

    def _reopened(self, rec: AllocRecord) -> AllocRecord:
        """A terminal alloc the restore picked up (plan_restore_statuses: only with the faults of
        nomad-5883 and 1795) is taken to be running again, as those clients did: recorded running."""
        if rec.live or rec.desired is not DesiredStatus.RUN:
            return rec
        rec = rec.with_(status=AllocStatus.RUNNING, reason="")
        self.core.store.put("alloc", rec.id, rec.to_record())
        return rec

    def _restore_job(self, job_id: str, job_rec: dict[str, Any]) -> Job | None:
        """The job from its canonical form (no parsing); a record from before canonical forms, or of
        another model version, is parsed from its source once and rewritten in canonical form."""
        try:
            return decode_job(job_rec.get("canonical"))
        except JobCodecError as exc:
            log.info("state: job %s: %s; parsing its source once", job_id, exc)
        try:
            job = parse_jobspec(
                job_rec["source"],
                source=f"state:job/{job_id}",
                fmt=job_rec.get("format"),
                variables=job_rec.get("variables") or {},
                limits=stored_limits(self.core.limits),  # accepted once: not refused now (capped at a stop)
                files=job_rec.get("files") or {},
            ).job
        except (JobspecError, KeyError, TypeError) as exc:
            log.error("state: job %s does not parse any more: %s", job_id, exc)
            return None
        job = _as_child(job, job_rec)
        self.core.store.put("job", job_id, {**job_rec, "canonical": encode_job(job)})
        return job

    def _observe_all(self, records: list[AllocRecord]) -> dict[str, tuple[AllocRunner, ObservedAlloc | None]]:
        """What is on the node for every running alloc, looked at concurrently (docker inspects, CNI
        CHECK, netns reads: reads only, independent per alloc), with the runner that looked: the
        one the alloc is restored with. One that cannot be observed has no observation: its own
        restore observes it again and fails it with the reason."""
        runners = []
        for rec in records:
            job = self.core.jobs.get(rec.job)
            group = next((g for g in job.groups if g.name == rec.group), None) if job else None
            if job and group and rec.status is AllocStatus.RUNNING and rec.desired is DesiredStatus.RUN:
                runners.append(AllocRunner(self.core.deps, rec, job, group))
        if len(runners) < 2:
            return {r.id: (r, None) for r in runners}  # observed by its own restore

        def look(runner: AllocRunner) -> tuple[str, tuple[AllocRunner, ObservedAlloc | None]]:
            try:
                return runner.id, (runner, runner.observe())
            except Exception as exc:
                log.warning("alloc=%s: observing at restore failed: %s", runner.id[:8], exc)
                return runner.id, (runner, None)

        # One iptables-save for all of them (each alloc's portmap check reads the nat table), and one
        # docker listing (each container then inspected once, not once per question about it).
        with (
            iptables.one_snapshot(),
            self.core.drivers.one_look(),
            ThreadPoolExecutor(RESTORE_PARALLEL, thread_name_prefix="restore") as pool,
        ):
            return dict(pool.map(look, runners))

    def _restore_alloc(
        self, rec: AllocRecord, runner: AllocRunner | None = None, observed: ObservedAlloc | None = None
    ) -> None:
        """One live alloc: restored; one the agent was killed while setting up (pending) set up
        again; one it was killed while stopping (desired stop) stopped. `runner`: the one that
        observed it (`_observe_all`), with what it found."""
        job = self.core.jobs.get(rec.job)
        group = next((g for g in job.groups if g.name == rec.group), None) if job else None
        if job is None or group is None:
            log.error("alloc=%s: job %s or group %s unknown; cannot restore", rec.id[:8], rec.job, rec.group)
            return
        runner = runner or AllocRunner(self.core.deps, rec, job, group)
        self.core.runners[rec.id] = runner
        try:
            if rec.desired is DesiredStatus.STOP:
                runner.event("", "Stop Resumed", "the agent was killed while stopping the alloc")
                runner.stop(rec.reason or "job stopped")
            elif rec.status is AllocStatus.PENDING:
                runner.resume_setup()
            else:
                runner.restore(observed)
        except Exception as exc:
            log.exception("alloc=%s: restore failed", rec.id[:8])
            runner.fail(f"restore failed: {exc}")

    def _start_owed_replacements(self, records: list[AllocRecord]) -> None:
        """Failed allocs whose replacement was still owed when the agent was killed: replaced once,
        when their reschedule is due (plan_owed_replacements: one already replaced only gets its
        record completed)."""
        by_id = {r.id: r for r in records}
        for owed in plan_owed_replacements(records):
            rec = by_id[owed.failed]
            job = self.core.jobs.get(rec.job)
            if job is None or not any(g.name == rec.group for g in job.groups):
                log.error(
                    "alloc=%s: replacement owed but job %s or group %s unknown",
                    rec.id[:8],
                    rec.job,
                    rec.group,
                )
                continue
            failed = AllocRunner(self.core.deps, rec, job, next(g for g in job.groups if g.name == rec.group))
            self.core.runners.setdefault(rec.id, failed)
            if owed.existing:
                failed.state.save(replaced_by=owed.existing, replace_pending=False)
                failed.event(
                    "",
                    "Replaced",
                    f"replaced by alloc {owed.existing}: {rec.reason} (started before the agent was "
                    "killed, recorded at restore)",
                )
                continue
            reason = f"{rec.reason} (replacement owed at restore)"
            if rec.reschedule_due:  # decided before the kill: placed when due, not at once
                self.core.allocs.resume_reschedule(failed, reason)
            else:  # failed before its reschedule was decided: decided now (AllocRegistry.replace)
                self.core.allocs.replace(failed, reason)

    def _replace_unreadable(self, alloc_id: str) -> None:
        """An alloc whose record cannot be read: its containers' labels still say which job and
        group it ran, so a replacement starts; the sweeper then removes the old containers."""
        labels = self._labels_of(alloc_id)
        job = self.core.jobs.get(labels.get(LABEL_JOB, "")) if labels else None
        group = labels.get(LABEL_GROUP, "") if labels else ""
        if job is None or not any(g.name == group for g in job.groups):
            log.error(
                "alloc=%s: unreadable and no job/group known from its containers; nothing to replace",
                alloc_id[:8],
            )
            return
        self.core.store.delete("alloc", alloc_id)
        new = self.core.allocs.new_alloc(job, group, replaces=alloc_id)
        self.core.store.append_event(
            alloc_id, "", "Replaced", f"replaced by alloc {new.id}: its record was unreadable"
        )

    def _labels_of(self, alloc_id: str) -> dict[str, str] | None:
        """Who an alloc was (job, group), from the labels a driver put on its tasks."""
        for d in self.core.drivers.all().values():
            labels = d.alloc_labels(alloc_id)
            if labels:
                return labels
        return None


def _as_child(job: Job, job_rec: dict[str, Any]) -> Job:
    """A dispatched or periodic child parsed again from its stored source (the JSON the agent wrote
    for it) keeps what the servers set on it and a jobspec's parse leaves out (ParentID, Dispatched,
    Payload)."""
    if "/" not in job.id or job_rec.get("format") != "json":
        return job
    try:
        raw = json.loads(job_rec["source"]).get("Job") or {}
    except (ValueError, AttributeError, KeyError, TypeError):
        return job
    parent, dispatched, payload = raw.get("ParentID"), raw.get("Dispatched"), raw.get("Payload")
    return replace(
        job,
        parent_id=parent if isinstance(parent, str) else job.parent_id,
        dispatched=dispatched if isinstance(dispatched, bool) else job.dispatched,
        payload=payload if isinstance(payload, str) else job.payload,
    )
