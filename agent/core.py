"""The agent's core: one main loop owns every alloc runner. The API, the docker event stream and
timers only put work on its queue, so no two changes to an alloc ever race.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agent.allocrunner import AllocRunner, RunnerDeps
from agent.consul import ConsulClient, ConsulData
from agent.drivers.base import LABEL_ALLOC, LABEL_GROUP, LABEL_JOB, LABEL_MANAGED
from agent.drivers.docker import DockerDriver
from agent.drivers.exec import ExecDriver
from agent.errors import AgentError
from agent.faults import Faults
from agent.jobspec import JobspecError, parse_jobspec
from agent.model import Job
from agent.network.cni import CniNetwork, check_supported, plugin_version
from agent.state import StateStore
from agent.sweeper import Sweeper, SweepPolicy, SweepReport
from agent.templates import SecretSource, check_template

log = logging.getLogger(__name__)
T = TypeVar("T")

DYNAMIC_PORTS = range(20000, 32000)
LOOP_IDLE = 1.0  # the loop wakes at least this often to run due timers


class NotFound(AgentError):
    pass


class Conflict(AgentError):
    pass


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Core:
    def __init__(
        self,
        store: StateStore,
        docker: DockerDriver,
        cni: CniNetwork | None,
        *,
        bridge: str,
        data_dir: Path,
        faults: Faults,
        sweep_grace: float = 60.0,
        sweep_dry_run: bool = False,
        consul: ConsulClient | None = None,
        advertise_address: str = "",
        vault: SecretSource | None = None,
        cni_check: bool | None = None,
    ) -> None:
        self.store = store
        self.docker = docker
        self.cni = cni
        self.faults = faults
        self.runners: dict[str, AllocRunner] = {}
        self.jobs: dict[str, Job] = {}
        self._q: queue.Queue[Callable[[], None]] = queue.Queue()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        exec_driver = ExecDriver(on_exit=lambda alloc, pid: self._q.put(self._died_callback(alloc, pid)))
        self.deps = RunnerDeps(
            store,
            docker,
            cni,
            bridge,
            data_dir,
            faults,
            self.schedule,
            self._replace,
            exec=exec_driver,
            consul=consul,
            advertise_address=advertise_address,
            vault=vault,
            consul_kv=ConsulData(consul.address) if consul else None,
            cni_check=cni_check
            if cni_check is not None
            else bool(cni and check_supported(plugin_version(cni.plugin_dir))),
        )
        log.info(
            "CNI CHECK on restore: %s", "on" if self.deps.cni_check else "off (plugins older than 1.3.0)"
        )
        self.restore_seconds = 0.0
        self._events: Any = None
        policy = SweepPolicy(grace=sweep_grace, untracked_pause=faults.enabled("sweep-untracked-pause"))
        self.sweeper = Sweeper(docker, cni, data_dir, policy=policy, dry_run=sweep_dry_run)
        self.last_sweep: SweepReport | None = None
        self.sweeps = 0  # sweeps done since start: the e2e suites wait for one to have run

    # -- loop ----------------------------------------------------------------------------------
    def call(self, fn: Callable[[], T], timeout: float = 120.0) -> T:
        """Run fn on the main loop and return its result (for the API threads)."""
        fut: Future[T] = Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                fut.set_exception(exc)

        self._q.put(run)
        return fut.result(timeout)

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
        if self._events is not None:
            self._events.close()

    # -- docker events -------------------------------------------------------------------------
    def watch_docker(self) -> None:
        """Feed container deaths of managed containers into the loop (thread; reconnects)."""
        while not self._stop.is_set():
            try:
                stream = self.docker.client.events(
                    decode=True,
                    filters={"type": "container", "event": ["die"], "label": [f"{LABEL_MANAGED}=true"]},
                )
                self._events = stream
                for ev in stream:
                    cid = ev.get("id") or ev.get("Actor", {}).get("ID", "")
                    alloc = ev.get("Actor", {}).get("Attributes", {}).get("org.fieldlab.alloc", "")
                    self._q.put(self._died_callback(str(alloc), str(cid)))
                    if self._stop.is_set():
                        return
            except Exception as exc:  # dockerd restarting: reconnect
                log.warning("docker event stream broke (%s); reconnecting", exc)
                self._stop.wait(1.0)

    def _died_callback(self, alloc_id: str, container_id: str) -> Callable[[], None]:
        return lambda: self._container_died(alloc_id, container_id)

    def _container_died(self, alloc_id: str, container_id: str) -> None:
        runner = self.runners.get(alloc_id)
        if runner is not None:
            runner.on_container_exit(container_id)

    # -- startup restore -----------------------------------------------------------------------
    def restore(self) -> None:
        t0 = time.monotonic()
        jobs = self.store.list("job")
        for bad in jobs.corrupt:
            log.error("state: job %s unreadable (%s): its allocs cannot be restored", bad.key, bad.reason)
        for job_id, rec in jobs.records.items():
            try:
                self.jobs[job_id] = parse_jobspec(
                    rec["source"], source=f"state:job/{job_id}", fmt=rec.get("format")
                ).job
            except (JobspecError, KeyError) as exc:
                log.error("state: job %s does not parse any more: %s", job_id, exc)
        allocs = self.store.list("alloc")
        replace_corrupt = [bad.key for bad in allocs.corrupt]
        for bad in allocs.corrupt:
            log.error("state: alloc %s unreadable (%s): replacing it", bad.key, bad.reason)
            self.store.append_event(bad.key, "", "Restore Failed", f"alloc record unreadable: {bad.reason}")
        for alloc_id, rec in allocs.records.items():
            if rec.get("status") != "running" or rec.get("desired") == "stop":
                continue
            job = self.jobs.get(rec.get("job", ""))
            group = next((g for g in job.groups if g.name == rec.get("group")), None) if job else None
            if job is None or group is None:
                log.error(
                    "alloc=%s: job %s or group %s unknown; cannot restore",
                    alloc_id[:8],
                    rec.get("job"),
                    rec.get("group"),
                )
                continue
            runner = AllocRunner(self.deps, rec, job, group)
            self.runners[alloc_id] = runner
            try:
                runner.restore()
            except Exception as exc:
                log.exception("alloc=%s: restore failed", alloc_id[:8])
                runner._fail_alloc(f"restore failed: {exc}")
        for alloc_id in replace_corrupt:
            self._replace_unreadable(alloc_id)
        self.restore_seconds = time.monotonic() - t0
        log.info("restored %d alloc(s) in %.2fs", len(self.runners), self.restore_seconds)
        self.sweep()

    def _replace_unreadable(self, alloc_id: str) -> None:
        """An alloc whose record cannot be read: its containers' labels still say which job and
        group it ran, so a replacement starts; the sweeper then removes the old containers."""
        labels = [c.labels for c in self.docker.managed_containers() if c.labels.get(LABEL_ALLOC) == alloc_id]
        job = self.jobs.get(labels[0].get(LABEL_JOB, "")) if labels else None
        group = labels[0].get(LABEL_GROUP, "") if labels else ""
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

    # -- orphans -------------------------------------------------------------------------------
    def live_allocs(self) -> set[str]:
        return {a for a, r in self.runners.items() if r.rec.get("status") in ("running", "pending")}

    def sweep(self) -> SweepReport | None:
        """Remove what no live alloc owns (on start after restore, then every sweep_interval)."""
        if self.faults.enabled("no-orphan-sweep"):
            log.warning("orphan sweep skipped: fault no-orphan-sweep is active")
            return None
        report = self.sweeper.sweep(self.live_allocs())
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

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, text: str, fmt: str | None, source: str = "<request>") -> dict[str, Any]:
        parsed = parse_jobspec(text, source=source, fmt=fmt)
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
        if job.id in self.jobs and any(
            r.job.id == job.id and r.rec.get("status") in ("running", "pending")
            for r in self.runners.values()
        ):
            raise Conflict(f"job {job.id} is already running: stop it first")
        self._check_static_ports(job)
        self.store.put("job", job.id, {"source": text, "format": fmt, "warnings": list(parsed.warnings)})
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
        return {
            int(p["host"])
            for r in self.runners.values()
            if r.rec.get("status") in ("running", "pending")
            for p in r.rec.get("ports", [])
        }

    def _new_alloc(self, job: Job, group_name: str, replaces: str = "") -> AllocRunner:
        group = next(g for g in job.groups if g.name == group_name)
        used = self._used_ports()
        ports = []
        for p in group.network.ports if group.network else ():
            host = p.static or next(x for x in DYNAMIC_PORTS if x not in used)
            used.add(host)
            ports.append({"label": p.label, "host": host, "to": p.to or host})
        rec = {
            "id": str(uuid.uuid4()),
            "job": job.id,
            "group": group.name,
            "status": "pending",
            "desired": "run",
            "created": time.time(),
            "ports": ports,
            "replaces": replaces,
            "replaced_by": "",
        }
        runner = AllocRunner(self.deps, rec, job, group)
        self.store.put("alloc", runner.id, rec)
        self.runners[runner.id] = runner
        runner.start()
        return runner

    def _replace(self, failed: AllocRunner, reason: str) -> None:
        if failed.rec.get("desired") == "stop":
            return

        def start_replacement() -> None:
            new = self._new_alloc(failed.job, failed.group.name, replaces=failed.id)
            failed._save(replaced_by=new.id)
            failed.event("", "Replaced", f"replaced by alloc {new.id}: {reason}")

        self.schedule(0.0, start_replacement)

    def stop_job(self, job_id: str) -> list[str]:
        if job_id not in self.jobs:
            raise NotFound(f"no job {job_id}")
        stopped = []
        for r in list(self.runners.values()):
            if r.job.id == job_id and r.rec.get("status") in ("running", "pending"):
                r.stop()
                stopped.append(r.id)
        return stopped

    def runner(self, alloc_id: str) -> AllocRunner:
        matches = [r for a, r in self.runners.items() if a.startswith(alloc_id)] if len(alloc_id) >= 6 else []
        if len(matches) != 1:
            raise NotFound(f"no alloc {alloc_id}" if not matches else f"alloc prefix {alloc_id} is ambiguous")
        return matches[0]
