"""The runner's ports (Nomad's allocrunner/interfaces and taskrunner/interfaces): what an alloc
runner's parts and a task runner's hooks may read and call, and nothing else.

The lowest module of the runner's own: it knows the runner's deps and state, never the runners
(agent.runner.alloc, agent.runner.taskrunner) nor their parts. The runners sit on top and satisfy
these protocols; each part (network, coordinator, restorer, kill, migrate, max_run_duration,
services) is handed an `AllocHost`, each hook the narrow parts of its task it needs (its events,
its lifecycle, its dirs), so no part imports its runner back and the runner's package has no import
circle (`make lint` counts them).

- `AllocContext`: what a task's hooks read of the alloc (its record, job, group, dir, its serial and
  the stop's cancel);
- `AllocHost`: what the alloc runner's parts and its task runners read and call on it (its state,
  its network, its lifecycle order, its kills and its failure);
- `TaskEvents`, `TaskLifecycle`: what a hook may say and do to its task (Nomad's EventEmitter and
  TaskLifecycle), handed to it when it is made;
- `TaskHost`: a task as its hooks are made from it (agent.runner.taskhooks);
- `RunningTask`: what the alloc runner's parts (the restorer, the coordinator, a network recovery)
  call on a task runner besides;
- one protocol per hook point (setup, prestart, env, poststart, exited, restore, reattached, stop):
  a hook implements the points it needs, and the task runner calls each point's hooks (HookPoints).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agent.allocdir.hostvolumes import HeldVolume
from agent.client.offload import Serial
from agent.decide.decisions import RestartDecision, StartCause
from agent.drivers.base import Mount, NetnsOwner, Sandbox, TaskDriver, TaskHandle, TaskOutput
from agent.network.base import AttachSpec
from agent.runner.deps import RunnerDeps
from agent.runner.state import AllocState
from agent.structs.model import Group, Job, Task
from agent.structs.records import AllocRecord, TaskRecord
from agent.templates.deps import TaskHost as TemplateHost
from agent.templates.runner import TaskTemplates

Then = Callable[[Exception | None], None]  # a step's end: None when done, the failure otherwise


@dataclass
class StartRequest:
    """What the hooks give one start of the task (their parts of agent.drivers.base.TaskContext)."""

    output: TaskOutput | None = None
    mounts: tuple[Mount, ...] = ()
    held: list[HeldVolume] = field(default_factory=list)  # the mounts' dirs, open until the start returns

    def release(self) -> None:
        """Close the held dirs (the start is over: the driver made its mounts, or failed)."""
        for h in self.held:
            h.close()
        self.held.clear()


# -- the alloc ---------------------------------------------------------------------------------------
class AllocContext(Protocol):
    """What a task's hooks (and the alloc's services) read of the alloc."""

    @property
    def id(self) -> str: ...

    @property
    def rec(self) -> AllocRecord: ...

    @property
    def job(self) -> Job: ...

    @property
    def group(self) -> Group: ...

    @property
    def alloc_dir(self) -> Path: ...

    @property
    def serial(self) -> Serial:
        """The alloc's operations in order; a hook's blocking step runs off the loop in it."""
        ...

    @property
    def setup_cancel(self) -> threading.Event:
        """Set by the stop at once: a long setup step (an artifact's download) ends early."""
        ...

    def alloc_running(self) -> bool: ...


class GroupNetwork(Protocol):
    """The alloc's network part as a task's start and the restore read it (agent.runner.network)."""

    def sandbox(self) -> Sandbox: ...

    def spec(self) -> AttachSpec: ...


class Lifecycle(Protocol):
    """The alloc's lifecycle order as a task runner asks it (agent.runner.coordinator)."""

    def done(self) -> bool: ...

    def advance(self) -> None: ...

    def first_tasks(self) -> list[Task]: ...


class AllocHost(AllocContext, Protocol):
    """What the alloc runner's parts and its task runners read and call on it."""

    network_from_state: bool  # its network taken over at a restore, not created in this run

    @property
    def d(self) -> RunnerDeps: ...

    @property
    def state(self) -> AllocState: ...

    @property
    def bridge(self) -> bool: ...

    @property
    def owner(self) -> NetnsOwner: ...

    @property
    def tasks(self) -> Mapping[str, RunningTask]: ...

    @property
    def network(self) -> GroupNetwork: ...

    @property
    def coord(self) -> Lifecycle: ...

    def event(self, task: str, type_: str, message: str, **details: Any) -> None: ...

    def kill_point(self, name: str) -> None: ...

    def driver(self, t: Task) -> TaskDriver: ...

    def netns_path(self) -> Path | None: ...

    def unfinished(self) -> list[Task]: ...

    # its lifecycle: the coordinator's hands
    def lifecycle_changed(self) -> None: ...

    # its end
    def stop(self, reason: str = ...) -> None: ...

    def recover_network(self, why: str, cause: StartCause = ...) -> None: ...

    def record_failure(self, reason: str) -> None: ...

    def finish_failure(self, reason: str) -> None: ...

    def fail(self, reason: str, *, teardown: bool = True) -> None: ...

    def teardown(self) -> None: ...


# -- the task ----------------------------------------------------------------------------------------
class TaskEvents(Protocol):
    """Where a hook says what happened to its task (Nomad's EventEmitter)."""

    def event(self, type_: str, message: str, **details: Any) -> None: ...


class TaskLifecycle(TaskEvents, Protocol):
    """What a hook may do to its running task (Nomad's TaskLifecycle): signal it, stop and start
    it again for a decision (in the alloc's turn), ask whether it runs."""

    def running(self) -> bool: ...

    def signal(self, sig: str) -> None: ...

    def stop_then_restart(self, cause: StartCause, why: str) -> None: ...


class TaskHost(TaskLifecycle, TemplateHost, Protocol):
    """A task as its hooks are made from it (agent.runner.taskhooks: each hook is handed the narrow
    parts it needs, the check watcher its CheckPorts) and as its template runner is given it."""

    killed_as_failure: bool  # its next exit follows a check_restart kill (the restart tracker's)

    @property
    def ar(self) -> AllocContext: ...

    @property
    def d(self) -> RunnerDeps: ...

    @property
    def t(self) -> Task: ...

    @property
    def name(self) -> str: ...

    @property
    def driver(self) -> TaskDriver: ...

    @property
    def task_dir(self) -> Path: ...

    def handle(self) -> TaskHandle | None: ...

    def env(self) -> dict[str, str]: ...

    def exec_env(self) -> dict[str, str]: ...

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None: ...


class RunningTask(TaskHost, Protocol):
    """What the alloc runner's parts (the restorer, the coordinator, a network recovery) call on a
    task runner."""

    @property
    def vault_changed_on_restore(self) -> bool:
        """The restore gave it a new token (its vault hook's word)."""
        ...

    @property
    def state(self) -> AllocState: ...

    @property
    def hooks(self) -> HookPoints: ...

    def handle_running(self, h: TaskHandle) -> bool: ...

    def start(self, cause: StartCause, why: str = "", *, restart: bool = False) -> None: ...

    def restart(self, cause: StartCause, why: str = "", *, count: bool = True) -> None: ...

    def start_poststop(self, again: bool, failed: Callable[[], None]) -> bool:
        """A poststop task's start as the alloc ends (`again`: by its restart policy); False: it
        could not start (dead and failed), else `failed()` when its start fails later."""
        ...

    def restart_decision(self, record: TaskRecord, now: float, code: int | None) -> RestartDecision: ...

    def restore_dead(self) -> None: ...

    def templates(self) -> TaskTemplates: ...

    def vault_token_changed(self, why: str) -> None: ...


# -- the hook points -----------------------------------------------------------------------------------
# A hook implements the points it needs, no others (as Nomad's hooks implement its interfaces); the
# task runner calls each point's hooks in the order of the task's list (HookPoints.of). A hook is
# made for its task with what it needs (agent.runner.taskhooks), so no point takes the task runner.
@runtime_checkable
class SetupHook(Protocol):
    def setup(self, then: Then) -> None:
        """Before the task's first start; `then(None)` when done (it may finish off the main loop,
        on it), `then(exc)` when it failed. Raising is a failure too."""
        ...


@runtime_checkable
class PrestartHook(Protocol):
    def prestart(self, req: StartRequest) -> None:
        """At every start: the hook's part of the start's context."""
        ...


@runtime_checkable
class EnvHook(Protocol):
    def env(self) -> dict[str, str]:
        """The hook's variables in the task's environment (Nomad's hook response Env)."""
        ...


@runtime_checkable
class PoststartHook(Protocol):
    def poststart(self, handle: TaskHandle) -> None:
        """After the start is recorded."""
        ...


@runtime_checkable
class ExitedHook(Protocol):
    def exited(self) -> None:
        """The task is done for good (it will not be started again)."""
        ...


@runtime_checkable
class RestoreHook(Protocol):
    def restore(self) -> None:
        """The agent started again and the alloc is being restored, before anything restarts."""
        ...


@runtime_checkable
class ReattachHook(Protocol):
    def reattached(self, handle: TaskHandle) -> None:
        """The task was found running at that restore."""
        ...


@runtime_checkable
class StopHook(Protocol):
    def stop(self) -> None:
        """The alloc is torn down, after the task's handle is removed."""
        ...


class TaskHook(Protocol):
    """A task's hook (agent.runner.taskhooks.task_hooks): its name, and the points it implements."""

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class HookPoints:
    """A task's hooks at each point, each point's in the order of the task's list."""

    all: tuple[TaskHook, ...] = ()
    setup: tuple[SetupHook, ...] = ()
    prestart: tuple[PrestartHook, ...] = ()
    env: tuple[EnvHook, ...] = ()
    poststart: tuple[PoststartHook, ...] = ()
    exited: tuple[ExitedHook, ...] = ()
    restore: tuple[RestoreHook, ...] = ()
    reattached: tuple[ReattachHook, ...] = ()
    stop: tuple[StopHook, ...] = ()

    @classmethod
    def of(cls, hooks: Sequence[TaskHook]) -> HookPoints:
        return cls(
            all=tuple(hooks),
            setup=tuple(h for h in hooks if isinstance(h, SetupHook)),
            prestart=tuple(h for h in hooks if isinstance(h, PrestartHook)),
            env=tuple(h for h in hooks if isinstance(h, EnvHook)),
            poststart=tuple(h for h in hooks if isinstance(h, PoststartHook)),
            exited=tuple(h for h in hooks if isinstance(h, ExitedHook)),
            restore=tuple(h for h in hooks if isinstance(h, RestoreHook)),
            reattached=tuple(h for h in hooks if isinstance(h, ReattachHook)),
            stop=tuple(h for h in hooks if isinstance(h, StopHook)),
        )
