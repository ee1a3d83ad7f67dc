"""The client config's driver plugin blocks, Nomad's `plugin "docker"`, `plugin "exec"` and
`plugin "raw_exec"` `{ config { ... } }` as far as this agent reads them, with their defaults (the
capabilities Nomad allows, the exec chroot's host paths) and their readers, whose errors name the key.
agent.command.config reads the rest of the file; the drivers read only these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.drivers.pullconfig import PLUGIN_KEYS as PULL_PLUGIN_KEYS
from agent.drivers.pullconfig import PullConfig, pull_plugin
from agent.errors import ConfigError

DEFAULT_CHROOT_ENV: tuple[tuple[str, str], ...] = (
    ("/bin", "/bin"),
    ("/etc/ld.so.cache", "/etc/ld.so.cache"),
    ("/etc/ld.so.conf", "/etc/ld.so.conf"),
    ("/etc/ld.so.conf.d", "/etc/ld.so.conf.d"),
    ("/etc/passwd", "/etc/passwd"),
    ("/etc/group", "/etc/group"),
    ("/etc/nsswitch.conf", "/etc/nsswitch.conf"),
    ("/etc/hosts", "/etc/hosts"),
    ("/etc/resolv.conf", "/etc/resolv.conf"),
    ("/etc/ssl/certs", "/etc/ssl/certs"),
    ("/lib", "/lib"),
    ("/lib64", "/lib64"),
    ("/sbin", "/sbin"),
    ("/usr", "/usr"),
)
"""Host paths bind-mounted read-only into an exec task's chroot (as Nomad's chroot_env)."""


# Nomad's capabilities.HCLSpecLiteral (the default allow_caps) and Docker's default set (its
# DockerDefaults: Nomad's plus NET_RAW, which Nomad therefore drops unless allowed).
NOMAD_DEFAULT_CAPS = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
DOCKER_DEFAULT_CAPS = (*NOMAD_DEFAULT_CAPS, "NET_RAW")
NOMAD_ALLOW_RUNTIMES = ("runc", "nvidia")


@dataclass(frozen=True)
class DockerPlugin:
    """Nomad's `plugin "docker" { config { ... } }` as far as this agent reads it (names and
    defaults as Nomad's drivers/docker/config.go); in the config file
    `"plugin": {"docker": {"config": {"allow_privileged": ..., "allow_caps": [...], "volumes":
    {"enabled": ...}, "allow_runtimes": [...]}}}` (agent.drivers.dockeropts reads it)."""

    allow_privileged: bool = False
    allow_caps: tuple[str, ...] = NOMAD_DEFAULT_CAPS
    volumes_enabled: bool = False  # volumes { enabled }
    allow_runtimes: tuple[str, ...] = NOMAD_ALLOW_RUNTIMES
    pids_limit: int = 0  # the agent's docker_pids_limit: a task's pids_limit may not exceed it
    # image_pull_timeout, pull_activity_timeout, auth { config, helper } (agent.drivers.pullconfig)
    pull: PullConfig = field(default_factory=PullConfig)


@dataclass(frozen=True)
class ExecPlugin:
    """Nomad's `plugin "exec" { config { ... } }` as far as this agent reads it (names and defaults as
    Nomad's drivers/exec/driver.go): `"plugin": {"exec": {"config": {"default_pid_mode": ...,
    "default_ipc_mode": ..., "allow_caps": [...]}}}` (agent.drivers.execopts reads it)."""

    default_pid_mode: str = "private"
    default_ipc_mode: str = "private"
    allow_caps: tuple[str, ...] = NOMAD_DEFAULT_CAPS


@dataclass(frozen=True)
class RawExecPlugin:
    """Nomad's `plugin "raw_exec" { config { denied_envvars = [...] } }` (its `enabled` is the
    agent's raw_exec_enabled, which it also takes here)."""

    denied_envvars: tuple[str, ...] = ()


def docker_plugin(p: str, raw: dict[str, Any], key: str) -> DockerPlugin:
    """`"plugin": {"docker": {"config": {...}}}`: Nomad's names; another plugin is not Nomad's here."""
    plugins = raw[key]
    if not isinstance(plugins, dict) or set(plugins) - {"docker", "exec", "raw_exec"}:
        raise ConfigError(p, key, 'must be {"docker"|"exec"|"raw_exec": {"config": {...}}}')
    body = plugins.get("docker") or {}
    cfg = body.get("config", {}) if isinstance(body, dict) and not set(body) - {"config"} else None
    if not isinstance(cfg, dict):
        raise ConfigError(p, f"{key}.docker", 'must be {"config": {...}}')
    where = f"{key}.docker.config."
    known = {"allow_privileged", "allow_caps", "volumes", "allow_runtimes", *PULL_PLUGIN_KEYS}
    if unknown := sorted(set(cfg) - known):
        raise ConfigError(p, where + unknown[0], f"unknown key (known: {', '.join(sorted(known))})")
    kw: dict[str, Any] = {}
    if "allow_privileged" in cfg:
        if not isinstance(cfg["allow_privileged"], bool):
            raise ConfigError(p, where + "allow_privileged", "must be true or false")
        kw["allow_privileged"] = cfg["allow_privileged"]
    for name in ("allow_caps", "allow_runtimes"):
        if name in cfg:
            value = cfg[name]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(p, where + name, "must be a list of non-empty strings")
            kw[name] = tuple(value)
    if "volumes" in cfg:
        vol = cfg["volumes"]
        if (
            not isinstance(vol, dict)
            or set(vol) - {"enabled"}
            or not isinstance(vol.get("enabled", False), bool)
        ):
            raise ConfigError(p, where + "volumes", 'must be {"enabled": true|false}')
        kw["volumes_enabled"] = vol.get("enabled", False)
    kw["pull"], bad = pull_plugin(cfg)
    if bad:
        raise ConfigError(p, where + bad[0][0], bad[0][1])
    return DockerPlugin(**kw)


def plugin_config(p: str, raw: dict[str, Any], key: str, name: str, known: set[str]) -> dict[str, Any]:
    body = raw[key].get(name) or {}
    cfg = body.get("config", {}) if isinstance(body, dict) and not set(body) - {"config"} else None
    if not isinstance(cfg, dict):
        raise ConfigError(p, f"{key}.{name}", 'must be {"config": {...}}')
    if unknown := sorted(set(cfg) - known):
        where = f"{key}.{name}.config.{unknown[0]}"
        raise ConfigError(p, where, f"unknown key (known: {', '.join(sorted(known))})")
    for k, value in cfg.items():
        if isinstance(value, list) and not all(isinstance(v, str) and v for v in value):
            raise ConfigError(p, f"{key}.{name}.config.{k}", "must be a list of non-empty strings")
    return cfg


def exec_plugin(p: str, raw: dict[str, Any], key: str) -> ExecPlugin:
    """`"plugin": {"exec": {"config": {...}}}`, Nomad's names, defaults and validation."""
    cfg = plugin_config(p, raw, key, "exec", {"default_pid_mode", "default_ipc_mode", "allow_caps"})
    kw: dict[str, Any] = {}
    for name in ("default_pid_mode", "default_ipc_mode"):
        if name in cfg:
            if cfg[name] not in ("private", "host"):
                raise ConfigError(
                    p, f"{key}.exec.config.{name}", f'must be "private" or "host", got {cfg[name]!r}'
                )
            kw[name] = cfg[name]
    if "allow_caps" in cfg:
        if not isinstance(cfg["allow_caps"], list):
            raise ConfigError(p, f"{key}.exec.config.allow_caps", "must be a list of non-empty strings")
        kw["allow_caps"] = tuple(cfg["allow_caps"])
    return ExecPlugin(**kw)


def raw_exec_plugin(p: str, raw: dict[str, Any], key: str) -> tuple[RawExecPlugin, bool | None]:
    """`"plugin": {"raw_exec": {"config": {"enabled": ..., "denied_envvars": [...]}}}`."""
    cfg = plugin_config(p, raw, key, "raw_exec", {"enabled", "denied_envvars"})
    if "enabled" in cfg and not isinstance(cfg["enabled"], bool):
        raise ConfigError(p, f"{key}.raw_exec.config.enabled", "must be true or false")
    denied = cfg.get("denied_envvars", [])
    if not isinstance(denied, list):
        raise ConfigError(p, f"{key}.raw_exec.config.denied_envvars", "must be a list of non-empty strings")
    return RawExecPlugin(denied_envvars=tuple(denied)), cfg.get("enabled")


def exec_plugins(p: str, raw: dict[str, Any], key: str) -> dict[str, Any]:
    """Config fields of the exec and raw_exec plugin blocks (a raw_exec `enabled` is raw_exec_enabled)."""
    kw: dict[str, Any] = {}
    if not isinstance(raw.get(key), dict):
        return kw
    if "exec" in raw[key]:
        kw["exec_plugin"] = exec_plugin(p, raw, key)
    if "raw_exec" in raw[key]:
        kw["raw_exec_plugin"], enabled = raw_exec_plugin(p, raw, key)
        if enabled is not None:
            kw["raw_exec_enabled"] = enabled
    return kw


def chroot_env(p: str, raw: dict[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(p, key, "must be an object of host path -> path inside the chroot")
    out = []
    for host, inside in value.items():
        if not isinstance(inside, str) or not host.startswith("/") or not inside.startswith("/"):
            raise ConfigError(p, f"{key}.{host}", "host path and chroot path must be absolute paths")
        out.append((host, inside))
    return tuple(out)
