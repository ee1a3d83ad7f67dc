"""The agent's core: one main loop owns every alloc runner. The API, the drivers' exit reports and
timers only put work on its queue, so no two changes to an alloc ever race.
"""

from __future__ import annotations

import contextlib
import fnmatch
import heapq
import itertools
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agent.config import DEFAULT_TOKEN_ROLE
from agent.consul import ConsulClient, ConsulData
from agent.decisions import (
    GcCandidate,
    GcLimits,
    ObservedAlloc,
    plan_gc,
    plan_orphan_sweep,
    plan_owed_replacements,
)
from agent.drivers.base import LABEL_GROUP, LABEL_JOB
from agent.drivers.registry import DriverRegistry
from agent.errors import AgentError
from agent.faults import Faults
from agent.jobcodec import JobCodecError, decode_job, encode_job
from agent.jobspec import DEFAULT_LIMITS, JobspecError, Limits, ParsedJob, parse_jobspec
from agent.killpoints import KillHook, sigkill_at
from agent.model import Job
from agent.network import iptables
from agent.network.base import Network
from agent.offload import Offload, threaded
from agent.records import AllocRecord, AllocStatus, DesiredStatus, PortAlloc, RecordError
from agent.runner.adopt import Adoption, node_of
from agent.runner.alloc import AllocRunner, RunnerDeps
from agent.runner.services import ServiceRegistrar
from agent.runner.taskdirs import TaskDirs
from agent.runner.vaulttoken import TokenIssuer
from agent.state import StateStore, drop_alloc
from agent.sweeper import Sweeper, SweepReport
from agent.templates.render import ConsulSource, check_template
from agent.templates.runner import TemplateDeps

log = logging.getLogger(__name__)
T = TypeVar("T")

DYNAMIC_PORTS = range(20000, 32000)
LOOP_IDLE = 1.0  # the loop wakes at least this often to run due timers
RESTORE_PARALLEL = 8  # allocs observed at once at restore
STOP_POLL = 0.05  # seconds between looks at allocs being stopped (await_stopped)


LIVE_STATUSES = ("pending", "running")
TERMINAL_STATUSES = ("complete", "failed")


@dataclass(frozen=True)
class GcReport:
    collected: list[str]
    jobs_purged: list[str]
    disk_used: float  # percent, after
    inodes_used: float


class NotFound(AgentError):
    pass


class Conflict(AgentError):
    pass


class NotRun(AgentError):
    """The request was withdrawn before the main loop took it: nothing was done (HTTP 503)."""


class InProgress(AgentError):
    """The request was started and has not finished yet: its outcome is unknown (HTTP 504)."""


def parse_submission(
    text: str,
    fmt: str | None,
    source: str,
    variables: Mapping[str, object],
    limits: Limits = DEFAULT_LIMITS,
    files: Mapping[str, str] | None = None,
) -> ParsedJob:
    """Parse a submitted jobspec and check its templates: pure, callable from any thread (the API's
    handler threads), so that a large or hostile jobspec never holds the main loop.

    Raises JobspecError with every problem."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > limits.max_bytes:
        raise JobspecError(source, [("", f"the jobspec is {size} bytes, more than {limits.max_bytes}")])
    parsed = parse_jobspec(text, source=source, fmt=fmt, variables=variables, limits=limits, files=files)
    job = parsed.job
    problems = [
        (f"job.{job.id}.group.{g.name}.task.{t.name}.template[{i}]", why)
        for g in job.groups
        for t in g.tasks
        for i, tpl in enumerate(t.templates)
        if (why := check_template(tpl))
    ]
    if problems:
        raise JobspecError(source, problems)
    return parsed


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Core:
    def __init__(
        self,
        store: StateStore,
        drivers: DriverRegistry,
        network: Network | None,
        *,
        data_dir: Path,
        faults: Faults,
        sweeper: Sweeper | None = None,
        consul: ConsulClient | None = None,
        advertise_address: str = "",
        vault: TokenIssuer | None = None,
        vault_token_role: str = DEFAULT_TOKEN_ROLE,
        task_dirs: TaskDirs | None = None,
        template_render_timeout: float = 2.0,
        template_max_bytes: int = 4 * 1024 * 1024,
        limits: Limits = DEFAULT_LIMITS,
        datacenter: str = "dc1",
        kill_point: KillHook | None = None,
        offload: Offload | None = None,
        gc_limits: GcLimits | None = None,
    ) -> None:
        self.limits = limits  # what a jobspec may ask for (the client's max_count, max_kill_timeout)
        self.datacenter = datacenter
        self.gc_limits = gc_limits or GcLimits()
        self.store = store
        self.drivers = drivers
        self.faults = faults
        self.bugs = faults.bugs()  # read once; only the plan_* decisions look at it
        # The named steps a kill must not break (agent.killpoints): a no-op unless `crash-at` is set
        # (then the agent SIGKILLs itself there, once per data dir), or a test's hook.
        self.kill_point = kill_point if kill_point is not None else sigkill_at(faults.crash_at, data_dir)
        self.runners: dict[str, AllocRunner] = {}
        self.jobs: dict[str, Job] = {}
        self._q: queue.Queue[Callable[[], None]] = queue.Queue()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        # Blocking steps (a task's stop, a change script) run in worker threads whose continuations
        # come back to this loop (agent.offload); tests of the fakes pass run_inline.
        self.offload = offload if offload is not None else threaded(self._q.put)
        consul_kv: ConsulSource | None = ConsulData(consul.address) if consul else None
        self.deps = RunnerDeps(
            store=store,
            drivers=drivers,
            network=network,
            data_dir=data_dir,
            schedule=self.schedule,
            replace=self._replace,
            templates=TemplateDeps(
                store,
                self.schedule,
                consul=consul_kv,
                bugs=self.bugs,
                render_timeout=template_render_timeout,
                max_bytes=template_max_bytes,
                offload=self.offload,
            ),
            bugs=self.bugs,
            dirs=task_dirs,
            services=ServiceRegistrar(consul) if consul else None,
            advertise_address=advertise_address,
            vault=vault,
            vault_token_role=vault_token_role,
            kill_point=self.kill_point,
            offload=self.offload,
        )
        self.restore_seconds = 0.0
        self.sweeper = sweeper
        self.last_sweep: SweepReport | None = None
        self.sweeps = 0  # sweeps done since start: the e2e suites wait for one to have run
        # Allocs found running after the state DB was lost: kept, listed, stopped on request only.
        self.adoption = Adoption(store, node_of(drivers))

    # -- loop ----------------------------------------------------------------------------------
    def call(self, fn: Callable[[], T], timeout: float = 120.0) -> T:
        """Run fn on the main loop and return its result (for the API threads).

        A call the loop has not taken within `timeout` is withdrawn, never run later behind its
        caller's back: NotRun says so, and a retry is safe. One the loop has started is waited for
        (the loop never blocks on a task, so it ends); if even that takes another `timeout`,
        InProgress says its outcome is unknown yet."""
        fut: Future[T] = Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return  # withdrawn by its caller: not carried out
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                fut.set_exception(exc)

        self._q.put(run)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            if fut.cancel():
                raise NotRun(
                    f"the agent's main loop did not take the request within {timeout:g}s: "
                    "it was not carried out, retrying is safe"
                ) from None
        try:
            return fut.result(timeout)
        except FutureTimeout:
            raise InProgress(
                f"the request is still being carried out after {2 * timeout:g}s: check its outcome "
                "before retrying"
            ) from None

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, _Timer(time.monotonic() + delay, next(self._seq), fn))

    def run_loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            while self._timers and self._timers[0].due <= now:
                self._safe(heapq.heappop(self._timers).fn)
            wait = min(LOOP_IDLE, self._timers[0].due - now) if self._timers else LOOP_IDLE
            try:
                item = self._q.get(timeout=max(0.0, wait))
            except queue.Empty:
                continue
            self._safe(item)

    def _safe(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("main loop task failed")

    def stop(self) -> None:
        self._stop.set()
        self._q.put(lambda: None)
        for d in self.drivers.all().values():
            d.close()

    # -- task exits ----------------------------------------------------------------------------
    def watch_exits(self) -> list[threading.Thread]:
        """Every driver reports task exits (docker's event stream, exec's pidfds) into the loop."""
        return self.drivers.watch(self.report_exit, self._stop)

    def report_exit(self, alloc_id: str, handle_id: str) -> None:
        """Called from a driver's thread: the exit is handled on the main loop."""
        self._q.put(lambda: self._task_exited(alloc_id, handle_id))

    def _task_exited(self, alloc_id: str, handle_id: str) -> None:
        runner = self.runners.get(alloc_id)
        if runner is not None:
            runner.on_task_exit(handle_id)

    # -- startup restore -----------------------------------------------------------------------
    def restore(self) -> None:
        t0 = time.monotonic()
        jobs = self.store.list("job")
        for bad in jobs.corrupt:
            log.error("state: job %s unreadable (%s): its allocs cannot be restored", bad.key, bad.reason)
        for job_id, job_rec in jobs.records.items():
            job = self._restore_job(job_id, job_rec)
            if job is not None:
                self.jobs[job_id] = job
        # Only what restore acts on is read (the status column is indexed): live allocs, failed ones
        # whose replacement is owed, and unreadable ones. Terminal history costs nothing here.
        live = self.store.list("alloc", LIVE_STATUSES)
        owed = self.store.list("alloc", ("failed",), flag="replace_pending")
        corrupt = {bad.key: bad for bad in [*live.corrupt, *owed.corrupt]}
        unreadable = [(bad.key, bad.reason) for bad in corrupt.values()]
        records: list[AllocRecord] = []
        for alloc_id, raw in {**live.records, **owed.records}.items():
            try:
                records.append(AllocRecord.from_record(raw, alloc_id))
            except RecordError as exc:
                unreadable.append((alloc_id, exc.reason))
        for key, reason in unreadable:
            log.error("state: alloc %s unreadable (%s): replacing it", key, reason)
            self.store.append_event(key, "", "Restore Failed", f"alloc record unreadable: {reason}")
        observed = self._observe_all([r for r in records if r.live])
        for rec in records:
            if rec.live:
                self._restore_alloc(rec, observed.get(rec.id))
        for alloc_id, _ in unreadable:
            self._replace_unreadable(alloc_id)
        self._start_owed_replacements(records)
        self.restore_seconds = time.monotonic() - t0
        log.info("restored %d alloc(s) in %.2fs", len(self.runners), self.restore_seconds)
        self.adoption.restore(self.runners)  # when the state DB was lost: what runs is adopted, not swept
        self.sweep()

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
                limits=self.limits,
                files=job_rec.get("files") or {},
            ).job
        except (JobspecError, KeyError, TypeError) as exc:
            log.error("state: job %s does not parse any more: %s", job_id, exc)
            return None
        self.store.put("job", job_id, {**job_rec, "canonical": encode_job(job)})
        return job

    def _observe_all(self, records: list[AllocRecord]) -> dict[str, ObservedAlloc]:
        """What is on the node for every running alloc, looked at concurrently (docker inspects, CNI
        CHECK, netns reads: reads only, independent per alloc). One that cannot be observed is
        left out: its own restore observes it again and fails it with the reason."""
        runners = []
        for rec in records:
            job = self.jobs.get(rec.job)
            group = next((g for g in job.groups if g.name == rec.group), None) if job else None
            if job and group and rec.status is AllocStatus.RUNNING and rec.desired is DesiredStatus.RUN:
                runners.append(AllocRunner(self.deps, rec, job, group))
        if len(runners) < 2:
            return {}

        def look(runner: AllocRunner) -> tuple[str, ObservedAlloc | None]:
            try:
                return runner.id, runner.observe()
            except Exception as exc:
                log.warning("alloc=%s: observing at restore failed: %s", runner.id[:8], exc)
                return runner.id, None

        # One iptables-save for all of them (each alloc's portmap check reads the nat table).
        with (
            iptables.one_snapshot(),
            ThreadPoolExecutor(RESTORE_PARALLEL, thread_name_prefix="restore") as pool,
        ):
            return {a: obs for a, obs in pool.map(look, runners) if obs is not None}

    def _restore_alloc(self, rec: AllocRecord, observed: ObservedAlloc | None = None) -> None:
        """One live alloc: restored; one the agent was killed while setting up (pending) set up
        again; one it was killed while stopping (desired stop) stopped."""
        job = self.jobs.get(rec.job)
        group = next((g for g in job.groups if g.name == rec.group), None) if job else None
        if job is None or group is None:
            log.error("alloc=%s: job %s or group %s unknown; cannot restore", rec.id[:8], rec.job, rec.group)
            return
        runner = AllocRunner(self.deps, rec, job, group)
        self.runners[rec.id] = runner
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
        """Failed allocs whose replacement was still on a timer when the agent was killed: replaced
        now, once (plan_owed_replacements: one already replaced only gets its record completed)."""
        by_id = {r.id: r for r in records}
        for owed in plan_owed_replacements(records):
            rec = by_id[owed.failed]
            job = self.jobs.get(rec.job)
            if job is None or not any(g.name == rec.group for g in job.groups):
                log.error(
                    "alloc=%s: replacement owed but job %s or group %s unknown",
                    rec.id[:8],
                    rec.job,
                    rec.group,
                )
                continue
            failed = AllocRunner(self.deps, rec, job, next(g for g in job.groups if g.name == rec.group))
            self.runners.setdefault(rec.id, failed)
            if owed.existing:
                failed.state.save(replaced_by=owed.existing, replace_pending=False)
                failed.event(
                    "",
                    "Replaced",
                    f"replaced by alloc {owed.existing}: {rec.reason} (started before the agent was "
                    "killed, recorded at restore)",
                )
                continue
            self._start_replacement(failed, f"{rec.reason} (replacement owed at restore)")

    def _replace_unreadable(self, alloc_id: str) -> None:
        """An alloc whose record cannot be read: its containers' labels still say which job and
        group it ran, so a replacement starts; the sweeper then removes the old containers."""
        labels = self._labels_of(alloc_id)
        job = self.jobs.get(labels.get(LABEL_JOB, "")) if labels else None
        group = labels.get(LABEL_GROUP, "") if labels else ""
        if job is None or not any(g.name == group for g in job.groups):
            log.error(
                "alloc=%s: unreadable and no job/group known from its containers; nothing to replace",
                alloc_id[:8],
            )
            return
        self.store.delete("alloc", alloc_id)
        new = self._new_alloc(job, group, replaces=alloc_id)
        self.store.append_event(
            alloc_id, "", "Replaced", f"replaced by alloc {new.id}: its record was unreadable"
        )

    def _labels_of(self, alloc_id: str) -> dict[str, str] | None:
        """Who an alloc was (job, group), from the labels a driver put on its tasks."""
        for d in self.drivers.all().values():
            labels = d.alloc_labels(alloc_id)
            if labels:
                return labels
        return None

    # -- orphans -------------------------------------------------------------------------------
    def live_allocs(self) -> set[str]:
        return {a for a, r in self.runners.items() if r.rec.live}

    def sweep(self) -> SweepReport | None:
        """Remove what no live alloc owns (on start after restore, then every sweep_interval)."""
        if self.sweeper is None:
            return None
        if not plan_orphan_sweep(self.bugs).run:
            log.warning("orphan sweep skipped: fault no-orphan-sweep is active")
            return None
        if self.adoption.pending:  # the state was lost and the node not listed yet: try again first
            self.adoption.restore(self.runners)
            if self.adoption.pending:
                log.error("orphan sweep skipped: the state DB was lost and adoption could not list the node")
                return None
        report = self.sweeper.sweep(
            self.live_allocs(), adopted=self.adoption.ids(), recorded=self.recorded_allocs()
        )
        self.last_sweep = report
        self.sweeps += 1
        if report.errors:
            log.error("sweeper could not remove: %s", "; ".join(report.errors))
        return report

    def start_periodic_sweep(self, interval: float) -> None:
        def tick() -> None:
            self.sweep()
            self.schedule(interval, tick)

        self.schedule(interval, tick)

    def alloc_views(self) -> list[dict[str, Any]]:
        """Every alloc the client tracks, as Nomad lists them: the ones it runs, and the terminal ones
        whose records the GC has not collected yet (read from the store: a restarted agent keeps
        no runner for them)."""
        views = [r.view() for r in self.runners.values()]
        for alloc_id, raw in self.store.list("alloc", TERMINAL_STATUSES).records.items():
            if alloc_id in self.runners:
                continue
            try:
                rec = AllocRecord.from_record(raw, alloc_id)
            except RecordError:
                continue
            job = self.jobs.get(rec.job)
            group = next((g for g in job.groups if g.name == rec.group), None) if job else None
            if job is not None and group is not None:
                views.append(AllocRunner(self.deps, rec, job, group).view())
        return views

    def recorded_allocs(self) -> set[str]:
        """Every alloc with a record (live or terminal): its alloc dir waits for the GC."""
        return {row.key for row in self.store.index("alloc", (*LIVE_STATUSES, *TERMINAL_STATUSES))}

    # -- garbage collection of terminal allocs -------------------------------------------------------
    def gc(self, *, force: bool = False) -> GcReport:
        """Collect terminal allocs as Nomad's client GC does (agent.decisions.plan_gc): each one's
        records, events and alloc dir go together; then the jobs none of whose allocs is left.
        Never an alloc whose replacement is owed or that still has a step off the loop."""
        rows = self.store.index("alloc", TERMINAL_STATUSES)
        keep = {
            a
            for a, r in self.runners.items()
            if r.rec.live or r.rec.replace_pending or r.serial.busy or r.serial.waiting
        }
        tracked = len(rows) + sum(1 for r in self.runners.values() if r.rec.live)
        left = {row.key: row for row in rows if row.key not in keep}
        collected: list[str] = []
        jobs: set[str] = set()
        disk, inodes = self._alloc_fs_usage()
        for _ in range(len(left) + 1):  # each pass collects at least one, or ends
            candidates = [GcCandidate(k, row.updated_at) for k, row in left.items()]
            todo = plan_gc(
                candidates,
                tracked - len(collected),
                self.gc_limits,
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
            disk, inodes = self._alloc_fs_usage()
        purged = self._purge_jobs_without_allocs(jobs - {""})
        if collected:
            log.info("GC: collected %d terminal alloc(s), %d job(s)", len(collected), len(purged))
        return GcReport(collected, purged, disk, inodes)

    def _collect(self, alloc_id: str) -> str:
        """Remove one terminal alloc for good; the job it belonged to."""
        runner = self.runners.pop(alloc_id, None)
        job = runner.job.id if runner else ""
        if not job:
            with contextlib.suppress(AgentError):
                job = str((self.store.get("alloc", alloc_id) or {}).get("job", ""))
        drop_alloc(self.store, alloc_id)
        self.deps.task_dirs.remove(self.deps.data_dir / "alloc" / alloc_id)
        return job

    def _purge_jobs_without_allocs(self, candidates: set[str]) -> list[str]:
        if not candidates:
            return []
        remaining = {str(r.get("job", "")) for r in self.store.list("alloc").records.values()}
        purged = sorted(
            j for j in candidates if (j not in remaining and j in self.jobs) or j not in remaining
        )
        for job_id in purged:
            self.store.delete("job", job_id)
            self.jobs.pop(job_id, None)
        return purged

    def _alloc_fs_usage(self) -> tuple[float, float]:
        """Percent of blocks and of inodes used on the filesystem of the alloc dirs."""
        where = self.deps.data_dir / "alloc"
        try:
            st = os.statvfs(where if where.exists() else self.deps.data_dir)
        except OSError:
            return 0.0, 0.0
        disk = 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks if st.f_blocks else 0.0
        inodes = 100.0 * (st.f_files - st.f_favail) / st.f_files if st.f_files else 0.0
        return disk, inodes

    def start_periodic_gc(self, interval: float) -> None:
        def tick() -> None:
            try:
                self.gc()
            finally:
                self.schedule(interval, tick)

        self.schedule(interval, tick)

    def purge_job(self, job_id: str) -> list[str]:
        """`job stop -purge`: once the job's allocs are stopped, they and the job are removed."""
        if job_id not in self.jobs:
            raise NotFound(f"no job {job_id}")
        mine = [a for a, r in self.runners.items() if r.job.id == job_id]
        busy = [a for a in mine if self.runners[a].rec.live or self.runners[a].serial.busy]
        if busy:
            raise Conflict(f"job {job_id}: alloc(s) {', '.join(b[:8] for b in busy)} still stopping")
        for a in mine:
            self._collect(a)
        for row in self.store.index("alloc", TERMINAL_STATUSES):  # those of earlier agent runs
            rec = self.store.get("alloc", row.key) or {}
            if rec.get("job") == job_id:
                self._collect(row.key)
        self.store.delete("job", job_id)
        self.jobs.pop(job_id, None)
        return mine

    # -- jobs ----------------------------------------------------------------------------------
    def submit(
        self,
        text: str,
        fmt: str | None,
        source: str = "<request>",
        variables: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        """Parse and commit in one step, on the loop (tests, the benchmarks); the API parses in its
        handler thread with `parse_submission` and commits with `commit`."""
        parsed = parse_submission(text, fmt, source, variables or {}, self.limits)
        return self.commit(parsed, text, fmt, variables or {}, source)

    def commit(
        self,
        parsed: ParsedJob,
        text: str,
        fmt: str | None,
        variables: Mapping[str, object],
        source: str = "<request>",
    ) -> dict[str, Any]:
        """On the loop: store a parsed job (its text, format and input variables, so that restore parses
        it the same way) and start its allocs."""
        job = parsed.job
        refused = [
            (f"job.{job.id}.group.{g.name}.task.{t.name}.driver", why)
            for g in job.groups
            for t in g.tasks
            if (why := self.drivers.refusal(t.driver))
        ]
        if not any(fnmatch.fnmatchcase(self.datacenter, dc) for dc in job.datacenters):
            refused.append(
                (
                    f"job.{job.id}.datacenters",
                    f"{list(job.datacenters)} does not include this client's datacenter "
                    f'"{self.datacenter}" (config datacenter): Nomad would not place it here',
                )
            )
        if refused:  # a driver this client does not run, or one its config leaves off (raw_exec)
            raise JobspecError(source, refused)
        if job.id in self.jobs and any(r.job.id == job.id and r.rec.live for r in self.runners.values()):
            raise Conflict(f"job {job.id} is already running: stop it first")
        self._check_static_ports(job)
        record = {
            "source": text,
            "format": fmt,
            "warnings": list(parsed.warnings),
            "variables": dict(variables),
            "files": dict(parsed.files),  # what file() read, kept with the source (display, inspect)
            "canonical": encode_job(job),  # what restore rebuilds the job from, without parsing
        }
        self.store.put("job", job.id, record)
        self.jobs[job.id] = job
        created = []
        for group in job.groups:
            for _ in range(group.count):
                created.append(self._new_alloc(job, group.name).id)
        return {"job": job.id, "allocs": created, "warnings": list(parsed.warnings)}

    def _check_static_ports(self, job: Job) -> None:
        used = self._used_ports()
        for g in job.groups:
            for p in g.network.ports if g.network else ():
                if p.static and p.static in used:
                    raise Conflict(
                        f"job {job.id} group {g.name} port {p.label}: static port {p.static} "
                        "is already taken by another alloc"
                    )

    def _used_ports(self) -> set[int]:
        return {p.host for r in self.runners.values() if r.rec.live for p in r.rec.ports}

    def _new_alloc(self, job: Job, group_name: str, replaces: str = "") -> AllocRunner:
        group = next(g for g in job.groups if g.name == group_name)
        used = self._used_ports()
        ports = []
        for p in group.network.ports if group.network else ():
            host = p.static or next(x for x in DYNAMIC_PORTS if x not in used)
            used.add(host)
            ports.append(PortAlloc(p.label, host, p.to or host))
        rec = AllocRecord(
            id=str(uuid.uuid4()),
            job=job.id,
            group=group.name,
            created=time.time(),
            ports=tuple(ports),
            replaces=replaces,
        )
        runner = AllocRunner(self.deps, rec, job, group)
        self.store.put("alloc", runner.id, rec.to_record())
        self.runners[runner.id] = runner
        self.kill_point("start.after-alloc-record")
        runner.start()
        return runner

    def _replace(self, failed: AllocRunner, reason: str) -> None:
        if failed.rec.desired is DesiredStatus.STOP:
            return
        self.schedule(0.0, lambda: self._start_replacement(failed, reason))

    def _start_replacement(self, failed: AllocRunner, reason: str) -> None:
        """The replacement owed to a failed alloc (its record says `replace_pending` until this is
        written, so a kill before it leaves it to the next restore)."""
        if failed.rec.desired is DesiredStatus.STOP or failed.rec.replaced_by:
            failed.state.save(replace_pending=False)  # its job was stopped meanwhile, or done already
            return
        self.kill_point("replace.after-fail-before-new-alloc")
        new = self._new_alloc(failed.job, failed.group.name, replaces=failed.id)
        self.kill_point("replace.after-new-alloc-before-record")
        failed.state.save(replaced_by=new.id, replace_pending=False)
        failed.event("", "Replaced", f"replaced by alloc {new.id}: {reason}")

    def stop_job(self, job_id: str) -> list[str]:
        adopted = self._stop_adopted(self.adoption.of_job(job_id))
        if job_id not in self.jobs:
            if adopted:
                return adopted
            raise NotFound(f"no job {job_id}")
        stopped = adopted  # adopted allocs of the job (found after a lost state DB) were stopped first
        for r in list(self.runners.values()):
            if r.job.id != job_id:
                continue
            if r.rec.live:
                r.stop()
                stopped.append(r.id)
            elif r.rec.desired is not DesiredStatus.STOP:
                # As Nomad's `job stop`: every alloc of the job is desired "stop", a terminal one
                # too, so a failed alloc is never replaced after its job was stopped.
                r.state.save(desired=DesiredStatus.STOP)
        return stopped

    def busy_allocs(self) -> list[str]:
        """On the loop: allocs with a step off the loop or operations waiting behind one."""
        return [a for a, r in self.runners.items() if r.serial.busy or r.serial.waiting]

    def await_stopped(self, alloc_ids: list[str], timeout: float) -> list[str]:
        """From an API thread: wait (polling the loop) until the allocs are stopped, as the tasks'
        stops run off the loop; the ids still stopping when `timeout` ran out."""
        deadline = time.monotonic() + timeout

        def stopping() -> list[str]:
            return [a for a in alloc_ids if a in self.runners and self.runners[a].rec.live]

        while (left := self.call(stopping)) and time.monotonic() < deadline:
            self._stop.wait(STOP_POLL)
        return left

    def _stop_adopted(self, alloc_ids: list[str]) -> list[str]:
        """Stop and remove adopted allocs (agent.runner.adopt); then sweep what they leave (netns, CNI)."""
        stopped = [a for a in alloc_ids if not self.adoption.stop(a)]

        def sweep_after() -> None:
            self.sweep()

        if stopped:
            self.schedule(0.0, sweep_after)
        return stopped

    def stop_alloc(self, alloc_id: str) -> list[str]:
        """POST /v1/allocation/<id>/stop: for an adopted alloc (no jobspec, so no other way to end it)."""
        adopted = self.adoption.find(alloc_id)
        if adopted is None:
            r = self.runner(alloc_id)
            raise Conflict(f"alloc {r.id} is managed: stop its job (DELETE /v1/job/{r.job.id})")
        if not self._stop_adopted([adopted.id]):
            raise AgentError(f"alloc {adopted.id}: not all of it could be stopped (see its events)")
        return [adopted.id]

    def runner(self, alloc_id: str) -> AllocRunner:
        matches = [r for a, r in self.runners.items() if a.startswith(alloc_id)] if len(alloc_id) >= 6 else []
        if len(matches) != 1:
            raise NotFound(f"no alloc {alloc_id}" if not matches else f"alloc prefix {alloc_id} is ambiguous")
        return matches[0]
