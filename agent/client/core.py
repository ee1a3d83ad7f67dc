"""The agent's core: one main loop owns every alloc runner. The API, the drivers' exit reports and
timers only put work on its queue, so no two changes to an alloc ever race.

The Core keeps the loop, the jobs and their allocs (submit, stop, replacements) and the orphan
sweeps. Two larger steps it runs on the loop have their own modules: the startup restore
(agent.client.restore)
and the GC of terminal allocs (agent.node.gc); `restore`, `gc`, `start_periodic_gc`, `purge_job` use them.
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from agent.client.offload import Offload, threaded
from agent.client.restore import LIVE_STATUSES, Restore
from agent.client.taskenv import node_table
from agent.command.config import DEFAULT_TOKEN_ROLE
from agent.consul.catalog import ConsulClient, ConsulData
from agent.decide.decisions import GcLimits, carried_reschedule_events, plan_orphan_sweep, plan_reschedule
from agent.decide.jobupdate import UpdatePlan, earlier_versions, plan_job_update
from agent.decide.placement import NodeFacts, refusals
from agent.drivers.registry import DriverRegistry
from agent.errors import AgentError, Conflict, InProgress, NotFound, NotRun
from agent.fieldbugs.faults import Faults
from agent.fieldbugs.killpoints import KillHook, sigkill_at
from agent.getter.getter import ArtifactGetter, HttpGetter
from agent.identity.vaultlogin import VaultJwt
from agent.jobspec import DEFAULT_LIMITS, JobspecError, Limits, ParsedJob, parse_jobspec
from agent.network.base import Network
from agent.node.gc import TERMINAL_STATUSES, GarbageCollector, GcReport, alloc_fs_usage
from agent.node.hostnetworks import alias_addresses, parse_port_ranges
from agent.node.nodeinfo import node_attributes
from agent.node.sweeper import Sweeper, SweepReport
from agent.runner.adopt import Adoption, node_of
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.runner.services import NomadData, ServiceRegistrar
from agent.runner.stored import stored_runner, terminal_views
from agent.runner.taskdirs import TaskDirs
from agent.runner.vaulttoken import TokenIssuer
from agent.state import CorruptRecordError, StateStore
from agent.state.changes import ChangeIndex, highest_kept
from agent.state.watched import WatchedStore
from agent.structs import layout
from agent.structs.jobcodec import encode_job
from agent.structs.model import Job
from agent.structs.records import (
    AllocRecord,
    AllocStatus,
    DesiredStatus,
    PortAlloc,
    RescheduleEvent,
    one_by_prefix,
)
from agent.templates.budget import DEFAULT_PASS_BUDGET
from agent.templates.deps import TemplateDeps
from agent.templates.render import check_template
from agent.templates.wake import vault_wake

log = logging.getLogger(__name__)
T = TypeVar("T")

DYNAMIC_PORTS = range(20000, 32000)
LOOP_IDLE = 1.0  # the loop wakes at least this often to run due timers
STOP_POLL = 0.05  # seconds between looks at allocs being stopped (await_stopped)
SWEPT_KEPT = 200  # removals of the sweeper the agent lists in /v1/agent/self (swept)


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
        vault_jwt: VaultJwt | None = None,
        task_dirs: TaskDirs | None = None,
        template_render_timeout: float = 2.0,
        template_max_bytes: int = 4 * 1024 * 1024,
        template_pass_budget: float = DEFAULT_PASS_BUDGET,
        limits: Limits = DEFAULT_LIMITS,
        datacenter: str = "dc1",
        kill_point: KillHook | None = None,
        offload: Offload | None = None,
        gc_limits: GcLimits | None = None,
        node: NodeFacts | None = None,
        getter: ArtifactGetter | None = None,
    ) -> None:
        self.datacenter = datacenter
        # What a job's datacenters and constraints are checked against, and /v1/node/:id shows
        self.node = node or NodeFacts("", "", datacenter, attributes=node_attributes(drivers.names))
        self.gc_limits = gc_limits or GcLimits()
        # Every write raises the change index: Nomad's X-Nomad-Index and blocking queries read it.
        self.changes = ChangeIndex(floor=highest_kept(store))
        store = WatchedStore(store, self.changes)
        self.store: StateStore = store
        self.drivers = drivers
        self.faults = faults
        self.bugs = faults.bugs()  # read once; only the plan_* decisions look at it
        # What a jobspec may ask for (the client's max_count, max_kill_timeout), with the checks' flags.
        self.limits = replace(limits, bugs=self.bugs)
        # The named steps a kill must not break (agent.fieldbugs.killpoints): a no-op unless `crash-at` is set
        # (then the agent SIGKILLs itself there, once per data dir), or a test's hook.
        self.kill_point = kill_point if kill_point is not None else sigkill_at(faults.crash_at, data_dir)
        self.runners: dict[str, AllocRunner] = {}
        self.jobs: dict[str, Job] = {}
        # On the loop, when Nomad's API is served (agent.nomadapi.node.Evals): the evaluation of a
        # placement the agent makes on its own (a failed alloc's replacement), (job, triggered by,
        # placed alloc ids) -> its ID, kept as the alloc's EvalID.
        self.evaluate: Callable[[Job, str, tuple[str, ...]], str] | None = None
        # When Nomad's API is served (agent.nomadapi.nodeverbs): True when the node takes no new allocs
        # (ineligible, draining); it then keeps what the job (or the update `plan`) would place, owed.
        self.hold: Callable[[Job, UpdatePlan | None], bool] | None = None
        self._q: queue.Queue[Callable[[], None]] = queue.Queue()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        # Blocking steps (a task's stop, a change script) run in worker threads whose continuations
        # come back to this loop (agent.client.offload); tests of the fakes pass run_inline.
        self.offload = offload if offload is not None else threaded(self._q.put)
        nomad = NomadData(
            store, lambda: self.runners, self.changes, self.schedule, datacenter, advertise_address, data_dir
        )
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
                consul=ConsulData(consul.address) if consul else None,
                bugs=self.bugs,
                render_timeout=template_render_timeout,
                max_bytes=template_max_bytes,
                offload=self.offload,
                pass_budget=template_pass_budget,
                max_templates=limits.max_templates,
                vault_wake=vault_wake(vault, self.schedule, self.offload),
                nomad=nomad,
            ),
            bugs=self.bugs,
            dirs=task_dirs,
            services=ServiceRegistrar(consul) if consul else None,
            advertise_address=advertise_address,
            vault=vault,
            vault_token_role=vault_token_role,
            vault_jwt=vault_jwt or VaultJwt(),
            kill_point=self.kill_point,
            offload=self.offload,
            host_volumes=self.node.host_volumes,
            max_kill_timeout=limits.max_kill_timeout,
            max_shutdown_delay=limits.max_shutdown_delay,
            identity_ttl=limits.identity_ttl,
            node_table=node_table(self.node),
            getter=getter or HttpGetter(),
        )
        self.restore_seconds = 0.0
        self.sweeper = sweeper
        self.last_sweep: SweepReport | None = None
        self.sweeps = 0  # sweeps done since start: the e2e suites wait for one to have run
        # What the sweeps removed ("kind:owner:target", the last SWEPT_KEPT): a leak the alloc's own
        # teardown left is found here even after the sweeper cleaned it (/v1/agent/self).
        self.swept: collections.deque[str] = collections.deque(maxlen=SWEPT_KEPT)
        # Allocs found running after the state DB was lost: kept, listed, stopped on request only.
        self.adoption = Adoption(store, node_of(drivers))
        self.restorer = Restore(self)
        self.collector = GarbageCollector(self, usage=self._alloc_fs_usage)

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

    # -- startup restore (agent.client.restore) -------------------------------------------------------
    def restore(self) -> None:
        """The allocs of the last run picked up again, then adoption and the orphan sweep."""
        self.restorer.restore()

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
        if not report.dry_run:
            self.swept.extend(f"{r.kind}:{r.owner}:{r.target}" for r in report.planned)
        if report.errors:
            log.error("sweeper could not remove: %s", "; ".join(report.errors))
        return report

    def start_periodic_sweep(self, interval: float) -> None:
        def tick() -> None:
            self.sweep()
            self.schedule(interval, tick)

        self.schedule(interval, tick)

    def alloc_views(self, job_id: str = "") -> list[dict[str, Any]]:
        """Every alloc listed: the runners', the terminal ones not collected (`job_id`'s only)."""
        views = [r.view() for r in self.runners.values() if not job_id or r.rec.job == job_id]
        return views + terminal_views(self.store, self.jobs, self.runners, job_id)

    def _stored_runner(self, alloc_id: str, raw: Mapping[str, Any] | None) -> AllocRunner | None:
        return stored_runner(self.deps, self.store, self.jobs, alloc_id, raw)

    def alloc(self, ref: str) -> AllocRunner:
        """An alloc to read (its view, events, logs) by id or prefix: every one `alloc_views` lists.
        A runner of this run, or a terminal alloc of an earlier run read from the store (a restarted
        agent keeps no runner for it). Whatever acts on an alloc goes through `runner`."""
        terminal = {row.key for row in self.store.index("alloc", TERMINAL_STATUSES)} - set(self.runners)
        alloc_id = one_by_prefix(ref, (*self.runners, *terminal))
        if alloc_id in self.runners:
            return self.runners[alloc_id]
        try:
            stored = self._stored_runner(alloc_id, self.store.get("alloc", alloc_id))
        except CorruptRecordError:  # not listed either
            stored = None
        if stored is None:
            raise NotFound(f"no alloc {ref}")
        return stored

    def recorded_allocs(self) -> set[str]:
        """Every alloc with a record (live or terminal): its alloc dir waits for the GC."""
        return {row.key for row in self.store.index("alloc", (*LIVE_STATUSES, *TERMINAL_STATUSES))}

    # -- garbage collection of terminal allocs (agent.node.gc) --------------------------------------
    def gc(self, *, force: bool = False) -> GcReport:
        return self.collector.gc(force=force)

    def _alloc_fs_usage(self) -> tuple[float, float]:
        """What the GC measures (agent.node.gc.alloc_fs_usage); the GC's tests replace it."""
        return alloc_fs_usage(self.deps.data_dir)

    def start_periodic_gc(self, interval: float) -> None:
        self.collector.start_periodic_gc(interval)

    def purge_job(self, job_id: str) -> list[str]:
        """`job stop -purge`: once the job's allocs are stopped, they and the job are removed."""
        return self.collector.purge_job(job_id)

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
        plan: UpdatePlan | None = None,
    ) -> dict[str, Any]:
        """On the loop: store a parsed job (its text, format and input variables, so that restore parses
        it the same way) and start its allocs; with `plan` (`plan_update`, its stops done), a new
        version of a running job: only the allocs the plan places."""
        job = parsed.job
        self._refuse(job, source)
        if plan is None and any(r.job.id == job.id and r.rec.live for r in self.runners.values()):
            raise Conflict(f"job {job.id} is already running: stop it first")
        self._check_static_ports(job, None if plan is None else {g for g, n in plan.start.items() if n})
        before = self.store.get("job", job.id) if job.id in self.jobs else None
        version = int(before.get("version", 0)) + 1 if before is not None else 0
        record = {
            "version": version,  # Nomad's job Version: 0 at the first register, +1 at each later one
            "submit_time": time.time(),
            "source": text,
            "format": fmt,
            "warnings": list(parsed.warnings),
            "variables": dict(variables),
            "files": dict(parsed.files),  # what file() read, kept with the source (display, inspect)
            "canonical": encode_job(job),  # what restore rebuilds the job from, without parsing
            "history": earlier_versions(before),  # Nomad's /versions: the versions before this one
        }
        self.store.put("job", job.id, record)
        self.jobs[job.id] = job
        for kept in self.running_allocs(job.id) if plan is not None else ():  # updated in place, as Nomad's
            kept.state.save(job_version=version)
        if self.hold is not None and self.hold(job, plan):  # stored, nothing placed: Nomad's blocked eval
            return {"job": job.id, "allocs": [], "warnings": list(parsed.warnings), "version": version}
        created = []
        for group in () if job.places_nothing else job.groups:  # a parent runs only its child jobs
            count = group.count if plan is None else plan.start.get(group.name, 0)
            previous = () if plan is None else plan.replaces.get(group.name, ())
            for i in range(count):
                replaces = previous[i] if i < len(previous) else ""
                new = self._new_alloc(job, group.name, replaces=replaces)
                created.append(new.id)
                if replaces and (old := self.runners.get(replaces)) is not None:
                    old.state.save(replaced_by=new.id)
                    old.event(
                        "",
                        "Replaced",
                        f"job {job.id} updated to version {version}: replaced by alloc {new.id}",
                    )
        return {"job": job.id, "allocs": created, "warnings": list(parsed.warnings), "version": version}

    def refusals(self, job: Job) -> list[tuple[str, str]]:
        """(path, why) of each reason this client would not place the job: a driver it does not run
        (or its config leaves off, as raw_exec), a task option its driver's plugin config refuses,
        and agent.decide.placement's (datacenter, constraints)."""
        drivers = [
            (f"job.{job.id}.group.{g.name}.task.{t.name}.driver", t.driver)
            for g in job.groups
            for t in g.tasks
        ]
        options = [  # a task's driver options this node's plugin config refuses (docker's gates)
            (f"job.{job.id}.group.{g.name}.task.{t.name}.config.{key}", why)
            for g in job.groups
            for t in g.tasks
            for key, why in self.drivers.config_refusals(t, g.network.driver_mode if g.network else "none")
        ]
        refused = [(p, why) for p, d in drivers if (why := self.drivers.refusal(d))]
        return refused + options + refusals(job, self.node)

    def _refuse(self, job: Job, source: str) -> None:
        if refused := self.refusals(job):  # Nomad would leave the group pending: refused here
            raise JobspecError(source, refused)

    def running_allocs(self, job_id: str) -> list[AllocRunner]:
        """The job's allocs that run and are meant to (oldest first)."""
        return sorted(
            (
                r
                for r in self.runners.values()
                if r.job.id == job_id and r.rec.live and r.rec.desired is DesiredStatus.RUN
            ),
            key=lambda r: r.rec.created,
        )

    def plan_update(self, parsed: ParsedJob, source: str) -> UpdatePlan | None:
        """On the loop, registering a job that runs, as Nomad (agent.decide.jobupdate): the plan, and the
        allocs it replaces or drops told to stop (the caller waits for them, then `commit`s with
        the plan). None when the job does not run (a plain commit)."""
        job = parsed.job
        old = self.jobs.get(job.id)
        running = self.running_allocs(job.id)
        if old is None or not running:
            return None
        self._refuse(job, source)
        live: dict[str, list[str]] = {}
        for r in running:
            live.setdefault(r.group.name, []).append(r.id)
        plan = plan_job_update(old, job, live, self.bugs)
        from agent.jobspec.update import canary_refusals  # the parsers load lazily

        if refused := canary_refusals(job, plan.destructive):  # before anything is stopped
            raise JobspecError(source, refused)
        for alloc_id in plan.stop:
            self.runners[alloc_id].stop("job updated: a new version of the job replaces this alloc")
        return plan

    def _check_static_ports(self, job: Job, groups: set[str] | None = None) -> None:
        holders = {p.host: r for r in self.runners.values() if r.rec.live for p in r.rec.ports}
        for g in job.groups:
            for p in g.network.ports if g.network and (groups is None or g.name in groups) else ():
                if p.static and (r := holders.get(p.static)) is not None:
                    held = f"alloc {r.id[:8]} of job {r.job.id}"
                    if r.rec.desired is DesiredStatus.STOP:
                        held = f"alloc {r.id[:8]}, which is stopping: run the job again once it stopped"
                    raise Conflict(
                        f"job {job.id} group {g.name} port {p.label}: static port {p.static} held by {held}"
                    )

    def _used_ports(self) -> set[int]:
        return {p.host for r in self.runners.values() if r.rec.live for p in r.rec.ports}

    def _new_alloc(
        self,
        job: Job,
        group_name: str,
        replaces: str = "",
        reschedule_events: tuple[RescheduleEvent, ...] = (),
    ) -> AllocRunner:
        group = next(g for g in job.groups if g.name == group_name)
        used = self._used_ports()
        ports = []
        named = alias_addresses(self.node.node_networks)
        for p in group.network.ports if group.network else ():
            # a named host network's first address (Nomad's AssignPorts), its reserved_ports never given
            found = named.get(p.host_network) if p.host_network != "default" else None
            address = found[0] if found else None
            reserved = set(parse_port_ranges(address.reserved_ports)) if address else set()
            host = p.static or next(x for x in DYNAMIC_PORTS if x not in used and x not in reserved)
            used.add(host)
            ports.append(PortAlloc(p.label, host, p.to or host, address.address if address else ""))
        version = int((self.store.get("job", job.id) or {}).get("version", 0))
        rec = AllocRecord(str(uuid.uuid4()), job.id, group.name, created=time.time(), ports=tuple(ports))
        rec = rec.with_(replaces=replaces, job_version=version, layout=layout.current())
        rec = rec.with_(reschedule_events=reschedule_events)  # Nomad's RescheduleTracker
        rec = rec.with_(create_index=self.changes.bump("alloc", rec.id))  # Nomad's CreateIndex
        runner = AllocRunner(self.deps, rec, job, group)
        self.store.put("alloc", runner.id, rec.to_record())
        self.runners[runner.id] = runner
        self.kill_point("start.after-alloc-record")
        runner.start()
        return runner

    def _replace(self, failed: AllocRunner, reason: str) -> None:
        """A failed alloc rescheduled on this node as Nomad's scheduler does when no other node fits
        (agent.decide.decisions.plan_reschedule over its group's policy and its reschedules so far): placed
        at once when due within Nomad's window, else after its delay by a follow-up evaluation (its
        FollowupEvalID; the due time is in its record, so a restore resumes the wait), or never once
        the policy owes none (its attempts used up, a system job's): it stays failed."""
        if failed.rec.desired is DesiredStatus.STOP:
            return
        now = time.time()
        plan = plan_reschedule(failed.group.reschedule, failed.rec.reschedule_events, now, now)
        if plan is None:
            failed.state.save(replace_pending=False)
            log.info("alloc=%s: not rescheduled: its reschedule policy owes no more attempts", failed.id[:8])
            return
        failed.state.save(reschedule_due=plan.due, reschedule_delay=plan.delay)
        if not plan.now and self.evaluate is not None:  # Nomad's "alloc-failure" places nothing yet
            self.evaluate(failed.job, "alloc-failure", ())
            failed.state.save(followup_eval_id=self.evaluate(failed.job, "alloc-reschedule", ()))
        self.resume_reschedule(failed, reason)

    def resume_reschedule(self, failed: AllocRunner, reason: str) -> None:
        """The owed replacement of `failed` started when its reschedule is due (at once when it is)."""
        delay = max(0.0, failed.rec.reschedule_due - time.time())
        self.schedule(delay, functools.partial(self._start_replacement, failed, reason))

    def _start_replacement(self, failed: AllocRunner, reason: str) -> None:
        """The replacement owed to a failed alloc (its record says `replace_pending` until this is
        written, so a kill before it leaves it to the next restore). On a node that takes no new
        allocs (Core.hold) it is owed to the job instead, as Nomad's blocked evaluation."""
        if failed.rec.desired is DesiredStatus.STOP or failed.rec.replaced_by:
            failed.state.save(replace_pending=False)  # its job was stopped meanwhile, or done already
            return
        group = failed.group.name
        if self.hold is not None and self.hold(failed.job, UpdatePlan((), {group: 1}, {}, ())):
            failed.state.save(replace_pending=False)
            if self.evaluate is not None:  # its FailedTGAllocs and the blocked evaluation
                self.evaluate(failed.job, "alloc-failure", ())
            failed.event("", "Reschedule Blocked", f"{reason}: the node takes no new allocs")
            return
        self.kill_point("replace.after-fail-before-new-alloc")
        new = self.place_replacement(failed, reason)
        if failed.rec.followup_eval_id:  # placed by the follow-up evaluation
            new.state.save(eval_id=failed.rec.followup_eval_id)
        elif self.evaluate is not None:  # Nomad's server evaluates a failed alloc ("alloc-failure")
            new.state.save(eval_id=self.evaluate(failed.job, "alloc-failure", (new.id,)))

    def place_replacement(self, failed: AllocRunner, reason: str) -> AllocRunner:
        """The replacement of `failed`, carrying its RescheduleTracker (the failed alloc's reschedules
        within the policy's interval and this one) and PreviousAllocation."""
        now = time.time()
        event = RescheduleEvent(now, failed.id, self.node.id, failed.rec.reschedule_delay)
        carried = carried_reschedule_events(failed.group.reschedule, failed.rec.reschedule_events, now)
        new = self._new_alloc(
            failed.job, failed.group.name, replaces=failed.id, reschedule_events=(*carried, event)
        )
        self.kill_point("replace.after-new-alloc-before-record")
        failed.state.save(replaced_by=new.id, replace_pending=False)
        failed.event("", "Replaced", f"replaced by alloc {new.id}: {reason}")
        return new

    def blocked_reschedule(self, job_id: str, group: str) -> AllocRunner | None:
        """The oldest failed alloc of the job's group whose reschedule was planned and then held by a
        node that took no new allocs (Core.hold): the blocked evaluation's placement replaces it. Not
        one a job stop dropped the reschedule of (its DesiredStatus stop)."""
        held = [
            r
            for r in self.runners.values()
            if r.job.id == job_id
            and r.group.name == group
            and r.rec.status is AllocStatus.FAILED
            and r.rec.desired is DesiredStatus.RUN
            and r.rec.reschedule_due > 0
            and not r.rec.replaced_by
            and not r.rec.replace_pending
        ]
        return min(held, key=lambda r: r.rec.created, default=None)

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
            raise Conflict(f"alloc {r.id} is managed: stop its job (fieldlab-agent job stop {r.job.id})")
        if not self._stop_adopted([adopted.id]):
            raise AgentError(f"alloc {adopted.id}: not all of it could be stopped (see its events)")
        return [adopted.id]

    def stop_and_replace(self, alloc_id: str) -> str:
        """Nomad's `alloc stop` of a managed alloc: it stops, and as its job still wants it, a
        replacement is placed (here: this node, the only one). Returns the replacement's id, ""
        when the alloc was not live (nothing to replace, as Nomad places nothing then)."""
        r = self.runner(alloc_id)
        if not r.rec.live or r.rec.desired is DesiredStatus.STOP:
            return ""
        r.stop()
        new = self._new_alloc(r.job, r.group.name, replaces=r.id)
        r.state.save(replaced_by=new.id)
        r.event("", "Replaced", f"stopped on request (alloc stop): replaced by alloc {new.id}")
        return new.id

    def runner(self, alloc_id: str) -> AllocRunner:
        return self.runners[one_by_prefix(alloc_id, self.runners)]
