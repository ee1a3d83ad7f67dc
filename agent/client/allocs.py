"""The alloc registry: every alloc runner of this run by its id, on the main loop. It places an
alloc (its ports, its record, its runner started), finds one by id or prefix (a runner, or a
terminal alloc of an earlier run read from the store), lists them, hands a driver's exit report to
its runner, and places a failed alloc's replacement when its reschedule policy owes one (Nomad's
scheduler, on the only node there is). Adopted allocs (agent.runner.adopt) are stopped here too.

What Nomad's server would decide (the evaluation of a placement, whether the node takes new
allocs) comes in through `ServerHooks`, set when Nomad's API is served (agent.nomadapi).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.client.loop import Loop
from agent.client.restore import LIVE_STATUSES
from agent.decide.jobupdate import UpdatePlan
from agent.decide.placement import NodeFacts
from agent.decide.reschedule import carried_reschedule_events, plan_reschedule
from agent.errors import AgentError, Conflict, NotFound
from agent.fieldbugs.killpoints import KillHook
from agent.node.gc import TERMINAL_STATUSES
from agent.node.hostnetworks import alias_addresses, parse_port_ranges
from agent.runner.adopt import Adoption
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.runner.stored import stored_runner, terminal_views
from agent.state import CorruptRecordError, StateStore
from agent.state.changes import ChangeIndex
from agent.structs import layout
from agent.structs.model import Job
from agent.structs.records import (
    AllocRecord,
    AllocStatus,
    DesiredStatus,
    PortAlloc,
    RescheduleEvent,
    one_by_prefix,
)

log = logging.getLogger(__name__)

DYNAMIC_PORTS = range(20000, 32000)
STOP_POLL = 0.05  # seconds between looks at allocs being stopped (await_stopped)


@dataclass
class ServerHooks:
    """What Nomad's server decides, when Nomad's API is served; None: the agent alone decides."""

    # On the loop (agent.nomadapi.node.Evals): the evaluation of a placement the agent makes on its
    # own (a failed alloc's replacement), (job, triggered by, placed alloc ids) -> its ID, kept as
    # the alloc's EvalID.
    evaluate: Callable[[Job, str, tuple[str, ...]], str] | None = None
    # (agent.nomadapi.nodeverbs): True when the node takes no new allocs (ineligible, draining); it
    # then keeps what the job (or the update `plan`) would place, owed.
    hold: Callable[[Job, UpdatePlan | None], bool] | None = None


class AllocRegistry:
    def __init__(
        self,
        loop: Loop,
        store: StateStore,
        deps: RunnerDeps,
        changes: ChangeIndex,
        jobs: Mapping[str, Job],
        node: NodeFacts,
        adoption: Adoption,
        server: ServerHooks,
        *,
        kill_point: KillHook,
        sweep: Callable[[], object],
    ) -> None:
        self.loop = loop
        self.store = store
        self.deps = deps
        self.changes = changes
        self.jobs = jobs  # the job registry's jobs, read only (a stored alloc's job)
        self.node = node
        self.adoption = adoption
        self.server = server
        self.kill_point = kill_point
        self._sweep = sweep  # after adopted allocs are stopped: what they leave (netns, CNI)
        self.runners: dict[str, AllocRunner] = {}

    # -- task exits ----------------------------------------------------------------------------
    def report_exit(self, alloc_id: str, handle_id: str) -> None:
        """Called from a driver's thread: the exit is handled on the main loop."""
        self.loop.post(lambda: self._task_exited(alloc_id, handle_id))

    def _task_exited(self, alloc_id: str, handle_id: str) -> None:
        runner = self.runners.get(alloc_id)
        if runner is not None:
            runner.on_task_exit(handle_id)

    # -- lookups and listings ------------------------------------------------------------------
    def runner(self, alloc_id: str) -> AllocRunner:
        """A runner of this run to act on, by id or prefix."""
        return self.runners[one_by_prefix(alloc_id, self.runners)]

    def alloc(self, ref: str) -> AllocRunner:
        """An alloc to read (its view, events, logs) by id or prefix: every one `views` lists.
        A runner of this run, or a terminal alloc of an earlier run read from the store (a restarted
        agent keeps no runner for it). Whatever acts on an alloc goes through `runner`."""
        terminal = {row.key for row in self.store.index("alloc", TERMINAL_STATUSES)} - set(self.runners)
        alloc_id = one_by_prefix(ref, (*self.runners, *terminal))
        if alloc_id in self.runners:
            return self.runners[alloc_id]
        try:
            raw = self.store.get("alloc", alloc_id)
            stored = stored_runner(self.deps, self.store, self.jobs, alloc_id, raw)
        except CorruptRecordError:  # not listed either
            stored = None
        if stored is None:
            raise NotFound(f"no alloc {ref}")
        return stored

    def views(self, job_id: str = "") -> list[dict[str, Any]]:
        """Every alloc listed: the runners', the terminal ones not collected (`job_id`'s only)."""
        views = [r.view() for r in self.runners.values() if not job_id or r.rec.job == job_id]
        return views + terminal_views(self.store, self.jobs, self.runners, job_id)

    def live(self) -> set[str]:
        return {a for a, r in self.runners.items() if r.rec.live}

    def recorded(self) -> set[str]:
        """Every alloc with a record (live or terminal): its alloc dir waits for the GC."""
        return {row.key for row in self.store.index("alloc", (*LIVE_STATUSES, *TERMINAL_STATUSES))}

    def busy(self) -> list[str]:
        """On the loop: allocs with a step off the loop or operations waiting behind one."""
        return [a for a, r in self.runners.items() if r.serial.busy or r.serial.waiting]

    def running(self, job_id: str) -> list[AllocRunner]:
        """The job's allocs that run and are meant to (oldest first)."""
        return sorted(
            (
                r
                for r in self.runners.values()
                if r.job.id == job_id and r.rec.live and r.rec.desired is DesiredStatus.RUN
            ),
            key=lambda r: r.rec.created,
        )

    def await_stopped(self, alloc_ids: list[str], timeout: float) -> list[str]:
        """From an API thread: wait (polling the loop) until the allocs are stopped, as the tasks'
        stops run off the loop; the ids still stopping when `timeout` ran out."""
        deadline = time.monotonic() + timeout

        def stopping() -> list[str]:
            return [a for a in alloc_ids if a in self.runners and self.runners[a].rec.live]

        while (left := self.loop.call(stopping)) and time.monotonic() < deadline:
            self.loop.stopping.wait(STOP_POLL)
        return left

    # -- placement -----------------------------------------------------------------------------
    def check_static_ports(self, job: Job, groups: set[str] | None = None) -> None:
        """Conflict when a static port the job's groups (`groups` only) ask for is held."""
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

    def new_alloc(
        self,
        job: Job,
        group_name: str,
        replaces: str = "",
        reschedule_events: tuple[RescheduleEvent, ...] = (),
    ) -> AllocRunner:
        """An alloc of the job's group placed on this node: its ports, its record, its runner started."""
        group = next(g for g in job.groups if g.name == group_name)
        used = {p.host for r in self.runners.values() if r.rec.live for p in r.rec.ports}
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

    # -- a failed alloc's replacement ----------------------------------------------------------
    def replace(self, failed: AllocRunner, reason: str) -> None:
        """A failed alloc rescheduled on this node as Nomad's scheduler does when no other node fits
        (agent.decide.reschedule.plan_reschedule over its group's policy and its reschedules so far): placed
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
        evaluate = self.server.evaluate
        if not plan.now and evaluate is not None:  # Nomad's "alloc-failure" places nothing yet
            evaluate(failed.job, "alloc-failure", ())
            failed.state.save(followup_eval_id=evaluate(failed.job, "alloc-reschedule", ()))
        self.resume_reschedule(failed, reason)

    def resume_reschedule(self, failed: AllocRunner, reason: str) -> None:
        """The owed replacement of `failed` started when its reschedule is due (at once when it is)."""
        delay = max(0.0, failed.rec.reschedule_due - time.time())
        self.loop.schedule(delay, functools.partial(self._start_replacement, failed, reason))

    def _start_replacement(self, failed: AllocRunner, reason: str) -> None:
        """The replacement owed to a failed alloc (its record says `replace_pending` until this is
        written, so a kill before it leaves it to the next restore). On a node that takes no new
        allocs (ServerHooks.hold) it is owed to the job instead, as Nomad's blocked evaluation."""
        if failed.rec.desired is DesiredStatus.STOP or failed.rec.replaced_by:
            failed.state.save(replace_pending=False)  # its job was stopped meanwhile, or done already
            return
        group = failed.group.name
        evaluate, hold = self.server.evaluate, self.server.hold
        if hold is not None and hold(failed.job, UpdatePlan((), {group: 1}, {}, ())):
            failed.state.save(replace_pending=False)
            if evaluate is not None:  # its FailedTGAllocs and the blocked evaluation
                evaluate(failed.job, "alloc-failure", ())
            failed.event("", "Reschedule Blocked", f"{reason}: the node takes no new allocs")
            return
        self.kill_point("replace.after-fail-before-new-alloc")
        new = self.place_replacement(failed, reason)
        if failed.rec.followup_eval_id:  # placed by the follow-up evaluation
            new.state.save(eval_id=failed.rec.followup_eval_id)
        elif evaluate is not None:  # Nomad's server evaluates a failed alloc ("alloc-failure")
            new.state.save(eval_id=evaluate(failed.job, "alloc-failure", (new.id,)))

    def place_replacement(self, failed: AllocRunner, reason: str) -> AllocRunner:
        """The replacement of `failed`, carrying its RescheduleTracker (the failed alloc's reschedules
        within the policy's interval and this one) and PreviousAllocation."""
        now = time.time()
        event = RescheduleEvent(now, failed.id, self.node.id, failed.rec.reschedule_delay)
        carried = carried_reschedule_events(failed.group.reschedule, failed.rec.reschedule_events, now)
        new = self.new_alloc(
            failed.job, failed.group.name, replaces=failed.id, reschedule_events=(*carried, event)
        )
        self.kill_point("replace.after-new-alloc-before-record")
        failed.state.save(replaced_by=new.id, replace_pending=False)
        failed.event("", "Replaced", f"replaced by alloc {new.id}: {reason}")
        return new

    def blocked_reschedule(self, job_id: str, group: str) -> AllocRunner | None:
        """The oldest failed alloc of the job's group whose reschedule was planned and then held by a
        node that took no new allocs (ServerHooks.hold): the blocked evaluation's placement replaces
        it. Not one a job stop dropped the reschedule of (its DesiredStatus stop)."""
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

    # -- stops ---------------------------------------------------------------------------------
    def stop_adopted(self, alloc_ids: list[str]) -> list[str]:
        """Stop and remove adopted allocs (agent.runner.adopt); then sweep what they leave (netns, CNI)."""
        stopped = [a for a in alloc_ids if not self.adoption.stop(a)]

        def sweep_after() -> None:
            self._sweep()

        if stopped:
            self.loop.schedule(0.0, sweep_after)
        return stopped

    def stop_alloc(self, alloc_id: str) -> list[str]:
        """POST /v1/allocation/<id>/stop: for an adopted alloc (no jobspec, so no other way to end it)."""
        adopted = self.adoption.find(alloc_id)
        if adopted is None:
            r = self.runner(alloc_id)
            raise Conflict(f"alloc {r.id} is managed: stop its job (fieldlab-agent job stop {r.job.id})")
        if not self.stop_adopted([adopted.id]):
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
        new = self.new_alloc(r.job, r.group.name, replaces=r.id)
        r.state.save(replaced_by=new.id)
        r.event("", "Replaced", f"stopped on request (alloc stop): replaced by alloc {new.id}")
        return new.id
