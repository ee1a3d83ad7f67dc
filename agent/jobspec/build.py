"""The builder: a plain body (from HCL or JSON) -> the agent's `Job`, validating every field it reads.

Every problem is recorded with its path and parsing goes on, so that one pass reports all of them. Nomad's
defaults are applied where the jobspec leaves a field out (restart policy by job type, kill signal by
driver, service and check names).
"""

from __future__ import annotations

import difflib
import logging
import math
import posixpath
import re
import signal
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import TypeVar

from agent.jobspec.constraints import read_constraints
from agent.jobspec.durations import MAX_NS, duration_seconds, format_duration
from agent.jobspec.fields import IMPLEMENTED, UNIMPLEMENTED, known
from agent.jobspec.limits import DEFAULT_LIMITS, Limits
from agent.jobspec.tree import Block, Body, Invalid, Report, depth, join
from agent.jobspec.volumes import check_mounts, read_mounts, read_volumes
from agent.model import (
    ChangeScript,
    Check,
    EphemeralDisk,
    Group,
    Job,
    Lifecycle,
    LogConfig,
    Network,
    Port,
    Resources,
    RestartPolicy,
    Service,
    Task,
    Template,
    Vault,
)

_T = TypeVar("_T")
log = logging.getLogger(__name__)

JOB_TYPES = ("service", "batch", "system", "sysbatch")
DRIVERS = ("docker", "exec", "raw_exec")
NETWORK_MODES = ("bridge", "host", "none")
RESTART_MODES = ("fail", "delay")
CHANGE_MODES = ("noop", "signal", "restart", "script")
VAULT_CHANGE_MODES = ("noop", "signal", "restart")
LIFECYCLE_HOOKS = ("prestart", "poststart", "poststop")
CHECK_TYPES = ("http", "tcp", "script")
UNRUN_CHECK_TYPES = ("grpc",)  # Nomad's, accepted with a warning and not registered
SERVICE_PROVIDERS = ("consul", "nomad")
TEMPLATE_DIRS = ("local", "secrets", "alloc")  # alloc/: the alloc's shared dir, as Nomad's sandbox

# Names end up in container names, label values and paths.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# Nomad's HCL2 jobspec takes any port label (a dash too); environment variable names clean it (see Port).
_PORT_LABEL = re.compile(r"^[^\x00-\x20\x7f]{1,128}$")
_SERVICE_NAME = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9-]{0,61}[a-z0-9])$")  # RFC 1123, as Nomad
_INT = re.compile(r"^[+-]?\d{1,19}$")
_MAX_INT = (1 << 63) - 1  # Go's int64: larger numbers are out of range
_PORT_NUMBER = re.compile(r"^[0-9]{1,5}$")
_RESTART_DEFAULTS = {
    "service": RestartPolicy(attempts=2, interval=1800.0, delay=15.0, mode="fail"),
    "batch": RestartPolicy(attempts=3, interval=86400.0, delay=15.0, mode="fail"),
}
_MIN_RESTART_INTERVAL = 5.0
_MIN_CHECK_INTERVAL = 1.0
_MIN_CPU = 1
_MIN_MEMORY = 10
_DEFAULT_KILL_SIGNAL = {"docker": "SIGTERM", "exec": "SIGINT", "raw_exec": "SIGINT"}
_TASK_NETWORK_DEPRECATED = (
    "a task's network is deprecated in Nomad; fieldlab-agent adds its ports to the group's network"
)
_GATEWAY_GROUP = (
    "a group without tasks whose services use Consul Connect (a gateway): Consul Connect is not "
    "implemented by fieldlab-agent, so the group is accepted but not run"
)
_TASK_DIR_VARS = {
    "${NOMAD_TASK_DIR}": "local",
    "${NOMAD_SECRETS_DIR}": "secrets",
    "${NOMAD_ALLOC_DIR}": "alloc",
}


def _choices(options: tuple[str, ...]) -> str:
    return ", ".join(f'"{o}"' for o in options)


class Builder:
    """Builds one `Job`; problems and warnings go to `report`."""

    def __init__(self, report: Report, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.report = report

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
            self.report.error("", f"the jobspec could not be read: {type(e).__name__}: {_short(str(e))}")
        return None

    def _job(self, top: Body) -> Job | None:
        for key in top:
            if key in ("variable", "variables", "locals"):
                self.report.error(key, "HCL variables are not supported by fieldlab-agent")
            elif key != "job":
                self.report.error(
                    _short(str(key)), "not part of a Nomad jobspec (a jobspec holds one job block)"
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
        self._name(job_id, join(path, "id") if job_id != label else path, "job ID")
        job_type = self._choice(body, "type", path, JOB_TYPES, "service")
        meta = self._str_map(body, "meta", path)
        default_vault = self._vault(body, path)
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
                self.report.error(group_path, f'duplicate group name "{_short(name)}"')
            seen.add(name)
            group = self._group(job_id, job_type, name, group_body, group_path, implicit, default_vault)
            if group is not None:
                groups.append(group)
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
    ) -> Group | None:
        if implicit is None:
            self._keys(body, "group", path)
            self._name(name, path, "group name")
        count = self._int(
            body, "count", path, 1, minimum=0, maximum=self.limits.max_count, limit_name="max_count"
        )
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
                self.report.error(task_path, f'duplicate task name "{_short(task_name)}"')
            seen.add(task_name)
            tasks.append(
                self._task(
                    f"{job_id}-{name}-{task_name}", task_name, task_body, task_path, labels, default_vault
                )
            )
        services = self._services(body, path, labels, f"{job_id}-{name}", task_names=seen)
        if not task_blocks and "task" not in body:
            if any("connect" in sb for _, sb, _ in self._blocks(body, "service", path)):
                self.report.warn(path, _GATEWAY_GROUP)
                return None
            self.report.error(join(path, "task"), "required: at least one task")
        volumes, csi = read_volumes(self, body, path)
        tasks = check_mounts(self, tasks, volumes, csi, path)
        if tasks and all(t.lifecycle is not None for t in tasks):  # Nomad's TaskGroup.Validate
            main = "at least one main task (one without lifecycle)"
            self.report.error(path, f'group "{_short(name)}" must have {main}')
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
            shutdown_delay=self._duration(body, "shutdown_delay", path, 0.0),
            volumes=volumes,
        )

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
    ) -> Task:
        self._keys(body, "task", path)
        self._name(name, path, "task name")
        driver = self._driver(body, path)
        config = self._config(body, path, driver, labels)
        env = self._str_map(body, "env", path, env=True)
        resources = self._resources(body, path)
        kill_timeout = self._duration(body, "kill_timeout", path, 5.0)
        if kill_timeout > self.limits.max_kill_timeout:  # Nomad's client caps it, it does not refuse
            self.report.warn(
                join(path, "kill_timeout"),
                f"{format_duration(kill_timeout)} is more than the client's max_kill_timeout "
                f"({format_duration(self.limits.max_kill_timeout)}): capped to it",
            )
            kill_timeout = self.limits.max_kill_timeout
        kill_signal = self._signal(body, "kill_signal", path, _DEFAULT_KILL_SIGNAL.get(driver, "SIGTERM"))
        templates = self._templates(body, path)
        services = self._services(body, path, labels, service_name, task_names=None)
        user = self._str(body, "user", path)
        vault = self._vault(body, path) or default_vault
        return Task(
            name=name,
            driver=driver,
            config=config,
            env=env,
            resources=resources,
            kill_timeout=kill_timeout,
            kill_signal=kill_signal,
            templates=templates,
            services=services,
            user=user,
            vault=vault,
            meta=self._str_map(body, "meta", path),
            constraints=read_constraints(self, body, path, task_level=True),
            logs=self._logs(body, path),
            shutdown_delay=self._duration(body, "shutdown_delay", path, 0.0),
            lifecycle=self._lifecycle(body, path),
            volume_mounts=read_mounts(self, body, path),
        )

    def _lifecycle(self, body: Body, path: str) -> Lifecycle | None:
        """The `lifecycle` block (Nomad's TaskLifecycleConfig.Validate: a hook is required and one of
        prestart, poststart, poststop)."""
        blocks = list(self._blocks(body, "lifecycle", path, single=True))
        if not blocks:
            return None
        _, lb, lpath = blocks[0]
        self._keys(lb, "lifecycle", lpath)
        hook = self._choice(lb, "hook", lpath, LIFECYCLE_HOOKS, "", required=True, what="lifecycle hook")
        sidecar = self._bool(lb, "sidecar", lpath, False)
        return Lifecycle(hook=hook, sidecar=sidecar) if hook else None

    def _logs(self, body: Body, path: str) -> LogConfig:
        """The `logs` block, checked as Nomad's LogConfig.Validate (at least 1 file of at least 1 MB;
        against the group's ephemeral_disk in _ephemeral_disk)."""
        blocks = list(self._blocks(body, "logs", path, single=True))
        if not blocks:
            return LogConfig()
        _, lb, lpath = blocks[0]
        self._keys(lb, "logs", lpath)
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
            f'driver "{_short(driver)}" is not run by fieldlab-agent: it runs {", ".join(DRIVERS)}',
        )
        return ""

    def _vault(self, body: Body, path: str) -> Vault | None:
        blocks = list(self._blocks(body, "vault", path, single=True))
        if not blocks:
            return None
        _, v, vpath = blocks[0]
        self._keys(v, "vault", vpath)
        policies = self._str_list(v, "policies", vpath)
        role = self._str(v, "role", vpath)
        if not policies:
            # Nomad >= 1.7 logs in with the task's workload identity (a JWT role) and takes the
            # policies from that role. Not implemented here; through the agent's token role an empty
            # list would grant every policy the role allows, so the token gets Vault's default only.
            self.report.warn(
                vpath,
                "a vault block without policies uses Nomad's workload identity, which fieldlab-agent "
                "does not implement: the task's token has only Vault's \"default\" policy",
            )
            policies = ("default",)
        for i, policy in enumerate(policies):
            if not policy.strip() or policy == "root":
                self.report.error(
                    f"{join(vpath, 'policies')}[{i}]", f"{_short(policy)!r} cannot be a task's policy"
                )
        if role:
            self.report.warn(
                join(vpath, "role"),
                "workload identity roles are not implemented by fieldlab-agent: the task's token is "
                "created through the agent's token role with the block's policies",
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
        )

    # --- group parts ---------------------------------------------------------------------------------------

    def _group_network(
        self, body: Body, path: str, task_blocks: list[tuple[str, Body, str]]
    ) -> Network | None:
        """The group's network, with the ports of its tasks' (deprecated) `resources { network {...} }`
        added: a group without a network of its own gets one in mode "host" for them, as Nomad had."""
        network = self._network(body, path)
        seen = {p.label for p in network.ports} if network else set()
        statics = {p.static: p.label for p in network.ports if p.static} if network else {}
        task_ports: list[Port] = []
        for _, task_body, task_path in task_blocks:
            if not isinstance(task_body, Mapping):
                continue
            for _, rb, rpath in self._blocks(task_body, "resources", task_path, single=True):
                for _, net, npath in self._blocks(rb, "network", rpath):
                    self.report.warn(npath, _TASK_NETWORK_DEPRECATED)
                    self._keys(net, "network", npath)
                    if net.get("mode") is not None:
                        self.report.warn(
                            join(npath, "mode"), "ignored in a task's network: the group's is used"
                        )
                    task_ports += self._ports(net, npath, seen, statics)
        if not task_ports:
            return network
        if network is None:
            return Network(mode="host", ports=tuple(task_ports))
        if network.mode == "none":
            return network  # reported by _network when it has ports; task ports cannot be given either
        return Network(mode=network.mode, ports=network.ports + tuple(task_ports))

    def _network(self, body: Body, path: str) -> Network | None:
        blocks = list(self._blocks(body, "network", path, single=True))
        if not blocks:
            return None
        _, net, npath = blocks[0]
        self._keys(net, "network", npath)
        mode = self._str(net, "mode", npath, "host")
        if mode.startswith("cni/"):
            self.report.error(
                join(npath, "mode"), f'CNI networks ("{_short(mode)}") are not supported by fieldlab-agent'
            )
        elif mode not in NETWORK_MODES:
            self.report.error(
                join(npath, "mode"), f'"{_short(mode)}" is not one of {_choices(NETWORK_MODES)}'
            )
        ports = self._ports(net, npath, set(), {})
        if ports and mode == "none":
            self.report.error(join(npath, "port"), 'ports need network mode "bridge" or "host"')
        return Network(mode=mode, ports=tuple(ports))

    def _ports(self, net: Body, npath: str, seen: set[str], statics: dict[int, str]) -> list[Port]:
        """The `port` and `reserved_ports` blocks of a network (labels in `seen` and static ports in
        `statics` are taken already, and are added to)."""
        ports = []
        for key in ("port", "reserved_ports"):
            for label, port, ppath in self._blocks(net, key, npath, labelled=True):
                self._keys(port, "port", ppath)
                if not _PORT_LABEL.match(label):
                    self.report.error(
                        ppath,
                        "a port label must be 1 to 128 characters, without spaces or control characters",
                    )
                if label in seen:
                    self.report.error(ppath, f'duplicate port label "{_short(label)}"')
                seen.add(label)
                to = self._port_number(port, "to", ppath, same_as_host=True)
                static = self._port_number(port, "static", ppath)
                if static in statics:
                    self.report.error(
                        join(ppath, "static"),
                        f'host port {static} is also taken by port "{_short(statics[static])}"',
                    )
                elif static:
                    statics[static] = label
                ports.append(Port(label=label, to=to, static=static))
        return ports

    def _port_number(self, body: Body, key: str, path: str, *, same_as_host: bool = False) -> int:
        """A port number; 0 when unset. `to`: 0 or -1 mean "the same as the host port" (Nomad);
        `static`: 0 means a dynamic port."""
        before = len(self.report.problems)
        value = self._int(body, key, path, 0)
        if body.get(key) is None or len(self.report.problems) > before:
            return 0
        if value == 0 or (same_as_host and value == -1):
            return 0
        if not 1 <= value <= 65535:
            what = "1-65535; 0 or -1: the same as the host port" if same_as_host else "1-65535"
            self.report.error(join(path, key), f"{value} is not a port number ({what})")
            return 0
        return value

    def _restart(self, body: Body, path: str, job_type: str) -> RestartPolicy:
        default = _RESTART_DEFAULTS["batch" if job_type in ("batch", "sysbatch") else "service"]
        blocks = list(self._blocks(body, "restart", path, single=True))
        if not blocks:
            return default
        _, rb, rpath = blocks[0]
        self._keys(rb, "restart", rpath)
        before = len(self.report.problems)
        policy = RestartPolicy(
            attempts=self._int(rb, "attempts", rpath, default.attempts, minimum=0),
            interval=self._duration(rb, "interval", rpath, default.interval),
            delay=self._duration(rb, "delay", rpath, default.delay),
            mode=self._choice(rb, "mode", rpath, RESTART_MODES, default.mode),
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

    def _services(
        self, body: Body, path: str, labels: set[str], default_name: str, *, task_names: set[str] | None
    ) -> tuple[Service, ...]:
        """A group's services (`task_names`: its tasks) or a task's (`task_names` None)."""
        services = []
        for _, sb, spath in self._blocks(body, "service", path):
            self._keys(sb, "service", spath)
            name = self._str(sb, "name", spath, default_name)
            # Nomad checks a name after interpolation; its default (job-group-task) is never refused.
            if sb.get("name") is not None and "${" not in name and not _SERVICE_NAME.match(name):
                self.report.error(
                    join(spath, "name"),
                    f'"{_short(name)}" is not a valid service name (letters, digits and dashes, at most 63)',
                )
            port = self._port_label(sb, "port", spath, labels)
            checks = []
            for _, cb, cpath in self._blocks(sb, "check", spath):
                if cb.get("type") in UNRUN_CHECK_TYPES:
                    self._keys(cb, "check", cpath)
                    self.report.warn(
                        join(cpath, "type"),
                        f"{cb.get('type')} checks are not implemented by fieldlab-agent: not registered",
                    )
                    continue
                checks.append(self._check(cb, cpath, name, port, labels, task_names))
            services.append(
                Service(
                    name=name,
                    port=port,
                    tags=self._str_list(sb, "tags", spath),
                    checks=tuple(checks),
                    provider=self._choice(sb, "provider", spath, SERVICE_PROVIDERS, "consul"),
                )
            )
        return tuple(services)

    def _check(
        self,
        body: Body,
        path: str,
        service: str,
        service_port: str,
        labels: set[str],
        task_names: set[str] | None,
    ) -> Check:
        self._keys(body, "check", path)
        ctype = self._choice(body, "type", path, CHECK_TYPES, "", required=True, what="check type")
        check_path = self._str(body, "path", path)
        if ctype == "http" and not check_path and "path" not in body:
            self.report.error(join(path, "path"), "required for http checks")
        elif check_path and ctype in ("tcp", "script"):
            self.report.warn(join(path, "path"), f"only applies to http checks; ignored for {ctype}")
        port = self._port_label(body, "port", path, labels)
        if ctype in ("http", "tcp") and not port and not service_port and "port" not in body:
            self.report.error(join(path, "port"), f"{ctype} checks need a port (on the check or its service)")
        command = self._str(body, "command", path)
        task = self._check_task(body, path, task_names)
        if ctype == "script":
            if task_names is not None and not task:
                self.report.error(
                    path, "script checks need a task-level service (the script runs in the task)"
                )
            elif not command and "command" not in body:
                self.report.error(join(path, "command"), "required for script checks")
        elif command:
            self.report.error(join(path, "command"), f"only applies to script checks, not {ctype}")
        interval = self._duration(body, "interval", path, 10.0, required=True)
        timeout = self._duration(body, "timeout", path, 2.0, required=True)
        for key, value in (("interval", interval), ("timeout", timeout)):
            if key in body and 0 <= value < _MIN_CHECK_INTERVAL:
                self.report.error(join(path, key), f"must be at least {_MIN_CHECK_INTERVAL:g}s")
        return Check(
            name=self._str(body, "name", path, f'service: "{service}" check'),
            type=ctype,
            path=check_path,
            interval=interval,
            timeout=timeout,
            port=port,
            command=command,
            args=self._str_list(body, "args", path),
            task=task,
        )

    def _check_task(self, body: Body, path: str, task_names: set[str] | None) -> str:
        """The task a group-level check runs in (script checks)."""
        task = self._str(body, "task", path)
        if not task:
            return ""
        if task_names is None:
            self.report.warn(join(path, "task"), "only used in a group's services; ignored in a task's")
            return ""
        if task not in task_names:
            self.report.error(join(path, "task"), f'the group has no task "{_short(task)}"')
        return task

    def _port_label(self, body: Body, key: str, path: str, labels: set[str]) -> str:
        """A port label of the group's network, or a port number (`port = 9001` or "9001", what
        `nomad job init -connect` writes): Nomad takes a number as the port itself."""
        label = self._str(body, key, path)
        if label in labels or not label or "${" in label:  # interpolated at runtime, as Nomad does
            return label
        if _PORT_NUMBER.match(label):
            if not 1 <= int(label) <= 65535:
                self.report.error(join(path, key), f"{label} is not a port number (1-65535)")
                return ""
            return str(int(label))
        where = "the group's network" if labels else "the group (it has no network ports)"
        self.report.error(join(path, key), f'port "{_short(label)}" is not defined in {where}')
        return label

    # --- task parts ----------------------------------------------------------------------------------------

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
        blocks = list(self._blocks(body, "resources", path, single=True))
        if not blocks:
            return Resources()
        _, rb, rpath = blocks[0]
        self._keys(rb, "resources", rpath)
        return Resources(
            cpu=self._int(rb, "cpu", rpath, Resources.cpu, minimum=_MIN_CPU),
            memory=self._int(rb, "memory", rpath, Resources.memory, minimum=_MIN_MEMORY),
        )

    def _templates(self, body: Body, path: str) -> tuple[Template, ...]:
        templates = []
        destinations: dict[str, str] = {}
        for _, tb, tpath in self._blocks(body, "template", path):
            template = self._template(tb, tpath)
            if template.destination in destinations:
                self.report.error(
                    join(tpath, "destination"),
                    f'"{template.destination}" is also written by {destinations[template.destination]}',
                )
            elif template.destination:
                destinations[template.destination] = tpath
            templates.append(template)
        if len(templates) > self.limits.max_templates:  # each one rendered, held, stored per task
            self.report.error(
                path,
                f"{len(templates)} templates in one task, more than the {self.limits.max_templates} "
                "a task may have (client config template_max_per_task)",
            )
        return tuple(templates)

    def _template(self, body: Body, path: str) -> Template:
        self._keys(body, "template", path)
        data = self._str(body, "data", path)
        source = self._str(body, "source", path)
        if "data" in body and "source" in body and body["data"] is not None and body["source"] is not None:
            self.report.error(path, 'set either "data" or "source", not both')
        elif body.get("data") is None and body.get("source") is None:
            self.report.error(path, 'needs "data" or "source"')
        destination = self._destination(body, path)
        mode = self._choice(body, "change_mode", path, CHANGE_MODES, "restart")
        change_signal = self._signal(body, "change_signal", path, "")
        if mode == "signal" and not change_signal and body.get("change_signal") is None:
            self.report.error(join(path, "change_signal"), 'required with change_mode "signal"')
        elif change_signal and mode != "signal":
            self.report.warn(
                join(path, "change_signal"), f'only used with change_mode "signal", not "{mode}"'
            )
        change_script = self._change_script(body, path)
        if mode == "script" and change_script is None and body.get("change_script") is None:
            self.report.error(join(path, "change_script"), 'required with change_mode "script"')
        elif change_script is not None and mode != "script":
            self.report.warn(
                join(path, "change_script"), f'only used with change_mode "script", not "{mode}"'
            )
        wait_min, wait_max = 0.0, 0.0
        for _, wb, wpath in self._blocks(body, "wait", path, single=True):
            self._keys(wb, "wait", wpath)
            wait_min = self._duration(wb, "min", wpath, 0.0)
            wait_max = self._duration(wb, "max", wpath, 0.0)
            if "max" in wb and wait_max < wait_min:
                self.report.error(join(wpath, "max"), f"must not be less than min ({wait_min:g}s)")
        return Template(
            destination=destination,
            data=data,
            source=source,
            change_mode=mode,
            change_signal=change_signal,
            change_script=change_script,
            perms=self._perms(body, path),
            splay=self._duration(body, "splay", path, 5.0),
            wait_min=wait_min,
            wait_max=wait_max,
            error_on_missing_key=self._bool(body, "error_on_missing_key", path, False),
            env=self._bool(body, "env", path, False),
            left_delimiter=self._delimiter(body, "left_delimiter", path, "{{"),
            right_delimiter=self._delimiter(body, "right_delimiter", path, "}}"),
        )

    def _delimiter(self, body: Body, key: str, path: str, default: str) -> str:
        text = self._str(body, key, path, default)
        if not text or len(text) > 16 or any(c.isspace() for c in text):
            self.report.error(join(path, key), "must be 1 to 16 characters, without spaces")
            return default
        return text

    def _destination(self, body: Body, path: str) -> str:
        """Where a template is written: as Nomad, any file inside the task dir (`template.out`,
        `usr/local/bin/app.sh`, `local/...`, `secrets/...`) or inside the alloc's shared dir
        (`alloc/...` or `../alloc/...`), once `${NOMAD_*_DIR}` is read. Refused as Nomad refuses what
        leaves the alloc dir: an absolute path, a `..` out of the task dir other than into the shared
        alloc/ dir (this sandbox does not reach the other tasks' dirs), a path naming a dir itself."""
        raw = self._str(body, "destination", path, required=True)
        if not raw:
            return ""
        text = raw
        for var, directory in _TASK_DIR_VARS.items():
            if text.startswith(var):
                text = directory + text[len(var) :]
        normal = posixpath.normpath(text) if text else "."
        parts = normal.split("/")
        if parts[:2] == ["..", "alloc"]:
            normal, parts = "/".join(parts[1:]), parts[1:]
        problem = ""
        if text.startswith("/"):
            problem = "is an absolute path: give one relative to the task dir"
        elif parts[0] == "..":
            problem = 'leaves the task dir: ".." leads only into the shared alloc/ dir (../alloc/...)'
        elif normal in (".", *TEMPLATE_DIRS) or text.endswith("/"):
            problem = "names a directory: give a file in it"
        if problem:
            self.report.error(
                join(path, "destination"),
                f'"{raw}" {problem} (a file inside the task dir, e.g. local/..., secrets/..., or in the '
                "alloc's shared alloc/ dir)",
            )
            return ""
        return normal

    def _change_script(self, body: Body, path: str) -> ChangeScript | None:
        blocks = list(self._blocks(body, "change_script", path, single=True))
        if not blocks:
            return None
        _, sb, spath = blocks[0]
        self._keys(sb, "change_script", spath)
        command = self._str(sb, "command", spath, required=True)
        if not command.strip() and "command" in sb:
            self.report.error(join(spath, "command"), "must not be empty")
        return ChangeScript(
            command=command,
            args=self._str_list(sb, "args", spath),
            timeout=self._duration(sb, "timeout", spath, 5.0),
            fail_on_error=self._bool(sb, "fail_on_error", spath, False),
        )

    def _perms(self, body: Body, path: str) -> str:
        text = self._str(body, "perms", path, "0644")
        if not re.fullmatch(r"[0-7]{1,4}", text):
            self.report.error(join(path, "perms"), f'"{text}" is not octal file permissions like "0644"')
            return "0644"
        return f"{int(text, 8):04o}"

    def _signal(self, body: Body, key: str, path: str, default: str) -> str:
        name = self._str(body, key, path, default)
        if name == default or name in signal.Signals.__members__:
            return name
        guess = name.upper() if name.upper().startswith("SIG") else f"SIG{name.upper()}"
        hint = f' (did you mean "{guess}"?)' if guess in signal.Signals.__members__ else ""
        self.report.error(join(path, key), f'"{name}" is not a signal name{hint}')
        return default

    # --- shapes: blocks, keys, names -----------------------------------------------------------------------

    def _blocks(
        self, body: Body, key: str, path: str, *, labelled: bool = False, single: bool = False
    ) -> Iterator[tuple[str, Body, str]]:
        """(label or "", body, path) of each `key` block, from HCL blocks or JSON objects."""
        bpath = join(path, key)
        value = body.get(key)
        if value is None:
            return
        if isinstance(value, Invalid):
            self.report.error(bpath, value.reason)
            return
        found: list[tuple[str, Body, str]] = []
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            found.extend(self._block_item(item, i, key, bpath, labelled=labelled, single=single))
        if single and len(found) > 1:
            self.report.error(bpath, f"at most one {key} block")
            found = found[:1]
        yield from found

    def _block_item(
        self, item: object, i: int, key: str, bpath: str, *, labelled: bool, single: bool
    ) -> list[tuple[str, Body, str]]:
        found: list[tuple[str, Body, str]] = []
        if isinstance(item, Block):
            if len(item.labels) != (1 if labelled else 0):
                want = "exactly one label" if labelled else "no labels"
                self.report.error(bpath, f"a {key} block takes {want}, not {len(item.labels)}")
                return found
            label = item.labels[0] if labelled else ""
            found.append((label, item.body, self._block_path(bpath, label, i, labelled, single)))
        elif isinstance(item, Mapping) and labelled:  # HCL JSON: {"<label>": {...} or [{...}, ...]}
            for label, inner in item.items():
                for one in inner if isinstance(inner, list) else [inner]:
                    if isinstance(one, Mapping):
                        found.append((str(label), one, f"{bpath}.{label}"))
                    else:
                        self.report.error(f"{bpath}.{label}", f"expected a {key} block (an object)")
        elif isinstance(item, Mapping):
            found.append(("", item, self._block_path(bpath, "", i, labelled, single)))
        elif isinstance(item, Invalid):
            self.report.error(bpath, item.reason)
        else:
            self.report.error(bpath, f"expected a {key} block, not {_kind(item)}")
        return found

    @staticmethod
    def _block_path(bpath: str, label: str, index: int, labelled: bool, single: bool) -> str:
        if labelled:
            return f"{bpath}.{label}"
        return bpath if single else f"{bpath}[{index}]"

    def _keys(self, body: Body, context: str, path: str) -> None:
        """Warn about Nomad fields the agent does not implement; reject fields that are not Nomad's."""
        for key, value in body.items():
            if key in IMPLEMENTED[context]:
                continue
            if key in UNIMPLEMENTED[context]:
                if value is not None:
                    self.report.warn(join(path, key))
                continue
            near = difflib.get_close_matches(key, sorted(known(context)), n=1) if len(key) < 64 else []
            hint = f' (did you mean "{near[0]}"?)' if near else ""
            if context.startswith("config."):
                reason = f"not a config field of Nomad's {context.removeprefix('config.')} driver{hint}"
            else:
                reason = f"not a Nomad jobspec field here{hint}"
            self.report.error(join(path, _short(key)), reason)

    def _name(self, name: str, path: str, what: str) -> None:
        if not _NAME.match(name):
            rule = 'at most 128 letters, digits, "_", "." or "-", starting with a letter or digit'
            self.report.error(path, f'{what} "{_short(name)}" must be {rule}')

    # --- values ------------------------------------------------------------------------------------------

    def _get(self, body: Body, key: str, path: str, *, required: bool = False) -> object:
        """The value, or None when unset (after reporting it if required) or already reported invalid."""
        value = body.get(key)
        if isinstance(value, Invalid):
            self.report.error(join(path, key), value.reason)
            return None
        if value is None and required:
            self.report.error(join(path, key), "required")
        return value

    def _str(self, body: Body, key: str, path: str, default: str = "", *, required: bool = False) -> str:
        value = self._get(body, key, path, required=required)
        if value is None:
            return default
        text = _scalar_text(value)
        if text is None:
            self.report.error(join(path, key), f"expected a string, not {_kind(value)}")
            return default
        return text

    def _choice(
        self,
        body: Body,
        key: str,
        path: str,
        options: tuple[str, ...],
        default: str,
        *,
        required: bool = False,
        what: str = "",
    ) -> str:
        value = self._str(body, key, path, default, required=required)
        if value == default or value in options:
            return value
        self.report.error(join(path, key), f'"{_short(value)}" is not one of {_choices(options)}')
        return default

    def _int(
        self,
        body: Body,
        key: str,
        path: str,
        default: int,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        limit_name: str = "",
    ) -> int:
        """A whole number; `maximum` is the client's `limit_name` (the error names it)."""
        value = self._get(body, key, path)
        if value is None:
            return default
        number = _whole(value)
        reason = ""
        if number is None:
            reason = f"expected a whole number, not {_kind(value)}"
        elif abs(number) > _MAX_INT:
            reason = "the number is out of range"
        elif minimum is not None and number < minimum:
            reason = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
        elif maximum is not None and number > maximum:
            reason = f"{key} {number} is more than the client's {limit_name} ({maximum})"
        if reason or number is None:
            self.report.error(join(path, key), reason)
            return default
        return number

    def _bool(self, body: Body, key: str, path: str, default: bool) -> bool:
        value = self._get(body, key, path)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        self.report.error(join(path, key), f"expected true or false, not {_kind(value)}")
        return default

    def _duration(
        self,
        body: Body,
        key: str,
        path: str,
        default: float,
        *,
        required: bool = False,
        maximum: float | None = None,
        limit_name: str = "",
    ) -> float:
        """Seconds; `maximum` is the client's `limit_name` (the error names it)."""
        value = self._get(body, key, path, required=required)
        if value is None:
            return default
        if not isinstance(value, str):
            self.report.error(
                join(path, key), f'expected a duration like "20s" or "1h30m", not {_kind(value)}'
            )
            return default
        try:
            seconds = duration_seconds(value)
        except ValueError as e:
            self.report.error(join(path, key), str(e))
            return default
        reason = ""
        if seconds < 0:
            reason = "must not be negative"
        elif maximum is not None and seconds > Fraction(maximum):
            reason = (
                f"{key} {_short(value.strip())} is more than the client's {limit_name} "
                f"({format_duration(maximum)})"
            )
        elif seconds * 1_000_000_000 > MAX_NS:
            reason = f'duration "{_short(value)}" is out of range (at most about 292 years)'
        if reason:
            self.report.error(join(path, key), reason)
            return default
        return float(seconds)

    def _str_list(self, body: Body, key: str, path: str) -> tuple[str, ...]:
        value = self._get(body, key, path)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.report.error(join(path, key), f"expected a list of strings, not {_kind(value)}")
            return ()
        out = []
        for i, item in enumerate(value):
            text = _scalar_text(item)
            if isinstance(item, Invalid):
                self.report.error(f"{join(path, key)}[{i}]", item.reason)
            elif text is None:
                self.report.error(f"{join(path, key)}[{i}]", f"expected a string, not {_kind(item)}")
            else:
                out.append(text)
        return tuple(out)

    def _mapping(self, body: Body, key: str, path: str) -> Mapping[str, object] | None:
        """A map given as an attribute (`env = {...}`, JSON) or as one block (`env {...}`)."""
        value = self._get(body, key, path)
        if value is None:
            return None
        if isinstance(value, list) and value and all(isinstance(v, Block) for v in value):
            if len(value) != 1:
                self.report.error(join(path, key), f"at most one {key} block")
            block = value[0]
            assert isinstance(block, Block)
            if block.labels:
                self.report.error(join(path, key), f"a {key} block takes no labels")
            return block.body
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], Mapping):
            return _str_keys(value[0])  # Nomad's API JSON writes some blocks as a list of one object
        if isinstance(value, Mapping):
            return _str_keys(value)
        what = "an empty list" if value == [] else _kind(value)
        self.report.error(join(path, key), f"expected a {key} block or a map, not {what}")
        return None

    def _str_map(self, body: Body, key: str, path: str, *, env: bool = False) -> dict[str, str]:
        mapping = self._mapping(body, key, path)
        out: dict[str, str] = {}
        for name, value in (mapping or {}).items():
            vpath = join(join(path, key), _short(name))
            if env and (not name or "=" in name or "\0" in name):
                self.report.error(vpath, "not a valid environment variable name")
            if isinstance(value, Invalid):
                self.report.error(vpath, value.reason)
                continue
            text = _scalar_text(value)
            if text is None:
                self.report.error(vpath, f"expected a string, not {_kind(value)}")
            else:
                out[name] = text
        return out

    def _plain(self, value: object, path: str) -> object:
        """A config value as plain data: blocks become lists of maps (as Nomad's API JSON writes them)."""
        if isinstance(value, Invalid):
            self.report.error(path, value.reason)
            return None
        if isinstance(value, Block):
            plain = {k: self._plain(v, join(path, k)) for k, v in value.body.items()}
            for label in reversed(value.labels):
                plain = {label: plain}
            return plain
        if isinstance(value, list):
            return [
                self._plain(v, path if isinstance(v, Block) else f"{path}[{i}]") for i, v in enumerate(value)
            ]
        if isinstance(value, Mapping):
            return {str(k): self._plain(v, join(path, str(k))) for k, v in value.items()}
        if isinstance(value, int | float) and not isinstance(value, bool) and _scalar_text(value) is None:
            self.report.error(path, "the number is out of range")
            return None
        return value


def _scalar_text(value: object) -> str | None:
    """A string, or a number or bool written as one (HCL converts them so); None for anything else
    (a number out of range too)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) <= _MAX_INT else None
    if isinstance(value, float):
        return str(value) if math.isfinite(value) else None
    return None


def _whole(value: object) -> int | None:
    """A whole number written as a number or a string, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and _INT.match(value.strip()):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return _MAX_INT + 1  # more digits than any int64: out of range, not parsed
    return None


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int | float):
        return f"the number {value}" if _scalar_text(value) is not None else "a number out of range"
    if isinstance(value, str):
        return f'"{value}"' if len(value) < 40 else "a string"
    kinds: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (list, "a list"),
        ((Mapping, Block), "a block or map"),
        (Invalid, "an invalid value"),
    )
    return next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)


def _short(text: str) -> str:
    """A name or value as an error message quotes it: at most 64 characters."""
    return text if len(text) <= 64 else f"{text[:50]}... ({len(text)} characters)"


def _str_keys(value: Mapping[_T, object]) -> dict[str, object]:
    return {str(k): v for k, v in value.items()}
