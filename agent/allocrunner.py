"""One allocation's life on this node: set up its network and tasks, watch them, restart them by
policy, recover from a dead pause container, restore after an agent restart, and tear down.

Every transition is written to the state store before it is acted on, so a crash at any point
leaves a record the next start can act on. All methods run on the agent's main loop thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.consul import ConsulClient, ConsulError, registrations
from agent.decisions import (
    ObservedAlloc,
    RestoreAction,
    plan_restore,
    plan_task_restart,
    trust_recorded_tasks,
)
from agent.drivers.base import DriverError, TaskHandle
from agent.drivers.docker import DockerDriver
from agent.drivers.exec import ExecDriver
from agent.errors import AgentError
from agent.faults import Faults
from agent.fsutil import mount_secrets, unmount_below
from agent.model import Group, Job, Task
from agent.network import netns
from agent.network.cni import CniError, CniNetwork, PortMapping
from agent.network.verify import verify_network
from agent.state import StateStore
from agent.tasktemplates import TaskTemplates
from agent.templates import ConsulSource, SecretSource

log = logging.getLogger(__name__)

PAUSE = "<pause>"  # handle key of the alloc's pause container


@dataclass
class RunnerDeps:
    store: StateStore
    docker: DockerDriver
    cni: CniNetwork | None
    bridge: str
    data_dir: Path
    faults: Faults
    schedule: Callable[[float, Callable[[], None]], None]
    replace: Callable[[AllocRunner, str], None]
    exec: ExecDriver = field(default_factory=ExecDriver)
    vault: SecretSource | None = None
    consul_kv: ConsulSource | None = None
    cni_check: bool = False  # run CNI CHECK on restore (plugins >= 1.3.0)
    consul: ConsulClient | None = None
    advertise_address: str = ""


class AllocRunner:
    def __init__(self, deps: RunnerDeps, record: dict[str, Any], job: Job, group: Group) -> None:
        self.d = deps
        self.rec = record
        self.job = job
        self.group = group
        self.id: str = record["id"]
        self._templates: dict[str, TaskTemplates] = {}

    # -- templates -----------------------------------------------------------------------------
    def templates(self, t: Task) -> TaskTemplates:
        if t.name not in self._templates:
            self._templates[t.name] = TaskTemplates(self, t)
        return self._templates[t.name]

    def task_env(self, t: Task) -> dict[str, str]:
        env = {
            **t.env,
            "NOMAD_ALLOC_ID": self.id,
            "NOMAD_TASK_NAME": t.name,
            "NOMAD_JOB_NAME": self.job.id,
            "NOMAD_GROUP_NAME": self.group.name,
            "NOMAD_ALLOC_IP": str(self.rec.get("address", "")),
        }
        for p in self.rec.get("ports", []):
            env[f"NOMAD_PORT_{p['label']}"] = str(p["to"])
            env[f"NOMAD_HOST_PORT_{p['label']}"] = str(p["host"])
        return env

    def task_running(self, t: Task) -> bool:
        return self._task_state(t.name).get("state") == "running"

    def signal_task(self, t: Task, sig: str) -> None:
        h = self._handle(t.name)
        if h is not None:
            self.driver(t).signal(h, sig)

    def exec_in_task(self, t: Task, argv: list[str], timeout: float) -> tuple[int, str]:
        h = self._handle(t.name)
        if h is None:
            return -1, "task has no handle"
        if t.driver == "docker":
            return self.d.docker.exec(h, argv)
        return self.d.exec.exec(h, argv, timeout)

    def restart_for_template(self, t: Task) -> None:
        self._stop_task(t)
        self._restart_task(t, "template re-rendered")

    # -- records -------------------------------------------------------------------------------
    @property
    def bridge(self) -> bool:
        return self.group.network is not None and self.group.network.mode == "bridge"

    @property
    def uses_pause(self) -> bool:
        """A docker task in a bridge group: a pause container owns the netns (upstream's way).
        Otherwise (exec only) the agent creates a named netns and the tasks join it by path."""
        return self.bridge and any(t.driver == "docker" for t in self.group.tasks)

    @property
    def netns_name(self) -> str:
        return f"fl-{self.id}"

    def driver(self, t: Task) -> DockerDriver | ExecDriver:
        return self.d.docker if t.driver == "docker" else self.d.exec

    def netns_path(self) -> Path | None:
        """The alloc's network namespace as a path, or None when it has none (host mode) or it is gone."""
        if not self.bridge:
            return None
        if self.uses_pause:
            pause = self._handle(PAUSE)
            return self.d.docker.netns_path(pause) if pause and self.d.docker.pid(pause) else None
        path = netns.netns_path(self.netns_name)
        return path if netns.is_netns(path) else None

    @property
    def alloc_dir(self) -> Path:
        return self.d.data_dir / "alloc" / self.id

    def task_dir(self, task: Task) -> Path:
        return self.alloc_dir / task.name

    def _save(self, **changes: Any) -> None:
        self.rec.update(changes)
        self.d.store.put("alloc", self.id, self.rec)

    def event(self, task: str, type_: str, message: str, **details: Any) -> None:
        self.d.store.append_event(self.id, task, type_, message, details or None)
        log.info("alloc=%s task=%s event=%r %s", self.id[:8], task or "-", type_, message)

    def _handle(self, name: str) -> TaskHandle | None:
        rec = self.d.store.get("handle", f"{self.id}/{name}")
        return TaskHandle.from_record(rec) if rec else None

    def _task_state(self, task: str) -> dict[str, Any]:
        return self.d.store.get("task", f"{self.id}/{task}") or {
            "state": "pending",
            "restarts": 0,
            "restart_times": [],
        }

    def _put_task_state(self, task: str, **changes: Any) -> None:
        st = self._task_state(task)
        st.update(changes)
        self.d.store.put("task", f"{self.id}/{task}", st)

    def port_mappings(self) -> list[PortMapping]:
        return [PortMapping(int(p["host"]), int(p["to"])) for p in self.rec.get("ports", [])]

    def owns_container(self, container_id: str) -> str | None:
        for name in [PAUSE, *(t.name for t in self.group.tasks)]:
            h = self._handle(name)
            if h and h.id == container_id:
                return name
        return None

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        for t in self.group.tasks:
            self.event(t.name, "Received", "Task received by client")
        try:
            self._setup_dirs()
            if self.bridge:
                self._setup_network()
            for t in self.group.tasks:
                self._start_task(t)
            self._save(status="running", reason="")
            self._register_services()
        except (AgentError, OSError) as exc:
            self._fail_setup(f"failed to setup alloc: {exc}")

    def _setup_dirs(self) -> None:
        for t in self.group.tasks:
            self.event(t.name, "Task Setup", "Building Task Directory")
            local = self.task_dir(t) / "local"
            local.mkdir(parents=True, exist_ok=True)
            local.chmod(0o755)
            mount_secrets(self.task_dir(t) / "secrets")
            if t.templates:
                self.templates(t).render_all()

    def _setup_network(self, *, keep_address: bool = False) -> None:
        """Create the alloc's netns owner and run CNI ADD on it; record the address ADD gave.
        `keep_address` is only the `stale-network-status-on-restore` fault (see recover_network)."""
        if self.d.cni is None:
            raise AgentError("bridge networking needs a CNI conflist (config cni_conf_dir)")
        if self.uses_pause:
            pause = self.d.docker.start_pause(self.job.id, self.group.name, self.id)
            self.d.store.put("handle", f"{self.id}/{PAUSE}", pause.to_record())
            ns = self.d.docker.netns_path(pause)
        else:
            ns = netns.create(self.netns_name, exist_ok=True)
        self._save(network_state="adding")
        result = self.d.cni.add(self.id, ns, port_mappings=self.port_mappings())
        address = result.primary_ip or ""
        if keep_address and self.rec.get("address"):
            # nomad-24236/16893: the recreated network's address is not written back; the alloc
            # (API, NOMAD_ALLOC_IP of the tasks restarted next) keeps the one from before.
            address = str(self.rec["address"])
        self._save(network_state="ready", address=address)

    def _start_task(self, t: Task) -> None:
        pause = self._handle(PAUSE) if self.uses_pause else None
        env = self.task_env(t)
        self._put_task_state(t.name, state="starting")
        if t.driver == "docker":
            mode = self.group.network.mode if self.group.network else "none"
            h = self.d.docker.start_task(
                self.job.id,
                self.group.name,
                self.id,
                t,
                pause=pause,
                network_mode=mode if mode in ("host", "none") else "",
                task_dir=self.task_dir(t),
                env=env,
            )
        else:
            h = self.d.exec.start_task(
                self.id, t, netns=self.netns_path(), task_dir=self.task_dir(t), env=env
            )
        self.d.store.put("handle", f"{self.id}/{t.name}", h.to_record())
        if t.templates:
            self.templates(t).task_started()
        self._put_task_state(t.name, state="running", failed=False)
        self.event(t.name, "Started", "Task started by client")

    def _fail_setup(self, reason: str) -> None:
        for t in self.group.tasks:
            self.event(t.name, "Setup Failure", reason)
        self._teardown()
        self._save(status="failed", reason=reason)

    # -- run time ------------------------------------------------------------------------------
    def on_container_exit(self, container_id: str) -> None:
        """docker reported that one of this alloc's containers died."""
        name = self.owns_container(container_id)
        if name is None or self.rec.get("status") != "running":
            return
        if name == PAUSE:
            self.event("", "Network Lost", "pause container died; recovering the group's network")
            if self.d.faults.enabled("reuse-dead-pause"):
                # nomad-12216: tasks are restarted into the dead pause's network and fail there.
                for t in self.group.tasks:
                    self._restart_task(t, "pause container died")
                return
            self.recover_network("pause container died")
            return
        task = next(t for t in self.group.tasks if t.name == name)
        h = self._handle(name)
        code = self.driver(task).status(h).exit_code if h else None
        self.event(name, "Terminated", f"Exit Code: {code}")
        self._put_task_state(name, state="dead")
        decision = plan_task_restart(
            self.group.restart, self._task_state(name).get("restart_times", []), time.time()
        )
        if not decision.restart:
            self._put_task_state(name, failed=True)
            self.event(name, "Not Restarting", decision.reason)
            self._fail_alloc(f"task {name} failed: {decision.reason}")
            return
        self.event(name, "Restarting", f"Task restarting in {decision.delay:.1f}s ({decision.reason})")
        self.d.schedule(decision.delay, lambda: self._restart_task(task, "restart policy"))

    def _restart_task(self, t: Task, why: str) -> None:
        if self.rec.get("status") != "running":
            return
        st = self._task_state(t.name)
        self._put_task_state(
            t.name,
            restarts=int(st.get("restarts", 0)) + 1,
            restart_times=[*st.get("restart_times", []), time.time()][-20:],
        )
        try:
            self._start_task(t)
        except DriverError as exc:
            self.event(t.name, "Driver Failure", str(exc))
            if self.bridge and not self.d.faults.enabled("reuse-dead-pause"):
                self.recover_network(f"task {t.name} could not start: {exc.reason}")
            else:
                self._fail_alloc(f"task {t.name} could not start: {exc}")

    def recover_network(self, why: str) -> None:
        """Recreate the whole network of the group (DEL, fresh pause, ADD) and restart its tasks.
        If that fails, the alloc is failed and replaced: never a dead end, never a second set."""
        for t in self.group.tasks:
            self.event(t.name, "Restart Signaled", f"network recreated: {why}")
            self._stop_task(t)
        try:
            if self.d.faults.enabled("ipam-stale-after-reboot") and self.d.cni is not None:
                # nomad-11272: forget the old attachment without DEL, so a reservation that
                # survived the reboot is still held by this very alloc id.
                self.d.cni.cache_path(self.id).unlink(missing_ok=True)
            else:
                self._del_network()
            pause = self._handle(PAUSE)
            if pause:
                self.d.docker.remove(pause.id)
            if not self.uses_pause:
                netns.delete(self.netns_name)
            self._setup_network(keep_address=self.d.faults.enabled("stale-network-status-on-restore"))
            for t in self.group.tasks:
                self._restart_task(t, why)
            self.event("", "Network Recovered", f"network recreated ({why})", address=self.rec.get("address"))
        except (AgentError, OSError) as exc:
            self._fail_alloc(f"network recovery failed: {exc}")

    def _del_network(self) -> None:
        if self.d.cni is None:
            return
        if self.d.faults.enabled("leak-portmap-chains"):
            # nomad-6385 family: teardown frees the address but leaves every iptables chain and
            # DNAT rule behind, so the host port stays pointed at a dead address.
            self.d.cni.release_reservations(self.id)
            self.d.cni.cache_path(self.id).unlink(missing_ok=True)
            self._save(network_state="deleted")
            return
        report = self.d.cni.delete(self.id, self.netns_path())
        if report.plugin_errors:
            self.event("", "Network Teardown", "CNI DEL reported: " + "; ".join(report.plugin_errors))
        self._save(network_state="deleted")

    def _fail_alloc(self, reason: str) -> None:
        self._save(status="failed", reason=reason)
        self.event("", "Alloc Failed", reason)
        self._teardown()
        self.d.replace(self, reason)

    # -- restore -------------------------------------------------------------------------------
    def observe(self) -> ObservedAlloc:
        tasks_running: list[bool] = []
        share: list[bool] = []
        ns_path = self.netns_path()
        ns_id = netns.netns_id(ns_path) if ns_path else None
        if self.uses_pause:
            pause = self._handle(PAUSE)
            pause_status = self.d.docker.status(pause) if pause else None
            owner_alive = bool(pause_status and pause_status.running)
            same_start = bool(pause_status and pause_status.detail != "restarted by docker")
        else:
            owner_alive, same_start = ns_path is not None, True
        for t in self.group.tasks:
            h = self._handle(t.name)
            st = self.driver(t).status(h) if h else None
            running = bool(st and st.running and st.detail != "restarted by docker")
            tasks_running.append(running)
            pid = self.driver(t).pid(h) if (h and running) else 0
            share.append(bool(pid and ns_id and netns.pid_netns_id(pid) == ns_id))
            if running and h and t.driver == "exec":
                self.d.exec.watch(self.id, h)
        diffs: list[str] = []
        cached = self.d.cni.cached_result(self.id) if (self.d.cni and self.bridge) else None
        if self.bridge and cached is not None and ns_path is not None:
            diffs = verify_network(ns_path, cached, self.d.bridge, self.port_mappings())
            if self.d.cni_check and self.d.cni is not None:
                # Only where the plugins are new enough (upstream's gate: bridge >= 1.3.0); older
                # ones fail CHECK spuriously (veth MAC, portmap IPv6) and would churn healthy allocs.
                try:
                    self.d.cni.check(self.id, ns_path)
                except CniError as exc:
                    diffs.append(f"CNI CHECK: {exc}")
        return ObservedAlloc(
            alloc_dir_exists=self.alloc_dir.is_dir(),
            bridge=self.bridge,
            pause_running=owner_alive,
            pause_same_start=same_start,
            tasks_running=tasks_running,
            tasks_share_pause_netns=share,
            network_diffs=diffs,
            has_cni_result=cached is not None,
        )

    def _rerender_on_restore(self) -> None:
        """Dynamic secrets are issued again on every agent start (as in the field): render them
        before anything restarts, so a restarted task reads fresh content."""
        for t in self.group.tasks:
            if self.alloc_dir.is_dir() and mount_secrets(self.task_dir(t) / "secrets"):
                self.event(t.name, "Task Setup", "secrets/ tmpfs mounted again (it is gone after a reboot)")
            if not t.templates:
                continue
            try:
                self.templates(t).render_all()
            except AgentError as exc:
                self.event(t.name, "Template Failed", f"{exc}; retrying")
                self.templates(t).schedule_rerender(1.0)

    def restore(self) -> RestoreAction:
        faults = self.d.faults
        obs = self.observe()
        if faults.enabled("half-alive-restore"):
            # nomad-23684/17079: the recorded task states are believed over the driver, so a task
            # that vanished while the agent was down is neither restarted nor reported.
            obs = trust_recorded_tasks(obs, [self.task_running(t) for t in self.group.tasks])
        plan = plan_restore(
            obs,
            check_network=not faults.enabled("no-network-check-on-restore"),
            check_alloc_dir=not faults.enabled("restore-missing-alloc-dir"),
        )
        log.info("alloc=%s restore: %s (%s)", self.id[:8], plan.action.value, plan.reason)
        if plan.action is not RestoreAction.REPLACE:
            self._rerender_on_restore()
        if plan.action is RestoreAction.REATTACH:
            self.event("", "Restored", f"reattached: {plan.reason}")
            for t in self.group.tasks:
                if t.templates:
                    self.templates(t).after_restore()
        elif plan.action is RestoreAction.RESTART_TASKS:
            self.event("", "Restored", plan.reason)
            for t, running in zip(self.group.tasks, obs.tasks_running, strict=True):
                if not running:
                    self._restart_task(t, "exited while the agent was down")
        elif plan.action is RestoreAction.RECREATE_NETWORK:
            self.event("", "Restore Network", plan.reason)
            self.recover_network(plan.reason)
        else:
            self.event("", "Restore Failed", plan.reason)
            self._fail_alloc(plan.reason)
        return plan.action

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, reason: str = "job stopped") -> None:
        self._save(desired="stop")
        for t in self.group.tasks:
            if self._handle(t.name):
                self.event(t.name, "Killing", f"Sent {t.kill_signal} ({reason})")
                self._stop_task(t)
                self._put_task_state(t.name, state="dead")
        self._teardown()
        self._save(status="complete", reason=reason)

    def services(self) -> list[dict[str, Any]]:
        """This alloc's service definitions (group and task services) in Consul's shape."""
        addr = self.d.advertise_address or str(self.rec.get("address", ""))
        ports = self.rec.get("ports", [])
        out = registrations(self.id, "", self.group.services, addr, ports)
        for t in self.group.tasks:
            out += registrations(self.id, t.name, t.services, addr, ports)
        return out

    def _register_services(self) -> None:
        if self.d.consul is None:
            return
        for svc in self.services():
            try:
                self.d.consul.register(svc)
                self.event(str(svc["Meta"]["task"]), "Service Registered", f"{svc['Name']} in Consul")
            except ConsulError as exc:
                self.event(str(svc["Meta"]["task"]), "Service Registration Failed", str(exc))

    def _deregister_services(self) -> None:
        if self.d.consul is None:
            return
        for svc in self.services():
            try:
                self.d.consul.deregister(str(svc["ID"]))
            except ConsulError as exc:
                self.event(str(svc["Meta"]["task"]), "Service Deregistration Failed", str(exc))

    def _teardown(self) -> None:
        self._deregister_services()
        for t in self.group.tasks:
            h = self._handle(t.name)
            if h and t.driver == "docker":
                self.d.docker.remove(h.id)
            elif h:
                self.d.exec.stop(h, t.kill_timeout, t.kill_signal)
                self.d.exec.remove_cgroups(self.id, t.name)
        if self.bridge:
            try:
                self._del_network()
            except CniError as exc:
                self.event("", "Network Teardown", str(exc))
            pause = self._handle(PAUSE)
            if pause:
                self.d.docker.remove(pause.id)
            if not self.uses_pause:
                netns.delete(self.netns_name)
        unmount_below(self.alloc_dir)

    # -- API view ------------------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        tasks = {}
        for t in self.group.tasks:
            st = self._task_state(t.name)
            h = self._handle(t.name)
            tasks[t.name] = {
                "state": st.get("state"),
                "restarts": st.get("restarts", 0),
                "failed": st.get("failed", False),
                "container": h.id if h else None,
            }
        pause = self._handle(PAUSE)
        return {
            **{
                k: self.rec.get(k)
                for k in (
                    "id",
                    "job",
                    "group",
                    "status",
                    "desired",
                    "reason",
                    "replaced_by",
                    "replaces",
                    "created",
                )
            },
            "network": {
                "mode": self.group.network.mode if self.group.network else "none",
                "address": self.rec.get("address", ""),
                "ports": self.rec.get("ports", []),
                "pause_container": pause.id if pause else None,
            },
            "tasks": tasks,
        }

    # -- user actions (API) ----------------------------------------------------------------------
    def user_restart(self, t: Task) -> None:
        self.event(t.name, "Restart Signaled", "User requested task to restart")
        self._stop_task(t)
        self._restart_task(t, "user request")

    def user_signal(self, task: str, sig: str) -> None:
        h = self._handle(task)
        if h is None:
            raise AgentError(f"alloc {self.id} has no running task {task!r}")
        self.event(task, "Signaling", f"Task being sent signal {sig}")
        t = next(x for x in self.group.tasks if x.name == task)
        self.driver(t).signal(h, sig)

    def _stop_task(self, t: Task) -> None:
        h = self._handle(t.name)
        if h is None:
            return
        if t.driver == "docker":
            self.d.docker.stop(h, t.kill_timeout)
        else:
            self.d.exec.stop(h, t.kill_timeout, t.kill_signal)
