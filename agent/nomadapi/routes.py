"""Nomad's v1 HTTP API, as a one-node Nomad agent in dev mode answers it for its own node: the
jobs, evaluations, allocations and nodes endpoints (the agent, status and system ones are in
agent.nomadapi.agentroutes; the client endpoints, files and logs in agent.nomadapi.clientroutes).

Handlers are thin: they read the request in their own thread, gather plain data on the main loop
(`core.call`) and shape it with the pure views of agent.nomadapi.structs. Reads are blocking
queries (agent.nomadapi.http); writes answer an EvalID (agent.nomadapi.node.Evals).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from agent.api.server import Handler, Response, query_params
from agent.api.views import alloc_counts, job_status
from agent.core import Core
from agent.errors import AgentError, NotFound
from agent.identity.vaultlogin import with_implicit_identities
from agent.jobcodec import JobCodecError, decode_job
from agent.node.driverevents import NodeEvent, NodeEvents, driver_changes
from agent.nomadapi import structs
from agent.nomadapi.agentroutes import agent_routes
from agent.nomadapi.briefs import alloc_briefs
from agent.nomadapi.deploywatch import Deployments, written
from agent.nomadapi.http import (
    HttpError,
    answer,
    answer_list,
    blocking,
    check_scope,
    guard,
    meta_headers,
)
from agent.nomadapi.jobdiff import job_diff
from agent.nomadapi.node import Eval, Evals, NodeIdentity, eval_fields
from agent.nomadapi.usage import CpuSamples
from agent.state.store import Event

if TYPE_CHECKING:
    from agent.model import Job

NS = "default"
_JOB_KINDS = ("job", "alloc", "eval")
_ALLOC_KINDS = ("alloc",)


class NomadApi:
    """What the routes share: the core, this node and the evaluations."""

    def __init__(
        self,
        core: Core,
        node: NodeIdentity,
        *,
        driver_health: Any = None,
        agent_health: Callable[[], Response] | None = None,
        agent_stats: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.core = core
        self.node = node
        self.evals = Evals(core.changes, core.store)
        self.deployments = Deployments(core.changes, core.store)  # agent.nomadapi.deploywatch
        core.evaluate = lambda job, trigger, placed: self.evaluate(job.id, trigger, job.type, placed).id
        self.cpu_samples = CpuSamples()  # the last CPU sample per task, for the stats' percentages
        self.driver_health = driver_health  # () -> {driver: {"healthy", "detected", "description"}}
        # /v1/agent/health's answer (the daemon's: 500 while degraded), and Stats["fieldlab"] of
        # /v1/agent/self (this agent's health beyond Nomad's: Vault login, restore, sweeps)
        self.agent_health = agent_health or (lambda: answer(structs.health(True, "ok")))
        self.agent_stats = agent_stats or dict
        # The node's eligibility, drain strategy and last drain (agent.nomadapi.nodeverbs sets it)
        self.node_fields: Callable[[], dict[str, Any]] = dict
        index = core.changes.bump("node", node.id)  # registered: the Node topic's NodeRegistration
        self.node_events = NodeEvents()
        self.node_events.add(NodeEvent("Node registered", "Cluster", {}, time.time(), index))

    def drivers_checked(self, health: dict[str, dict[str, Any]]) -> None:
        """On the loop: the drivers' health as a periodic look found it; a change is a node event
        (NodeStreamEvent) and a node update (NodeRegistration), as Nomad's client reports one."""
        seen = self.node_events
        changes = driver_changes(seen.drivers, health) if seen.drivers is not None else []
        seen.drivers = health
        for driver, message in changes:
            self.core.changes.bump("node", self.node.id)
            index = self.core.changes.bump("node_event", self.node.id)
            seen.add(NodeEvent(message, "Driver", {"driver": driver}, time.time(), index))

    def evaluate(
        self, job_id: str, trigger: str, job_type: str, placed: tuple[str, ...] = (), *, priority: int = 50
    ) -> Eval:
        """On the loop: the evaluation of a write, kept as the EvalID of each alloc it placed (as
        Nomad's scheduler writes it into the allocs of its plan)."""
        ev = self.evals.create(job_id, trigger, job_type, placed, priority=priority)
        written(self.core, self.deployments, job_id)  # a new version's deployment, as Nomad's scheduler
        for alloc_id in placed:
            if (runner := self.core.runners.get(alloc_id)) is not None:
                runner.state.save(eval_id=ev.id)
        return ev

    # -- plain data, on the main loop --------------------------------------------------------
    def node_dict(self, *, stub: bool, resources: bool = False, os: bool = False) -> dict[str, Any]:
        """This node as Nomad's api.NodeListStub (stub; with `?resources=true`/`?os=true`'s fields
        when asked) or api.Node."""
        health = self.driver_health() if self.driver_health else {}
        drivers = {
            n: {"healthy": d["healthy"], "detected": True, "description": d["detail"]}
            for n, d in health.items()
        }
        facts = self.core.node  # what constraints are checked against (agent.placement)
        fields: dict[str, Any] = {
            "node_id": self.node.id,
            "name": self.node.name,
            "datacenter": self.node.datacenter,
            "address": self.node.http_addr,
            "drivers": drivers,
            "attributes": dict(facts.attributes),
            "meta": dict(facts.meta),
            "node_class": facts.node_class,
            "node_pool": facts.pool,
            "status": "ready",
            "create_index": self.core.changes.start,
            "modify_index": self.core.changes.current(("node",)),
            **self.node_fields(),
        }
        if stub:
            return structs.node_stub(**fields, with_resources=resources, with_os=os)
        events = [
            structs.node_event(e.message, e.subsystem, e.details, e.timestamp, e.index)
            for e in self.node_events.events
        ]
        return structs.node_json(**fields, host_volumes=dict(facts.host_volumes), events=events)

    def all_alloc_views(self, job_id: str = "") -> list[dict[str, Any]]:
        adopted = [v for v in self.core.adoption.views() if not job_id or v.get("job") == job_id]
        return self.core.alloc_views(job_id) + adopted

    def alloc_briefs(self) -> list[dict[str, Any]]:
        return alloc_briefs(self.core)

    def job_dict(self, job: Job, allocs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The job as Nomad's api.Job (on the loop: reads its record, and its allocs unless given)."""
        record = self.core.store.get("job", job.id) or {}
        if allocs is None:
            allocs = [a for a in self.alloc_briefs() if a.get("job") == job.id]
        index = self.core.changes.of("job", job.id)
        version, submit = int(record.get("version", 0)), float(record.get("submit_time") or 0.0)
        return structs.job_json(
            with_implicit_identities(job, self.core.deps.vault_jwt),
            region=self.node.region,
            namespace=NS,
            status=job_status(str(a.get("status", "")) for a in allocs),
            version=version,
            stable=self.deployments.stable(job.id, version, submit),
            submit_time=float(record.get("submit_time") or 0.0),
            create_index=index,
            modify_index=max([index, *(self.core.changes.of("alloc", a["id"]) for a in allocs)]),
            job_modify_index=index,
            stop=self.stopped(job.id),
        )

    def stopped(self, job_id: str) -> bool:
        """Nomad's Job.Stop: the job's last register or deregister was a deregister (`job stop`
        without -purge keeps the job, stopped, until it is registered again)."""
        writes = [e.triggered_by for e in self.evals.of_job(job_id) if e.triggered_by in _JOB_WRITES]
        return bool(writes) and writes[-1] == "job-deregister"

    def alloc_dict(
        self,
        view: Mapping[str, Any],
        *,
        stub: bool,
        job: dict[str, Any] | None = None,
        resources: bool = False,
        events: Sequence[Event] | None = None,  # the alloc's, when read already (else read here)
    ) -> dict[str, Any]:
        found = self.core.store.events(str(view["id"])) if events is None else events
        by_task = structs.events_by_task(found, list(view.get("tasks") or {}))
        index = self.core.changes.of("alloc", str(view["id"]))
        # Nomad never changes an alloc's CreateIndex; one written before records kept it reads as
        # the start of this run (it was made before it)
        create = int(view.get("create_index") or 0) or self.core.changes.start
        common: dict[str, Any] = {
            "events_by_task": by_task,
            "node_id": self.node.id,
            "node_name": self.node.name,
            "namespace": NS,
            "eval_id": str(view.get("eval_id") or ""),
            **self.deployment_of(str(view["id"])),
            "create_index": min(create, index),
            "modify_index": index,
            "alloc_modify_index": index,
            "modify_time": max(
                [float(view.get("created") or 0.0), *(e.time for v in by_task.values() for e in v)]
            ),
        }
        if stub:
            return structs.alloc_stub(view, with_resources=resources, **common)
        return structs.alloc_json(view, job=job, **common)

    def deployment_of(self, alloc_id: str) -> dict[str, Any]:
        """The alloc's DeploymentID and DeploymentStatus (agent.nomadapi.deploywatch)."""
        deployment_id, status = self.deployments.of_alloc(alloc_id)
        return {"deployment_id": deployment_id, "deployment_status": status}

    def alloc_dicts(
        self, views: list[dict[str, Any]], *, stub: bool, resources: bool = False
    ) -> Iterator[Any]:
        """Off the loop: the views (read on it) as Nomad's allocations, shaped one by one as they are
        encoded (`answer_list`), every alloc's events read now, in one go."""
        every = self.core.store.events_by_alloc() if len(views) > 1 else {}
        return (self.alloc_dict(v, stub=stub, resources=resources, events=every.get(v["id"])) for v in views)

    def summary(
        self, job_id: str, groups: Sequence[str], allocs: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        if allocs is None:
            allocs = [a for a in self.alloc_briefs() if a.get("job") == job_id]
        names = list(groups) + sorted({str(a.get("group")) for a in allocs} - set(groups))
        counts = {n: alloc_counts(a for a in allocs if a.get("group") == n) for n in names}
        index = self.core.changes.of("job", job_id)
        job = self.core.jobs.get(job_id)
        children = self.children(job_id) if job is not None and job.places_nothing else None
        return structs.job_summary(
            job_id, NS, counts, index, self.core.changes.current(_JOB_KINDS), children=children
        )

    def children(self, job_id: str) -> dict[str, int]:
        """api.JobChildrenSummary of a parameterized or periodic job: its child jobs by status."""
        kids = [j.id for j in self.core.jobs.values() if j.parent_id == job_id]
        by_job: dict[str, list[str]] = {}
        for a in self.alloc_briefs() if kids else ():
            by_job.setdefault(str(a.get("job")), []).append(str(a.get("status", "")))
        statuses = [job_status(by_job.get(k, [])) for k in kids]
        return {
            "Pending": statuses.count("pending"),
            "Running": statuses.count("running"),
            "Dead": statuses.count("dead"),
        }

    def job_versions(self, job_id: str) -> list[dict[str, Any]]:
        """On the loop: the job now, then the versions it kept before (newest first), as api.Job."""
        current = self.job_dict(self.job_or_404(job_id))
        out = [current]
        for h in (self.core.store.get("job", job_id) or {}).get("history") or []:
            try:
                old = decode_job(h.get("canonical"))
            except JobCodecError:
                continue  # a version of another model: not shown rather than shown wrong
            out.append(
                {
                    **current,
                    **structs.job_json(
                        with_implicit_identities(old, self.core.deps.vault_jwt),
                        region=self.node.region,
                        namespace=NS,
                        status=current["Status"],
                        version=int(h.get("version", 0)),
                        stable=self.deployments.stable(
                            job_id, int(h.get("version", 0)), float(h.get("submit_time") or 0.0)
                        ),
                        submit_time=float(h.get("submit_time") or 0.0),
                        create_index=current["CreateIndex"],
                        modify_index=current["CreateIndex"],
                        job_modify_index=current["CreateIndex"],
                    ),
                }
            )
        return out

    def job_or_404(self, job_id: str) -> Job:
        job = self.core.jobs.get(job_id)
        if job is None:
            raise NotFound("job not found")
        return job


_JOB_WRITES = ("job-register", "job-deregister")  # the evaluations of a register and a `job stop`


def _job_id(raw: str) -> str:
    job_id = unquote(raw)
    if not job_id or len(job_id) > 128:
        raise HttpError(400, "missing job ID" if not job_id else f"job ID {job_id[:64]!r}...: too long")
    return job_id


def _prefix(params: Mapping[str, str]) -> str:
    return params.get("prefix", "")


def _reverse(params: Mapping[str, str]) -> bool:
    """Nomad's `?reverse=true` (command/agent/http.go parseReverse: exactly "true")."""
    return params.get("reverse") == "true"


def listing_order(
    items: Sequence[Any],
    *,
    by_id: bool,
    reverse: bool,
    id_of: Callable[[Any], str],
    create_of: Callable[[Any], int],
) -> list[Any]:
    """The order of Nomad's alloc and eval lists (nomad/state: a prefix query walks the ID index,
    otherwise the namespace's create index, CreateIndex then ID), `reverse` walking it backwards."""
    key: Callable[[Any], Any] = id_of if by_id else (lambda x: (create_of(x), id_of(x)))
    return sorted(items, key=key, reverse=reverse)


def build_nomad_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    """Every Nomad route this agent serves (method, path regex, handler), errors as Nomad's."""
    from agent.nomadapi.clientroutes import client_routes
    from agent.nomadapi.deployments import deployment_routes
    from agent.nomadapi.events import event_stream
    from agent.nomadapi.jobdispatch import job_dispatch_routes
    from agent.nomadapi.jobplan import job_plan_routes
    from agent.nomadapi.jobscale import job_scale_routes
    from agent.nomadapi.jobwrites import job_write_routes
    from agent.nomadapi.nodeverbs import node_verb_routes
    from agent.nomadapi.services import service_routes
    from agent.nomadapi.variables import variable_routes

    table = [
        *agent_routes(api),
        *job_plan_routes(api),
        *job_scale_routes(api),
        *job_write_routes(api),
        *_job_routes(api),
        *_alloc_routes(api),
        *client_routes(api),
        ("GET", r"/v1/event/stream", event_stream(api)),
        *service_routes(api),
        *variable_routes(api),
        *node_verb_routes(api),
        *job_dispatch_routes(api),
        *deployment_routes(api),
    ]
    return [(m, rx, guard(h)) for m, rx, h in job_ids_with_slashes(table)]


_ONE_JOB = r"/v1/job/([^/]+)"


def job_ids_with_slashes(table: Sequence[tuple[str, str, Handler]]) -> list[tuple[str, str, Handler]]:
    """Nomad's /v1/job/ routes as its JobSpecificRequest reads them: a job's ID is everything before
    the route's suffix (`/allocations`, `/dispatch/payload`, ...), slashes included, so the child jobs
    of a dispatch or a periodic launch (`<parent>/dispatch-...`) are addressed as any job; the bare
    `/v1/job/<id>` is tried after every suffix."""
    suffixed, bare, rest = [], [], []
    for m, rx, h in table:
        if rx == _ONE_JOB:
            bare.append((m, r"/v1/job/(.+)", h))
        elif rx.startswith(_ONE_JOB + "/") and "(" not in rx[len(_ONE_JOB) :]:
            suffixed.append((m, r"/v1/job/(.+)" + rx[len(_ONE_JOB) :], h))
        else:
            rest.append((m, rx, h))
    return [*rest, *suffixed, *bare]


# -- jobs and evaluations --------------------------------------------------------------------------
def _job_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    core = api.core

    def jobs(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        prefix = _prefix(params)
        reverse = _reverse(params)  # Nomad lists jobs by ID (Job.List: JobsByNamespace)

        def read() -> list[dict[str, Any]]:
            by_job: dict[str, list[dict[str, Any]]] = {}
            for a in api.alloc_briefs():  # once, not once per job
                by_job.setdefault(str(a.get("job")), []).append(a)
            out = []
            for job_id in sorted(core.jobs, reverse=reverse):
                if job_id.startswith(prefix):
                    spec, allocs = core.jobs[job_id], by_job.get(job_id, [])
                    job = api.job_dict(spec, allocs)
                    summary = api.summary(job_id, [g.name for g in spec.groups], allocs)
                    out.append(structs.job_stub(job, status=job["Status"], summary=summary))
            return out

        return answer(blocking(core.changes, _JOB_KINDS, lambda: core.call(read)))

    def job(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        job_id = _job_id(groups[0])
        return answer(
            blocking(
                core.changes, _JOB_KINDS, lambda: core.call(lambda: api.job_dict(api.job_or_404(job_id)))
            )
        )

    def job_allocs(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        job_id = _job_id(groups[0])

        def read() -> list[dict[str, Any]]:
            views = core.call(lambda: api.all_alloc_views(job_id))
            return [api.alloc_dict(v, stub=True) for v in views]  # events read here, off the loop

        return answer(blocking(core.changes, _ALLOC_KINDS, read))

    def summary(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = _job_id(groups[0])
        return answer(
            blocking(
                core.changes,
                _JOB_KINDS,
                lambda: core.call(
                    lambda: api.summary(job_id, [g.name for g in api.job_or_404(job_id).groups])
                ),
            )
        )

    def versions(groups: tuple[str, ...], body: bytes) -> Response:
        """`?diffs=true`: Diffs[i] is Versions[i+1] -> Versions[i] (agent.nomadapi.jobdiff)."""
        job_id = _job_id(groups[0])
        versions = blocking(core.changes, _JOB_KINDS, lambda: core.call(lambda: api.job_versions(job_id)))
        index = core.changes.current(_JOB_KINDS)
        diffs = None
        if query_params().get("diffs") == "true":
            diffs = [job_diff(versions[i + 1], versions[i]) for i in range(len(versions) - 1)]
        return answer(
            {"Versions": versions, "Diffs": diffs, "Index": index, "LastContact": 0, "KnownLeader": True}
        )

    def job_evals(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = _job_id(groups[0])
        return answer(
            blocking(
                core.changes,
                ("eval",),
                lambda: [
                    structs.evaluation(**eval_fields(e), namespace=NS) for e in api.evals.of_job(job_id)
                ],
            )
        )

    def evaluations(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        prefix = _prefix(params)

        def read() -> list[dict[str, Any]]:
            found = listing_order(
                [e for e in api.evals.all() if e.id.startswith(prefix)],
                by_id=bool(prefix),
                reverse=_reverse(params),
                id_of=lambda e: e.id,
                create_of=lambda e: e.create_index,
            )
            return [structs.evaluation(**eval_fields(e), namespace=NS) for e in found]

        return answer(blocking(core.changes, ("eval",), read))

    def evaluation(groups: tuple[str, ...], body: bytes) -> Response:
        def read() -> dict[str, Any]:
            ev = api.evals.find(unquote(groups[0]))
            if ev is None:
                raise NotFound("eval not found")
            return structs.evaluation(**eval_fields(ev), namespace=NS)

        return answer(blocking(core.changes, ("eval",), read))

    def eval_allocs(groups: tuple[str, ...], body: bytes) -> Response:
        ev = api.evals.find(unquote(groups[0]))
        if ev is None:
            raise NotFound("eval not found")
        return answer(
            blocking(
                core.changes,
                _ALLOC_KINDS,
                lambda: [
                    api.alloc_dict(v, stub=True)
                    for v in core.call(lambda: api.all_alloc_views(ev.job_id))
                    if v.get("eval_id") == ev.id  # the allocs whose EvalID it is, as Nomad's
                ],
            )
        )

    job_rx = r"/v1/job/([^/]+)"
    return [
        ("GET", r"/v1/jobs", jobs),
        ("GET", job_rx, job),
        ("GET", job_rx + "/allocations", job_allocs),
        ("GET", job_rx + "/summary", summary),
        ("GET", job_rx + "/versions", versions),
        ("GET", job_rx + "/submission", _job_submission(api)),
        ("GET", job_rx + "/evaluations", job_evals),
        ("GET", r"/v1/evaluations", evaluations),
        ("GET", r"/v1/evaluation/([^/]+)", evaluation),
        ("GET", r"/v1/evaluation/([^/]+)/allocations", eval_allocs),
    ]


def _job_submission(api: NomadApi) -> Handler:
    """`GET /v1/job/:id/submission?version=N`: the jobspec as submitted (`nomad job inspect -hcl`),
    kept for the job's current version; 404 "job source not found" for any other, as Nomad."""
    core = api.core

    def submission(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region)
        job_id = _job_id(groups[0])
        raw = params.get("version", "")
        if not raw.isdigit() or len(raw) > 19:
            raise HttpError(400, "Unable to parse job submission version parameter")

        def read() -> dict[str, Any]:
            record = core.store.get("job", job_id) if job_id in core.jobs else None
            if record is None or int(record.get("version", 0)) != int(raw) or not record.get("source"):
                raise NotFound("job source not found")
            return structs.job_submission(
                str(record["source"]), record.get("format"), record.get("variables") or {}
            )

        return answer(blocking(core.changes, ("job",), lambda: core.call(read)))

    return submission


# -- allocations and nodes ------------------------------------------------------------------------
def _alloc_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    core = api.core

    def allocs(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        prefix = _prefix(params)
        # `?resources=true`: each stub with its AllocatedResources (Nomad's list_allocations)
        resources = params.get("resources", "false").lower() in ("true", "1")
        start = core.changes.start  # the CreateIndex of an alloc whose record did not keep one

        def views() -> list[dict[str, Any]]:
            return listing_order(
                [v for v in core.call(api.all_alloc_views) if str(v["id"]).startswith(prefix)],
                by_id=bool(prefix),
                reverse=_reverse(params),
                id_of=lambda v: str(v["id"]),
                create_of=lambda v: int(v.get("create_index") or 0) or start,
            )

        return answer_list(
            blocking(
                core.changes,
                _ALLOC_KINDS,
                lambda: api.alloc_dicts(views(), stub=True, resources=resources),
            )
        )

    def alloc(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        ref = unquote(groups[0])

        def gather() -> tuple[dict[str, Any], dict[str, Any] | None]:
            adopted = core.adoption.find(ref)
            if adopted is not None:
                view = adopted.view()
                job = core.jobs.get(str(view.get("job")))
                return view, api.job_dict(job) if job is not None else None
            runner = _find_alloc(core, ref)  # its Job is the version it was placed for, as Nomad's
            view = runner.view()
            return view, {**api.job_dict(runner.job), "Version": runner.rec.job_version}

        def read() -> dict[str, Any]:
            view, job = core.call(gather)
            return api.alloc_dict(view, stub=False, job=job)

        return answer(blocking(core.changes, _ALLOC_KINDS, read))

    def stop(groups: tuple[str, ...], body: bytes) -> Response:
        ref = unquote(groups[0])

        def do() -> Eval:
            adopted = core.adoption.find(ref)
            if adopted is not None:
                core.stop_alloc(adopted.id)
                return api.evals.create(adopted.job, "alloc-stop", "service")
            r = _find_alloc(core, ref)
            new = core.stop_and_replace(r.id)
            return api.evaluate(r.job.id, "alloc-stop", r.job.type, (new,) if new else ())

        ev = core.call(do)
        index = core.changes.current()
        meta_headers(index)
        return answer({"EvalID": ev.id, "Index": index})

    def nodes(groups: tuple[str, ...], body: bytes) -> Response:
        from agent.nomadapi.jobwrites import _go_bool

        params = query_params()
        prefix = _prefix(params)
        # Nomad's NodeStubFields (command/agent/http.go parseNodeListStubFields)
        resources, os = _go_bool(params, "resources"), _go_bool(params, "os")
        out = blocking(
            core.changes,
            ("node",),
            lambda: (
                [api.node_dict(stub=True, resources=resources, os=os)]
                if api.node.id.startswith(prefix)
                else []
            ),
        )
        return answer(out)

    def node(groups: tuple[str, ...], body: bytes) -> Response:
        if not api.node.id.startswith(unquote(groups[0])) or not groups[0]:
            raise NotFound("node not found")
        return answer(blocking(core.changes, ("node",), lambda: api.node_dict(stub=False)))

    def node_allocs(groups: tuple[str, ...], body: bytes) -> Response:
        if unquote(groups[0]) != api.node.id:
            raise NotFound("node not found")
        return answer_list(
            blocking(
                core.changes,
                _ALLOC_KINDS,
                lambda: api.alloc_dicts(core.call(api.all_alloc_views), stub=False),
            )
        )

    return [
        ("GET", r"/v1/allocations", allocs),
        ("GET", r"/v1/allocation/([^/]+)", alloc),
        ("PUT", r"/v1/allocation/([^/]+)/stop", stop),
        ("POST", r"/v1/allocation/([^/]+)/stop", stop),
        ("GET", r"/v1/nodes", nodes),
        ("GET", r"/v1/node/([^/]+)", node),
        ("GET", r"/v1/node/([^/]+)/allocations", node_allocs),
    ]


def _find_alloc(core: Core, ref: str) -> Any:
    if len(ref) < 2:
        raise HttpError(400, f"alloc ID {ref!r}: give the ID, or a prefix of at least 2 characters")
    try:
        return core.alloc(ref)
    except NotFound:
        raise NotFound("alloc not found") from None
    except AgentError as exc:  # a prefix more than one alloc has
        raise HttpError(400, str(exc)) from None
