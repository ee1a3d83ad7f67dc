"""Nomad's node verbs on this one node: eligibility, drain, evaluate (issue 52).

What Nomad's servers decide for a node, decided here for the only one:
- `PUT /v1/node/:id/eligibility` (api.NodeUpdateEligibilityRequest): an ineligible node takes no new
  allocs. A job registered then is stored and its evaluation places nothing: FailedTGAllocs per group
  and a blocked evaluation ("queued-allocs"), as Nomad's scheduler answers when no node is eligible.
  When the node turns eligible again, each blocked evaluation is unblocked and places what it owed
  (as Nomad's blocked evals do), its allocs carrying its EvalID.
- `PUT /v1/node/:id/drain` (api.NodeUpdateDrainRequest): the node turns ineligible and Nomad's
  drainer is run: a service group's allocs are stopped `MIGRATE_MAX_PARALLEL` at a time while the
  rest of the group stays running (Nomad's `migrate` default; with no other node no replacement
  ever becomes healthy, so the rest wait for the deadline); batch allocs are left to finish until
  the deadline; system allocs are stopped once the others are done (kept with IgnoreSystemJobs). At
  the deadline every remaining alloc is stopped and the drain completes at once (a negative
  deadline: at once; 0: no deadline). A service job's allocs a drain stopped are owed to the job (a
  blocked evaluation), placed again when the node turns eligible; a batch job's are not replaced
  (Nomad's batch drain since PR #26961, also when the node turns eligible before they stopped, PR
  #28018). DrainSpec null cancels the drain.
- `PUT /v1/node/:id/evaluate`: a "node-update" evaluation for each job with allocs on the node, and
  each system job (Nomad's createNodeEvals); nothing to place (every alloc is placed at once here).

The node's eligibility, drain and last drain are kept in the store (kind "node_sched"), so they
survive an agent restart; a drain that was running goes on (its deadline is a wall-clock time).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from agent.api.handler import Handler, Response
from agent.decide.jobupdate import UpdatePlan
from agent.errors import AgentError, NotFound
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.node.driverevents import NodeEvent, NodeEvents
from agent.nomadapi.context import CorePort, NodeParts
from agent.nomadapi.gojson import go_time
from agent.nomadapi.http import HttpError, answer, meta_headers
from agent.nomadapi.node import Evals, NodeIdentity
from agent.structs.model import Job
from agent.structs.records import DesiredStatus

log = logging.getLogger(__name__)

KIND = "node_sched"  # the store's kind for the node's scheduling state (key: the node ID)
DRAIN_TICK = 0.5  # seconds between the drainer's looks while a drain runs
MIGRATE_MAX_PARALLEL = 1  # Nomad's default `migrate { max_parallel }`
ELIGIBLE, INELIGIBLE = "eligible", "ineligible"
SYSTEM_TYPES = ("system", "sysbatch")
# Nomad's node event texts (nomad/node_endpoint.go, nomad/drainer/drainer.go)
EV_DRAIN_SET = "Node drain strategy set"
EV_DRAIN_UPDATED = "Node drain strategy updated"
EV_DRAIN_DISABLED = "Node drain disabled"
EV_DRAIN_COMPLETE = "Node drain complete"
EV_ELIGIBLE = "Node marked as eligible for scheduling"
EV_INELIGIBLE = "Node marked as ineligible for scheduling"
DRAIN_STOP = "alloc is being migrated: node drain (no other node: it is not placed elsewhere)"


def plan_blocked_reschedule_tracker(bugs: Bugs = NO_BUGS) -> bool:
    """Whether the alloc a blocked evaluation places for a failed alloc whose reschedule the node
    held (ineligible, draining) is its replacement, carrying its RescheduleTracker, as Nomad's
    scheduler since PR #12319. `blocked-reschedule-drops-tracker` is nomad-12147: it is a new alloc
    with no tracker, so the reschedule policy's attempts start again and a job that keeps failing is
    rescheduled past them. Pure."""
    return not bugs.blocked_reschedule_drops_tracker


def plan_drained_alloc_owed(job_type: str, bugs: Bugs = NO_BUGS) -> bool:
    """Whether an alloc the drainer stopped is owed to its job, placed again when the node takes
    allocs: a service job's (migrated, here to the same node once it is eligible); never a batch
    job's (Nomad's documented batch drain: it finishes by the deadline or is killed there, and is not
    replaced, since PR #26961; PR #28018 kept it so when the node is re-enabled before the alloc
    stopped); a system job's neither. `drained-batch-replaced` is nomad-28008: a drained batch alloc
    is placed again once the node is eligible, beside the one still stopping. Pure."""
    if job_type == "batch":
        return bugs.drained_batch_replaced
    return job_type not in SYSTEM_TYPES


class NodeVerbPort(CorePort, NodeParts, Protocol):
    node: NodeIdentity
    evals: Evals
    node_events: NodeEvents
    node_fields: Callable[[], dict[str, Any]]  # the node's scheduling fields in its JSON


class NodeSchedule:
    """The node's eligibility, drain and last drain, and the allocs owed to jobs while it is
    ineligible (job -> groups -> count, and the blocked evaluation that waits for them). On the loop."""

    def __init__(self, api: NodeVerbPort) -> None:
        self.api = api
        store = self.api.store  # None in a stand-in core (tests reading request bodies): nothing kept
        rec = (store.get(KIND, api.node.id) if store is not None else None) or {}
        self.eligibility = str(rec.get("eligibility", ELIGIBLE))
        self.drain: dict[str, Any] | None = rec.get("drain")
        self.last_drain: dict[str, Any] | None = rec.get("last_drain")
        self.owed: dict[str, dict[str, Any]] = dict(rec.get("owed") or {})
        self.fresh: dict[str, dict[str, int]] = {}  # what the next evaluation of a job failed to place
        self.ticking = False

    # -- state ---------------------------------------------------------------------------------
    def save(self) -> None:
        record = {
            "eligibility": self.eligibility,
            "drain": self.drain,
            "last_drain": self.last_drain,
            "owed": self.owed,
        }
        self.api.store.put(KIND, self.api.node.id, record)

    def fields(self) -> dict[str, Any]:
        """node_json / node_stub's eligibility, drain_strategy (api.DrainStrategy) and last_drain
        (api.DrainMetadata)."""
        d, last = self.drain, self.last_drain
        strategy = None
        if d is not None:
            strategy = {
                "Deadline": d["deadline"],
                "IgnoreSystemJobs": d["ignore_system"],
                "ForceDeadline": go_time(d["force_deadline"] or None),
                "StartedAt": go_time(d["started"]),
            }
        drained = None
        if last is not None:
            drained = {
                "StartedAt": go_time(last["started"]),
                "UpdatedAt": go_time(last["updated"]),
                "Status": last["status"],
                "AccessorID": "",
                "Meta": last.get("meta") or None,
            }
        return {"eligibility": self.eligibility, "drain_strategy": strategy, "last_drain": drained}

    def changed(
        self, kind: str, message: str = "", subsystem: str = "", details: Mapping[str, str] = {}
    ) -> int:
        """Record the change: the event stream's NodeDrain / NodeEligibility (`kind`), then the node's
        ModifyIndex (blocking queries on the node wake); with the node event Nomad writes."""
        self.save()
        node_id = self.api.node.id
        self.api.changes.bump(kind, node_id)
        index = self.api.changes.bump("node", node_id)
        if message:
            self.api.node_events.add(NodeEvent(message, subsystem, dict(details), time.time(), index))
        return index

    # -- the placement gate (ServerHooks.hold) and the evaluations' hook (Evals.hook) -----------------
    def hold(self, job: Job, plan: UpdatePlan | None) -> bool:
        if self.eligibility == ELIGIBLE or getattr(job, "parameterized_parent", False):
            return False
        counts = {
            g.name: n for g in job.groups if (n := g.count if plan is None else plan.start.get(g.name, 0)) > 0
        }
        if not counts:
            return False
        self.owed[job.id] = {"groups": counts, "eval": ""}
        self.fresh[job.id] = counts
        self.save()
        return True

    def failed(self, job_id: str, triggered_by: str) -> Mapping[str, int]:
        if triggered_by == "job-deregister" and job_id in self.owed:  # its blocked eval is cancelled
            self._cancel_blocked(self.owed.pop(job_id).get("eval", ""))
            self.save()
        return self.fresh.pop(job_id, {})

    def blocked(self, job_id: str, eval_id: str) -> None:
        entry = self.owed.setdefault(job_id, {"groups": {}, "eval": ""})
        if entry.get("eval") and entry["eval"] != eval_id:
            self._cancel_blocked(entry["eval"])  # one blocked eval per job, as Nomad's tracker keeps
        entry["eval"] = eval_id
        self.save()

    def _cancel_blocked(self, eval_id: str) -> None:
        ev = self.api.evals.find(eval_id) if eval_id else None
        if ev is not None and ev.status == "blocked":
            self.api.evals.put(replace(ev, status="canceled"))
            self.api.changes.bump("eval", ev.id)

    # -- eligibility ---------------------------------------------------------------------------
    def set_eligibility(self, eligibility: str) -> tuple[int, list[str], int]:
        """(NodeModifyIndex, EvalIDs, EvalCreateIndex) of Nomad's NodeEligibilityUpdateResponse."""
        if self.drain is not None and eligibility == ELIGIBLE:
            raise HttpError(400, "can not set node's scheduling eligibility to eligible while it is draining")
        node_index = self.api.changes.current(("node",))
        if eligibility == self.eligibility:
            return node_index, [], 0  # nothing to do, as Nomad's
        self.eligibility = eligibility
        message = EV_ELIGIBLE if eligibility == ELIGIBLE else EV_INELIGIBLE
        index = self.changed("node_eligibility", message, "Cluster")
        if eligibility != ELIGIBLE:
            return index, [], 0
        return (index, *self.became_eligible(index))

    def became_eligible(self, node_index: int) -> tuple[list[str], int]:
        """The node-update evaluations Nomad makes (its allocs' jobs, the system jobs), then every
        blocked evaluation unblocked: it places what it owed."""
        ids, at = self.node_evals()
        for job_id in list(self.owed):
            self._unblock(job_id)
        return ids, at

    def _unblock(self, job_id: str) -> None:
        entry = self.owed.pop(job_id)
        self.save()
        job = self.api.jobs.get(job_id)
        if job is None:
            return
        placed: list[str] = []
        try:
            self.api.allocs.check_static_ports(job, set(entry["groups"]))
            for group, count in sorted(entry["groups"].items()):
                if any(g.name == group for g in job.groups):
                    placed += [self._place(job, group) for _ in range(int(count))]
        except AgentError as exc:  # a static port held meanwhile: it stays owed, and says why
            log.warning("blocked evaluation of job %s not placed: %s", job_id, exc)
            self.owed[job_id] = entry
            self.save()
            return
        ev = self.api.evals.find(entry.get("eval") or "") if entry.get("eval") else None
        if ev is None:
            ev = self.api.evals.create(job_id, "queued-allocs", job.type, tuple(placed))
        else:
            ev = replace(ev, status="complete", placed=tuple(placed))
            self.api.evals.put(ev)
            self.api.changes.bump("eval", ev.id)
        for alloc_id in placed:
            self.api.runners[alloc_id].state.save(eval_id=ev.id)

    def _place(self, job: Job, group: str) -> str:
        """One alloc the blocked evaluation owes: a held reschedule's replacement, which carries the
        failed alloc's RescheduleTracker, else a new one."""
        failed = self.api.allocs.blocked_reschedule(job.id, group)
        if failed is not None and plan_blocked_reschedule_tracker(self.api.bugs):
            return self.api.allocs.place_replacement(failed, "the node takes new allocs again").id
        return self.api.allocs.new_alloc(job, group).id

    def node_evals(self) -> tuple[list[str], int]:
        """Nomad's createNodeEvals: one "node-update" evaluation per job with an alloc on the node
        that is not done (service: not stopped and terminal; batch: not terminal), and per system
        job that runs; (their IDs, the index of the last; 0 when none)."""
        jobs: dict[str, Job] = {}
        for r in self.api.runners.values():
            if r.job.type in SYSTEM_TYPES:
                continue
            if r.rec.live or (r.job.type == "service" and r.rec.desired is not DesiredStatus.STOP):
                jobs.setdefault(r.job.id, r.job)
        for job in self.api.jobs.values():
            if job.type == "system" and any(
                r.job.id == job.id and r.rec.desired is DesiredStatus.RUN for r in self.api.runners.values()
            ):
                jobs.setdefault(job.id, job)
        evals = [
            self.api.evals.create(j.id, "node-update", j.type, (), node_id=self.api.node.id)
            for j in jobs.values()
        ]
        return [e.id for e in evals], max((e.create_index for e in evals), default=0)

    # -- drain ---------------------------------------------------------------------------------
    def set_drain(
        self, spec: Mapping[str, Any] | None, mark_eligible: bool, meta: Mapping[str, str] | None
    ) -> tuple[int, list[str], int]:
        """(NodeModifyIndex, EvalIDs, EvalCreateIndex) of Nomad's NodeDrainUpdateResponse."""
        now = time.time()
        was_ineligible = self.eligibility == INELIGIBLE
        message = ""
        if spec is not None:
            deadline = int(spec["Deadline"])
            message = EV_DRAIN_SET if self.drain is None else EV_DRAIN_UPDATED
            started = self.drain["started"] if self.drain is not None else now
            self.drain = {
                "deadline": deadline,
                "ignore_system": bool(spec["IgnoreSystemJobs"]),
                "started": started,
                "force_deadline": now + deadline / 1e9 if deadline > 0 else 0.0,
            }
            self.eligibility = INELIGIBLE
            kept = (self.last_drain or {}).get("meta") if message == EV_DRAIN_UPDATED else None
            self.last_drain = {"started": started, "updated": now, "status": "draining", "meta": meta or kept}
        else:
            if self.drain is not None:
                message = EV_DRAIN_DISABLED
                self.drain = None
                last = self.last_drain or {"started": now, "meta": None}
                self.last_drain = {
                    **last,
                    "updated": now,
                    "status": "canceled",
                    "meta": meta or last.get("meta"),
                }
            if mark_eligible:
                self.eligibility = ELIGIBLE
        index = self.changed("node_drain", message, "Drain")
        ids: list[str] = []
        at = 0
        if was_ineligible and mark_eligible and spec is None:
            ids, at = self.became_eligible(index)
        if self.drain is not None:
            self.tick()
        return index, ids, at

    def tick(self) -> None:
        """One look of the drainer; again every DRAIN_TICK while the drain runs."""
        self.ticking = False
        d = self.drain
        if d is None:
            return
        now = time.time()
        live = [r for r in self.api.runners.values() if r.rec.live]
        others = [r for r in live if r.job.type not in SYSTEM_TYPES]
        system = [r for r in live if r.job.type in SYSTEM_TYPES and not d["ignore_system"]]
        if d["deadline"] < 0 or (d["force_deadline"] and now >= d["force_deadline"]):
            self._stop([r for r in others + system if r.rec.desired is DesiredStatus.RUN])
            self._complete({"deadline_reached": "true"})
            return
        by_group: dict[tuple[str, str], list[Any]] = {}
        for r in others:
            if r.job.type == "service":  # batch allocs are left to finish until the deadline
                by_group.setdefault((r.job.id, r.group.name), []).append(r)
        drain = []
        for runners in by_group.values():
            running = [r for r in runners if r.rec.desired is DesiredStatus.RUN]
            threshold = runners[0].group.count - MIGRATE_MAX_PARALLEL
            drain += running[: max(0, min(len(running), len(running) - threshold))]
        self._stop(drain)
        if not others:  # done: the system allocs go last, then the drain is complete
            self._stop([r for r in system if r.rec.desired is DesiredStatus.RUN])
            self._complete({})
            return
        if not self.ticking:
            self.ticking = True
            self.api.schedule(DRAIN_TICK, self.tick)

    def _stop(self, runners: list[Any]) -> None:
        """Stop the allocs as the drainer migrates them: nothing placed elsewhere (no other node);
        a service job's are owed to it (one "node-drain" evaluation, blocked, per job), a batch
        job's are not (its "node-drain" evaluation places nothing)."""
        bugs = self.api.bugs
        by_job: dict[str, dict[str, int]] = {}
        owed: set[str] = set()
        for r in runners:
            r.stop(DRAIN_STOP)
            if r.job.type not in SYSTEM_TYPES:
                groups = by_job.setdefault(r.job.id, {})
                groups[r.group.name] = groups.get(r.group.name, 0) + 1
                if plan_drained_alloc_owed(r.job.type, bugs):
                    owed.add(r.job.id)
        for job_id, groups in by_job.items():
            if job_id in owed:
                entry = self.owed.setdefault(job_id, {"groups": {}, "eval": ""})
                for g, n in groups.items():
                    entry["groups"][g] = int(entry["groups"].get(g, 0)) + n
                self.fresh[job_id] = groups
            self.api.evals.create(job_id, "node-drain", self.api.jobs[job_id].type, ())
        self.save()

    def _complete(self, details: Mapping[str, str]) -> None:
        """Nomad's NodesDrainComplete: the strategy cleared, LastDrain complete, still ineligible."""
        now = time.time()
        last = self.last_drain or {"started": now, "meta": None}
        self.last_drain = {**last, "updated": now, "status": "complete"}
        # The event first, then the strategy cleared (Nomad writes both in one apply): a reader of the
        # node (fields, then events) that sees the strategy gone sees the event too; the node's index
        # moves again after, so a blocking query woken in between reads the cleared strategy next.
        self.changed("node_drain", EV_DRAIN_COMPLETE, "Drain", details)
        self.drain = None
        self.changed("node_drain")


# -- the routes ----------------------------------------------------------------------------------------
def _body(body: bytes, allowed: frozenset[str]) -> dict[str, Any]:
    """The request's JSON object (Nomad's decodeBody), every key one Nomad's request has."""
    if not body.strip():
        raise HttpError(400, "Request body is empty")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise HttpError(400, f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HttpError(400, "the request body must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise HttpError(
            400,
            f"unknown field(s) {', '.join(repr(k[:64]) for k in unknown)}: "
            f"not one of {', '.join(sorted(allowed))}",
        )
    return data


def _typed(data: Mapping[str, Any], key: str, kind: type, where: str, default: Any) -> Any:
    value = data.get(key, default)
    if value is None:
        return default
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise HttpError(400, f"{where}{key}: an integer (nanoseconds), not {json.dumps(value)[:64]}")
    if kind is not int and not isinstance(value, kind):
        raise HttpError(400, f"{where}{key}: a {kind.__name__}, not {json.dumps(value)[:64]}")
    return value


def _drain_request(body: bytes) -> tuple[dict[str, Any] | None, bool, dict[str, str] | None]:
    data = _body(body, frozenset({"NodeID", "DrainSpec", "MarkEligible", "Meta"}))
    raw = data.get("DrainSpec")
    spec = None
    if raw is not None:
        if not isinstance(raw, dict):
            raise HttpError(
                400, "DrainSpec: an object {Deadline, IgnoreSystemJobs} or null (cancel the drain)"
            )
        unknown = sorted(set(raw) - {"Deadline", "IgnoreSystemJobs"})
        if unknown:
            raise HttpError(400, f"DrainSpec: unknown field(s) {', '.join(repr(k[:64]) for k in unknown)}")
        deadline = _typed(raw, "Deadline", int, "DrainSpec.", 0)
        if abs(deadline) > 2**63 - 1:
            raise HttpError(400, "DrainSpec.Deadline: out of the range of a Go time.Duration")
        spec = {
            "Deadline": deadline,
            "IgnoreSystemJobs": _typed(raw, "IgnoreSystemJobs", bool, "DrainSpec.", False),
        }
    mark = _typed(data, "MarkEligible", bool, "", False)
    meta = _typed(data, "Meta", dict, "", None)
    if meta is not None and not all(isinstance(v, str) for v in meta.values()):
        raise HttpError(400, "Meta: a map of strings")
    return spec, mark, meta


def node_verb_routes(api: NodeVerbPort) -> list[tuple[str, str, Handler]]:
    sched = NodeSchedule(api)
    api.node_fields = sched.fields
    api.server.hold = sched.hold
    api.evals.hook = sched
    if sched.drain is not None:  # a drain that ran when the agent stopped goes on
        api.schedule(0.0, sched.tick)

    def node_id(raw: str) -> None:
        if raw != api.node.id:
            raise NotFound("node not found")

    def reply(index: int, ids: list[str], at: int, **extra: Any) -> Response:
        meta_headers(index)
        return answer(
            {"NodeModifyIndex": index, "EvalIDs": ids or None, "EvalCreateIndex": at, **extra, "Index": index}
        )

    def eligibility(groups: tuple[str, ...], body: bytes) -> Response:
        data = _body(body, frozenset({"NodeID", "Eligibility"}))
        node_id(_typed(data, "NodeID", str, "", "") or groups[0])
        value = _typed(data, "Eligibility", str, "", "")
        if value not in (ELIGIBLE, INELIGIBLE):
            raise HttpError(
                400, f"invalid scheduling eligibility {value[:64]!r}: {ELIGIBLE!r} or {INELIGIBLE!r}"
            )
        return reply(*api.call(lambda: sched.set_eligibility(value)))

    def drain(groups: tuple[str, ...], body: bytes) -> Response:
        node_id(groups[0])
        spec, mark, meta = _drain_request(body)
        return reply(*api.call(lambda: sched.set_drain(spec, mark, meta)))

    def evaluate(groups: tuple[str, ...], body: bytes) -> Response:
        node_id(groups[0])

        def do() -> tuple[list[str], int, int]:
            ids, at = sched.node_evals()
            return ids, at, api.changes.current(("node",))

        ids, at, node_index = api.call(do)
        index = at or api.changes.current(("eval",))
        meta_headers(index)
        return answer(
            {
                "HeartbeatTTL": 0,
                "EvalIDs": ids or None,
                "EvalCreateIndex": at,
                "NodeModifyIndex": node_index,
                "Features": 0,
                "LeaderRPCAddr": "",
                "NumNodes": 1,
                "Servers": None,
                "SchedulingEligibility": sched.eligibility,
                "SignedIdentity": None,
                "Index": index,
                "LastContact": 0,
                "KnownLeader": True,
                "NextToken": "",
            }
        )

    rx = r"/v1/node/([^/]+)"
    return [
        (method, rx + suffix, handler)
        for suffix, handler in (("/eligibility", eligibility), ("/drain", drain), ("/evaluate", evaluate))
        for method in ("PUT", "POST")
    ]
