"""What every driver offers the alloc runner, and the handle it leaves in the state store.

A driver runs tasks (`TaskDriver`); a network-namespace owner (`NetnsOwner`) holds a bridge group's
network namespace for its tasks to join. The runner only knows these protocols: which driver runs a
task, and which owner a group needs, is the registry's business (`agent.drivers.registry`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agent.drivers import errors as _errors
from agent.drivers.usage import Usage
from agent.structs.model import Task

DriverError = _errors.DriverError  # named from here by the drivers and runners (defined low, in errors)

# Nomad's task-dir variables: the runner sets them to host paths (what raw_exec gets); inside a
# task's own root (an exec chroot, a container) they are where the task dir's parts are mounted.
TASK_PATH_VARS = {"NOMAD_ALLOC_DIR": "/alloc", "NOMAD_TASK_DIR": "/local", "NOMAD_SECRETS_DIR": "/secrets"}


def inside_env(env: Mapping[str, str]) -> dict[str, str]:
    """The task's environment as seen inside its own root: Nomad's task-dir variables are the
    mount points (TASK_PATH_VARS) where the runner set them to host paths."""
    return {**env, **{k: v for k, v in TASK_PATH_VARS.items() if k in env}}


if TYPE_CHECKING:
    from agent.drivers.session import ExecSession

# Labels on everything the agent creates in docker: the sweeper only ever looks at these.
LABEL_MANAGED = "org.fieldlab.managed"
LABEL_ALLOC = "org.fieldlab.alloc"
LABEL_JOB = "org.fieldlab.job"
LABEL_GROUP = "org.fieldlab.group"
LABEL_TASK = "org.fieldlab.task"
LABEL_ROLE = "org.fieldlab.role"  # "pause" or "task"


@dataclass(frozen=True)
class TaskHandle:
    """Enough to find a running task again after an agent restart."""

    driver: str
    id: str  # container id, or pid for exec
    started_at: str  # docker's StartedAt, or the process start time in clock ticks

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TaskHandle:
        return cls(str(rec["driver"]), str(rec["id"]), str(rec["started_at"]))


RESTARTED = "restarted by docker"  # TaskStatus.detail: running, but not the process the agent started


@dataclass(frozen=True)
class Sandbox:
    """What the group network asks of its netns owner beyond the netns (Nomad's docker driver sets
    them on the pause container, whose resolv.conf and hostname the joined task containers share):
    `network.hostname` and `network.dns` (servers, searches, options; each replaces the node's own
    line, the rest of the node's resolv.conf is kept, as Nomad's GenerateDNSMount)."""

    hostname: str = ""
    dns_servers: tuple[str, ...] = ()
    dns_searches: tuple[str, ...] = ()
    dns_options: tuple[str, ...] = ()


NO_SANDBOX = Sandbox()


@dataclass(frozen=True)
class TaskStatus:
    running: bool
    exit_code: int | None = None
    detail: str = ""


ExitReport = Callable[[str, str], None]
"""(alloc id, handle id) -> None: a driver saw a task (or a netns owner) of that alloc exit."""


class TaskOutput(Protocol):
    """Where a process task's stdout and stderr go (agent.runner.logmonhook: the pipes its logmon
    copies into alloc/logs)."""

    def open(self) -> tuple[int, int]:
        """Two fds for the task's stdout and stderr; the caller closes them once the task has them."""


@dataclass(frozen=True)
class Mount:
    """A host volume in a task (Nomad's MountConfig): `host_path` at `task_path`, read only when the
    client's volume, the group's request or the task's mount says so."""

    host_path: str
    task_path: str
    read_only: bool
    propagation_mode: str = "private"
    # an O_PATH fd of the checked dir (agent.allocdir.hostvolumes.hold_host_volume), open until the start
    # returns: the driver mounts that very dir, never `host_path` resolved again; -1: none
    fd: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class TaskContext:
    """Everything a driver needs to start one task of an alloc."""

    job: str
    group: str
    alloc_id: str
    task: Task
    task_dir: Path
    env: Mapping[str, str]
    network_mode: str = "none"  # the group's: "bridge", "host" or "none"
    netns: Path | None = None  # the alloc's network namespace, for drivers that join it by path
    netns_owner: TaskHandle | None = None  # the container owning it, for drivers that join a container
    # the group network's dns (hostname unused here): a docker task outside a pause container gets it
    # as its own container's DNS options (inside one it shares the pause container's resolv.conf)
    sandbox: Sandbox = NO_SANDBOX
    ports: tuple[tuple[str, int, int], ...] = ()  # the alloc's ports: (label, host port, to)
    # label -> the address a port on a named host network is bound on (its HostIP; others: none)
    port_host_ips: Mapping[str, str] = field(default_factory=dict)
    output: TaskOutput | None = None  # a process task's stdout/stderr (None: /dev/null, `logs` disabled)
    mounts: tuple[Mount, ...] = ()  # its host volumes (volume_mount), resolved against the node's config
    task_dirs: tuple[str, ...] = ("alloc", "local", "secrets")  # mounted at /<name> (plan_task_dir_mounts)
    host_namespaces: tuple[str, ...] = ()  # config keys whose "host" it gets (plan_host_namespaces)
    logs_read_only: bool = True  # alloc/logs bound read-only over /alloc (plan_logs_read_only)
    # a task event of type "Driver" (message, details), as Nomad's driver EventEmitter (a pull's)
    driver_event: Callable[[str, Mapping[str, str]], None] | None = None
    # the driver's `prepare` (PreparesStart) ran for this start, off the main loop: not done again
    prepared: bool = False


@runtime_checkable
class PreparesStart(Protocol):
    """A driver whose start has a blocking first step (docker: the image pull, which may take up
    to image_pull_timeout), as Nomad's driver does it in the task runner's own goroutine: the task
    runner runs `prepare` off the main loop (agent.client.offload), then `start` on it with
    `ctx.prepared`. Exec and raw_exec have none."""

    def prepare(self, ctx: TaskContext) -> None:
        """What the start needs on the node before it starts (in a worker thread; its events go
        through ctx.driver_event); DriverError when it cannot be had, as the start's own."""


class TaskDriver(Protocol):
    name: str
    # In a bridge group, tasks of this driver join a container's netns (docker's
    # `--network container:<id>`) rather than a netns by path: the group then needs a pause container.
    joins_container_netns: bool
    # A task that ended while the agent was down still has its exit status here: a container engine
    # keeps it with the container (docker); a process driver's task was the agent's child, whose
    # status went with that agent (exec, raw_exec): found gone, its exit code is unknown.
    keeps_exit_status: bool
    # The task's output goes to alloc/logs through its logmon (as Nomad's): a process task is given
    # the pipes (TaskContext.output); a container's log is copied into them by a docker logger
    # (`container_log`: the runner starts one for each container the task gets).
    log_files: bool
    container_log: bool

    def start(self, ctx: TaskContext) -> TaskHandle:
        """Start the task; DriverError when it cannot."""

    def status(self, handle: TaskHandle) -> TaskStatus: ...

    def pid(self, handle: TaskHandle) -> int:
        """The task's main pid on the node, 0 when it is not running."""

    def signal(self, handle: TaskHandle, sig: str) -> None: ...

    def exec(
        self, handle: TaskHandle, argv: list[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        """Run a command inside the task (change_mode script): (exit code, the output's tail).
        `env`: the task's environment as the runner recorded it at start (the process drivers run
        the command in it; never one read back from the task, which the task could rewrite)."""

    def exec_session(
        self,
        handle: TaskHandle,
        argv: list[str],
        *,
        tty: bool,
        rows: int = 24,
        cols: int = 80,
        env: Mapping[str, str] | None = None,
    ) -> ExecSession:
        """An interactive command in the running task (`alloc exec -i/-t`), the same way in as
        `exec`; DriverError when it cannot start."""

    def stop(self, handle: TaskHandle, timeout: float, sig: str) -> None:
        """Stop gracefully: `sig`, then kill after `timeout` seconds. Gone already is fine."""

    def usage(self, alloc_id: str, task: str, handle: TaskHandle) -> Usage | None:
        """What the running task uses now (memory, CPU time: agent.drivers.usage); None when it
        is gone. Blocks for a moment (the engine's stats, a few cgroup files): off the loop."""

    def remove(self, alloc_id: str, task: Task, handle: TaskHandle) -> None:
        """Remove the task and everything the driver made for it (container, cgroups)."""

    def reattach(self, alloc_id: str, handle: TaskHandle) -> None:
        """After an agent restart: report this running task's exit again (see ExitReport)."""

    def watch(self, report: ExitReport, stop: threading.Event) -> None:
        """Report task exits through `report` until `stop` is set (run in a thread of its own)."""

    def close(self) -> None:
        """End a running watch."""

    def alloc_labels(self, alloc_id: str) -> dict[str, str] | None:
        """Who the alloc was (job, group labels) from its tasks, when its record is unreadable."""

    def one_look(self) -> AbstractContextManager[None]:
        """A window of reads only (the restore's observation of every alloc at once): `status` and
        `pid` inside it may answer from one look at the runtime, shared by every thread."""


class NetnsOwner(Protocol):
    """Holds an alloc's network namespace: a pause container, or a netns the agent creates by name.

    `handle` is what `create` returned and the runner recorded (None when the owner needs none,
    as a netns named after the alloc does)."""

    kind: str

    def create(
        self, job: str, group: str, alloc_id: str, *, sandbox: Sandbox = NO_SANDBOX
    ) -> TaskHandle | None:
        """Create (or start again) the owner; a handle for the state store, if it needs one.
        `sandbox`: the hostname and DNS of a new owner (a pause container's; a named netns has none:
        the jobspec refuses them for a group without a docker task, as Nomad)."""

    def path(self, alloc_id: str, handle: TaskHandle | None) -> Path | None:
        """The netns as a path CNI and tasks can use, or None when it is gone."""

    def status(self, alloc_id: str, handle: TaskHandle | None) -> TaskStatus:
        """`detail == RESTARTED` when a new (empty) netns replaced the recorded one."""

    def holds(self, alloc_id: str, handle: TaskHandle | None, pid: int) -> bool:
        """Whether process `pid` is in this owner's netns."""

    def remove(self, alloc_id: str, handle: TaskHandle | None) -> None: ...


class KnownDeaths:
    """The handle ids whose death a driver reported (or found at its first look), the newest `keep`
    of them: a long-running agent forgets the oldest (a task container's id is never reused)."""

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self._ids: dict[str, None] = {}

    def add(self, cid: str) -> bool:
        """Remember `cid`; False when it was known already (its death was reported)."""
        if not cid or cid in self._ids:
            return False
        self._ids[cid] = None
        if len(self._ids) > self.keep:
            del self._ids[next(iter(self._ids))]
        return True
