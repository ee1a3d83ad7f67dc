"""A task runner's plain hooks (Nomad's task_dir, logmon, artifact and volume hooks, and a docker
task's logger, which Nomad's docker driver starts itself); the identity, dispatch payload, Vault,
template and check hooks have files of their own.

Each hook does one part of a task's life around the driver's start, at the points Nomad's task
runner calls its own hooks:

- `setup`: once, when the alloc is set up, before the task's first start (Nomad's prestart hooks
  the first time; they mark themselves done so that a restart does not run them again);
- `prestart`: at every start, giving the start its part of the task's context;
- `env`: the hook's variables in the task's environment;
- `poststart`: after the start is recorded;
- `exited`: the task is done for good (it will not be started again);
- `restore`: the agent started again and the alloc is being restored, before anything restarts;
- `reattached`: the task was found running at that restore;
- `stop`: the alloc is torn down, after the task's handle is removed.

A hook implements the points it needs and no others (agent.runner.interfaces: one protocol per
point), is made only for a task that needs it, with the narrow parts of the task it uses
(agent.runner.taskhooks, as Nomad's initHooks), and keeps its own state. The task runner
(agent.runner.taskrunner) runs each point's hooks in the order of the task's list, as Nomad's does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from agent.allocdir.hostvolumes import HostVolumeError, hold_host_volume
from agent.client.offload import Serial
from agent.decide.taskdecisions import plan_remount_secrets, plan_restart_logmon
from agent.drivers.base import DriverError, Mount, TaskHandle, TaskOutput
from agent.errors import AgentError, Unavailable
from agent.fieldbugs.bugs import Bugs
from agent.getter.getter import ArtifactGetter
from agent.runner.interfaces import StartRequest, TaskEvents, Then
from agent.runner.logmonhook import LogLimits, LogmonOutput, TaskLogs
from agent.runner.owner import task_user_owner
from agent.runner.taskdirs import TaskDirs
from agent.structs.model import HostVolume, Task, VolumeMount

log = logging.getLogger(__name__)
DOWNLOADING_ARTIFACTS = "Downloading Artifacts"  # Nomad's TaskDownloadingArtifacts
ARTIFACT_DOWNLOAD_FAILED = "Failed Artifact Download"  # Nomad's TaskArtifactDownloadFailed


class TaskDirHook:
    """The task's directory (local/, secrets/ on a tmpfs, the alloc's shared dir)."""

    name = "task_dir"

    def __init__(
        self, events: TaskEvents, dirs: TaskDirs, alloc_dir: Path, task_dir: Path, secrets_mb: int, bugs: Bugs
    ) -> None:
        self.events, self.dirs, self.bugs = events, dirs, bugs
        self.alloc_dir, self.task_dir, self.secrets_mb = alloc_dir, task_dir, secrets_mb

    def setup(self, then: Then) -> None:
        self.events.event("Task Setup", "Building Task Directory")
        self.dirs.prepare(self.task_dir, self.secrets_mb)
        then(None)

    def restore(self) -> None:
        if not plan_remount_secrets(self.bugs):
            return
        if self.alloc_dir.is_dir() and self.dirs.remount_secrets(self.task_dir, self.secrets_mb):
            self.events.event("Task Setup", "secrets/ tmpfs mounted again (it is gone after a reboot)")


class LogmonHook:
    """The task's stdout/stderr go through its logmon (agent.runner.logmonhook), started before each
    start when none runs; the driver gives the task the logmon's pipes. Made only for a task whose
    driver writes its output to files (`log_files`) and whose `logs` are enabled. `always`: every
    start of the task wrote to the pipes (a container's logger copies into them), so a restore
    brings back a logmon that is gone without asking whether the task was given pipes."""

    name = "logmon"

    def __init__(
        self,
        events: TaskEvents,
        logs: TaskLogs,
        alloc_dir: Path,
        task: str,
        limits: LogLimits,
        *,
        always: bool,
        bugs: Bugs,
    ) -> None:
        self.events, self.logs, self.alloc_dir, self.task, self.limits = events, logs, alloc_dir, task, limits
        self.always, self.bugs = always, bugs

    def prestart(self, req: StartRequest) -> None:
        req.output = self._output()

    def _output(self) -> TaskOutput:
        try:
            self.logs.ensure(self.alloc_dir, self.task, self.limits)
        except OSError as exc:
            raise DriverError("logmon", f"task {self.task}", f"cannot start its logmon: {exc}") from None
        return LogmonOutput(self.logs, self.alloc_dir, self.task)

    def exited(self) -> None:
        self.logs.stop(self.alloc_dir, self.task)  # it drains its pipes (and its logger) and ends

    def reattached(self, handle: TaskHandle) -> None:
        """Its logmon outlived the agent as a rule; one that did not is started again and copies what
        waited in the pipe. A process task an agent before logmon started writes its own file
        (agent.command.logs.TaskDirLog): none."""
        if not plan_restart_logmon(self.bugs):
            return
        if self.always or self.logs.has_pipes(self.alloc_dir, self.task):
            try:
                self._output()
            except DriverError as exc:
                self.events.event("Logmon Failure", f"{exc.reason}: its output waits in the pipe")


class DockerLoggerHook:
    """A container's log copied into its task's logmon pipes by a logger per container (Nomad's
    docker_logger), started after each start and again at a restore. Made only for a task whose
    driver has a container log (`container_log`) and whose `logs` are enabled; a logger that
    cannot start is an event, not a failed task."""

    name = "docker_logger"

    def __init__(self, events: TaskEvents, logs: TaskLogs, alloc_dir: Path, task: str, bugs: Bugs) -> None:
        self.events, self.logs, self.alloc_dir, self.task, self.bugs = events, logs, alloc_dir, task, bugs

    def poststart(self, handle: TaskHandle) -> None:
        try:
            self.logs.follow_container(self.alloc_dir, self.task, handle.id)
        except OSError as exc:
            self.events.event("Logmon Failure", f"cannot follow its container's log: {exc}")

    def reattached(self, handle: TaskHandle) -> None:
        if plan_restart_logmon(self.bugs):  # nomad-5577's fault: nothing is started again
            self.poststart(handle)


class ArtifactHook:
    """The task's artifacts (Nomad's artifact hook), fetched into its task dir before its first start,
    off the main loop, one after the other, by the agent's getter (agent.getter). Not fetched again at
    a restore: the task dir kept them. A download that failed is a "Failed Artifact Download" event
    and fails the setup; one whose server did not answer is tried again with the setup
    (plan_setup_retry). Made only for a task with artifacts."""

    name = "artifacts"

    def __init__(
        self,
        task: Task,
        events: TaskEvents,
        getter: ArtifactGetter,
        task_dir: Path,
        env: Callable[[], dict[str, str]],
        serial: Serial,
        cancel: threading.Event,
        alloc_id: str,
    ) -> None:
        self.task, self.events, self.getter, self.task_dir = task, events, getter, task_dir
        self.task_env = env  # the task's environment, read at the setup (the artifacts' ${...})
        self.serial, self.cancel, self.alloc_id = serial, cancel, alloc_id

    def setup(self, then: Then) -> None:
        artifacts = self.task.artifacts
        self.events.event(DOWNLOADING_ARTIFACTS, "Client is downloading artifacts")
        getter, task_dir, env = self.getter, self.task_dir, self.task_env()
        owner = task_user_owner(self.task)  # for `chown = true`: the task's `user`, as Nomad's
        failed_source: list[str] = []
        cancel = self.cancel  # set by the alloc's stop: the download ends at once, as Nomad's

        def blocking() -> int:
            count = 0
            for artifact in artifacts:
                failed_source[:] = [artifact.source]
                count += getter.fetch(task_dir, artifact, env, owner if artifact.chown else None, cancel)
            failed_source.clear()
            return count

        def done(result: object, exc: Exception | None) -> None:
            if exc is not None and cancel.is_set():
                then(exc)  # stopped meanwhile: no failure to report, the stop queued behind ends it
                return
            if exc is not None:
                source = failed_source[0] if failed_source else "?"
                message = f'failed to download artifact "{source}": {exc}'
                self.events.event(ARTIFACT_DOWNLOAD_FAILED, message)
                if not isinstance(exc, AgentError | OSError):
                    log.error("alloc=%s task=%s: %s", self.alloc_id[:8], self.task.name, message)
                then(_failure(exc, message))
                return
            then(None)

        self.serial.off_loop(f"artifacts {self.task.name}", blocking, done)


def _failure(exc: Exception, message: str) -> Exception:
    """The setup's failure: retryable (Unavailable) when the server did not answer."""
    if isinstance(exc, Unavailable):
        return Unavailable(message)
    return AgentError(message)


class VolumeHook:
    """The task's volume_mounts on this node's host volumes (Nomad's volume hook): read only when
    the client's volume, the group's request or the mount says so. A volume the node no longer has
    (its config changed since the job was placed) fails the start, naming it. Each path is resolved
    at every start and refused when it leads into the agent's own dirs, and held open until the
    driver has mounted it (agent.allocdir.hostvolumes: no window between the check and the mount).
    Made only for a task with volume_mounts."""

    name = "volumes"

    def __init__(
        self,
        task: str,
        mounts: tuple[VolumeMount, ...],
        requests: Mapping[str, HostVolume],
        host_volume: Callable[[str], tuple[str, bool] | None],
        own_paths: tuple[Path, ...],
    ) -> None:
        """`host_volume`: the node's host volume of a name (its path, read only) or None."""
        self.task, self.mounts, self.requests = task, mounts, requests
        self.host_volume, self.own_paths = host_volume, own_paths

    def prestart(self, req: StartRequest) -> None:
        out = []
        for m in self.mounts:
            want = self.requests[m.volume]
            found = self.host_volume(want.source)
            if found is None:
                why = f"host volume validation error: missing {want.source}"
                raise DriverError("volume", f"task {self.task}", why)
            path, client_ro = found
            try:  # resolved now, at every start, and held open: the driver mounts the checked dir
                held = hold_host_volume(want.source, path, self.own_paths)
            except HostVolumeError as exc:
                raise DriverError("volume", f"task {self.task}", str(exc)) from None
            req.held.append(held)  # closed by the task runner once the start returned
            read_only = client_ro or want.read_only or m.read_only
            out.append(Mount(held.path, m.destination, read_only, m.propagation_mode, fd=held.fd))
        req.mounts = tuple(out)
