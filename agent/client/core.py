"""The agent's core: the composition the daemon wires (agent.command.wiring). One main loop
(agent.client.loop) owns every alloc runner: the API, the drivers' exit reports and timers only put
work on its queue, so no two changes to an alloc ever race.

It composes the loop, the alloc registry (agent.client.allocs: runners by id, placement, a failed
alloc's replacement, adopted allocs' stops) and the job registry (agent.client.jobs: register,
update, stop), and keeps the node's housekeeping: the orphan sweeps here, the startup restore
(agent.client.restore, `restorer`) and the GC of terminal allocs (agent.node.gc, `collector`).
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import replace
from pathlib import Path

from agent.client.allocs import AllocRegistry, ServerHooks
from agent.client.jobs import JobRegistry
from agent.client.loop import Loop
from agent.client.offload import Offload, threaded
from agent.client.restore import Restore
from agent.client.taskenv import node_table
from agent.command.config import DEFAULT_TOKEN_ROLE
from agent.consul.catalog import ConsulClient, ConsulData
from agent.decide.decisions import GcLimits, plan_orphan_sweep
from agent.decide.placement import NodeFacts
from agent.drivers.registry import DriverRegistry
from agent.fieldbugs.faults import Faults
from agent.fieldbugs.killpoints import KillHook, sigkill_at
from agent.getter.getter import ArtifactGetter, HttpGetter
from agent.identity.vaultlogin import VaultJwt
from agent.jobspec import DEFAULT_LIMITS, Limits
from agent.network.base import Network
from agent.node.gc import GarbageCollector, alloc_fs_usage
from agent.node.nodeinfo import node_attributes
from agent.node.sweeper import Sweeper, SweepReport
from agent.runner.adopt import Adoption, node_of
from agent.runner.deps import RunnerDeps
from agent.runner.services import NomadData, ServiceRegistrar
from agent.runner.taskdirs import TaskDirs
from agent.runner.vaulttoken import TokenIssuer
from agent.state import StateStore
from agent.state.changes import ChangeIndex, highest_kept
from agent.state.watched import WatchedStore
from agent.structs.model import Job
from agent.templates.budget import DEFAULT_PASS_BUDGET
from agent.templates.deps import TemplateDeps
from agent.templates.wake import vault_wake

log = logging.getLogger(__name__)

SWEPT_KEPT = 200  # removals of the sweeper the agent lists in /v1/agent/self (swept)


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
        # The three subjects the core composes: the main loop, the allocs, the jobs.
        self.loop = Loop()
        # The loop's two entry points every caller uses (API threads, timers of the parts)
        self.call = self.loop.call
        self.schedule = self.loop.schedule
        # What Nomad's server decides, when Nomad's API is served (agent.client.allocs.ServerHooks)
        self.server = ServerHooks()
        self.jobs: dict[str, Job] = {}
        # Blocking steps (a task's stop, a change script) run in worker threads whose continuations
        # come back to this loop (agent.client.offload); tests of the fakes pass run_inline.
        self.offload = offload if offload is not None else threaded(self.loop.post)
        nomad = NomadData(
            store,
            lambda: self.allocs.runners,
            self.changes,
            self.schedule,
            datacenter,
            advertise_address,
            data_dir,
        )
        self.deps = RunnerDeps(
            store=store,
            drivers=drivers,
            network=network,
            data_dir=data_dir,
            schedule=self.schedule,
            # the alloc registry, built over these deps below
            replace=lambda failed, reason: self.allocs.replace(failed, reason),  # noqa: PLW0108
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
        self.allocs = AllocRegistry(
            self.loop,
            store,
            self.deps,
            self.changes,
            self.jobs,
            self.node,
            self.adoption,
            self.server,
            kill_point=self.kill_point,
            sweep=self.sweep,
        )
        self.runners = self.allocs.runners  # the registry's own dict: the GC and the restore write it
        self.job_registry = JobRegistry(
            self.jobs,
            self.allocs,
            store,
            drivers,
            self.node,
            self.adoption,
            self.server,
            limits=self.limits,
            bugs=self.bugs,
        )
        self.restorer = Restore(self)
        self.collector = GarbageCollector(self, usage=self._alloc_fs_usage)

    def stop(self) -> None:
        self.loop.stop()
        for d in self.drivers.all().values():
            d.close()

    def watch_exits(self) -> list[threading.Thread]:
        """Every driver reports task exits (docker's event stream, exec's pidfds) into the loop."""
        return self.drivers.watch(self.allocs.report_exit, self.loop.stopping)

    # -- orphans -------------------------------------------------------------------------------
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
            self.allocs.live(), adopted=self.adoption.ids(), recorded=self.allocs.recorded()
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

    def _alloc_fs_usage(self) -> tuple[float, float]:
        """What the GC measures (agent.node.gc.alloc_fs_usage); the GC's tests replace it."""
        return alloc_fs_usage(self.deps.data_dir)
