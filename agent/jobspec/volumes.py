"""A group's `volume` blocks and its tasks' `volume_mount` blocks -> agent.structs.model.HostVolume and
VolumeMount, checked as Nomad's server checks them on register (nomad/structs VolumeRequest.Validate,
Task.Validate's volume mounts).

- A host volume's `access_mode`, `attachment_mode` and `mount_options` are checked as Nomad's
  VolumeRequest.Validate (agent.jobspec.clientfields).
- A `volume` needs a `type`: "host" is implemented; "csi" is refused (the lab's nodes run no CSI
  plugin: a replay without the volume would be another system), its mounts with it. `source` is
  required. `per_alloc` is refused: it names a volume per
  alloc index, and the lab's nodes have none.
- A `volume_mount` needs `volume` (a volume of its group) and `destination` (an absolute path in the
  task, `${NOMAD_TASK_DIR}` and the other dir variables read as the task sees them; not one of the
  task's own dirs, and not under another mount of the task: a volume the task can write could hold
  a link that the next mount would follow). A docker task may mount under /local, /alloc and /tmp,
  as in Nomad: the engine resolves the destination inside the container (DOCKER_UNDER).
  `propagation_mode` is one of Nomad's three.

Whether the node has the volume is the placement's question (agent.decide.placement), answered when the
job is placed.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import TYPE_CHECKING

from agent.jobspec.clientfields import check_host_volume, check_selinux_label
from agent.jobspec.tree import Body, join
from agent.structs.model import HostVolume, Task, VolumeMount

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

VOLUME_TYPES = ("host", "csi")
CSI_REFUSAL = (
    "refused: fieldlab-agent does not mount CSI volumes: the lab's nodes run no CSI plugin (host "
    "volumes only)"
)
PROPAGATION_MODES = ("private", "host-to-task", "bidirectional")
# Task paths a mount may not cover or go under: the task's own dirs and the chroot's system dirs,
# which the agent mounts there itself (a task-writable one could hold a link a mount would follow).
RESERVED = ("/", "/alloc", "/local", "/secrets", "/tmp", "/dev", "/proc", "/sys", "/.oldroot")  # noqa: S108
# A docker task's mounts are made by the engine, not by the agent: dockerd hands each bind to runc,
# which resolves its destination inside the container's rootfs with symlink-safe joining
# (securejoin), after the mounts above it (docker orders them by depth), and mounts the host path
# there in the container's own mount namespace. A link the task planted under /local, /alloc or
# /tmp then leads at worst elsewhere in the container, never out of it; and the agent writes the
# task dir on the host, never through a container's mount. So as in Nomad (and as a docker task's
# `config.volumes` binds already do) a docker task may mount under these; not over /local or
# /alloc themselves, not over the agent's read-only /alloc/logs, never /secrets. exec tasks keep
# the refusal: the agent makes their mounts in the chroot itself.
DOCKER_UNDER = ("/local", "/alloc")
DOCKER_AT_OR_UNDER = ("/tmp",)  # noqa: S108 (the container's own /tmp, not the agent's)
DOCKER_KEPT = ("/alloc/logs",)
# Nomad's volume hook interpolates the destination with the task's environment: its dirs as the task
# sees them (exec's chroot and docker's container alike)
TASK_DIR_VARS = {
    "${NOMAD_TASK_DIR}": "/local",
    "${NOMAD_ALLOC_DIR}": "/alloc",
    "${NOMAD_SECRETS_DIR}": "/secrets",
}


def read_volumes(builder: BodyReader, body: Body, path: str) -> tuple[tuple[HostVolume, ...], set[str]]:
    """The group's host volumes, and the aliases of its csi ones (refused; their mounts not checked)."""
    volumes: list[HostVolume] = []
    csi: set[str] = set()
    for alias, vb, vpath in builder._blocks(body, "volume", path, labelled=True):
        builder._keys(vb, "volume", vpath)
        kind = builder._choice(vb, "type", vpath, VOLUME_TYPES, "", required=True, what="volume type")
        source = builder._str(vb, "source", vpath, required=True)
        read_only = builder._bool(vb, "read_only", vpath, False)
        if kind == "host":
            check_host_volume(builder, vb, vpath, read_only)  # Nomad's VolumeRequest.Validate
        if kind == "host" and builder._bool(vb, "per_alloc", vpath, False):
            builder.report.error(join(vpath, "per_alloc"), "per-alloc host volumes are not implemented")
        if kind == "csi":
            builder.report.error(join(vpath, "type"), CSI_REFUSAL)
            csi.add(alias)
        elif kind == "host" and source:
            volumes.append(HostVolume(alias=alias, source=source, read_only=read_only))
    return tuple(volumes), csi


def read_mounts(builder: BodyReader, body: Body, path: str) -> tuple[VolumeMount, ...]:
    """The task's `volume_mount` blocks (checked against the group's volumes in `check_mounts`)."""
    mounts: list[VolumeMount] = []
    for _, mb, mpath in builder._blocks(body, "volume_mount", path):
        builder._keys(mb, "volume_mount", mpath)
        volume = builder._str(mb, "volume", mpath, required=True)
        dest = builder._str(mb, "destination", mpath, required=True)
        for var, task_path in TASK_DIR_VARS.items():  # Nomad's ReplaceEnv, with the task's view
            dest = dest.replace(var, task_path)
        mode = builder._choice(mb, "propagation_mode", mpath, PROPAGATION_MODES, "private")
        check_selinux_label(builder, mb, mpath)
        read_only = builder._bool(mb, "read_only", mpath, False)
        docker = body.get("driver") == "docker"
        if dest and not _destination_ok(builder, dest, join(mpath, "destination"), docker=docker):
            continue
        if volume and dest:
            mounts.append(VolumeMount(volume, posixpath.normpath(dest), read_only, mode))
    return tuple(mounts)


def _under(path: str, parents: tuple[str, ...], *, itself: bool) -> bool:
    return any((itself and path == p) or path.startswith(p + "/") for p in parents)


def _docker_may_mount(normal: str) -> bool:
    """Whether a docker task may mount at `normal`, one of RESERVED's (see DOCKER_UNDER)."""
    if _under(normal, DOCKER_KEPT, itself=True):
        return False
    return _under(normal, DOCKER_UNDER, itself=False) or _under(normal, DOCKER_AT_OR_UNDER, itself=True)


def _destination_ok(builder: BodyReader, dest: str, where: str, *, docker: bool = False) -> bool:
    if not dest.startswith("/"):
        builder.report.error(where, f'"{dest}" is not an absolute path in the task')
        return False
    if ".." in dest.split("/") or "\x00" in dest:
        builder.report.error(where, f'"{dest}" may not contain ".."')
        return False
    normal = posixpath.normpath(dest)
    if docker and (":" in dest or "," in dest):  # a docker bind is "<host>:<task path>:<options>"
        builder.report.error(where, f'"{dest}" cannot be a docker bind\'s destination (":" or ",")')
        return False
    if docker and _docker_may_mount(normal):
        return True
    for reserved in RESERVED:
        if normal == reserved or (reserved != "/" and normal.startswith(reserved + "/")):
            why = f'"{dest}" is the task\'s own {reserved}: mount a volume elsewhere'
            if not docker and _docker_may_mount(normal):
                why += (
                    " (a docker task may: its engine mounts in the container; this driver's are the agent's)"
                )
            builder.report.error(where, why)
            return False
    return True


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def check_mounts(
    builder: BodyReader, tasks: list[Task], volumes: tuple[HostVolume, ...], csi: set[str], path: str
) -> list[Task]:
    """Each task's mounts against its group's volumes (Nomad: "references undefined volume"); a
    mount of a csi volume is left out with the volume."""
    known = {v.alias for v in volumes}
    out = []
    for t in tasks:
        kept: list[VolumeMount] = []
        for i, m in enumerate(t.volume_mounts):
            where = f"{path}.task.{t.name}.volume_mount[{i}]"
            if m.volume in csi:
                continue
            if m.volume not in known:
                why = f'references undefined volume "{m.volume}" of the group'
                builder.report.error(f"{where}.volume", why)
                continue
            clash = next((k for k in kept if _nested(k.destination, m.destination)), None)
            if clash is not None:
                builder.report.error(
                    f"{where}.destination",
                    f'"{m.destination}" and "{clash.destination}" nest or repeat: mount each volume apart',
                )
                continue
            kept.append(m)
        out.append(replace(t, volume_mounts=tuple(kept)) if len(kept) != len(t.volume_mounts) else t)
    return out
