"""Nomad's periodic dispatcher on one node (nomad/periodic.go, nomad/periodic_endpoint.go): a job with
an enabled `periodic` block places nothing itself; at each time one of its cron specs names, in its
`time_zone`, the agent registers the child job `<job>/periodic-<unix launch time>` (the parent's
copy without `periodic`, `ParentID` set), a batch job as any, evaluated with TriggeredBy
"periodic-job". With `prohibit_overlap` a launch is skipped while a child still runs (has a live
alloc). `POST /v1/job/:id/periodic/force` launches one now, whatever the overlap rule.

The launches are timers on the agent's loop, one look a second (`TICK`). At the agent's start the
last launch is read from the children the agent keeps: a launch missed while it was down is made
once, as Nomad's leader does when it restores its periodic jobs; a job registered later launches
from then on (its children of before, a purged job's, make up nothing).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from croniter import croniter

from agent.api.handler import Handler, Response, query_params
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.jobspec import ParsedJob
from agent.jobspec.jobtypes import time_zone
from agent.nomadapi.context import Allocs, Jobs, NodeParts, OnLoop
from agent.nomadapi.http import HttpError, answer, check_scope, meta_headers
from agent.nomadapi.jobjson import parsed_job_json
from agent.nomadapi.node import Eval, NodeIdentity
from agent.structs.model import Job, Periodic
from agent.structs.records import DesiredStatus

log = logging.getLogger(__name__)
LAUNCH_SUFFIX = "/periodic-"  # structs.PeriodicLaunchSuffix
TRIGGER = "periodic-job"  # structs.EvalTriggerPeriodicJob
TICK = 1.0  # seconds between looks for a due launch
MISSED = 60.0  # seconds late past which a launch is made at the time it is made, not the time it was due


class PeriodicPort(OnLoop, Jobs, Allocs, NodeParts, Protocol):
    node: NodeIdentity

    def evaluate(
        self, job_id: str, trigger: str, job_type: str, placed: tuple[str, ...] = (), *, priority: int = 50
    ) -> Eval: ...

    def stopped(self, job_id: str) -> bool: ...


def next_launch(periodic: Periodic, after: float) -> float:
    """The first launch time (Unix seconds) strictly after `after`, in the job's time zone: the
    earliest of its specs (Nomad's PeriodicConfig.Next). Pure."""
    zone = time_zone(periodic.time_zone)
    start = datetime.datetime.fromtimestamp(after, zone)
    specs = (periodic.spec,) if periodic.spec else periodic.specs
    return min(float(croniter(s, start).get_next(float)) for s in specs)


def plan_launch(prohibit_overlap: bool, child_runs: bool, restoring: bool, bugs: Bugs = NO_BUGS) -> bool:
    """Whether a due launch is made: never while a child of a `prohibit_overlap` job still runs, the
    launch a restore makes (one missed while the agent was down) included, as Nomad's dispatcher since
    PR #16583. `periodic-restore-ignores-overlap` is nomad-11052: the launch made at the agent's
    start skips the check, and a second child runs beside the one still running. Pure."""
    if not (prohibit_overlap and child_runs):
        return True
    return restoring and bugs.periodic_restore_ignores_overlap


def plan_track_stopped_at_start(bugs: Bugs = NO_BUGS) -> bool:
    """Whether the agent's start tracks a stopped periodic job: never (Nomad's restore of its periodic
    dispatcher since PR #3201). `periodic-restores-stopped-job` is nomad-3201: it is tracked again
    and launches children on its schedule though `job stop` stopped it. Pure."""
    return bugs.periodic_restores_stopped_job


def launch_time(parent_id: str, child_id: str) -> int | None:
    """The launch time a periodic child's ID carries, or None when it is not one of `parent_id`'s."""
    prefix = parent_id + LAUNCH_SUFFIX
    tail = child_id[len(prefix) :] if child_id.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def derived_job(parent: Job, at: int) -> Job:
    """Nomad's deriveJob: the parent's copy named `<job>/periodic-<at>`, not periodic, its ParentID."""
    child_id = f"{parent.id}{LAUNCH_SUFFIX}{at}"
    return dataclasses.replace(parent, id=child_id, name=child_id, parent_id=parent.id, periodic=None)


class PeriodicLauncher:
    """On the loop: each periodic job's next launch, and the launches."""

    def __init__(self, api: PeriodicPort, clock: Callable[[], float], bugs: Bugs | None = None) -> None:
        self.api = api
        self.clock = clock
        self.bugs = bugs if bugs is not None else api.bugs
        self.kept: set[str] = set()  # stopped jobs tracked from the start on (only a fault does that)
        self.due: dict[str, float] = {}  # job -> its next launch (Unix seconds)
        self.restored = False  # the first look (the agent's start) made: later jobs launch from now

    def tracked(self, job: Job) -> bool:
        """Nomad's IsPeriodicActive: periodic, enabled, not stopped (`job stop` keeps the job until
        it is purged or registered again), not parameterized."""
        return self._active(job) and not self.api.stopped(job.id)

    @staticmethod
    def _active(job: Job) -> bool:
        return job.periodic is not None and job.periodic.enabled and job.parameterized is None

    def tick(self) -> None:
        now = self.clock()
        restoring, self.restored = not self.restored, True
        if restoring and plan_track_stopped_at_start(self.bugs):
            self.kept = {j.id for j in self.api.jobs.values() if self._active(j) and self.api.stopped(j.id)}
        jobs = {j.id: j for j in self.api.jobs.values() if self.tracked(j) or j.id in self.kept}
        for gone in set(self.due) - set(jobs):
            del self.due[gone]
        for job_id, job in jobs.items():
            periodic = job.periodic
            assert periodic is not None
            if job_id not in self.due:  # at the agent's start: from its last launch (a missed one is made)
                kids = self.api.jobs if restoring else ()
                last = max((t for c in kids if (t := launch_time(job_id, c)) is not None), default=None)
                self.due[job_id] = next_launch(periodic, last if last is not None else now)
            if self.due[job_id] > now:
                continue
            # a launch missed while the agent was down is made once, now (Nomad's leader at a restore)
            at = int(self.due[job_id]) if now - self.due[job_id] < MISSED else int(now)
            self.due[job_id] = next_launch(periodic, max(now, at))
            runs = periodic.prohibit_overlap and self.running_children(job_id)
            if not plan_launch(periodic.prohibit_overlap, runs, restoring, self.bugs):
                log.info(
                    "periodic job %s: launch at %d skipped, a child still runs (prohibit_overlap)", job_id, at
                )
                continue
            try:
                self.launch(job, at)
            except Exception:  # one job's failed launch never stops the others'
                log.exception("periodic job %s: launch at %d failed", job_id, at)

    def running_children(self, job_id: str) -> bool:
        return any(
            r.job.parent_id == job_id and r.rec.live and r.rec.desired is DesiredStatus.RUN
            for r in self.api.runners.values()
        )

    def launch(self, parent: Job, at: int) -> Eval:
        """Register the child of the launch at `at` and evaluate it (Nomad's createEval)."""
        child = derived_job(parent, at)
        if self.api.jobs.get(child.id) == child:  # launched this second already: Nomad's no-op register
            return self.api.evaluate(child.id, TRIGGER, child.type)
        text = json.dumps({"Job": parsed_job_json(child, self.api.node.region)})
        done = self.api.job_registry.commit(ParsedJob(child, ()), text, "json", {}, f"job {child.id}")
        placed = tuple(str(a) for a in done.get("allocs") or ())
        return self.api.evaluate(child.id, TRIGGER, child.type, placed)


def periodic_routes(api: PeriodicPort, clock: Callable[[], float]) -> list[tuple[str, str, Handler]]:
    launcher = PeriodicLauncher(api, clock)

    def tick() -> None:
        try:
            launcher.tick()
        finally:
            api.schedule(TICK, tick)

    api.schedule(TICK, tick)

    def force(groups: tuple[str, ...], body: bytes) -> Response:
        from urllib.parse import unquote

        params = query_params()
        check_scope(params, api.node.region)
        job_id = unquote(groups[0])

        def do() -> Eval:
            job = api.jobs.get(job_id)
            if job is None:
                raise HttpError(500, "job not found")
            if job.periodic is None:
                raise HttpError(500, "can't force launch non-periodic job")
            if not launcher.tracked(job):
                raise HttpError(
                    500,
                    f'force launch for job "{job_id}" failed: '
                    f'can\'t force run non-tracked job "{job_id}" (default)',
                )
            return launcher.launch(job, int(clock()))

        ev = api.call(do)
        meta_headers(ev.create_index)
        out: dict[str, Any] = {"EvalID": ev.id, "EvalCreateIndex": ev.create_index, "Index": ev.create_index}
        return answer({**out, "LastContact": 0, "KnownLeader": True})

    rx = r"/v1/job/([^/]+)/periodic/force"
    return [("POST", rx, force), ("PUT", rx, force)]
