"""A docker task's host paths as Nomad's docker driver mounts them (pure; part of
agent.drivers.dockeropts): `volumes` (relative paths in the task's dir, host paths only with the
plugin's volumes { enabled }), `mount`/`mounts` (bind, volume, tmpfs: Nomad's toDockerMount),
`devices` (toDockerDevice), and a client host volume's bind. Whatever the plugin config, no bind
leads into or holds the agent's own files (agent.allocdir.hostvolumes' rule), links followed once.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

from agent.command.plugins import DockerPlugin
from agent.drivers.base import Mount
from agent.drivers.dockervalues import DockerOpts, TaskFacts, read_blocks, read_strs, str_map

# Nomad's docker driver: a volume_mount's propagation_mode as a bind's propagation.
PROPAGATION = {"private": "rprivate", "host-to-task": "rslave", "bidirectional": "rshared"}


def volume_bind(m: Mount) -> str:
    """A host volume as a docker bind: "<host>:<task path>:<ro|rw>,<propagation>"."""
    return f"{m.host_path}:{m.task_path}:{'ro' if m.read_only else 'rw'},{PROPAGATION[m.propagation_mode]}"


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _host_source(
    key: str,
    src: str,
    plugin: DockerPlugin,
    facts: TaskFacts,
    out: DockerOpts,
    later: Callable[[object], bool],
    base: str = "",
) -> str:
    """A bind's host path as Nomad's expandPath (relative: in `base`, the task's dir), refused while volumes
    are off unless it stays in the alloc's dir (Nomad's escapingfs check), and always refused when it
    leads into or holds the agent's own files (agent.allocdir.hostvolumes' rule), links followed once."""
    path = posixpath.normpath(posixpath.join(base or facts.task_dir, src))
    if later(src):
        return path
    real = facts.resolve(path)
    alloc = facts.resolve(facts.alloc_dir)
    if _under(real, alloc):
        return real
    if not plugin.volumes_enabled:
        out.refuse(key, f"volumes are not enabled; cannot mount host path: {src!r} (plugin docker volumes)")
        return real
    for own in facts.own_paths:
        if _under(real, own) or _under(own, real):
            out.refuse(key, f"{src!r} ({real}) reaches the agent's own {own}: refused")
            break
    return real


def mounts(
    config: Mapping[str, Any],
    plugin: DockerPlugin,
    facts: TaskFacts,
    out: DockerOpts,
    later: Callable[[object], bool],
) -> None:
    kw = out.kwargs
    binds = []
    # nomad-1977 (`volumes-relative-to-alloc-dir`): a relative path joined to the alloc's dir
    base = facts.alloc_dir if facts.bugs.volumes_relative_to_alloc_dir else ""
    for i, spec in enumerate(read_strs(config, "volumes", out)):
        key = f"volumes[{i}]"
        parts = spec.split(":")
        if len(parts) < 2:
            out.refuse(key, f"invalid docker volume {spec!r}: not <src>:<destination> format")
            continue
        src = _host_source(key, parts[0], plugin, facts, out, later, base)
        binds.append(":".join([src, *parts[1:]]))
    if binds:
        kw["volumes"] = binds
    mounts = []
    for key in ("mount", "mounts"):
        for i, m in enumerate(read_blocks(config, key, out)):
            where = f"{key}[{i}]"
            got = _mount(where, m, plugin, facts, out, later)
            if got is not None:
                mounts.append(got)
    if mounts:
        kw["mounts"] = mounts
    devices = []
    for i, d in enumerate(read_blocks(config, "devices", out)):
        host = d.get("host_path")
        if not isinstance(host, str) or not host:
            out.refuse(f"devices[{i}]", "host path must be set in configuration for devices")
            continue
        perms = str(d.get("cgroup_permissions") or "rwm")
        if not set(perms) <= set("rwm"):
            out.refuse(f"devices[{i}]", f"invalid cgroup permission string: {perms!r}")
        devices.append(f"{host}:{d.get('container_path') or host}:{perms}")
    if devices:
        kw["devices"] = devices


def _mount(
    where: str,
    m: Mapping[str, Any],
    plugin: DockerPlugin,
    facts: TaskFacts,
    out: DockerOpts,
    later: Callable[[object], bool],
) -> dict[str, Any] | None:
    """Nomad's toDockerMount as the engine's Mount object."""
    kind = m.get("type") or "volume"
    target, source = m.get("target"), m.get("source") or ""
    if not isinstance(target, str) or not target or not isinstance(source, str):
        out.refuse(where, "target (and source) must be strings, target not empty")
        return None
    hm: dict[str, Any] = {"Target": target, "Source": source, "Type": kind}
    hm["ReadOnly"] = m.get("readonly") is True
    opts = _first(m.get(f"{kind}_options"))
    if kind == "bind":
        hm["Source"] = _host_source(where, source, plugin, facts, out, later)
        if prop := opts.get("propagation"):
            hm["BindOptions"] = {"Propagation": prop}
    elif kind == "tmpfs":
        if source:
            out.refuse(where, 'invalid source, must be "" for tmpfs')
        tmpfs = {k: v for k, v in (("SizeBytes", opts.get("size")), ("Mode", opts.get("mode"))) if v}
        if tmpfs:
            hm["TmpfsOptions"] = tmpfs
    elif kind == "volume":
        if not plugin.volumes_enabled:
            why = f"volumes are not enabled; cannot mount volume: {source!r} (plugin docker volumes)"
            out.refuse(where, why)
        if _first(opts.get("driver_config")).get("name"):
            out.refuse(where, "no docker volume plugin runs on this node (volume_options.driver_config)")
        vo: dict[str, Any] = {"NoCopy": opts.get("no_copy") is True}
        if labels := str_map(opts.get("labels") or {}):
            vo["Labels"] = labels
        hm["VolumeOptions"] = vo
    else:
        out.refuse(where, f'invalid mount type, must be "bind", "volume", "tmpfs": {kind!r}')
        return None
    return hm


def _first(v: object) -> dict[str, Any]:
    if isinstance(v, list | tuple) and v:
        v = v[0]
    return dict(v) if isinstance(v, Mapping) else {}
