"""A group's network and ports, and the services and checks of a group or task, read as Nomad reads
them (ports by label, static ports unique on the node, service names RFC 1123, checks by type)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from agent.jobspec.reader import BodyReader, choices, short
from agent.jobspec.tree import Body, join
from agent.model import Check, CheckRestart, Network, Port, Service

NETWORK_MODES = ("bridge", "host", "none")
CHECK_TYPES = ("http", "tcp", "script")
UNRUN_CHECK_TYPES = ("grpc",)  # Nomad's, accepted with a warning and not registered
SERVICE_PROVIDERS = ("consul", "nomad")
# Nomad's HCL2 jobspec takes any port label (a dash too); environment variable names clean it (see Port).
_PORT_LABEL = re.compile(r"^[^\x00-\x20\x7f]{1,128}$")
_SERVICE_NAME = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9-]{0,61}[a-z0-9])$")  # RFC 1123, as Nomad
_PORT_NUMBER = re.compile(r"^[0-9]{1,5}$")
_MIN_CHECK_INTERVAL = 1.0
_TASK_NETWORK_DEPRECATED = (
    "a task's network is deprecated in Nomad; fieldlab-agent adds its ports to the group's network"
)


class ServiceBlocks(BodyReader):
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
        found = self._single(body, "network", path)
        if found is None:
            return None
        net, npath = found
        mode = self._str(net, "mode", npath, "host")
        if mode.startswith("cni/"):
            self.report.error(
                join(npath, "mode"), f'CNI networks ("{short(mode)}") are not supported by fieldlab-agent'
            )
        elif mode not in NETWORK_MODES:
            self.report.error(join(npath, "mode"), f'"{short(mode)}" is not one of {choices(NETWORK_MODES)}')
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
                    self.report.error(ppath, f'duplicate port label "{short(label)}"')
                seen.add(label)
                to = self._port_number(port, "to", ppath, same_as_host=True)
                static = self._port_number(port, "static", ppath)
                if static in statics:
                    self.report.error(
                        join(ppath, "static"),
                        f'host port {static} is also taken by port "{short(statics[static])}"',
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
                    f'"{short(name)}" is not a valid service name (letters, digits and dashes, at most 63)',
                )
            port = self._port_label(sb, "port", spath, labels)
            service_restart = self._check_restart(sb, spath, None)
            checks = []
            for _, cb, cpath in self._blocks(sb, "check", spath):
                if cb.get("type") in UNRUN_CHECK_TYPES:
                    self._keys(cb, "check", cpath)
                    self.report.warn(
                        join(cpath, "type"),
                        f"{cb.get('type')} checks are not implemented by fieldlab-agent: not registered",
                    )
                    continue
                check = self._check(cb, cpath, name, port, labels, task_names)
                checks.append(replace(check, restart=self._check_restart(cb, cpath, service_restart)))
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
        method = self._str(body, "method", path, "GET")
        if method != "GET" and ctype != "http":
            self.report.warn(join(path, "method"), f"only applies to http checks; ignored for {ctype}")
        return Check(
            name=self._str(body, "name", path, f'service: "{service}" check'),
            type=ctype,
            path=check_path,
            method=method.upper(),
            interval=interval,
            timeout=timeout,
            port=port,
            command=command,
            args=self._str_list(body, "args", path),
            task=task,
        )

    def _check_restart(self, body: Body, path: str, inherited: CheckRestart | None) -> CheckRestart | None:
        """A `check_restart` block (Nomad's CheckRestart), else the one inherited from the service."""
        found = self._single(body, "check_restart", path)
        if found is None:
            return inherited
        block, bpath = found
        return CheckRestart(
            limit=self._int(block, "limit", bpath, 0, minimum=0),
            grace=self._duration(block, "grace", bpath, 1.0),
            ignore_warnings=self._bool(block, "ignore_warnings", bpath, False),
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
            self.report.error(join(path, "task"), f'the group has no task "{short(task)}"')
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
        self.report.error(join(path, key), f'port "{short(label)}" is not defined in {where}')
        return label

    # --- task parts ----------------------------------------------------------------------------------------
