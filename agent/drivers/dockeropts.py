"""A docker task's `config` as Nomad's docker driver maps it onto the container (pure: plain data in,
docker-py's create kwargs or the refusals out; drivers/docker/config.go and driver.go
createContainerConfig). Every option of Nomad's driver is either honoured here or in
`REFUSED` with the reason; `refusals` is the client's check at submission (it depends on the node's
plugin config: allow_privileged, allow_caps, volumes { enabled }, allow_runtimes), `plan` the same
check again at start, over the interpolated config, with the kwargs. docs/drivers.md lists them all.

Kept from the agent's own hardening where Nomad does not contradict it: `no-new-privileges` on every
container but a privileged one, the engine's json-file log bounded (the agent copies the container's
log into alloc/logs through the engine's API). `init` is Nomad's: off unless the task says
`init = true` (a PID 1 that ignores SIGTERM then waits out the task's kill_timeout, as under Nomad).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent.command.plugins import DOCKER_DEFAULT_CAPS, DockerPlugin
from agent.drivers.dockermounts import mounts
from agent.drivers.dockervalues import (
    DockerOpts,
    TaskFacts,
    read_block,
    read_bool,
    read_int,
    read_map,
    read_str,
    read_strs,
    str_map,
)
from agent.drivers.pullconfig import task_pull

NO_NEW_PRIVILEGES = "no-new-privileges"
# the engine's own copy of a task's output, json-file, when the task sets no logging (docker.py)
READABLE_LOG_TYPES = ("json-file", "local")

HONOURED = frozenset(
    {
        "image", "command", "args", "ports", "hostname", "dns_servers", "dns_search_domains",
        "dns_options", "extra_hosts", "entrypoint", "work_dir", "labels", "readonly_rootfs",
        "cap_add", "cap_drop", "security_opt", "sysctl", "ulimit", "shm_size", "memory_hard_limit",
        "oom_score_adj", "init", "interactive", "tty", "ipc_mode", "pid_mode", "uts_mode",
        "userns_mode", "cgroupns", "privileged", "pids_limit", "group_add", "mac_address",
        "healthchecks", "logging", "port_map", "mount", "mounts", "volumes", "devices",
        "network_mode", "runtime", "auth", "auth_soft_fail", "image_pull_timeout", "force_pull",
    }
)  # fmt: skip

# Read by the image pull (agent.drivers.dockerpull, as Nomad's createImage/pullImage), checked here.
PULL_OPTIONS = frozenset({"auth", "auth_soft_fail", "image_pull_timeout", "force_pull"})
REFUSED: Mapping[str, str] = {
    "load": "loading an image from an artifact's tarball is not implemented by this agent",
    "advertise_ipv6_address": "this agent advertises no container address (services use the alloc's)",
    "container_exists_attempts": (
        "this agent removes a leftover container of the same name before it creates one: it never "
        "retries into an existing container"
    ),
    "cpu_hard_limit": (
        "this agent fingerprints no cpu.totalcompute, so it cannot turn the task's cpu (MHz) into the "
        "CFS quota Nomad's driver computes"
    ),
    "cpu_cfs_period": "used only with cpu_hard_limit, which this agent does not implement",
    "ipv4_address": "needs a user-defined docker network_mode, which this agent does not run",
    "ipv6_address": "needs a user-defined docker network_mode, which this agent does not run",
    "network_aliases": "needs a user-defined docker network_mode, which this agent does not run",
    "isolation": "a Windows isolation mode: Nomad's driver refuses it on Linux too",
    "platform": "pulling an image for another platform is not implemented by this agent",
    "storage_opt": "the lab's docker storage (overlay2 without project quotas) takes no storage options",
    "volume_driver": "no docker volume plugin runs on this node",
}
# Kept as Nomad keeps it: accepted with a warning, and no effect (Nomad's driver logs
# "cpuset_cpus is no longer supported"); in fields.UNIMPLEMENTED.
IGNORED_AS_NOMAD = frozenset({"cpuset_cpus"})
_NS_MODES = ("ipc_mode", "pid_mode", "uts_mode", "userns_mode")
_CAP = re.compile(r"^[A-Za-z_]+$")


def effective_network(config: Mapping[str, Any], group_mode: str) -> str:
    """The container's network mode: the task's network_mode, else a bridge group's pause container
    ("container"), else docker's default bridge ("default") in a host-mode group as Nomad's driver,
    else "none"."""
    mode = config.get("network_mode")
    if isinstance(mode, str) and mode:
        return mode
    return {"bridge": "container", "host": "default"}.get(group_mode, "none")


def refusals(
    config: Mapping[str, Any], plugin: DockerPlugin, facts: TaskFacts | None = None
) -> list[tuple[str, str]]:
    """(config key, why) of each option this task may not have on this node: at submission
    (values still holding `${...}` are checked again at start, interpolated)."""
    return plan(config, plugin, facts or TaskFacts(), submission=True).refused


def plan(
    config: Mapping[str, Any], plugin: DockerPlugin, facts: TaskFacts, *, submission: bool = False
) -> DockerOpts:
    """The docker-py create kwargs of the task's options (those Nomad's driver sets from its
    config), or the refusals. `submission`: values not yet interpolated are skipped."""
    out = DockerOpts()
    later = _interpolated if submission else (lambda _v: False)
    for key in config:
        if key in REFUSED and config[key] not in (None, False, "", [], {}, 0):
            out.refuse(key, REFUSED[key])
        elif key not in HONOURED | REFUSED.keys() | IGNORED_AS_NOMAD:
            out.refuse(key, "not a config field of Nomad's docker driver")
    net = effective_network(config, facts.network_mode)
    _simple(config, out, net, later)
    _names(config, out, net, later)
    _security(config, plugin, out, later, facts)
    _resources(config, plugin, facts, out)
    _logging(config, out)
    task_pull(config, out)
    mounts(config, plugin, facts, out, later)
    _network(config, plugin, facts, out, net)
    return out


def from_task(user: str, cpu_mhz: int) -> dict[str, Any]:
    """What Nomad's createContainerConfig takes from the task itself rather than its config:
    Config.User the task's `user` (none: the image's USER), CPUShares its cpu (at least 2, as
    cpuResources on a node below 262144 MHz)."""
    return {"cpu_shares": max(2, cpu_mhz), **({"user": user} if user else {})}


def _interpolated(value: object) -> bool:
    return "${" in repr(value)


# -- the options -------------------------------------------------------------------------------------


def _simple(config: Mapping[str, Any], out: DockerOpts, net: str, later: Callable[[object], bool]) -> None:
    kw = out.kwargs
    joined = net == "container"
    conflict = (
        "this task joins its bridge group's network namespace (the pause container's): docker refuses "
        "{what} there, and Nomad's driver fails the task at start; {instead}"
    )
    if hostname := read_str(config, "hostname", out):
        if joined:
            instead = "set the group's network.hostname"
            out.refuse("hostname", conflict.format(what="a hostname", instead=instead))
        kw["hostname"] = hostname
    dns = {"dns_servers": "dns", "dns_search_domains": "dns_search", "dns_options": "dns_opt"}
    for key, kwarg in dns.items():
        if values := read_strs(config, key, out):
            if joined:
                out.refuse(key, conflict.format(what="DNS options", instead="use the group's network.dns"))
            kw[kwarg] = values
    for server in kw.get("dns", []):
        if not later(server) and not _is_ip(server):
            out.refuse("dns_servers", f"{server!r} is not an IP address")
    # in a bridge group the docker driver writes them into the group network's /etc/hosts (docker.py)
    if hosts := read_strs(config, "extra_hosts", out):
        for h in hosts:
            if later(h):
                continue
            if ":" not in h:
                out.refuse("extra_hosts", f'invalid hosts entry {h!r}: not "<host>:<ip>"')
            elif not _is_ip(ip := h.partition(":")[2]) and (joined or ip != "host-gateway"):
                # docker's own --add-host takes host-gateway; Nomad's /etc/hosts of a group, an IP only
                out.refuse("extra_hosts", f"invalid IP address {h!r}")
        kw["extra_hosts"] = hosts
    _container(config, out)


def _names(config: Mapping[str, Any], out: DockerOpts, net: str, later: Callable[[object], bool]) -> None:
    kw = out.kwargs
    if mac := read_str(config, "mac_address", out):
        if net in ("container", "host", "none"):
            out.refuse("mac_address", f"docker refuses a MAC address with network mode {net}")
        elif not later(mac) and not re.fullmatch(r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}", mac):
            out.refuse("mac_address", f"failed to parse mac_address {mac!r}")
        kw["mac_address"] = mac


def _container(config: Mapping[str, Any], out: DockerOpts) -> None:
    """The options of the container itself (Config, and HostConfig's plain fields)."""
    kw = out.kwargs
    if "entrypoint" in config:
        kw["entrypoint"] = read_strs(config, "entrypoint", out)
    if (cmd := _cmd(config, out)) is not None:
        kw["command"] = cmd
    if work_dir := read_str(config, "work_dir", out):
        kw["working_dir"] = work_dir
    if labels := read_map(config, "labels", out):
        kw["labels"] = labels
    for key, kwarg in (("readonly_rootfs", "read_only"), ("interactive", "stdin_open"), ("tty", "tty")):
        if read_bool(config, key, out):
            kw[kwarg] = True
    if read_bool(config, "init", out):
        kw["init"] = True  # Nomad's default is none: the image's ENTRYPOINT/CMD is PID 1
    if groups := read_strs(config, "group_add", out):
        kw["group_add"] = groups
    if (adj := read_int(config, "oom_score_adj", out)) is not None:
        if not -1000 <= adj <= 1000:
            out.refuse("oom_score_adj", f"{adj} is outside -1000..1000")
        kw["oom_score_adj"] = adj
    health = read_block(config, "healthchecks", out)
    if health.get("disable") is True:
        kw["healthcheck"] = {"test": ["NONE"]}  # Nomad's sentinel: the image's HEALTHCHECK is off
    elif health.get("disable") not in (None, False):
        out.refuse("healthchecks.disable", "must be a bool")
    _kernel(config, out)


def _cmd(config: Mapping[str, Any], out: DockerOpts) -> list[str] | None:
    """Nomad's Config.Cmd: `[command] + args`, or `args` alone; None (the image's CMD) with neither.
    The image's ENTRYPOINT stays unless the task sets `entrypoint`, so a command of an image with an
    ENTRYPOINT is its first argument. A command with no word, or spaces around it, is refused as
    Nomad's validateCommand fails the start."""
    command = read_str(config, "command", out)
    raw = config.get("args")
    if raw is not None and not isinstance(raw, list | tuple):
        out.refuse("args", "must be a list of strings")
        raw = None
    # HCL's list(string) takes a number or a bool as its string
    args = [a if isinstance(a, str) else str(a).lower() if isinstance(a, bool) else str(a) for a in raw or ()]
    if command:
        if not command.strip():
            out.refuse("command", f"command empty: {command!r}")
        elif command.strip() != command:
            out.refuse("command", f"command contains extra white space: {command!r}")
        return [command, *args]
    return args or None


def _kernel(config: Mapping[str, Any], out: DockerOpts) -> None:
    kw = out.kwargs
    if "sysctl" in config:
        kw["sysctls"] = read_map(config, "sysctl", out)
    if "ulimit" in config:
        kw["ulimits"] = _ulimits(read_map(config, "ulimit", out), out)
    if cgroupns := read_str(config, "cgroupns", out):
        if cgroupns not in ("host", "private"):
            out.refuse("cgroupns", f'{cgroupns!r} is not "host" or "private"')
        kw["cgroupns"] = cgroupns


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
    except ValueError:
        return False
    return True


def _ulimits(raw: Mapping[str, str], out: DockerOpts) -> list[dict[str, Any]]:
    """Nomad's sliceMergeUlimit: "soft" or "soft:hard" per name."""
    found = []
    for name, spec in sorted(raw.items()):
        soft, _, hard = (spec if ":" in spec else f"{spec}:{spec}").partition(":")
        if not re.fullmatch(r"-?\d+", soft) or not re.fullmatch(r"-?\d+", hard):
            out.refuse(f"ulimit.{name}", f"malformed ulimit specification {spec!r}")
            continue
        found.append({"name": name, "soft": int(soft), "hard": int(hard)})
    return found


def _norm_cap(c: str) -> str:
    return c.strip().lower().removeprefix("cap_")


def capabilities(
    allow: Sequence[str], add: Sequence[str], drop: Sequence[str], *, keep_defaults: bool = False
) -> tuple[list[str], list[str], list[str]]:
    """Nomad's capabilities.Delta: (cap_add, cap_drop, the adds outside allow_caps). Drops are the
    task's plus Docker's defaults that allow_caps leaves out (NET_RAW by default), as Nomad since PR
    #10572. `keep_defaults` is nomad-10572's bug (`net-raw-by-default`): Docker's defaults are kept
    whatever allow_caps says, NET_RAW among them."""
    allowed = {_norm_cap(c) for c in allow}
    adds = {_norm_cap(c) for c in add if _norm_cap(c)}
    if "all" in allowed:
        missing: set[str] = set()
    else:
        missing = adds - allowed
    add_out = ["all"] if "all" in adds else sorted(adds)
    basis = {_norm_cap(c) for c in DOCKER_DEFAULT_CAPS}
    drops = {_norm_cap(c) for c in drop if _norm_cap(c)}
    if "all" not in allowed and not keep_defaults:
        drops |= basis - allowed
    drop_out = ["all"] if "all" in {_norm_cap(c) for c in drop} else sorted(drops)
    return add_out, drop_out, sorted(missing)


def _security(
    config: Mapping[str, Any],
    plugin: DockerPlugin,
    out: DockerOpts,
    later: Callable[[object], bool],
    facts: TaskFacts,
) -> None:
    kw = out.kwargs
    privileged = read_bool(config, "privileged", out) is True
    if privileged:
        if not plugin.allow_privileged:
            out.refuse(
                "privileged",
                "Docker privileged mode is disabled on this Nomad agent (plugin docker allow_privileged)",
            )
        kw["privileged"] = True
    add, drop = read_strs(config, "cap_add", out), read_strs(config, "cap_drop", out)
    for key, caps in (("cap_add", add), ("cap_drop", drop)):
        for c in caps:
            if not later(c) and not _CAP.fullmatch(c.strip()):
                out.refuse(key, f"{c!r} is not a capability name")
    keep = facts.bugs.net_raw_by_default
    cap_add, cap_drop, missing = capabilities(plugin.allow_caps, add, drop, keep_defaults=keep)
    if missing:
        out.refuse(
            "cap_add",
            "driver does not allow the following capabilities: "
            f"{', '.join(missing)} (plugin docker allow_caps: {', '.join(plugin.allow_caps)})",
        )
    if cap_add:
        kw["cap_add"] = cap_add
    if cap_drop:
        kw["cap_drop"] = cap_drop
    _security_opts(config, out, privileged)
    _modes(config, plugin, out)


def _security_opts(config: Mapping[str, Any], out: DockerOpts, privileged: bool) -> None:
    """Nomad's parseSecurityOpts, and the agent's no-new-privileges unless privileged."""
    opts = []
    for opt in read_strs(config, "security_opt", out):
        name, eq, value = opt.partition("=")
        if not eq and name != NO_NEW_PRIVILEGES:
            name, eq, value = opt.partition(":")
            if not eq:
                out.refuse("security_opt", f"invalid security_opt: {opt!r}")
                continue
        if name == "seccomp" and value != "unconfined":
            out.refuse(
                "security_opt",
                f"{opt!r}: a seccomp profile read from a file of the node is not implemented (a "
                "jobspec never reads the node's files); seccomp=unconfined is",
            )
            continue
        opts.append(opt)
    if not privileged and NO_NEW_PRIVILEGES not in opts:
        opts.append(NO_NEW_PRIVILEGES)  # the agent's hardening: setuid binaries in the image gain nothing
    out.kwargs["security_opt"] = opts


def _modes(config: Mapping[str, Any], plugin: DockerPlugin, out: DockerOpts) -> None:
    """Namespace modes: Nomad's validateNamespace with no allowed_modes (only allow_privileged)."""
    kw = out.kwargs
    for key in _NS_MODES:
        mode = read_str(config, key, out)
        if not mode or (mode == "host" and key != "userns_mode"):
            continue  # "host": the runner's plan_host_namespaces decides it (taskdecisions)
        if not plugin.allow_privileged:
            out.refuse(key, f'cannot apply "{key}" configuration: only with plugin docker allow_privileged')
        kw[key] = mode
    if runtime := read_str(config, "runtime", out):
        if runtime not in plugin.allow_runtimes:
            why = f"requested runtime {runtime!r} is not allowed (plugin docker allow_runtimes)"
            out.refuse("runtime", why)
        kw["runtime"] = runtime


def _resources(config: Mapping[str, Any], plugin: DockerPlugin, facts: TaskFacts, out: DockerOpts) -> None:
    """Nomad's memoryLimits: with memory_hard_limit, memory is the soft reservation and the hard
    limit the larger one; swap never past the hard limit (memory+swap = the hard limit, as Nomad since
    #8153; `swap-below-hard-limit` puts back that bug: memory+swap = the soft memory, which the engine
    refuses); memory alone is the hard limit with no swap past it. pids_limit under the plugin's."""
    kw = out.kwargs
    hard = read_int(config, "memory_hard_limit", out) or 0
    if hard < 0:
        out.refuse("memory_hard_limit", f"{hard} is below 0")
    # resources.memory_max over memory_hard_limit, the larger one the hard limit; -1: none at all
    high = -1 if facts.memory_max_mb < 0 else max(hard, facts.memory_max_mb)
    if high < 0:
        kw["mem_limit"], kw["mem_reservation"], kw["memswap_limit"] = 0, f"{facts.memory_mb}m", 0
    elif high > 0:
        if facts.memory_mb > high:
            out.refuse(
                "memory_hard_limit",
                f"task memory requirements exceed driver hard limit of {hard} MB",
            )
        kw["mem_limit"], kw["mem_reservation"] = f"{high}m", f"{facts.memory_mb}m"
        swap = facts.memory_mb if facts.bugs.swap_below_hard_limit else high
        kw["memswap_limit"] = f"{swap}m"
    elif facts.memory_mb > 0:
        # memory alone: the hard limit, and no swap beyond it (Nomad sets MemorySwap = Memory, where
        # docker's own default would add as much swap again)
        kw["mem_limit"] = kw["memswap_limit"] = f"{facts.memory_mb}m"
    kw["mem_swappiness"] = 0  # Nomad's MaybeDisableMemorySwappiness (the engine drops it on cgroup v2)
    if (shm := read_int(config, "shm_size", out)) is not None and shm != 0:
        if shm < 0:
            out.refuse("shm_size", f"{shm} is below 0")
        kw["shm_size"] = shm
    if plugin.pids_limit > 0:
        kw["pids_limit"] = plugin.pids_limit
    if (pids := read_int(config, "pids_limit", out)) is not None and pids > 0:
        if plugin.pids_limit > 0 and pids > plugin.pids_limit:
            out.refuse(
                "pids_limit",
                f"pids_limit cannot be greater than nomad plugin config pids_limit: {plugin.pids_limit}",
            )
        kw["pids_limit"] = pids


def _logging(config: Mapping[str, Any], out: DockerOpts) -> None:
    logging = read_block(config, "logging", out)
    if not logging:
        return
    kind = logging.get("type") or logging.get("driver") or ""
    opts = str_map(logging.get("config") or {})
    if not isinstance(kind, str) or opts is None:
        out.refuse("logging", "type must be a string and config a map of strings")
        return
    kind = kind or "json-file"
    if kind not in READABLE_LOG_TYPES:
        out.refuse(
            "logging.type",
            f"{kind!r}: the agent copies a task's output into alloc/logs by reading the engine's log, "
            f"which only {' and '.join(READABLE_LOG_TYPES)} are sure to keep readable",
        )
    out.kwargs["log_config"] = {"type": kind, "config": opts}


def _network(
    config: Mapping[str, Any], plugin: DockerPlugin, facts: TaskFacts, out: DockerOpts, net: str
) -> None:
    """network_mode: host, none and docker's bridge (default) as Nomad's driver; a sibling's
    container or a user-defined network is refused. port_map: the legacy container port of a
    label, in a host-mode group (Nomad's driver refuses it for a bridge group's ports)."""
    mode = read_str(config, "network_mode", out)
    if mode and mode not in ("host", "none", "bridge", "default"):
        why = (
            "joining a sibling task's container is not implemented by this agent"
            if mode.startswith("container:")
            else "a user-defined docker network: the lab creates none"
        )
        out.refuse("network_mode", f"{mode!r}: {why}")
    port_map = config.get("port_map")
    if port_map is None:
        return
    mapped = str_map(port_map)
    if mapped is None or not all(re.fullmatch(r"\d+", v) for v in mapped.values()):
        out.refuse("port_map", "must be a map of port labels to container port numbers")
        return
    if net == "container":
        out.refuse("port_map", "'port_map' cannot map group network ports, use 'ports' instead")
        return
    out.port_map = {k: int(v) for k, v in mapped.items()}


def port_map_env(port_map: Mapping[str, int]) -> dict[str, str]:
    """Nomad's SetPortMapEnvs (createContainerConfig, before the env is the container's): with the
    legacy port_map, NOMAD_PORT_<label> is the mapped container port (the label cleaned as
    CleanEnvVar: other than a letter, digit, "_" or "." becomes "_")."""
    return {
        re.sub(r"[^A-Za-z0-9_.]", "_", f"NOMAD_PORT_{label}"): str(port) for label, port in port_map.items()
    }


def published(
    ports: Iterable[tuple[str, int, int]],
    wanted: object,
    port_map: Mapping[str, int],
    address: str,
    host_ips: Mapping[str, str] | None = None,
) -> dict[str, tuple[str, int] | int]:
    """Nomad's port publishing on docker's bridge (a host-mode group, or network_mode bridge): each
    alloc port (label, host, to) the task lists in `ports` (or, legacy, in `port_map`) published
    from its host port (on `address`, "" every address) to its port_map's, else `to`, else the host
    port, tcp and udp. A port on a named host network is bound on its address there (`host_ips`:
    label -> its HostIP, as Nomad's driver binds each mapping's HostIP)."""
    labels = {str(label) for label in wanted} if isinstance(wanted, list | tuple) else set()
    labels = labels or set(port_map)
    out: dict[str, tuple[str, int] | int] = {}
    for label, host, to in ports:
        if label in labels:
            bind = (host_ips or {}).get(label) or address
            for proto in ("tcp", "udp"):
                out[f"{port_map.get(label, to) or host}/{proto}"] = (bind, host) if bind else host
    return out


def ensure_all_listed(options: Iterable[str]) -> list[str]:
    """The options of Nomad's driver that are neither honoured, refused nor ignored as Nomad
    (a test keeps this empty against fields.IMPLEMENTED)."""
    known = HONOURED | REFUSED.keys() | IGNORED_AS_NOMAD
    return sorted(o for o in options if o not in known)
