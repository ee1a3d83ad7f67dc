"""A group's network and ports, and the services and checks of a group or task, read as Nomad reads
them (ports by label, static ports unique on the node, service names RFC 1123, checks by type)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import replace

from agent.client.checktarget import HTTP_METHODS
from agent.jobspec.reader import choices, short
from agent.jobspec.serviceopts import ServiceOptions
from agent.jobspec.tree import Body, join
from agent.structs.model import Check, CheckRestart, Network, Port, Service

NETWORK_MODES = ("bridge", "host", "none")
CHECK_TYPES = ("http", "tcp", "script", "grpc")  # grpc: Consul's checks only, run by Consul
SERVICE_PROVIDERS = ("consul", "nomad")
# Nomad's HCL2 jobspec takes any port label (a dash too); environment variable names clean it (see Port).
_PORT_LABEL = re.compile(r"^[^\x00-\x20\x7f]{1,128}$")
_SERVICE_NAME = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9-]{0,61}[a-z0-9])$")  # RFC 1123, as Nomad
_PORT_NUMBER = re.compile(r"^[0-9]{1,5}$")
_DNS_NAME = re.compile(
    r"^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$"
)
_CNI_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")  # a CNI network's name (agent.network.cni)
_MIN_CHECK_INTERVAL = 1.0
# Nomad's ServiceCheck.AddressMode ("" is "host"); "auto" is a service's only.
CHECK_ADDRESS_MODES = ("host", "alloc", "alloc_ipv6", "driver")
# Fields Nomad's validateNomad refuses in a nomad-provider check.
CONSUL_ONLY_CHECK_KEYS = (
    "expose",
    "success_before_passing",
    "failures_before_critical",
    "failures_before_warning",
    "tls_server_name",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TASK_NETWORK_DEPRECATED = (
    "a task's network is deprecated in Nomad; fieldlab-agent adds its ports to the group's network"
)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class ServiceBlocks(ServiceOptions):
    def _group_network(
        self, body: Body, path: str, task_blocks: list[tuple[str, Body, str]]
    ) -> Network | None:
        """The group's network, with the ports of its tasks' (deprecated) `resources { network {...} }`
        added: a group without a network of its own gets one in mode "host" for them, as Nomad had."""
        network = self._network(body, path)
        if network is not None:
            self._sandbox_refusals(network, path, task_blocks)
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
            if not _CNI_NAME.match(mode[len("cni/") :]):
                self.report.error(
                    join(npath, "mode"),
                    f'"{short(mode)}": cni/<name> names a CNI network of the client\'s cni_config_dir'
                    " (letters, digits, '_', '.', '-')",
                )
        elif mode not in NETWORK_MODES:
            self.report.error(
                join(npath, "mode"), f'"{short(mode)}" is not one of {choices(NETWORK_MODES)} or cni/<name>'
            )
        ports = self._ports(net, npath, set(), {})
        if ports and mode == "none":
            self.report.error(join(npath, "port"), 'ports need network mode "bridge", "cni/<name>" or "host"')
        hostname = self._str(net, "hostname", npath)
        if hostname and ("${" in hostname or not _DNS_NAME.match(hostname)):
            why = (
                "interpolation in network.hostname is not implemented by fieldlab-agent"
                if "${" in hostname
                else "Hostname is not a valid DNS name"  # Nomad's NetworkResource validation
            )
            self.report.error(join(npath, "hostname"), why)
        servers, searches, options = self._dns(net, npath)
        return Network(
            mode=mode,
            ports=tuple(ports),
            cni_args=self._cni_args(net, npath),
            hostname=hostname,
            dns_servers=servers,
            dns_searches=searches,
            dns_options=options,
        )

    def _dns(self, net: Body, npath: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """`dns { servers, searches, options }`: the resolv.conf of the group's tasks (each list set
        replaces the node's line, as Nomad's GenerateDNSMount; agent.drivers.base.Sandbox)."""
        found = self._single(net, "dns", npath)
        if found is None:
            return (), (), ()
        body, dpath = found
        self._keys(body, "dns", dpath)
        lists = (
            self._str_list(body, "servers", dpath),
            self._str_list(body, "searches", dpath),
            self._str_list(body, "options", dpath),
        )
        for key, values in zip(("servers", "searches", "options"), lists, strict=True):
            for i, value in enumerate(values):
                where = f"{join(dpath, key)}[{i}]"
                if "${" in value:
                    self.report.error(
                        where, "interpolation in network.dns is not implemented by fieldlab-agent"
                    )
                elif key == "servers" and not _is_ip(value):
                    self.report.error(where, f"{short(value)!r} is not an IP address")
                elif not value or any(c.isspace() for c in value):
                    self.report.error(where, "a resolv.conf entry must be non-empty, without spaces")
        return lists

    def _sandbox_refusals(
        self, network: Network, path: str, task_blocks: list[tuple[str, Body, str]]
    ) -> None:
        """hostname is the docker pause container's, dns a docker task's (the pause container's, or its
        own container's outside one: agent.drivers.base.Sandbox): refused where neither exists, with
        Nomad's words where Nomad refuses too."""
        npath = join(path, "network")
        dns = bool(network.dns_servers or network.dns_searches or network.dns_options)
        if network.hostname and not network.group_netns:  # Nomad's network manager says so
            self.report.error(
                join(npath, "hostname"),
                f'hostname cannot be set on task group using "{short(network.mode)}" networking mode',
            )
        for name, task_body, _ in task_blocks:
            driver = task_body.get("driver") if isinstance(task_body, Mapping) else None
            if not isinstance(driver, str) or driver == "docker":
                continue
            if network.hostname and network.group_netns:  # Nomad: the docker driver alone sets it
                self.report.error(
                    join(npath, "hostname"),
                    f"hostname is not currently supported on driver {short(driver)} (task {short(name)})",
                )
            if dns:  # Nomad mounts a resolv.conf into exec tasks; this agent does not
                self.report.error(
                    join(npath, "dns"),
                    f"refused: fieldlab-agent does not write a {short(driver)} task's resolv.conf"
                    f" (task {short(name)}): network.dns is honoured for docker tasks",
                )

    def _cni_args(self, net: Body, npath: str) -> tuple[tuple[str, str], ...]:
        """`cni { args = {...} }`: passed in CNI_ARGS to the plugins of a bridge or cni/<name> network,
        as Nomad's network hook passes them (agent.network.base.plan_cni_args)."""
        found = self._single(net, "cni", npath)
        if found is None:
            return ()
        body, cpath = found
        self._keys(body, "cni", cpath)
        args = self._str_map(body, "args", cpath)
        for key, value in args.items():
            if not key or any(c in key for c in "=;") or ";" in value:
                self.report.error(
                    join(join(cpath, "args"), short(key)),
                    "CNI_ARGS is a ';'-separated list of KEY=VALUE: a key may hold neither '=' nor ';',"
                    " a value no ';'",
                )
        return tuple(sorted(args.items()))

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
                host_network = self._host_network(port, label, ppath)
                if self._bool(port, "ignore_collision", ppath, False):
                    self.report.error(
                        join(ppath, "ignore_collision"),
                        "refused: fieldlab-agent does not let a static port collide with another alloc's"
                        " (Nomad's ignore_collision skips the scheduler's port check; here every host"
                        " port is checked at submission)",
                    )
                ports.append(Port(label=label, to=to, static=static, host_network=host_network))
        return ports

    def _host_network(self, port: Body, label: str, ppath: str) -> str:
        """A port's `host_network` ("default" when unset): whether this client has it is placement's
        (agent.decide.placement.refusals fails a name the node lacks, as Nomad's scheduler)."""
        name = self._str(port, "host_network", ppath, "default") or "default"
        if "${" in name:
            self.report.error(
                join(ppath, "host_network"),
                "interpolation in host_network is not implemented by fieldlab-agent",
            )
        return name

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
            provider = self._choice(sb, "provider", spath, SERVICE_PROVIDERS, "consul")
            service_restart = self._check_restart(sb, spath, None)
            # a group service's `task` is its checks' (Nomad's Canonicalize), a task service's its own
            service_task = self._check_task(sb, spath, task_names)
            checks = []
            fields = self._service_fields(sb, spath, name, provider)
            for _, cb, cpath in self._blocks(sb, "check", spath):
                check = self._check(cb, cpath, name, port, labels, task_names)
                if service_task and not check.task:
                    check = replace(check, task=service_task)
                check = replace(check, restart=self._check_restart(cb, cpath, service_restart))
                check = self._check_options(cb, cpath, check, fields["on_update"], provider)
                self._script_rules(cpath, check, name, provider, path, group_level=task_names is not None)
                self._check_rules(cb, cpath, check, port, provider, group_level=task_names is not None)
                if provider != "nomad":  # a Nomad service's: refused by the Consul-only rule
                    self._expose(cb, cpath, check, path, name)
                checks.append(check)
            services.append(
                Service(
                    name=name,
                    port=port,
                    tags=self._str_list(sb, "tags", spath),
                    checks=tuple(checks),
                    provider=provider,
                    **fields,
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
        if ctype in ("http", "tcp", "grpc") and not port and not service_port and "port" not in body:
            self.report.error(join(path, "port"), f"{ctype} checks need a port (on the check or its service)")
        command = self._str(body, "command", path)
        task = self._check_task(body, path, task_names)
        if ctype == "script":
            if not command and "command" not in body:
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
            address_mode=self._str(body, "address_mode", path),
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

    def _check_rules(
        self, body: Body, path: str, check: Check, service_port: str, provider: str, *, group_level: bool
    ) -> None:
        """Nomad's rules for where a check may be sent (Task.validateServices, TaskGroup.validateServices,
        ServiceCheck.validateCommon and validateNomad in nomad/structs): an address mode a check
        takes, a literal port only where the mode allows one, a relative http path, an HTTP method."""
        self._check_address_mode(path, check.address_mode, provider, group_level=group_level)
        if check.type in ("http", "tcp", "grpc"):
            self._check_port_rules(path, check, service_port, provider, group_level=group_level)
        if check.type == "http":
            self._check_http(path, check, provider)
        if provider == "nomad":
            for key in CONSUL_ONLY_CHECK_KEYS:
                if body.get(key) not in (None, False, 0, ""):
                    self.report.error(join(path, key), "may only be set for Consul service checks")

    def _check_address_mode(self, path: str, mode: str, provider: str, *, group_level: bool) -> None:
        mpath = join(path, "address_mode")
        if mode == "auto":
            self.report.error(
                mpath, f'"auto" is only valid for services; a check takes {choices(CHECK_ADDRESS_MODES)}'
            )
        elif mode and mode not in CHECK_ADDRESS_MODES:
            self.report.error(mpath, f'"{short(mode)}" is not one of {choices(CHECK_ADDRESS_MODES)}')
        elif mode in ("alloc", "alloc_ipv6") and not group_level:
            self.report.error(mpath, f'only checks of a group\'s service can use address_mode = "{mode}"')
        elif mode == "driver" and group_level:
            self.report.error(mpath, 'only checks of a task\'s service can use address_mode = "driver"')
        elif mode == "driver" and provider == "nomad":
            self.report.error(mpath, 'address_mode = "driver" may only be set for Consul service checks')
        elif mode == "alloc_ipv6" and provider == "nomad":
            self.report.error(mpath, "not supported by fieldlab-agent: its alloc networks are IPv4 only")
        elif mode not in ("", "host") and provider != "nomad":
            self.report.warn(
                mpath, "not implemented for Consul checks by fieldlab-agent: Consul is given the host port"
            )

    def _check_http(self, path: str, check: Check, provider: str) -> None:
        """An http check's method (nomad provider: Nomad's list) and path (relative, Nomad's rule)."""
        if provider == "nomad" and check.method not in HTTP_METHODS:
            self.report.error(
                join(path, "method"),
                f'method type "{short(check.method)}" not supported in Nomad http check: '
                + choices(HTTP_METHODS),
            )
        if not check.path:
            return
        first = re.split(r"[/?#]", check.path, maxsplit=1)[0]
        if ":" in first:
            self.report.error(join(path, "path"), "http checks need a relative http path (no scheme or host)")
        elif _CONTROL.search(check.path):
            self.report.error(join(path, "path"), "not a valid http path (control characters)")

    def _check_port_rules(
        self, path: str, check: Check, service_port: str, provider: str, *, group_level: bool
    ) -> None:
        """A literal port number: in a task's service only with address_mode "driver" (Nomad refuses
        it otherwise); in a group's nomad service only with "alloc", the alloc's own address (Nomad
        would send it to the node's local agent address in host mode: never here)."""
        port = check.port or service_port
        if not _PORT_NUMBER.match(port):
            return
        where = join(path, "port") if check.port else join(path, "port") + " (the service's, inherited)"
        if not group_level and check.address_mode != "driver":
            self.report.error(
                where,
                f'check "{short(check.name)}" cannot use a numeric port {port} '
                'without setting address_mode="driver"',
            )
        elif group_level and provider == "nomad" and check.address_mode != "alloc":
            self.report.error(
                where,
                f'a numeric port ({port}) is taken only with address_mode = "alloc" '
                "(the alloc's own address); name a port label of the group's network, "
                "which the alloc reserves",
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

    def _script_rules(
        self, path: str, check: Check, service: str, provider: str, group_path: str, *, group_level: bool
    ) -> None:
        """Nomad's rules for a script check: Consul's only (ServiceCheck.validateNomad takes tcp and
        http), and in a group's service it names the task it runs in, on the check or its service
        (TaskGroup.validateScriptChecksInGroupServices)."""
        if check.type not in ("script", "grpc"):
            return
        if provider == "nomad":
            self.report.error(
                join(path, "type"), f'invalid check type ("{check.type}"), must be one of tcp, http'
            )
        elif check.type == "grpc":
            return
        elif group_level and not check.task:
            group = group_path.rsplit(".", 1)[-1]
            self.report.error(
                path,
                f"Service [{group}]->{short(service)} or Check {short(check.name)} "
                "must specify task parameter",
            )

    def _check_task(self, body: Body, path: str, task_names: set[str] | None) -> str:
        """The task a group-level check runs in (script checks); a group service's `task`, its
        checks' default."""
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
