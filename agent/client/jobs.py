"""The job registry: the jobs this node runs (their stored text and versions, child jobs among
them), on the main loop. A register is parsed off the loop (`parse_submission`, in the API's
handler thread) and committed here: refused when this node would not place it, stored as a new
version, its allocs placed through the alloc registry (agent.client.allocs); an update of a
running job is planned as Nomad's (agent.decide.jobupdate) first. A job's stop stops its allocs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from agent.client.allocs import AllocRegistry, ServerHooks
from agent.decide.jobupdate import UpdatePlan, earlier_versions, plan_job_update
from agent.decide.placement import NodeFacts, refusals
from agent.drivers.registry import DriverRegistry
from agent.errors import Conflict, NotFound
from agent.fieldbugs.bugs import Bugs
from agent.jobspec import DEFAULT_LIMITS, JobspecError, Limits, ParsedJob, parse_jobspec
from agent.runner.adopt import Adoption
from agent.state import StateStore
from agent.structs.jobcodec import encode_job
from agent.structs.model import Job
from agent.structs.records import DesiredStatus
from agent.templates.render import check_template


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


class JobRegistry:
    def __init__(
        self,
        jobs: dict[str, Job],
        allocs: AllocRegistry,
        store: StateStore,
        drivers: DriverRegistry,
        node: NodeFacts,
        adoption: Adoption,
        server: ServerHooks,
        *,
        limits: Limits,
        bugs: Bugs,
    ) -> None:
        self.jobs = jobs
        self.allocs = allocs
        self.store = store
        self.drivers = drivers
        self.node = node
        self.adoption = adoption
        self.server = server
        self.limits = limits
        self.bugs = bugs

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
        if plan is None and any(r.job.id == job.id and r.rec.live for r in self.allocs.runners.values()):
            raise Conflict(f"job {job.id} is already running: stop it first")
        self.allocs.check_static_ports(job, None if plan is None else {g for g, n in plan.start.items() if n})
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
        for kept in self.allocs.running(job.id) if plan is not None else ():  # updated in place, as Nomad's
            kept.state.save(job_version=version)
        hold = self.server.hold
        if hold is not None and hold(job, plan):  # stored, nothing placed: Nomad's blocked eval
            return {"job": job.id, "allocs": [], "warnings": list(parsed.warnings), "version": version}
        created = []
        for group in () if job.places_nothing else job.groups:  # a parent runs only its child jobs
            count = group.count if plan is None else plan.start.get(group.name, 0)
            previous = () if plan is None else plan.replaces.get(group.name, ())
            for i in range(count):
                replaces = previous[i] if i < len(previous) else ""
                new = self.allocs.new_alloc(job, group.name, replaces=replaces)
                created.append(new.id)
                if replaces and (old := self.allocs.runners.get(replaces)) is not None:
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

    def plan_update(self, parsed: ParsedJob, source: str) -> UpdatePlan | None:
        """On the loop, registering a job that runs, as Nomad (agent.decide.jobupdate): the plan, and the
        allocs it replaces or drops told to stop (the caller waits for them, then `commit`s with
        the plan). None when the job does not run (a plain commit)."""
        job = parsed.job
        old = self.jobs.get(job.id)
        running = self.allocs.running(job.id)
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
            self.allocs.runners[alloc_id].stop("job updated: a new version of the job replaces this alloc")
        return plan

    def stop_job(self, job_id: str) -> list[str]:
        adopted = self.allocs.stop_adopted(self.adoption.of_job(job_id))
        if job_id not in self.jobs:
            if adopted:
                return adopted
            raise NotFound(f"no job {job_id}")
        stopped = adopted  # adopted allocs of the job (found after a lost state DB) were stopped first
        for r in list(self.allocs.runners.values()):
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
