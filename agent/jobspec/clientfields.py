"""Client-side jobspec fields read as Nomad CE reads them (issue 52: no field accepted and ignored).

- `vault { namespace }` and a job's `vault_namespace` (its tasks' default): Vault namespaces are
  Vault Enterprise's and Nomad CE refuses any (nomad/job_endpoint_hook_vault_ce.go, its text).
- A group's `vault` block (HCL2): the default of each of its tasks without one (jobspec2's
  decodeTaskGroup), over the job's.
- A group's and a task's `consul` block: Nomad CE takes only the default cluster (jobConsulHook,
  its text); a Consul namespace or admin partition other than "default" needs Consul Enterprise,
  which the lab does not run, so it is refused rather than registered where it was not asked.
- A group's `max_run_duration`: Nomad's TaskGroup.Validate (batch and sysbatch jobs only, above
  zero); the client stops the alloc past it (agent.runner.alloc).
- A volume's `access_mode`, `attachment_mode` and `mount_options` on a host volume: Nomad's
  VolumeRequest.Validate (agent.jobspec.volumes calls `check_host_volume`).
- A volume_mount's `selinux_label`: "", "z" or "Z" (VolumeMount.Validate, its text). Nomad hands it to
  the task driver; its docker and exec drivers do not apply it (podman's does), nor does this agent:
  a label given is warned about, saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.jobspec.reader import short
from agent.jobspec.tree import Body, join

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

VAULT_CE = "multiple Vault namespaces requires Nomad Enterprise, Namespaces: "  # ErrMultipleNamespaces
CONSUL_CLUSTER_CE = "non-default Consul cluster requires Nomad Enterprise"
_CONSUL_ENT = 'needs Consul Enterprise, which the lab does not run: only "default" is served here'
BATCH_TYPES = ("batch", "sysbatch")

# Nomad's host volume access and attachment modes (nomad/structs/host_volumes.go)
HOST_ACCESS_MODES = (
    "single-node-reader-only",
    "single-node-writer",
    "single-node-single-writer",
    "single-node-multi-writer",
)
HOST_ATTACHMENT_MODES = ("file-system", "block-device")


def check_vault_namespace(builder: BodyReader, body: Body, key: str, path: str) -> None:
    """A Vault namespace (a `vault` block's `namespace`, a job's `vault_namespace`): Nomad CE's refusal."""
    namespace = builder._str(body, key, path)
    if namespace:
        builder.report.error(join(path, key), VAULT_CE + short(namespace))


def check_consul(builder: BodyReader, body: Body, path: str) -> None:
    """A group's or a task's `consul` block as Nomad CE with Consul CE takes it: every value "default"
    or unset (a task's partition then matches its group's, as jobConsulHook requires)."""
    found = builder._single(body, "consul", path)
    if found is None:
        return
    cb, cpath = found
    builder._keys(cb, "consul", cpath)
    if builder._str(cb, "cluster", cpath) not in ("", "default"):
        builder.report.error(join(cpath, "cluster"), CONSUL_CLUSTER_CE)
    for key, what in (("namespace", "a Consul namespace"), ("partition", "a Consul admin partition")):
        value = builder._str(cb, key, cpath)
        if value not in ("", "default"):
            builder.report.error(join(cpath, key), f'{what} ("{short(value)}") {_CONSUL_ENT}')


def read_max_run_duration(builder: BodyReader, body: Body, path: str, job_type: str) -> float | None:
    """A group's `max_run_duration` in seconds (None: unset), checked as Nomad's TaskGroup.Validate."""
    if body.get("max_run_duration") is None:
        return None
    seconds = builder._duration(body, "max_run_duration", path, 0.0)
    where = join(path, "max_run_duration")
    if seconds <= 0:
        builder.report.error(where, "MaxRunDuration must be greater than zero")
        return None
    if job_type not in BATCH_TYPES:
        builder.report.error(where, f'Job type "{job_type}" does not allow max_run_duration')
        return None
    return seconds


def check_host_volume(builder: BodyReader, vb: Body, vpath: str, read_only: bool) -> None:
    """A host volume's modes and mount options, as Nomad's VolumeRequest.Validate: no mount options;
    an access mode of a host volume, reader-only only read-only; an attachment mode of Nomad's two.
    A static host volume of the client serves every mode (the modes choose among dynamic host
    volumes, which this node does not create)."""
    if vb.get("mount_options") is not None:
        builder.report.error(join(vpath, "mount_options"), "host volumes cannot have mount options")
    access = builder._str(vb, "access_mode", vpath)
    if access == "single-node-reader-only" and not read_only:
        builder.report.error(join(vpath, "access_mode"), f"{access} volumes must be read-only")
    elif access and access not in HOST_ACCESS_MODES:
        why = f"host volumes cannot be mounted with {short(access)} access mode"
        builder.report.error(join(vpath, "access_mode"), why)
    attachment = builder._str(vb, "attachment_mode", vpath)
    if attachment and attachment not in HOST_ATTACHMENT_MODES:
        builder.report.error(
            join(vpath, "attachment_mode"),
            f'"{short(attachment)}" is not one of "file-system", "block-device"',
        )


SELINUX_LABELS = ("", "z", "Z")  # Nomad's SELinuxSharedVolume, SELinuxPrivateVolume
SELINUX_IGNORED = (
    "ignored: Nomad's docker and exec drivers do not apply a volume_mount's SELinux label either "
    "(its podman driver does; this node runs no SELinux)"
)


def check_selinux_label(builder: BodyReader, body: Body, path: str) -> None:
    """A volume_mount's `selinux_label`, as Nomad's VolumeMount.Validate and its drivers."""
    label = builder._str(body, "selinux_label", path)
    if label not in SELINUX_LABELS:
        builder.report.error(
            join(path, "selinux_label"), f'volume mount has an invalid SELinux label: "{short(label)}"'
        )
    elif label:
        builder.report.warn(join(path, "selinux_label"), SELINUX_IGNORED)


CORES_REFUSAL = (
    "refused: fieldlab-agent does not reserve whole CPU cores (Nomad's cores: a cpuset of cores no "
    "other task is given, chosen by the scheduler): give the task cpu (MHz shares) instead"
)
MEMORY_NO_LIMIT = -1  # Nomad's MemoryNoLimit: memory is the reservation, no hard limit


def read_memory_max(builder: BodyReader, body: Body, path: str, memory: int) -> int:
    """A task's `memory_max` (MB; -1: no hard limit; 0: unset), as Nomad's Resources.Validate. Nomad's
    servers drop it unless memory oversubscription is enabled (a scheduler setting); this agent is
    its own scheduler and takes it, as a cluster with oversubscription enabled does."""
    if body.get("memory_max") is None:
        return 0
    value = builder._int(body, "memory_max", path, 0, minimum=MEMORY_NO_LIMIT)
    if value not in (0, MEMORY_NO_LIMIT) and value < memory:
        why = f"MemoryMaxMB value ({value}) should be larger than MemoryMB value ({memory})"
        builder.report.error(join(path, "memory_max"), why)
        return 0
    return value


def read_secrets(builder: BodyReader, body: Body, path: str, memory: int) -> int:
    """A task's `secrets` (MB): the size of its secrets/ tmpfs, as Nomad's Resources.Validate."""
    if body.get("secrets") is None:
        return 0
    value = builder._int(body, "secrets", path, 0)
    if value < 0:
        builder.report.error(join(path, "secrets"), f"SecretsMB value ({value}) cannot be negative")
        return 0
    if value > memory:
        why = f"SecretsMB value ({value}) cannot be larger than MemoryMB value ({memory})"
        builder.report.error(join(path, "secrets"), why)
        return 0
    return value
