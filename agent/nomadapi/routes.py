"""Nomad's v1 HTTP API, as a one-node Nomad agent in dev mode answers it for its own node: the
routes' shared context (NomadApi: the core, this node, the evaluations and deployments, and the
views of jobs, allocs and the node every resource shapes its answers with) and the route table,
composed of one route module per resource as Nomad's command/agent/*_endpoint.go:

    agentroutes (agent, status, regions, system)   jobs, jobwrites, jobplan, jobscale, jobdispatch
    evaluations   allocations   clientroutes (a client's allocs)   clientfs (files and logs)
    nodes, nodeverbs   deployments   scaling (policies)   services   variables   events

Each route module takes the narrow port it reads (agent.nomadapi.context), never this module.
Handlers are thin: they read the request in their own thread, gather plain data on the main loop
(`core.call`) and shape it with the pure views of agent.nomadapi.structs. Reads are blocking
queries (agent.nomadapi.http); writes answer an EvalID (agent.nomadapi.node.Evals).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from agent.api.handler import Handler, Response
from agent.api.views import alloc_counts, job_status
from agent.client.allocs import AllocRegistry, ServerHooks
from agent.client.core import Core
from agent.client.jobs import JobRegistry
from agent.drivers.registry import DriverRegistry
from agent.errors import NotFound
from agent.fieldbugs.bugs import Bugs
from agent.identity.vaultlogin import with_implicit_identities
from agent.jobspec import Limits
from agent.node.driverevents import NodeEvent, NodeEvents, driver_changes
from agent.node.gc import GarbageCollector
from agent.nomadapi import structs
from agent.nomadapi.agentroutes import agent_routes
from agent.nomadapi.allocations import alloc_routes
from agent.nomadapi.briefs import alloc_briefs
from agent.nomadapi.clientfs import fs_routes
from agent.nomadapi.clientroutes import client_routes
from agent.nomadapi.context import JOB_KINDS, NS
from agent.nomadapi.deployments import deployment_routes
from agent.nomadapi.deploywatch import Deployments, written
from agent.nomadapi.evaluations import eval_routes
from agent.nomadapi.events import event_stream
from agent.nomadapi.http import answer, guard
from agent.nomadapi.jobdispatch import job_dispatch_routes
from agent.nomadapi.jobplan import job_plan_routes
from agent.nomadapi.jobs import job_routes
from agent.nomadapi.jobscale import job_scale_routes
from agent.nomadapi.jobwrites import job_write_routes
from agent.nomadapi.node import Eval, Evals, NodeIdentity
from agent.nomadapi.nodes import node_routes
from agent.nomadapi.nodeverbs import node_verb_routes
from agent.nomadapi.scaling import scaling_routes
from agent.nomadapi.services import service_routes
from agent.nomadapi.usage import CpuSamples
from agent.nomadapi.variables import variable_routes
from agent.runner.adopt import Adoption
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.state import StateStore
from agent.state.changes import ChangeIndex
from agent.state.store import Event
from agent.structs.jobcodec import JobCodecError, decode_job
from agent.structs.model import Job

T = TypeVar("T")


class NomadApi:
    """What the routes share: the core, this node, the evaluations and deployments, and the views
    of jobs, allocs and the node; each route module reads it through its narrow port
    (agent.nomadapi.context), which this satisfies by its fields and methods."""

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
        core.server.evaluate = lambda job, trigger, placed: (
            self.evaluate(job.id, trigger, job.type, placed).id
        )
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

    # -- the core's parts the route modules read (agent.nomadapi.context), lent from the core ------
    def call(self, fn: Callable[[], T], timeout: float = 120.0) -> T:
        return self.core.call(fn, timeout)

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.core.schedule(delay, fn)

    @property
    def changes(self) -> ChangeIndex:
        return self.core.changes

    @property
    def store(self) -> StateStore:
        return self.core.store

    @property
    def jobs(self) -> dict[str, Job]:
        return self.core.jobs

    @property
    def job_registry(self) -> JobRegistry:
        return self.core.job_registry

    @property
    def allocs(self) -> AllocRegistry:
        return self.core.allocs

    @property
    def runners(self) -> dict[str, AllocRunner]:
        return self.core.runners

    @property
    def adoption(self) -> Adoption:
        return self.core.adoption

    @property
    def deps(self) -> RunnerDeps:
        return self.core.deps

    @property
    def drivers(self) -> DriverRegistry:
        return self.core.drivers

    @property
    def collector(self) -> GarbageCollector:
        return self.core.collector

    @property
    def limits(self) -> Limits:
        return self.core.limits

    @property
    def bugs(self) -> Bugs:
        return self.core.bugs

    @property
    def server(self) -> ServerHooks:
        return self.core.server

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
        written(self, self.deployments, job_id)  # a new version's deployment, as Nomad's scheduler
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
        facts = self.core.node  # what constraints are checked against (agent.decide.placement)
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
            "node_networks": [n.json() for n in facts.node_networks],
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
        host_networks = {h.name: h.json() for h in facts.host_network_config}
        return structs.node_json(
            **fields, host_volumes=dict(facts.host_volumes), host_networks=host_networks, events=events
        )

    def all_alloc_views(self, job_id: str = "") -> list[dict[str, Any]]:
        adopted = [v for v in self.core.adoption.views() if not job_id or v.get("job") == job_id]
        return self.core.allocs.views(job_id) + adopted

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
            job_id, NS, counts, index, self.core.changes.current(JOB_KINDS), children=children
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


def build_nomad_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    """Every Nomad route this agent serves (method, path regex, handler), errors as Nomad's."""
    table = [
        *agent_routes(api),
        *job_plan_routes(api),
        *job_scale_routes(api),
        *job_write_routes(api),
        *job_routes(api),
        *eval_routes(api),
        *alloc_routes(api),
        *node_routes(api),
        *client_routes(api),
        *fs_routes(api),
        ("GET", r"/v1/event/stream", event_stream(api)),
        *service_routes(api),
        *variable_routes(api),
        *node_verb_routes(api),
        *job_dispatch_routes(api),
        *scaling_routes(api),
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
