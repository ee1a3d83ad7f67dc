"""The builder: a plain body (from HCL or JSON) -> the agent's `Job`, validating every field it reads.

Every problem is recorded with its path and parsing goes on, so that one pass reports all of them. Nomad's
defaults are applied where the jobspec leaves a field out (restart policy by job type, kill signal by
driver, service and check names).
"""

from __future__ import annotations

import difflib
import posixpath
import re
import signal
from collections.abc import Iterator, Mapping
from typing import TypeVar

from agent.jobspec.durations import parse_duration
from agent.jobspec.fields import IMPLEMENTED, UNIMPLEMENTED, known
from agent.jobspec.limits import DEFAULT_LIMITS, Limits
from agent.jobspec.tree import Block, Body, Invalid, Report, join
from agent.model import (
    ChangeScript,
    Check,
    Group,
    Job,
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

JOB_TYPES = ("service", "batch", "system", "sysbatch")
DRIVERS = ("docker", "exec")
NETWORK_MODES = ("bridge", "host", "none")
RESTART_MODES = ("fail", "delay")
CHANGE_MODES = ("noop", "signal", "restart", "script")
VAULT_CHANGE_MODES = ("noop", "signal", "restart")
CHECK_TYPES = ("http", "tcp", "script")
SERVICE_PROVIDERS = ("consul", "nomad")
TEMPLATE_DIRS = ("local", "secrets", "alloc")  # alloc/: the alloc's shared dir, as Nomad's sandbox

# Names end up in container names, label values and paths.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_PORT_LABEL = re.compile(r"^[A-Za-z0-9_]+$")  # Nomad's rule: it becomes NOMAD_PORT_<label>
_SERVICE_NAME = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9-]{0,61}[a-z0-9])$")  # RFC 1123, as Nomad
_INT = re.compile(r"^[+-]?\d+$")
_RESTART_DEFAULTS = {
    "service": RestartPolicy(attempts=2, interval=1800.0, delay=15.0, mode="fail"),
    "batch": RestartPolicy(attempts=3, interval=86400.0, delay=15.0, mode="fail"),
}
_MIN_RESTART_INTERVAL = 5.0
_MIN_CHECK_INTERVAL = 1.0
_MIN_CPU = 1
_MIN_MEMORY = 10
_DEFAULT_KILL_SIGNAL = {"docker": "SIGTERM", "exec": "SIGINT"}
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
        for key in top:
            if key in ("variable", "variables", "locals"):
                self.report.error(key, "HCL variables are not supported by fieldlab-agent")
            elif key != "job":
                self.report.error(key, "not part of a Nomad jobspec (a jobspec holds one job block)")
        before = len(self.report.problems)
        blocks = list(self._blocks(top, "job", "", labelled=True))
        if not blocks:
            if len(self.report.problems) == before:
                self.report.error("job", "required: one job block")
            return None
        if len(blocks) > 1:
            self.report.error("job", "a jobspec holds exactly one job block")
        job_id, body, path = blocks[0]
        self._keys(body, "job", path)
        self._name(job_id, path, "job ID")
        job_type = self._choice(body, "type", path, JOB_TYPES, "service")
        meta = self._str_map(body, "meta", path)
        groups = []
        seen: set[str] = set()
        for name, group_body, group_path in self._blocks(body, "group", path, labelled=True):
            if name in seen:
                self.report.error(group_path, f'duplicate group name "{name}"')
            seen.add(name)
            groups.append(self._group(job_id, job_type, name, group_body, group_path))
        if not groups and "group" not in body:
            self.report.error(join(path, "group"), "required: at least one group")
        return Job(id=job_id, groups=tuple(groups), type=job_type, meta=meta)

    def _group(self, job_id: str, job_type: str, name: str, body: Body, path: str) -> Group:
        self._keys(body, "group", path)
        self._name(name, path, "group name")
        count = self._int(body, "count", path, 1, minimum=0)
        network = self._network(body, path)
        labels = {p.label for p in network.ports} if network else set()
        restart = self._restart(body, path, job_type)
        tasks = []
        seen: set[str] = set()
        for task_name, task_body, task_path in self._blocks(body, "task", path, labelled=True):
            if task_name in seen:
                self.report.error(task_path, f'duplicate task name "{task_name}"')
            seen.add(task_name)
            tasks.append(self._task(f"{job_id}-{name}-{task_name}", task_name, task_body, task_path, labels))
        if not tasks and "task" not in body:
            self.report.error(join(path, "task"), "required: at least one task")
        services = self._services(body, path, labels, f"{job_id}-{name}", task_level=False)
        return Group(
            name=name,
            tasks=tuple(tasks),
            count=count,
            network=network,
            restart=restart,
            services=services,
        )

    def _task(self, service_name: str, name: str, body: Body, path: str, labels: set[str]) -> Task:
        self._keys(body, "task", path)
        self._name(name, path, "task name")
        driver = self._choice(body, "driver", path, DRIVERS, "", required=True, what="driver")
        config = self._config(body, path, driver, labels)
        env = self._str_map(body, "env", path, env=True)
        resources = self._resources(body, path)
        kill_timeout = self._duration(body, "kill_timeout", path, 5.0)
        kill_signal = self._signal(body, "kill_signal", path, _DEFAULT_KILL_SIGNAL.get(driver, "SIGTERM"))
        templates = self._templates(body, path)
        services = self._services(body, path, labels, service_name, task_level=True)
        user = self._str(body, "user", path)
        vault = self._vault(body, path)
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
        )

    def _vault(self, body: Body, path: str) -> Vault | None:
        blocks = list(self._blocks(body, "vault", path, single=True))
        if not blocks:
            return None
        _, v, vpath = blocks[0]
        self._keys(v, "vault", vpath)
        policies = self._str_list(v, "policies", vpath)
        role = self._str(v, "role", vpath)
        if not policies:
            # Through the agent's token role an empty list would grant every policy the role allows.
            self.report.error(
                join(vpath, "policies"), "required: the policies of the task's Vault token (at least one)"
            )
        for i, policy in enumerate(policies):
            if not policy.strip() or policy == "root":
                self.report.error(f"{join(vpath, 'policies')}[{i}]", f"{policy!r} cannot be a task's policy")
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

    def _network(self, body: Body, path: str) -> Network | None:
        blocks = list(self._blocks(body, "network", path, single=True))
        if not blocks:
            return None
        _, net, npath = blocks[0]
        self._keys(net, "network", npath)
        mode = self._str(net, "mode", npath, "host")
        if mode.startswith("cni/"):
            self.report.error(
                join(npath, "mode"), f'CNI networks ("{mode}") are not supported by fieldlab-agent'
            )
        elif mode not in NETWORK_MODES:
            self.report.error(join(npath, "mode"), f'"{mode}" is not one of {_choices(NETWORK_MODES)}')
        ports = []
        seen: set[str] = set()
        statics: dict[int, str] = {}
        for label, port, ppath in self._blocks(net, "port", npath, labelled=True):
            self._keys(port, "port", ppath)
            if not _PORT_LABEL.match(label):
                self.report.error(ppath, f'port label "{label}" must match [A-Za-z0-9_]+')
            if label in seen:
                self.report.error(ppath, f'duplicate port label "{label}"')
            seen.add(label)
            to = self._port_number(port, "to", ppath, allow_same_as_host=True)
            if to and mode == "host":
                self.report.warn(
                    join(ppath, "to"), 'only applies in network mode "bridge"; ignored in "host" mode'
                )
            static = self._port_number(port, "static", ppath)
            if static in statics:
                self.report.error(
                    join(ppath, "static"), f'host port {static} is also taken by port "{statics[static]}"'
                )
            elif static:
                statics[static] = label
            ports.append(Port(label=label, to=to, static=static))
        if ports and mode == "none":
            self.report.error(join(npath, "port"), 'ports need network mode "bridge" or "host"')
        return Network(mode=mode, ports=tuple(ports))

    def _port_number(self, body: Body, key: str, path: str, *, allow_same_as_host: bool = False) -> int:
        before = len(self.report.problems)
        value = self._int(body, key, path, 0)
        if body.get(key) is None or len(self.report.problems) > before:
            return 0
        if allow_same_as_host and value == -1:  # Nomad: -1 maps to the same port as the host's
            return 0
        if not 1 <= value <= 65535:
            self.report.error(join(path, key), f"{value} is not a port number (1-65535)")
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
        self, body: Body, path: str, labels: set[str], default_name: str, *, task_level: bool
    ) -> tuple[Service, ...]:
        services = []
        for _, sb, spath in self._blocks(body, "service", path):
            self._keys(sb, "service", spath)
            name = self._str(sb, "name", spath, default_name)
            if "${" not in name and not _SERVICE_NAME.match(name):
                self.report.error(
                    join(spath, "name"),
                    f'"{name}" is not a valid service name (letters, digits and dashes, at most 63)',
                )
            port = self._port_label(sb, "port", spath, labels)
            checks = []
            for _, cb, cpath in self._blocks(sb, "check", spath):
                checks.append(self._check(cb, cpath, name, port, labels, task_level=task_level))
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
        self, body: Body, path: str, service: str, service_port: str, labels: set[str], *, task_level: bool
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
        if ctype == "script":
            if not task_level:
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
        )

    def _port_label(self, body: Body, key: str, path: str, labels: set[str]) -> str:
        label = self._str(body, key, path)
        if label and label not in labels:
            where = "the group's network" if labels else "the group (it has no network ports)"
            self.report.error(join(path, key), f'port "{label}" is not defined in {where}')
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
        if driver not in DRIVERS:
            return plain
        self._keys(plain, f"config.{driver}", cpath)
        # The fields the agent implements are stored normalised (strings, lists of strings, a string map);
        # the others are kept as written, blocks as lists of maps.
        normal: dict[str, object] = {}
        if driver == "docker":
            normal["image"] = self._str(plain, "image", cpath, required=True)
            if not str(normal["image"]).strip() and "image" in plain:
                self.report.error(join(cpath, "image"), "must not be empty")
            normal["command"] = self._str(plain, "command", cpath)
            ports = list(self._str_list(plain, "ports", cpath))
            normal["ports"] = ports
            for i, label in enumerate(ports):
                if label not in labels:
                    where = "the group's network" if labels else "the group (it has no network ports)"
                    self.report.error(f"{cpath}.ports[{i}]", f'port "{label}" is not defined in {where}')
        else:
            normal["command"] = self._str(plain, "command", cpath, required=True)
            if not str(normal["command"]).strip() and "command" in plain:
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
        )

    def _destination(self, body: Body, path: str) -> str:
        raw = self._str(body, "destination", path, required=True)
        if not raw:
            return ""
        text = raw
        for var, directory in _TASK_DIR_VARS.items():
            if text.startswith(var):
                text = directory + text[len(var) :]
        parts = text.split("/")
        normal = posixpath.normpath(text)
        if (
            text.startswith("/")
            or ".." in parts
            or normal.split("/")[0] not in TEMPLATE_DIRS
            or "/" not in normal
        ):
            self.report.error(
                join(path, "destination"),
                f'"{raw}" must be a file under local/ or secrets/ of the task dir, or under the alloc\'s '
                'shared alloc/ dir, without ".."',
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
            near = difflib.get_close_matches(key, sorted(known(context)), n=1)
            hint = f' (did you mean "{near[0]}"?)' if near else ""
            if context.startswith("config."):
                reason = f"not a config field of Nomad's {context.removeprefix('config.')} driver{hint}"
            else:
                reason = f"not a Nomad jobspec field here{hint}"
            self.report.error(join(path, key), reason)

    def _name(self, name: str, path: str, what: str) -> None:
        if not _NAME.match(name):
            rule = 'at most 128 letters, digits, "_", "." or "-", starting with a letter or digit'
            self.report.error(path, f'{what} "{name}" must be {rule}')

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
        if what == "driver":
            reason = f'unsupported driver "{value}": fieldlab-agent runs {_choices(options)}'
        else:
            reason = f'"{value}" is not one of {_choices(options)}'
        self.report.error(join(path, key), reason)
        return default

    def _int(self, body: Body, key: str, path: str, default: int, *, minimum: int | None = None) -> int:
        value = self._get(body, key, path)
        if value is None:
            return default
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif (isinstance(value, float) and value.is_integer()) or (
            isinstance(value, str) and _INT.match(value.strip())
        ):
            number = int(value)
        if number is None:
            self.report.error(join(path, key), f"expected a whole number, not {_kind(value)}")
            return default
        if minimum is not None and number < minimum:
            reason = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
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

    def _duration(self, body: Body, key: str, path: str, default: float, *, required: bool = False) -> float:
        value = self._get(body, key, path, required=required)
        if value is None:
            return default
        if not isinstance(value, str):
            self.report.error(
                join(path, key), f'expected a duration like "20s" or "1h30m", not {_kind(value)}'
            )
            return default
        try:
            seconds = parse_duration(value)
        except ValueError as e:
            self.report.error(join(path, key), str(e))
            return default
        if seconds < 0:
            self.report.error(join(path, key), "must not be negative")
            return default
        return seconds

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
        if isinstance(value, list) and all(isinstance(v, Block) for v in value):
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
        self.report.error(join(path, key), f"expected a {key} block or a map, not {_kind(value)}")
        return None

    def _str_map(self, body: Body, key: str, path: str, *, env: bool = False) -> dict[str, str]:
        mapping = self._mapping(body, key, path)
        out: dict[str, str] = {}
        for name, value in (mapping or {}).items():
            vpath = join(join(path, key), name)
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
        return value


def _scalar_text(value: object) -> str | None:
    """A string, or a number or bool written as one (HCL converts them so); None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f'"{value}"' if len(value) < 40 else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping | Block):
        return "a block or map"
    return type(value).__name__


def _str_keys(value: Mapping[_T, object]) -> dict[str, object]:
    return {str(k): v for k, v in value.items()}
