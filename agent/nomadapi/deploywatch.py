"""Nomad's deployments for the service jobs one node runs: what Nomad's scheduler creates and its
deployment watcher decides (nomad/structs/deployment.go, scheduler/reconciler, nomad/
deploymentwatcher), for the allocs this agent places (issue 52).

- **Created** for each version of a service job that a write registers (a new job, or a change: the
  same job registered again is no new version), when one of its groups has a count and an update
  strategy (its `update` block, agent.jobspec.update; Nomad's default for a service job:
  max_parallel 1, min_healthy_time 10s, healthy_deadline 5m, progress_deadline 10m;
  `max_parallel = 0` means none). A running deployment
  of an earlier version is cancelled ("Cancelled due to newer version of job").
- **Alloc health** as Nomad's client decides it (health by task states): healthy once every main
  task has run `min_healthy_time` without a restart, unhealthy when the alloc or a main task fails
  first or `healthy_deadline` passes. Decided once, as the client reports it. With
  `health_check = "checks"` and Nomad service checks, they must all pass too (a readiness check,
  `on_update = "ignore"`, by running; pending does not), min_healthy_time counted from then.
- **Status**: running -> successful when every group has as many healthy allocs as it desires;
  failed at the first unhealthy alloc or when `progress_deadline` passes without all of them
  (RequireProgressBy: the last alloc's health + the deadline); cancelled when the job is stopped.
  `fail`, `pause`/resume, `promote` and `allocation-health` as Nomad's watcher does them.

Records are kept in the agent's store (kind "deployment"), so they outlive an agent restart; a
purged job's deployments go with it (Nomad's GC collects them later). Every method runs on the
main loop (the store's writes are the loop's).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from agent.decide.jobupdate import TRACKED_VERSIONS
from agent.nomadapi.context import Allocs, Changes, Jobs, Kept, OnLoop
from agent.runner.deps import RunnerDeps
from agent.state.changes import ChangeIndex
from agent.state.store import Event, StateStore
from agent.structs.model import Job, UpdateStrategy

KIND = "deployment"  # the store's kind (key: the deployment's ID)
MARKS = "job_stable"  # the store's kind of `/stable` marks (key: job@version)
ACTIVE = ("running", "paused")  # Deployment.Active
TICK = 1.0  # seconds between two looks while a deployment is active (Nomad's watcher is event-driven)

RUNNING = "Deployment is running"  # structs.DeploymentStatusDescription*
PAUSED = "Deployment is paused"
SUCCESSFUL = "Deployment completed successfully"
STOPPED_JOB = "Cancelled because job is stopped"
NEWER_JOB = "Cancelled due to newer version of job"
FAILED_ALLOCS = "Failed due to unhealthy allocations"
PROGRESS = "Failed due to progress deadline"
FAILED_BY_USER = "Deployment marked as failed"


class DeploymentError(Exception):
    """A verb Nomad refuses: its message, answered as Nomad's server answers an uncoded error."""


def alloc_health(
    view: Mapping[str, Any],
    events: Sequence[Event],
    main_tasks: Iterable[str],
    *,
    min_healthy: float,
    healthy_deadline: float,
    now: float,
    checks_since: float | None = 0.0,
) -> tuple[bool, float] | None:
    """(healthy, when) as Nomad's client decides an alloc's deployment health by its task states,
    or None while undecided (or never: an alloc stopped before it was healthy). `checks_since`:
    with `health_check = "checks"` and Nomad service checks, since when they have all passed
    (None: not now), which min_healthy_time counts from too (Nomad's tracker waits for both)."""
    tasks = view.get("tasks") or {}
    main = [t for t in main_tasks if t in tasks]
    if view.get("status") == "failed" or any(tasks[t].get("failed") for t in main):
        return False, now
    if view.get("desired") == "stop" or view.get("status") in ("complete", "lost"):
        return None
    created = float(view.get("created") or 0.0)
    if view.get("status") == "running" and main and all(tasks[t].get("state") == "running" for t in main):
        started = {e.task: e.time for e in events if e.type == "Started"}  # the last start of each
        since = max([created, *(started.get(t, created) for t in main)])
        if checks_since is not None and now - max(since, checks_since) >= min_healthy:
            since = max(since, checks_since)
            return True, since + min_healthy
    if now - created >= healthy_deadline:
        return False, created + healthy_deadline
    return None


def nomad_checks_pass(results: Iterable[Mapping[str, Any]], expected: int) -> bool:
    """Whether an alloc's Nomad service checks all pass, as Nomad's tracker scans them: every one
    has a result, each a success, or a failure of a readiness check (`on_update = "ignore"`);
    pending is not passing."""
    found = list(results)
    if len(found) < expected:
        return False
    return all(
        r.get("Status") == "success" or (r.get("Status") == "failure" and r.get("Mode") == "readiness")
        for r in found
    )


def _nomad_check_count(job: Job, group: str) -> int:
    """The Nomad service checks of a group and its tasks (Nomad's countChecks)."""
    g = next((x for x in job.groups if x.name == group), None)
    if g is None:
        return 0
    services = [*g.services, *(s for t in g.tasks for s in t.services)]
    return sum(len(s.checks) for s in services if s.provider == "nomad")


def _checks_since(
    a: dict[str, Any],
    job: Job,
    view: Mapping[str, Any],
    tg: Mapping[str, Any],
    now: float,
    checks_of: Callable[[str], Mapping[str, Mapping[str, Any]]] | None,
) -> float | None:
    """Since when a deployment alloc's (`a`) Nomad checks have all passed (kept in `a`), None while
    they do not; 0.0 when its health waits for no checks."""
    expected = _nomad_check_count(job, str(view["group"])) if tg.get("health_check") == "checks" else 0
    if not expected or checks_of is None:
        return 0.0
    if nomad_checks_pass(checks_of(str(view["id"])).values(), expected):
        a.setdefault("checks_since", now)
    else:
        a.pop("checks_since", None)
    since = a.get("checks_since")
    return None if since is None else float(since)


def group_counts(d: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Each group's PlacedAllocs, HealthyAllocs and UnhealthyAllocs of a deployment record."""
    out = {g: {"placed": 0, "healthy": 0, "unhealthy": 0} for g in d["groups"]}
    for a in d["allocs"].values():
        counts = out.get(a["group"])
        if counts is None:
            continue
        counts["placed"] += 1
        if a.get("healthy") is True:
            counts["healthy"] += 1
        elif a.get("healthy") is False:
            counts["unhealthy"] += 1
    return out


def _group_state(count: int, u: UpdateStrategy | None, now: float) -> dict[str, Any]:
    """A group's DeploymentState as created, with the strategy its allocs' health follows."""
    u = u or UpdateStrategy()
    return {
        "desired_total": count,
        "health_check": u.health_check,
        "auto_revert": u.auto_revert,
        "min_healthy_time": u.min_healthy_time,
        "healthy_deadline": u.healthy_deadline,
        "progress_deadline": u.progress_deadline,
        "require_progress_by": now + u.progress_deadline if u.progress_deadline else 0.0,
        "promoted": False,
    }


def _main_tasks(job: Job, group: str) -> list[str]:
    g = next((x for x in job.groups if x.name == group), None)
    if g is None:
        return []
    return [t.name for t in g.tasks if t.lifecycle is None or t.lifecycle.sidecar]


class Deployments:
    """The deployments, by ID, mirrored from the store."""

    def __init__(self, changes: ChangeIndex, store: StateStore | None = None) -> None:
        self._changes = changes
        self._store = store
        self._lock = threading.Lock()  # the routes read the mirror off the loop
        self._all: dict[str, dict[str, Any]] = {}
        self._by_alloc: dict[str, str] = {}  # alloc ID -> its deployment's
        self._marks: dict[str, dict[str, Any]] = {}  # `/stable` marks by job@version
        self.ticking = False  # a look is scheduled on the loop (`tick`)
        # (job ID, version): registers that version again, off the loop (agent.nomadapi.jobscale)
        self.reverter: Callable[[str, int], None] | None = None
        if store is not None:
            for key, rec in store.list(KIND).records.items():
                if isinstance(rec, dict) and isinstance(rec.get("groups"), dict):
                    self._all[key] = rec
                    self._by_alloc.update(dict.fromkeys(rec.get("allocs") or {}, key))
            self._marks = {k: r for k, r in store.list(MARKS).records.items() if isinstance(r, dict)}

    # -- reads (any thread) ---------------------------------------------------------------------
    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return sorted(self._all.values(), key=lambda d: (d["create_index"], d["id"]))

    def of_job(self, job_id: str) -> list[dict[str, Any]]:
        """The job's deployments, newest first (Nomad's Job.Deployments)."""
        return sorted((d for d in self.all() if d["job_id"] == job_id), key=lambda d: -d["create_index"])

    def find(self, deployment_id: str) -> dict[str, Any] | None:
        """By its whole ID, as Nomad's DeploymentByID (a CLI resolves a prefix with the list)."""
        with self._lock:
            return self._all.get(deployment_id)

    def of_alloc(self, alloc_id: str) -> tuple[str, dict[str, Any] | None]:
        """(DeploymentID, api.AllocDeploymentStatus or None) of an alloc."""
        with self._lock:
            d = self._all.get(self._by_alloc.get(alloc_id, ""))
            a = d["allocs"].get(alloc_id) if d is not None else None
            if d is None or a is None:
                return "", None
            if a.get("healthy") is None:
                return d["id"], None
            status = {"Healthy": a["healthy"], "Timestamp": a["timestamp"], "Canary": False}
            return d["id"], {**status, "ModifyIndex": a["modify_index"]}

    def stable(self, job_id: str, version: int, submit: float) -> bool:
        """Whether the job's version is stable: marked so (`/stable`), else its deployment succeeded."""
        with self._lock:
            mark = self._marks.get(_mark_key(job_id, version))
        if mark is not None and mark.get("submit") == submit:
            return bool(mark.get("stable"))
        return any(
            d["job_version"] == version and d["job_submit"] == submit and d.get("stable", False)
            for d in self.of_job(job_id)
        )

    # -- writes (on the loop) -------------------------------------------------------------------
    def _save(self, d: dict[str, Any]) -> None:
        d["modify_index"] = self._changes.bump(KIND, d["id"])
        d["modified"] = time.time()
        with self._lock:
            self._all[d["id"]] = d
            self._by_alloc.update(dict.fromkeys(d["allocs"], d["id"]))
        if self._store is not None:
            self._store.put(KIND, d["id"], d)

    def _drop(self, deployment_id: str) -> None:
        with self._lock:
            gone = self._all.pop(deployment_id, None)
            for alloc_id in gone["allocs"] if gone is not None else ():
                if self._by_alloc.get(alloc_id) == deployment_id:
                    del self._by_alloc[alloc_id]
        self._changes.bump(KIND, deployment_id)
        if self._store is not None:
            self._store.delete(KIND, deployment_id)

    def job_written(self, job: Job, version: int, submit: float, job_index: int) -> dict[str, Any] | None:
        """A version of `job` was registered: its deployment (made now unless it has one), or None
        when Nomad makes none (not a service job, no group with a count)."""
        if job.type != "service":
            return None
        mine = [d for d in self.of_job(job.id) if d["job_version"] == version and d["job_submit"] == submit]
        if mine:
            return mine[0]
        groups = {g.name: g for g in job.groups if g.count > 0 and g.update and g.update.max_parallel > 0}
        if not groups:  # Nomad's reconciler: no group with a count and a strategy (IsEmpty)
            return None
        for old in self.of_job(job.id):
            if old["status"] in ACTIVE:
                self._set_status(old, "cancelled", NEWER_JOB)
            elif old["job_version"] <= version - TRACKED_VERSIONS:  # its version is no longer kept
                self._drop(old["id"])
        now = time.time()
        deployment_id = str(uuid.uuid4())
        d: dict[str, Any] = {
            "id": deployment_id,
            "job_id": job.id,
            "job_version": version,
            "job_submit": submit,
            "job_index": job_index,
            "status": "running",
            "description": RUNNING,
            "created": now,
            "create_index": self._changes.bump(KIND, deployment_id),
            "groups": {name: _group_state(g.count, g.update, now) for name, g in groups.items()},
            "allocs": {},
            "stable": False,
        }
        self._save(d)
        return d

    def _set_status(self, d: dict[str, Any], status: str, description: str) -> None:
        rollback = None
        if status == "failed" and any(tg.get("auto_revert") for tg in d["groups"].values()):
            rollback, description = self._rollback(d, description)
        d["status"], d["description"] = status, description
        if status == "successful":
            d["stable"] = True  # Nomad marks the job's version stable with it
        self._save(d)
        if rollback is not None and self.reverter is not None:
            d["reverted_to"] = rollback
            self.reverter(d["job_id"], rollback)

    def _rollback(self, d: Mapping[str, Any], description: str) -> tuple[int | None, str]:
        """A failed deployment of a group with `auto_revert`: the job's newest stable version to
        register again, and the description as Nomad's watcher writes it (latestStableJob,
        handleRollbackValidity)."""
        record = self._store.get("job", d["job_id"]) if self._store is not None else None
        if record is None:
            return None, f"{description} - no stable job version to auto revert to"
        kept = [record, *(h for h in record.get("history") or [] if isinstance(h, dict))]
        for h in sorted(kept, key=lambda h: -int(h.get("version", 0))):
            version, submit = int(h.get("version", 0)), float(h.get("submit_time") or 0.0)
            if not self.stable(d["job_id"], version, submit):
                continue
            if h.get("canonical") == record.get("canonical"):
                return None, (
                    f"{description} - not rolling back to stable job version {version} as current job "
                    "has same specification"
                )
            return version, f"{description} - rolling back to job version {version}"
        return None, f"{description} - no stable job version to auto revert to"

    def refresh(
        self,
        jobs: Mapping[str, Job],
        views_of: Callable[[str], list[dict[str, Any]]],
        events_of: Callable[[str], Sequence[Event]],
        now: float,
        checks_of: Callable[[str], Mapping[str, Mapping[str, Any]]] | None = None,
    ) -> bool:
        """Every active deployment brought up to date with its allocs; whether one is still active.
        `checks_of`: an alloc's Nomad check results (agent.runner.checks.CheckResults.of)."""
        active = False
        for d in [d for d in self.all() if d["status"] in ACTIVE]:
            job = jobs.get(d["job_id"])
            if job is None:  # purged
                self._drop(d["id"])
                continue
            self._look(d, job, views_of(d["job_id"]), events_of, now, checks_of)
            active = active or d["status"] in ACTIVE
        with self._lock:
            gone = [i for i, d in self._all.items() if d["job_id"] not in jobs]
        for deployment_id in gone:
            self._drop(deployment_id)
        self.forget_marks(jobs)
        return active

    def _look(
        self,
        d: dict[str, Any],
        job: Job,
        views: list[dict[str, Any]],
        events_of: Callable[[str], Sequence[Event]],
        now: float,
        checks_of: Callable[[str], Mapping[str, Mapping[str, Any]]] | None = None,
    ) -> None:
        changed = False
        mine = [
            v for v in views if v.get("job_version") == d["job_version"] and v.get("group") in d["groups"]
        ]
        for v in mine:
            if str(v["id"]) not in d["allocs"]:
                d["allocs"][str(v["id"])] = {"group": v["group"], "healthy": None, "modify_index": 0}
                changed = True
            a = d["allocs"][str(v["id"])]
            if a["healthy"] is not None:
                continue
            tg = d["groups"][v["group"]]
            if tg.get("health_check") == "manual":  # health only by the operator's word
                continue
            checks_since = _checks_since(a, job, v, tg, now, checks_of)
            decided = alloc_health(
                v,
                events_of(str(v["id"])),
                _main_tasks(job, str(v["group"])),
                min_healthy=tg["min_healthy_time"],
                healthy_deadline=tg["healthy_deadline"],
                now=now,
                checks_since=checks_since,
            )
            if decided is None:
                continue
            a["healthy"], a["timestamp"] = decided
            a["modify_index"] = self._changes.current() + 1
            if decided[0] and tg["progress_deadline"]:
                tg["require_progress_by"] = decided[1] + tg["progress_deadline"]
            changed = True
        if views and all(v.get("desired") == "stop" for v in views):
            self._set_status(d, "cancelled", STOPPED_JOB)
            return
        if d["status"] == "running":
            decision = self._decide(d, now)
            if decision is not None:
                self._set_status(d, *decision)
                return
        if changed:
            self._save(d)

    @staticmethod
    def _decide(d: Mapping[str, Any], now: float) -> tuple[str, str] | None:
        counts = group_counts(d)
        if any(c["unhealthy"] for c in counts.values()):
            return "failed", FAILED_ALLOCS
        if all(counts[g]["healthy"] >= tg["desired_total"] for g, tg in d["groups"].items()):
            return "successful", SUCCESSFUL
        if any(now > tg["require_progress_by"] > 0 for tg in d["groups"].values()):
            return "failed", PROGRESS
        return None

    # -- verbs (on the loop), as Nomad's Deployment endpoint and watcher -------------------------
    def _active_or(self, deployment_id: str, refused: str) -> dict[str, Any]:
        with self._lock:
            d = self._all.get(deployment_id)
        if d is None:
            raise DeploymentError("deployment not found")
        if d["status"] not in ACTIVE:
            raise DeploymentError(refused)
        return d

    def fail(self, deployment_id: str) -> dict[str, Any]:
        d = self._active_or(deployment_id, "can't fail terminal deployment")
        self._set_status(d, "failed", FAILED_BY_USER)
        return d

    def pause(self, deployment_id: str, pause: bool) -> dict[str, Any]:
        refused = "can't pause terminal deployment" if pause else "can't resume terminal deployment"
        d = self._active_or(deployment_id, refused)
        self._set_status(d, *(("paused", PAUSED) if pause else ("running", RUNNING)))
        return d

    def promote(self, deployment_id: str, groups: Sequence[str] | None) -> dict[str, Any]:
        """No canaries are placed here (one node): each chosen group is promoted, as Nomad's with
        none to wait for."""
        d = self._active_or(deployment_id, "can't promote terminal deployment")
        for name, tg in d["groups"].items():
            if groups is None or name in groups:
                tg["promoted"] = True
        self._save(d)
        return d

    def set_health(
        self, deployment_id: str, healthy: Sequence[str], unhealthy: Sequence[str]
    ) -> dict[str, Any]:
        """An operator's word on allocs' health (`nomad deployment`'s allocation-health): Nomad's
        state store checks each is an alloc of the deployment; an unhealthy one fails it."""
        if not healthy and not unhealthy:
            raise DeploymentError("must specify at least one healthy/unhealthy allocation ID")
        d = self._active_or(deployment_id, "can't set health of allocations for a terminal deployment")
        now = time.time()
        for alloc_id, ok in [*((a, True) for a in healthy), *((a, False) for a in unhealthy)]:
            a = d["allocs"].get(alloc_id)
            if a is None:
                raise DeploymentError(f'alloc "{alloc_id}" is not part of deployment "{deployment_id}"')
            a["healthy"], a["timestamp"], a["modify_index"] = ok, now, self._changes.current() + 1
        if unhealthy:
            self._set_status(d, "failed", FAILED_ALLOCS)
        else:
            self._save(d)
        return d

    def mark_stable(self, job_id: str, version: int, submit: float, stable: bool) -> int:
        """`/v1/job/:id/stable` (Nomad's Job.Stable): the version's stability as the caller says,
        kept (kind "job_stable") whether or not the version has a deployment; the change's index."""
        key = _mark_key(job_id, version)
        mark = {"job_id": job_id, "version": version, "submit": submit, "stable": stable}
        with self._lock:
            self._marks[key] = mark
        if self._store is not None:
            self._store.put(MARKS, key, mark)
        self._changes.bump("job", job_id)
        return self._changes.bump(MARKS, key)

    def forget_marks(self, jobs: Mapping[str, Job]) -> None:
        with self._lock:
            gone = [k for k, m in self._marks.items() if m.get("job_id") not in jobs]
            for k in gone:
                del self._marks[k]
        for k in gone if self._store is not None else ():
            assert self._store is not None
            self._store.delete(MARKS, k)


def _mark_key(job_id: str, version: int) -> str:
    return f"{job_id}@{version}"


class WatchPort(OnLoop, Changes, Kept, Jobs, Allocs, Protocol):
    """What the deployment watcher reads on the loop: the jobs and their records, the allocs' views
    and events, the checks' results (the runners' deps), and the loop's timer for its next look."""

    @property
    def deps(self) -> RunnerDeps: ...


def written(api: WatchPort, deployments: Deployments, job_id: str) -> None:
    """On the loop, once a write's evaluation is made: the deployment of the job's version."""
    job = api.jobs.get(job_id)
    record = api.store.get("job", job_id) if job is not None else None
    if job is None or record is None:
        return
    version, submit = int(record.get("version", 0)), float(record.get("submit_time") or 0.0)
    deployments.job_written(job, version, submit, api.changes.of("job", job_id))
    look(api, deployments)


def look(api: WatchPort, deployments: Deployments) -> None:
    """On the loop: every active deployment brought up to date with its allocs, and the next look
    scheduled while one is active (as Nomad's watcher follows a deployment until it ends)."""
    active = deployments.refresh(
        api.jobs, api.allocs.views, api.store.events, time.time(), api.deps.check_results.of
    )
    if active and not deployments.ticking:
        deployments.ticking = True

        def tick() -> None:
            deployments.ticking = False
            look(api, deployments)

        api.schedule(TICK, tick)
