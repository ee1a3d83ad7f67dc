"""The builder: a plain body (from HCL or JSON) -> the agent's `Job`, validating every field it reads.

Every problem is recorded with its path and parsing goes on, so that one pass reports all of them. Nomad's
defaults are applied where the jobspec leaves a field out (restart policy by job type, kill signal by
driver, service and check names).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TypeVar

from agent.decide.taskdecisions import plan_validation
from agent.identity.vaultlogin import VAULT_IDENTITY
from agent.jobspec.artifacts import read_artifacts
from agent.jobspec.clientfields import (
    CORES_REFUSAL,
    check_consul,
    check_vault_namespace,
    read_max_run_duration,
    read_memory_max,
    read_secrets,
)
from agent.jobspec.constraints import read_constraints
from agent.jobspec.durations import format_duration
from agent.jobspec.identities import read_identities
from agent.jobspec.jobtypes import read_dispatch_payload, read_namespace, read_parameterized, read_periodic
from agent.jobspec.limits import JOB_MAX_COUNT, count_refusal, total_count_refusal
from agent.jobspec.reader import short, whole
from agent.jobspec.reschedule import group_reschedule, read_reschedule
from agent.jobspec.scaling import read_scaling
from agent.jobspec.services import ServiceBlocks
from agent.jobspec.templateblocks import TemplateBlocks
from agent.jobspec.tree import Body, Invalid, depth, join
from agent.jobspec.update import group_update, read_update
from agent.jobspec.volumes import check_mounts, read_mounts, read_volumes
from agent.structs.model import (
    EphemeralDisk,
    Group,
    Job,
    Lifecycle,
    LogConfig,
    Resources,
    RestartPolicy,
    Task,
    UpdateStrategy,
    Vault,
)

_T = TypeVar("_T")
log = logging.getLogger(__name__)

JOB_TYPES = ("service", "batch", "system", "sysbatch")
DRIVERS = ("docker", "exec", "raw_exec")
RESTART_MODES = ("fail", "delay")
VAULT_CHANGE_MODES = ("noop", "signal", "restart")
LIFECYCLE_HOOKS = ("prestart", "poststart", "poststop")

_RESTART_DEFAULTS = {
    "service": RestartPolicy(attempts=2, interval=1800.0, delay=15.0, mode="fail"),
    "batch": RestartPolicy(attempts=3, interval=86400.0, delay=15.0, mode="fail"),
}
_MIN_RESTART_INTERVAL = 5.0
_MIN_CPU = 1
_MIN_MEMORY = 10
_GATEWAY_GROUP = (
    "a group without tasks whose services use Consul Connect (a gateway): Consul Connect is not "
    "implemented by fieldlab-agent, so the group is accepted but not run"
)


class Builder(ServiceBlocks, TemplateBlocks):
    """Builds one `Job`; problems and warnings go to `report`."""

    # --- job, group, task -------------------------------------------------------------------------------

    def job(self, top: Body) -> Job | None:
        """The job, or None when there is none; no input raises: anything unexpected is a problem."""
        try:
            if depth(top, self.limits.max_depth) > self.limits.max_depth:
                self.report.error("", f"the jobspec is nested more than {self.limits.max_depth} levels")
                return None
            return self._job(top)
        except RecursionError:
            self.report.error("", f"the jobspec is nested more than {self.limits.max_depth} levels")
        except Exception as e:  # a bug here must not become a 500 or a crashed CLI: reported, and logged
            log.exception("jobspec builder failed")
            self.report.error("", f"the jobspec could not be read: {type(e).__name__}: {short(str(e))}")
        return None

    def _job(self, top: Body) -> Job | None:
        for key in top:
            if key in ("variable", "variables", "locals"):
                self.report.error(key, "HCL variables are not supported by fieldlab-agent")
            elif key != "job":
                self.report.error(
                    short(str(key)), "not part of a Nomad jobspec (a jobspec holds one job block)"
                )
        before = len(self.report.problems)
        blocks = list(self._blocks(top, "job", "", labelled=True))
        if not blocks:
            if len(self.report.problems) == before:
                self.report.error("job", "required: one job block")
            return None
        if len(blocks) > 1:
            self.report.error("job", "a jobspec holds exactly one job block")
        label, body, path = blocks[0]
        self._keys(body, "job", path)
        job_id = self._str(body, "id", path, label) or label  # Nomad: `id` overrides the label
        self._job_id(job_id, join(path, "id") if job_id != label else path)
        job_type = self._choice(body, "type", path, JOB_TYPES, "service")
        meta = self._str_map(body, "meta", path)
        read_namespace(self, body, path)
        parameterized = read_parameterized(self, body, path, job_type)
        periodic = read_periodic(self, body, path, job_type, parameterized is not None)
        default_vault = self._vault(body, path)
        check_vault_namespace(self, body, "vault_namespace", path)  # the tasks' default: Nomad CE refuses it
        job_update = read_update(self, body, path)  # each group's default (Nomad's Canonicalize)
        job_reschedule = read_reschedule(self, body, path)  # likewise
        # Nomad's HCL2: a task directly in the job is a group of its own, named after the task, first.
        parts: list[tuple[str, Body, str, list[tuple[str, Body, str]] | None]] = [
            (name, {}, task_path, [(name, task_body, task_path)])
            for name, task_body, task_path in self._blocks(body, "task", path, labelled=True)
        ]
        parts += [(n, b, p, None) for n, b, p in self._blocks(body, "group", path, labelled=True)]
        groups = []
        seen: set[str] = set()
        for name, group_body, group_path, implicit in parts:
            if name in seen:
                self.report.error(group_path, f'duplicate group name "{short(name)}"')
            seen.add(name)
            group = self._group(
                job_id, job_type, name, group_body, group_path, implicit, default_vault, job_update
            )
            if group is not None:  # Nomad's Canonicalize: the group's reschedule over the job's
                given = read_reschedule(self, group_body, group_path)
                group = replace(group, reschedule=group_reschedule(self, job_type, job_reschedule, given))
            if group is not None:
                groups.append(group)
        if (total := sum(g.count for g in groups)) > JOB_MAX_COUNT:  # Nomad's server refuses it so
            self.report.error(path, total_count_refusal(total))
        if not parts and "group" not in body and "task" not in body:
            self.report.error(join(path, "group"), "required: at least one group")
        datacenters = self._str_list(body, "datacenters", path) or ("*",)
        return Job(
            id=job_id,
            groups=tuple(groups),
            type=job_type,
            meta=meta,
            name=self._str(body, "name", path) or job_id,
            datacenters=datacenters,
            constraints=read_constraints(self, body, path),
            parameterized=parameterized,
            periodic=periodic,
        )

    def _group(
        self,
        job_id: str,
        job_type: str,
        name: str,
        body: Body,
        path: str,
        implicit: list[tuple[str, Body, str]] | None,
        default_vault: Vault | None,
        job_update: dict[str, object] | None = None,
    ) -> Group | None:
        if implicit is None:
            self._keys(body, "group", path)
            self._name(name, path, "group name")
            default_vault = self._vault(body, path) or default_vault  # HCL2: the group's over the job's
            check_consul(self, body, path)
        count = self._int(body, "count", path, 1, minimum=0)
        if count > self.limits.max_count:  # Nomad would queue what does not fit: agent.jobspec.limits
            self.report.error(join(path, "count"), count_refusal(count, self.limits.max_count))
            count = 1
        task_blocks = (
            implicit if implicit is not None else list(self._blocks(body, "task", path, labelled=True))
        )
        network = self._group_network(body, path, task_blocks)
        labels = {p.label for p in network.ports} if network else set()
        restart = self._restart(body, path, job_type)
        tasks = []
        seen: set[str] = set()
        for task_name, task_body, task_path in task_blocks:
            if task_name in seen:
                self.report.error(task_path, f'duplicate task name "{short(task_name)}"')
            seen.add(task_name)
            tasks.append(
                self._task(
                    f"{job_id}-{name}-{task_name}",
                    task_name,
                    task_body,
                    task_path,
                    labels,
                    default_vault,
                    group_restart=restart,
                )
            )
        services = self._services(body, path, labels, f"{job_id}-{name}", task_names=seen)
        if not task_blocks:  # no task block, or an API job's empty "Tasks" (Nomad: Missing tasks)
            if any("connect" in sb for _, sb, _ in self._blocks(body, "service", path)):
                self.report.warn(path, _GATEWAY_GROUP)
                return None
            self.report.error(join(path, "task"), "required: at least one task")
        volumes, csi = read_volumes(self, body, path)
        tasks = check_mounts(self, tasks, volumes, csi, path)
        checks = plan_validation(self.limits.bugs)
        if checks.main_task and tasks and all(t.lifecycle is not None for t in tasks):  # TaskGroup.Validate
            main = "at least one main task (one without lifecycle)"
            self.report.error(path, f'group "{short(name)}" must have {main}')
        return Group(
            name=name,
            tasks=tuple(tasks),
            count=count,
            network=network,
            restart=restart,
            services=services,
            meta=self._str_map(body, "meta", path),
            constraints=read_constraints(self, body, path),
            ephemeral_disk=self._ephemeral_disk(body, path, tasks),
            shutdown_delay=self._shutdown_delay(body, path),
            volumes=volumes,
            scaling=read_scaling(self, body, path, count=count, job_type=job_type),
            update=self._update(job_type, job_update or {}, body, path),
            max_run_duration=read_max_run_duration(self, body, path, job_type),
        )

    def _update(
        self, job_type: str, job_given: dict[str, object], body: Body, path: str
    ) -> UpdateStrategy | None:
        """The group's update strategy (agent.jobspec.update); a batch job takes none (Nomad's
        TaskGroup.Validate)."""
        given = read_update(self, body, path)
        if job_type in ("service", "system"):
            return group_update(self, job_given, given)
        for where in {str(g["path"]) for g in (job_given, given) if g}:
            self.report.error(where, f'Job type "{job_type}" does not allow update block')
        return None

    def _ephemeral_disk(self, body: Body, path: str, tasks: list[Task]) -> EphemeralDisk:
        """The group's `ephemeral_disk`, checked as Nomad's EphemeralDisk.Validate (at least 10 MB), and
        each task's logs against it (LogConfig.Validate: max_files x max_file_size below the size)."""
        disk, dpath = EphemeralDisk(), join(path, "ephemeral_disk")
        for _, db, dpath in self._blocks(body, "ephemeral_disk", path, single=True):
            self._keys(db, "ephemeral_disk", dpath)
            disk = EphemeralDisk(
                size=self._int(db, "size", dpath, 300, minimum=10),
                sticky=self._bool(db, "sticky", dpath, False),
                migrate=self._bool(db, "migrate", dpath, False),
            )
        for t in tasks:
            usage = t.logs.max_files * t.logs.max_file_size
            if usage >= disk.size:  # as Nomad, whether or not the logs are disabled
                self.report.error(
                    f"{path}.task.{t.name}.logs",
                    f"log storage ({usage} MB) must be less than requested disk capacity ({disk.size} MB"
                    f" at {dpath})",
                )
        return disk

    def _task(
        self,
        service_name: str,
        name: str,
        body: Body,
        path: str,
        labels: set[str],
        default_vault: Vault | None,
        *,
        group_restart: RestartPolicy | None = None,
    ) -> Task:
        self._keys(body, "task", path)
        self._name(name, path, "task name")
        driver = self._driver(body, path)
        config = self._config(body, path, driver, labels)
        env = self._str_map(body, "env", path, env=True)
        resources = self._resources(body, path)
        kill_timeout = self._duration(body, "kill_timeout", path, 5.0)
        if (
            kill_timeout > self.limits.max_kill_timeout
        ):  # Nomad's client caps it at the kill, it does not refuse
            self.report.warn(
                join(path, "kill_timeout"),
                f"{format_duration(kill_timeout)} is more than the client's max_kill_timeout "
                f"({format_duration(self.limits.max_kill_timeout)}): a stop waits that long at most",
            )
        # "" when not set, as Nomad's job keeps it: the driver's default then (taskdecisions.plan_kill_signal)
        kill_signal = self._signal(body, "kill_signal", path, "")
        templates = self._templates(body, path)
        services = self._services(body, path, labels, service_name, task_names=None)
        user = self._str(body, "user", path)
        identities = read_identities(self, body, path)
        check_consul(self, body, path)  # Nomad CE with Consul CE: the defaults only
        has_vault_identity = any(w.name == VAULT_IDENTITY for w in identities)
        vault = self._vault(body, path, has_vault_identity) or default_vault
        return Task(
            name=name,
            driver=driver,
            config=config,
            env=env,
            resources=resources,
            kill_timeout=kill_timeout,
            kill_signal=kill_signal,
            leader=self._bool(body, "leader", path, False),
            templates=templates,
            services=services,
            user=user,
            vault=vault,
            meta=self._str_map(body, "meta", path),
            constraints=read_constraints(self, body, path, task_level=True),
            logs=self._logs(body, path),
            shutdown_delay=self._shutdown_delay(body, path),
            lifecycle=self._lifecycle(body, path),
            volume_mounts=read_mounts(self, body, path),
            artifacts=read_artifacts(self, body, path),
            identities=identities,
            dispatch_payload=read_dispatch_payload(self, body, path),
            restart=self._task_restart(body, path, group_restart or RestartPolicy()),
        )

    def _shutdown_delay(self, body: Body, path: str) -> float:
        """A group's or task's `shutdown_delay`, refused above the client's max_shutdown_delay: a stop
        waits it before its kill, so a jobspec could hold a stop (and the GC and purge behind it) for
        years. Nomad's client has no such limit (docs/task-lifecycle.md); a record stored before is
        capped at the stop instead (agent.runner.kill)."""
        delay = self._duration(body, "shutdown_delay", path, 0.0)
        limit = self.limits.max_shutdown_delay
        if delay > limit:
            self.report.error(
                join(path, "shutdown_delay"),
                f"{format_duration(delay)} is more than the client's max_shutdown_delay "
                f"({format_duration(limit)}): a stop would wait that long before its kill (the agent's "
                "config max_shutdown_delay raises the limit)",
            )
        return delay

    def _lifecycle(self, body: Body, path: str) -> Lifecycle | None:
        """The `lifecycle` block (Nomad's TaskLifecycleConfig.Validate: a hook is required and one of
        prestart, poststart, poststop)."""
        found = self._single(body, "lifecycle", path)
        if found is None:
            return None
        lb, lpath = found
        required = plan_validation(self.limits.bugs).lifecycle_hook
        hook = self._choice(lb, "hook", lpath, LIFECYCLE_HOOKS, "", required=required, what="lifecycle hook")
        sidecar = self._bool(lb, "sidecar", lpath, False)
        return Lifecycle(hook=hook, sidecar=sidecar) if hook else None

    def _logs(self, body: Body, path: str) -> LogConfig:
        """The `logs` block, checked as Nomad's LogConfig.Validate (at least 1 file of at least 1 MB;
        against the group's ephemeral_disk in _ephemeral_disk)."""
        found = self._single(body, "logs", path)
        if found is None:
            return LogConfig()
        lb, lpath = found
        disabled = self._bool(lb, "disabled", lpath, False)
        return LogConfig(
            max_files=self._int(lb, "max_files", lpath, 10, minimum=1),
            max_file_size=self._int(lb, "max_file_size", lpath, 10, minimum=1),
            disabled=disabled,
        )

    def _driver(self, body: Body, path: str) -> str:
        driver = self._str(body, "driver", path, required=True)
        if not driver or driver in DRIVERS:
            return driver
        self.report.error(
            join(path, "driver"),
            f'driver "{short(driver)}" is not run by fieldlab-agent: it runs {", ".join(DRIVERS)}',
        )
        return ""

    def _vault(self, body: Body, path: str, has_vault_identity: bool = False) -> Vault | None:
        found = self._single(body, "vault", path)
        if found is None:
            return None
        v, vpath = found
        policies = self._str_list(v, "policies", vpath)
        role = self._str(v, "role", vpath)
        check_vault_namespace(self, v, "namespace", vpath)
        if not policies and not has_vault_identity:
            # Nomad >= 1.7 logs in with the task's Vault identity and its JWT role decides the
            # policies (agent.identity.vaultlogin). The agent does too when the task has an identity
            # "vault_default" or its config a vault.default_identity; else the token role gives the
            # token Vault's "default" policy only.
            self.report.warn(
                vpath,
                "a vault block without policies takes them from a JWT role (Nomad 1.7+'s workload "
                "identity): on an agent without vault.default_identity and a task without identity "
                '"vault_default", the task\'s token has only Vault\'s "default" policy',
            )
        for i, policy in enumerate(policies):
            if not policy.strip() or policy == "root":
                self.report.error(
                    f"{join(vpath, 'policies')}[{i}]", f"{short(policy)!r} cannot be a task's policy"
                )
        change_mode = self._choice(v, "change_mode", vpath, VAULT_CHANGE_MODES, "restart")
        change_signal = self._str(v, "change_signal", vpath)
        if change_mode == "signal" and not change_signal:
            self.report.error(join(vpath, "change_signal"), 'required with change_mode = "signal"')
        return Vault(
            policies=policies,
            role=role,
            change_mode=change_mode,
            change_signal=change_signal,
            env=self._bool(v, "env", vpath, True),
            file=not self._bool(v, "disable_file", vpath, False),
            allow_token_expiration=self._bool(v, "allow_token_expiration", vpath, False),
        )

    # --- group parts ---------------------------------------------------------------------------------------

    def _restart(self, body: Body, path: str, job_type: str) -> RestartPolicy:
        default = _RESTART_DEFAULTS["batch" if job_type in ("batch", "sysbatch") else "service"]
        found = self._single(body, "restart", path)
        if found is None:
            return default
        rb, rpath = found
        before = len(self.report.problems)
        policy = RestartPolicy(
            attempts=self._int(rb, "attempts", rpath, default.attempts, minimum=0),
            interval=self._duration(rb, "interval", rpath, default.interval),
            delay=self._duration(rb, "delay", rpath, default.delay),
            mode=self._choice(rb, "mode", rpath, RESTART_MODES, default.mode),
            render_templates=self._bool(rb, "render_templates", rpath, default.render_templates),
        )
        if len(self.report.problems) > before:
            return policy
        if policy.attempts == 0 and policy.mode == "delay":
            self.report.error(
                join(rpath, "mode"), 'mode "delay" with 0 attempts is ambiguous; use mode "fail"'
            )
        if policy.interval < _MIN_RESTART_INTERVAL:
            self.report.error(join(rpath, "interval"), f"must be at least {_MIN_RESTART_INTERVAL:g}s")
        elif policy.attempts * policy.delay > policy.interval:
            self.report.error(
                rpath,
                f"{policy.attempts} attempts with a delay of {policy.delay:g}s do not fit in an interval "
                f"of {policy.interval:g}s",
            )
        return policy

    def _task_restart(self, body: Body, path: str, group: RestartPolicy) -> RestartPolicy | None:
        """A task's own `restart` block: the fields it sets over its group's policy (Nomad's
        Task.Canonicalize merges them so); None without one. Each value is checked as the group's;
        the merged policy is not checked as a whole, as Nomad validates the group's policy only."""
        found = self._single(body, "restart", path)
        if found is None:
            return None
        rb, rpath = found
        return RestartPolicy(
            attempts=self._int(rb, "attempts", rpath, group.attempts, minimum=0),
            interval=self._duration(rb, "interval", rpath, group.interval),
            delay=self._duration(rb, "delay", rpath, group.delay),
            mode=self._choice(rb, "mode", rpath, RESTART_MODES, group.mode),
            render_templates=self._bool(rb, "render_templates", rpath, group.render_templates),
        )

    def _config(self, body: Body, path: str, driver: str, labels: set[str]) -> dict[str, object]:
        cpath = join(path, "config")
        config = self._mapping(body, "config", path)
        if config is None:
            if driver and body.get("config") is None:
                self.report.error(cpath, f"required: the {driver} driver needs a config block")
            return {}
        plain: dict[str, object] = {k: self._plain(v, join(cpath, k)) for k, v in config.items()}
        reported = {k for k, v in config.items() if isinstance(v, Invalid)}  # one problem per path
        if driver not in DRIVERS:
            return plain
        self._keys(plain, f"config.{driver}", cpath)
        # The fields the agent implements are stored normalised (strings, lists of strings, a string map);
        # the others are kept as written, blocks as lists of maps.
        normal: dict[str, object] = {}
        if driver == "docker":
            normal["image"] = self._str(plain, "image", cpath, required="image" not in reported)
            if not str(normal["image"]).strip() and "image" in plain and "image" not in reported:
                self.report.error(join(cpath, "image"), "must not be empty")
            normal["command"] = self._str(plain, "command", cpath)
            ports = list(self._str_list(plain, "ports", cpath))
            normal["ports"] = ports
            for i, label in enumerate(ports):
                if label not in labels:
                    where = "the group's network" if labels else "the group (it has no network ports)"
                    self.report.error(f"{cpath}.ports[{i}]", f'port "{label}" is not defined in {where}')
        else:
            normal["command"] = self._str(plain, "command", cpath, required="command" not in reported)
            if not str(normal["command"]).strip() and "command" in plain and "command" not in reported:
                self.report.error(join(cpath, "command"), "must not be empty")
        normal["args"] = list(self._str_list(plain, "args", cpath))
        plain.update((k, v) for k, v in normal.items() if plain.get(k) is not None)
        return plain

    def _resources(self, body: Body, path: str) -> Resources:
        found = self._single(body, "resources", path)
        if found is None:
            return Resources()
        rb, rpath = found
        cores = whole(rb.get("cores"))  # Nomad's Resources.Validate; reserved cores: clientfields
        if cores is not None and cores < 0 and plan_validation(self.limits.bugs).cores_not_negative:
            self.report.error(join(rpath, "cores"), f"cores value ({cores}) cannot be negative")
        elif cores is not None and cores > 0:
            self.report.error(join(rpath, "cores"), CORES_REFUSAL)
        memory = self._int(rb, "memory", rpath, Resources.memory, minimum=_MIN_MEMORY)
        return Resources(
            cpu=self._int(rb, "cpu", rpath, Resources.cpu, minimum=_MIN_CPU),
            memory=memory,
            memory_max=read_memory_max(self, rb, rpath, memory),
            secrets=read_secrets(self, rb, rpath, memory),
        )
