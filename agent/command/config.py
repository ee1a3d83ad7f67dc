"""Typed agent config, loaded once from a JSON file, validated with errors that name the key."""

from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agent.command.plugins import (
    DEFAULT_CHROOT_ENV,
    DockerPlugin,
    ExecPlugin,
    RawExecPlugin,
    chroot_env,
    docker_plugin,
    exec_plugins,
)
from agent.errors import ConfigError
from agent.identity.claims import DEFAULT_IDENTITY_TTL
from agent.identity.vaultlogin import DEFAULT_JWT_MOUNT, VAULT_IDENTITY, VaultJwt
from agent.jobspec.limits import DEFAULT_MAX_SHUTDOWN_DELAY
from agent.node.hostnetworks import HostNetwork, parse_host_networks
from agent.structs.layout import NodeLayout
from agent.structs.model import WorkloadIdentity

DEFAULT_CONFIG = Path("/etc/fieldlab-agent/config.json")


@dataclass(frozen=True)
class TLSConfig:
    """mTLS for the agent's HTTP API: its own cert and key, and the CA that client certs must chain to."""

    cert_file: Path
    key_file: Path
    ca_file: Path


DEFAULT_TOKEN_ROLE = "fieldlab-task"  # noqa: S105 - a role name, not a secret
"""The token role tasks' Vault tokens are created through (auth/token/create/<role>)."""

DEFAULT_RESTART_JITTER = 0.0
"""Seconds of the restart window: after an agent start, its AppRole login and each running task's
re-issue wait a random part of it (docs/vault-load.md). Off by default: the lab's suites read the new
certificate as soon as a restarted agent is up (a fleet sets a few seconds, e.g. 5)."""


DEFAULT_VAULT_TIMEOUT = 5.0
"""Seconds one Vault request may take (vault.timeout)."""


@dataclass(frozen=True)
class VaultConfig:
    address: str = ""
    approle_file: Path | None = None  # JSON with role_id and secret_id, mode 0600
    token_role: str = DEFAULT_TOKEN_ROLE  # the token role that creates tasks' tokens
    # The agent's own cap on its Vault requests (its client's and every task's), a token bucket;
    # 0: none. Set under the server's rate-limit quota, a storm is paced rather than refused (429).
    max_requests_per_second: float = 0.0
    # After a start, the first login and each running task's re-issue are spread over this many
    # seconds (0, the default: at once, inside the restore).
    restart_jitter: float = DEFAULT_RESTART_JITTER
    # Seconds one Vault request may take before it is abandoned and retried. Under a storm the
    # server's queue is longer than the default: a timed-out PKI issue is still done by the server,
    # and its retry issues another (the storm feeds itself), so a fleet sets more.
    timeout: float = DEFAULT_VAULT_TIMEOUT
    # Per-job policies: a policy whose name starts with this prefix belongs to jobs, and a task's
    # vault block may name it only in a job it belongs to (agent.runner.vaulttoken.JobPolicies).
    # "" (the default): no such check. The lab sets "fieldlab-job-" (its pki role's job policies).
    job_policy_prefix: str = ""
    # The jobs each such policy belongs to: policy -> job ids, or prefixes ending in "*". A policy of
    # the prefix not listed here belongs to the one job whose id is the rest of its name.
    job_policies: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The workload identity workflow (agent.identity.vaultlogin): the JWT auth method's mount, the login
    # role when a vault block names none (Nomad's create_from_role), and the identity a task with a
    # vault block gets when its jobspec has no `identity "vault_default"` (Nomad servers'
    # vault.default_identity: {"aud": [...], "ttl": seconds, "env": bool, "file": bool}). Without one
    # (the default) such a task's token comes from the token role, as before Nomad 1.7.
    jwt_auth_backend_path: str = DEFAULT_JWT_MOUNT
    jwt_role: str = ""
    default_identity: WorkloadIdentity | None = None

    @property
    def jwt(self) -> VaultJwt:
        return VaultJwt(self.jwt_auth_backend_path, self.jwt_role, self.default_identity)


@dataclass(frozen=True)
class Config:
    node_name: str
    datacenter: str = "dc1"  # a job runs here only if one of its datacenters (globs) matches, as Nomad
    # Nomad's client `node_class` and `meta`: what constraints read as ${node.class} and ${meta.<key>},
    # and /v1/node/:id shows as NodeClass and Meta.
    node_class: str = ""
    node_meta: tuple[tuple[str, str], ...] = ()
    data_dir: Path = Path("/var/lib/fieldlab-agent")
    bind_address: str = "0.0.0.0"  # noqa: S104 - the agent API serves the lab network, over mTLS
    port: int = 4646
    tls: TLSConfig | None = None
    vault: VaultConfig = field(default_factory=VaultConfig)
    consul_address: str = ""
    advertise_address: str = ""  # this node's address for service registrations
    cni_plugin_dir: Path = Path("/usr/lib/cni")
    cni_conf_dir: Path = Path("/etc/cni/net.d")
    cni_network: str = "nomad"  # the conflist <cni_conf_dir>/<cni_network>.conflist (Nomad's name)
    cni_bridge: str = "fieldlab0"
    # Names outside the data dir (agent.structs.layout): an exec group's netns /run/netns/<prefix><alloc id>,
    # a process task's cgroup <root>/<parent>/<alloc>.<task>; Nomad's by default.
    netns_prefix: str = ""
    cgroup_parent: str = "nomad.slice"
    sweep_interval: float = 60.0  # seconds between orphan sweeps
    sweep_grace: float = 60.0  # containers younger than this are never swept
    sweep_dry_run: bool = False  # only report what the sweeper would remove
    # -- garbage collection of terminal allocs (Nomad's client gc_* settings and defaults) ----------
    gc_interval: float = 60.0  # seconds between GC passes
    gc_max_allocs: int = 50  # allocs tracked (live and terminal) before terminal ones are collected
    gc_disk_usage_threshold: float = 80.0  # percent of the data dir's filesystem: collect above it
    gc_inodes_usage_threshold: float = 70.0  # percent of its inodes
    jobs_enabled: bool = True  # false: only the health/metrics API (tests of the API layer)
    log_level: str = "INFO"
    shutdown_timeout: float = 10.0
    # -- the API: who may call it, and staying up under idle or slow clients ----------------------
    # Client-cert identities (subject CN) allowed to call the API; every other cert gets 403.
    api_allowed_identities: tuple[str, ...] = ("controller.operator.fieldlab",)
    api_handshake_timeout: float = 5.0  # seconds for a client to finish the TLS handshake
    api_request_timeout: float = 10.0  # seconds to read a request's head and body
    api_max_body_bytes: int = 1024 * 1024  # larger request bodies get 413
    api_max_connections: int = 64  # handler threads; more clients wait, they never stop the API
    # A websocket (Nomad's exec): the largest message a client may send (more is closed 1009). Any
    # connection: the most bytes it may leave unsent (a websocket client past it is dropped, a stream
    # waits at it and is dropped after api_request_timeout; Nomad's websocket buffers 2 KiB and then
    # blocks on the socket).
    api_ws_max_message_bytes: int = 1024 * 1024
    api_write_buffer_bytes: int = 64 * 1024
    # HTTP/1.1 (h11): the largest request line and headers (more: 431; Nomad's Go server takes 1 MiB,
    # the agent 64 KiB, so 256 parked clients hold at most 16 MiB), a client address's connections
    # open at once (Nomad's http_max_conns_per_client: one more gets 429), and the requests that may
    # wait for a busy handler (one more is answered api_queue_full_status, 503 or 429, before its
    # body is read, and not run: 64 of at most api_max_body_bytes each bound what they hold).
    api_max_header_bytes: int = 64 * 1024
    api_max_conns_per_client: int = 100
    api_max_queued_requests: int = 64
    api_queue_full_status: int = 503
    # -- templates ------------------------------------------------------------------------------
    template_render_timeout: float = 2.0  # seconds one template may take to render
    template_max_bytes: int = 4 * 1024 * 1024  # largest rendered template
    template_max_per_task: int = 256  # templates a task may have (more are refused at submission)
    template_pass_budget: float = 10.0  # seconds all of a task's renders of one pass may take together
    # A root agent's render worker drops to nobody; when it cannot (nobody cannot read the agent's
    # Python or venv): true, every render fails with the reason and health says why; false (the
    # default, for tests and development), it renders as the agent's user with a warning. The lab
    # sets true.
    template_worker_fail_closed: bool = False
    # -- task isolation -------------------------------------------------------------------------
    exec_allow_root: bool = False  # exec tasks may ask for `user = "root"`
    chroot_env: tuple[tuple[str, str], ...] = DEFAULT_CHROOT_ENV
    # Nomad's client host_volume blocks: name -> a dir of the node that a group's `volume` of type
    # host may ask for, read only to every task when set so.
    host_volumes: tuple[tuple[str, str, bool], ...] = ()
    # Nomad's client host_network blocks (agent.node.hostnetworks): the host networks a group
    # network's port may name in its `host_network`, besides "default"
    host_networks: tuple[HostNetwork, ...] = ()
    # -- artifacts (agent.getter) -----------------------------------------------------------------
    # Where a task's artifacts may come from: networks (CIDR) or host names. None unless the config
    # says (the lab's role gives its servers). Loopback and link-local addresses only when an entry is
    # itself such a network (e.g. "127.0.0.0/8"), never through a wider one or a host name
    # (agent.getter.plan.host_allowed): the agent is root on the host's network.
    artifact_allowed_hosts: tuple[str, ...] = ()
    artifact_max_bytes: int = 100 * 1024 * 1024  # one download (Nomad's artifact http_max_size)
    # seconds one whole download may take, redirects included (Nomad's artifact http_read_timeout, 30m)
    artifact_http_read_timeout: float = 1800.0
    docker_pids_limit: int = 4096  # pids limit of every task container (0: none)
    # The docker driver: off on a node without a docker engine (the lab's light clients): docker
    # tasks are refused at submission with the reason, and nothing of docker is polled or swept.
    docker_enabled: bool = True
    raw_exec_enabled: bool = False  # the raw_exec driver (no isolation), off as in Nomad's plugin config
    # Nomad's `plugin "docker" { config { ... } }`: the gates of a docker task's options (DockerPlugin)
    plugin: DockerPlugin = field(default_factory=DockerPlugin)
    exec_plugin: ExecPlugin = field(default_factory=ExecPlugin)  # Nomad's `plugin "exec" { config { ... } }`
    raw_exec_plugin: RawExecPlugin = field(
        default_factory=RawExecPlugin
    )  # Nomad's `plugin "raw_exec" { config { ... } }`
    # -- what a jobspec may ask for ---------------------------------------------------------------
    max_count: int = 1000  # a group's count
    max_kill_timeout: float = 30.0  # seconds; longer kill_timeouts are capped (Nomad's client default)
    # Seconds a group's or task's shutdown_delay may ask for: longer ones are refused at submission and
    # capped at a stop (a record stored before). Nomad's client has no such limit; 30 s is its
    # max_kill_timeout default, the bound Nomad puts on the other wait of a stop (docs/task-lifecycle.md).
    max_shutdown_delay: float = DEFAULT_MAX_SHUTDOWN_DELAY
    # Seconds a workload identity's JWT lives when its `identity` block (or vault.default_identity)
    # sets no ttl: Nomad signs such a token without `exp` (a warning only); this agent never does.
    identity_default_ttl: float = DEFAULT_IDENTITY_TTL
    # The file this config was read from (set by load_config, never a key of it): its dir is one of the
    # agent's own, which no host volume may lead into (agent.allocdir.hostvolumes.own_paths).
    config_file: Path | None = None


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _section(path: str, raw: dict[str, Any], name: str, cls: type[Any]) -> dict[str, Any]:
    known = {f.name for f in fields(cls)} - {"config_file"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(path, f"{name}{unknown[0]}", f"unknown key (known: {', '.join(sorted(known))})")
    return raw


def _abs_path(p: str, raw: dict[str, Any], key: str) -> Path:
    if not isinstance(raw[key], str) or not raw[key].startswith("/"):
        raise ConfigError(p, key, "must be an absolute path")
    return Path(raw[key])


def _port(p: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise ConfigError(p, "port", f"{value!r} is not a TCP port (1-65535)")
    return value


def _seconds(p: str, raw: dict[str, Any], key: str) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(p, key, "must be a positive number of seconds")
    return float(value)


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _finite_seconds(p: str, raw: dict[str, Any], key: str) -> float:
    value = raw[key]
    if not _finite(value) or value <= 0:
        raise ConfigError(p, key, f"{value!r} is not a number of seconds > 0")
    return float(value)


def _bound(p: str, raw: dict[str, Any], key: str, zero: str) -> float:
    """A limit in seconds: a finite number >= 0 (an infinite one would be no limit at all)."""
    value = raw[key]
    if not _finite(value) or value < 0:
        raise ConfigError(p, key, f"{value!r} is not a number of seconds >= 0 ({zero})")
    return float(value)


def _percent(p: str, raw: dict[str, Any], key: str) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 100:
        raise ConfigError(p, key, "must be a percentage above 0 and at most 100")
    return float(value)


def _bool(p: str, raw: dict[str, Any], key: str) -> bool:
    if not isinstance(raw[key], bool):
        raise ConfigError(p, key, "must be true or false")
    return bool(raw[key])


def _count(p: str, raw: dict[str, Any], key: str, *, minimum: int = 1) -> int:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(p, key, f"must be a whole number >= {minimum}")
    return value


def _one_of(p: str, raw: dict[str, Any], key: str, choices: tuple[int, ...]) -> int:
    value = raw[key]
    if isinstance(value, bool) or value not in choices:
        raise ConfigError(p, key, f"{value!r}: choose one of {', '.join(map(str, choices))}")
    return int(value)


def _strings(p: str, raw: dict[str, Any], key: str) -> tuple[str, ...]:
    value = raw[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(p, key, "must be a list of non-empty strings")
    return tuple(value)


def _allowed_hosts(p: str, raw: dict[str, Any], key: str) -> tuple[str, ...]:
    """Networks ("10.0.0.0/8", "127.0.0.1") or host names ("server1")."""
    out = _strings(p, raw, key)
    for i, item in enumerate(out):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            if not all(c.isalnum() or c in "-." for c in item):
                raise ConfigError(
                    p, f"{key}[{i}]", f'"{item}" is neither a network (CIDR) nor a host name'
                ) from None
    return out


def _host_volumes(p: str, raw: dict[str, Any], key: str) -> tuple[tuple[str, str, bool], ...]:
    """{"name": {"path": "/abs/dir", "read_only": false}}: each name one of letters, digits, '_', '.',
    '-', each path absolute (that it is a directory is checked on the node, at the agent's start:
    agent.command.wiring.build_core)."""
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(p, key, 'must be an object of name -> {"path": ..., "read_only": ...}')
    out = []
    for name, spec in value.items():
        where = f"{key}.{name}"
        if not name or not all(c.isalnum() or c in "_.-" for c in name):
            raise ConfigError(p, where, "a name of letters, digits, '_', '.', '-'")
        if not isinstance(spec, dict) or set(spec) - {"path", "read_only"}:
            raise ConfigError(p, where, 'must be {"path": "/abs/dir", "read_only": false}')
        path, read_only = spec.get("path"), spec.get("read_only", False)
        if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/"):
            raise ConfigError(p, f"{where}.path", "must be an absolute path without '..'")
        if not isinstance(read_only, bool):
            raise ConfigError(p, f"{where}.read_only", "must be true or false")
        out.append((name, path, read_only))
    return tuple(sorted(out))


def _node_meta(p: str, raw: dict[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(p, key, "must be an object of key -> string value (Nomad's client meta)")
    for k, v in value.items():
        if not k or not isinstance(v, str):
            raise ConfigError(p, f"{key}.{k}", "a non-empty key with a string value")
    return tuple(sorted(value.items()))


def _log_level(p: str, value: Any) -> str:
    if value not in _LOG_LEVELS:
        raise ConfigError(p, "log_level", f"{value!r}: choose one of {', '.join(_LOG_LEVELS)}")
    return str(value)


def _tls(p: str, tls: Any) -> TLSConfig:
    if not isinstance(tls, dict):
        raise ConfigError(p, "tls", "must be an object with cert_file, key_file, ca_file")
    _section(p, tls, "tls.", TLSConfig)
    for key in ("cert_file", "key_file", "ca_file"):
        if not isinstance(tls.get(key), str):
            raise ConfigError(p, f"tls.{key}", "required, a path")
    return TLSConfig(Path(tls["cert_file"]), Path(tls["key_file"]), Path(tls["ca_file"]))


def _vault(p: str, v: Any) -> VaultConfig:
    if not isinstance(v, dict):
        raise ConfigError(p, "vault", "must be an object")
    _section(p, v, "vault.", VaultConfig)
    addr = v.get("address", "")
    if not isinstance(addr, str) or (addr and not addr.startswith(("http://", "https://"))):
        raise ConfigError(p, "vault.address", f"{addr!r} is not an http(s) URL")
    approle = v.get("approle_file")
    role = v.get("token_role", DEFAULT_TOKEN_ROLE)
    if not isinstance(role, str) or not role or "/" in role or role.strip() != role:
        raise ConfigError(p, "vault.token_role", f"{role!r} is not a token role name")
    rps = _non_negative(p, v, "max_requests_per_second", 0.0, "vault.")
    jitter = _non_negative(p, v, "restart_jitter", DEFAULT_RESTART_JITTER, "vault.")
    timeout = _non_negative(p, v, "timeout", DEFAULT_VAULT_TIMEOUT, "vault.")
    if timeout == 0:
        raise ConfigError(p, "vault.timeout", "must be a number of seconds > 0")
    prefix = v.get("job_policy_prefix", "")
    if not isinstance(prefix, str) or prefix.strip() != prefix or "/" in prefix:
        raise ConfigError(p, "vault.job_policy_prefix", f"{prefix!r} is not the start of a policy name")
    return VaultConfig(
        addr,
        Path(approle) if approle else None,
        role,
        rps,
        jitter,
        timeout,
        job_policy_prefix=prefix,
        job_policies=_job_policies(p, v.get("job_policies", {}), prefix),
        jwt_auth_backend_path=_vault_name(p, v, "jwt_auth_backend_path", DEFAULT_JWT_MOUNT, "a mount path"),
        jwt_role=_vault_name(p, v, "jwt_role", "", "a JWT role name"),
        default_identity=_default_identity(p, v.get("default_identity")),
    )


def _vault_name(p: str, v: dict[str, Any], key: str, default: str, what: str) -> str:
    value = v.get(key, default)
    if not isinstance(value, str) or value.strip() != value or value.startswith("/") or ".." in value:
        raise ConfigError(p, f"vault.{key}", f"{value!r} is not {what}")
    if key == "jwt_auth_backend_path" and not value:
        raise ConfigError(p, f"vault.{key}", "must name the JWT auth method's mount (Nomad's jwt-nomad)")
    return value


def _default_identity(p: str, raw: Any) -> WorkloadIdentity | None:
    key = "vault.default_identity"
    if raw is None or raw == {}:  # absent, or empty (the lab role's "none"): the token role's way
        return None
    if not isinstance(raw, dict):
        raise ConfigError(p, key, 'must be an object: {"aud": ["vault.io"], "ttl": 3600}')
    unknown = sorted(set(raw) - {"aud", "ttl", "env", "file"})
    if unknown:
        raise ConfigError(p, f"{key}.{unknown[0]}", "unknown key (known: aud, env, file, ttl)")
    aud = raw.get("aud")
    if not isinstance(aud, list) or not aud or not all(isinstance(a, str) and a for a in aud):
        raise ConfigError(
            p, f"{key}.aud", "must be a list of one or more audiences (Vault's role binds them)"
        )
    ttl = _non_negative(p, raw, "ttl", 0.0, f"{key}.")
    for flag in ("env", "file"):
        if not isinstance(raw.get(flag, False), bool):
            raise ConfigError(p, f"{key}.{flag}", "must be true or false")
    env, file = bool(raw.get("env", False)), bool(raw.get("file", False))
    return WorkloadIdentity(VAULT_IDENTITY, tuple(aud), env=env, file=file, ttl=ttl)


def _job_policies(p: str, value: Any, prefix: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    key = "vault.job_policies"
    if not isinstance(value, dict):
        raise ConfigError(p, key, "must be an object of policy name -> list of job ids (or prefixes*)")
    if value and not prefix:
        raise ConfigError(p, key, "needs vault.job_policy_prefix (the policies it lists start with it)")
    out = []
    for policy, jobs in value.items():
        if not policy.startswith(prefix) or policy == prefix:
            raise ConfigError(p, f"{key}.{policy}", f"is not a policy of vault.job_policy_prefix {prefix!r}")
        if (
            not isinstance(jobs, list)
            or not jobs
            or not all(isinstance(j, str) and j and j != "*" for j in jobs)
        ):
            raise ConfigError(
                p,
                f"{key}.{policy}",
                "must be a non-empty list of job ids, or prefixes ending in * (not * alone)",
            )
        out.append((policy, tuple(jobs)))
    return tuple(out)


def _non_negative(p: str, raw: dict[str, Any], key: str, default: float, prefix: str = "") -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
        raise ConfigError(p, f"{prefix}{key}", "must be a number >= 0 (0: off)")
    return float(value)


def _read(path: Path) -> dict[str, Any]:
    p = str(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(p, "", "no such config file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(p, "", f"unreadable: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(p, "", "must be a JSON object")
    return raw


def load_config(path: Path = DEFAULT_CONFIG) -> Config:
    p = str(path)
    raw = _read(path)
    _section(p, raw, "", Config)
    if not isinstance(raw.get("node_name"), str) or not raw["node_name"]:
        raise ConfigError(p, "node_name", "required, a non-empty string")
    kw: dict[str, Any] = {"node_name": raw["node_name"]}
    for key in ("data_dir", "cni_plugin_dir", "cni_conf_dir"):
        if key in raw:
            kw[key] = _abs_path(p, raw, key)
    for key in (
        "bind_address",
        "consul_address",
        "cni_network",
        "cni_bridge",
        "advertise_address",
        "datacenter",
        "node_class",
        "netns_prefix",
        "cgroup_parent",
    ):
        if key in raw:
            if not isinstance(raw[key], str):
                raise ConfigError(p, key, "must be a string")
            kw[key] = raw[key]
    checks: dict[str, Any] = {
        "port": lambda: _port(p, raw["port"]),
        "jobs_enabled": lambda: _bool(p, raw, "jobs_enabled"),
        "sweep_dry_run": lambda: _bool(p, raw, "sweep_dry_run"),
        "sweep_interval": lambda: _seconds(p, raw, "sweep_interval"),
        "sweep_grace": lambda: _seconds(p, raw, "sweep_grace"),
        "gc_interval": lambda: _seconds(p, raw, "gc_interval"),
        "gc_max_allocs": lambda: _count(p, raw, "gc_max_allocs"),
        "gc_disk_usage_threshold": lambda: _percent(p, raw, "gc_disk_usage_threshold"),
        "gc_inodes_usage_threshold": lambda: _percent(p, raw, "gc_inodes_usage_threshold"),
        "log_level": lambda: _log_level(p, raw["log_level"]),
        "api_allowed_identities": lambda: _strings(p, raw, "api_allowed_identities"),
        "api_handshake_timeout": lambda: _seconds(p, raw, "api_handshake_timeout"),
        "api_request_timeout": lambda: _seconds(p, raw, "api_request_timeout"),
        "api_max_body_bytes": lambda: _count(p, raw, "api_max_body_bytes"),
        "api_max_connections": lambda: _count(p, raw, "api_max_connections"),
        "api_ws_max_message_bytes": lambda: _count(p, raw, "api_ws_max_message_bytes"),
        "api_write_buffer_bytes": lambda: _count(p, raw, "api_write_buffer_bytes", minimum=4096),
        "api_max_header_bytes": lambda: _count(p, raw, "api_max_header_bytes", minimum=1024),
        "api_max_conns_per_client": lambda: _count(p, raw, "api_max_conns_per_client"),
        "api_max_queued_requests": lambda: _count(p, raw, "api_max_queued_requests", minimum=0),
        "api_queue_full_status": lambda: _one_of(p, raw, "api_queue_full_status", (429, 503)),
        "template_render_timeout": lambda: _seconds(p, raw, "template_render_timeout"),
        "template_max_bytes": lambda: _count(p, raw, "template_max_bytes"),
        "template_max_per_task": lambda: _count(p, raw, "template_max_per_task"),
        "template_pass_budget": lambda: _seconds(p, raw, "template_pass_budget"),
        "template_worker_fail_closed": lambda: _bool(p, raw, "template_worker_fail_closed"),
        "exec_allow_root": lambda: _bool(p, raw, "exec_allow_root"),
        "chroot_env": lambda: chroot_env(p, raw, "chroot_env"),
        "host_volumes": lambda: _host_volumes(p, raw, "host_volumes"),
        "host_networks": lambda: parse_host_networks(p, raw, "host_networks"),
        "artifact_allowed_hosts": lambda: _allowed_hosts(p, raw, "artifact_allowed_hosts"),
        "artifact_max_bytes": lambda: _count(p, raw, "artifact_max_bytes"),
        "artifact_http_read_timeout": lambda: _finite_seconds(p, raw, "artifact_http_read_timeout"),
        "node_meta": lambda: _node_meta(p, raw, "node_meta"),
        "docker_pids_limit": lambda: _count(p, raw, "docker_pids_limit", minimum=0),
        "raw_exec_enabled": lambda: _bool(p, raw, "raw_exec_enabled"),
        "docker_enabled": lambda: _bool(p, raw, "docker_enabled"),
        "plugin": lambda: docker_plugin(p, raw, "plugin"),
        "max_count": lambda: _count(p, raw, "max_count"),
        "max_kill_timeout": lambda: _seconds(p, raw, "max_kill_timeout"),
        "max_shutdown_delay": lambda: _bound(p, raw, "max_shutdown_delay", "0: no shutdown_delay allowed"),
        "identity_default_ttl": lambda: _finite_seconds(p, raw, "identity_default_ttl"),
    }
    for key, check in checks.items():
        if key in raw:
            kw[key] = check()
    kw.update(exec_plugins(p, raw, "plugin"))
    if "shutdown_timeout" in raw:
        kw["shutdown_timeout"] = _seconds(p, raw, "shutdown_timeout")
    try:
        NodeLayout(
            kw.get("netns_prefix", Config.netns_prefix),
            kw.get("cgroup_parent", Config.cgroup_parent),
            kw.get("cni_network", Config.cni_network),
        )
    except ValueError as exc:
        key = str(exc).split(" ", 1)[0]
        raise ConfigError(p, key, str(exc).split(": ", 1)[-1]) from None
    if raw.get("tls") is not None:
        kw["tls"] = _tls(p, raw["tls"])
    if raw.get("vault") is not None:
        kw["vault"] = _vault(p, raw["vault"])
    kw["config_file"] = path.absolute()
    return Config(**kw)
