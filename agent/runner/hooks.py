"""A task runner's hooks (Nomad's taskrunner hooks: task_dir, logmon, artifacts, vault, template,
volume).

Each hook does one part of a task's life around the driver's start, at the points Nomad's task
runner calls its own hooks:

- `setup`: once, when the alloc is set up, before the task's first start (Nomad's prestart hooks
  the first time; they mark themselves done so that a restart does not run them again);
- `prestart`: at every start, giving the start its part of the task's context;
- `poststart`: after the start is recorded;
- `exited`: the task is done for good (it will not be started again);
- `restore`: the agent started again and the alloc is being restored, before anything restarts;
- `reattached`: the task was found running at that restore;
- `stop`: the alloc is torn down, after the task's handle is removed.

A hook implements the points it needs and no others (agent.runner.interfaces: one protocol per
point). The task runner (agent.runner.taskrunner) runs each point's hooks in the order of
`task_hooks` (agent.runner.taskhooks), as Nomad's does.
"""

from __future__ import annotations

import logging

from agent.allocdir.hostvolumes import HostVolumeError, hold_host_volume
from agent.decide.taskdecisions import plan_remount_secrets, plan_restart_logmon, plan_vault_token_allowed
from agent.drivers.base import DriverError, Mount, TaskHandle, TaskOutput
from agent.errors import AgentError, Unavailable
from agent.runner.interfaces import StartRequest, TaskHost, Then
from agent.runner.logmonhook import LogLimits, LogmonOutput
from agent.runner.owner import task_user_owner
from agent.structs.records import DesiredStatus
from agent.templates.render import TemplateRenderError
from agent.vault.errors import VaultError

log = logging.getLogger(__name__)
DOWNLOADING_ARTIFACTS = "Downloading Artifacts"  # Nomad's TaskDownloadingArtifacts
ARTIFACT_DOWNLOAD_FAILED = "Failed Artifact Download"  # Nomad's TaskArtifactDownloadFailed


class TaskDirHook:
    """The task's directory (local/, secrets/ on a tmpfs, the alloc's shared dir)."""

    name = "task_dir"

    def setup(self, tr: TaskHost, then: Then) -> None:
        tr.event("Task Setup", "Building Task Directory")
        tr.d.task_dirs.prepare(tr.task_dir, tr.t.resources.secrets)
        then(None)

    def restore(self, tr: TaskHost) -> None:
        if not plan_remount_secrets(tr.d.bugs):
            return
        if tr.ar.alloc_dir.is_dir() and tr.d.task_dirs.remount_secrets(tr.task_dir, tr.t.resources.secrets):
            tr.event("Task Setup", "secrets/ tmpfs mounted again (it is gone after a reboot)")


class LogmonHook:
    """A process task's stdout/stderr go through its logmon (agent.runner.logmonhook), started when
    none runs; a container's log is copied into the same pipes by a logger per container (Nomad's
    docker_logger). A task whose `logs` are disabled has neither."""

    name = "logmon"

    def prestart(self, tr: TaskHost, req: StartRequest) -> None:
        req.output = self.output(tr)

    def output(self, tr: TaskHost) -> TaskOutput | None:
        t = tr.t
        if not tr.driver.log_files or t.logs.disabled:
            return None
        limits = LogLimits(t.logs.max_files, t.logs.max_file_size)
        try:
            tr.d.task_logs.ensure(tr.ar.alloc_dir, t.name, limits)
        except OSError as exc:
            raise DriverError("logmon", f"task {t.name}", f"cannot start its logmon: {exc}") from None
        return LogmonOutput(tr.d.task_logs, tr.ar.alloc_dir, t.name)

    def poststart(self, tr: TaskHost, handle: TaskHandle) -> None:
        """A logger that cannot start is an event, not a failed task."""
        if not tr.driver.container_log or tr.t.logs.disabled:
            return
        try:
            tr.d.task_logs.follow_container(tr.ar.alloc_dir, tr.t.name, handle.id)
        except OSError as exc:
            tr.event("Logmon Failure", f"cannot follow its container's log: {exc}")

    def exited(self, tr: TaskHost) -> None:
        tr.d.task_logs.stop(tr.ar.alloc_dir, tr.t.name)  # it drains its pipes and ends

    def reattached(self, tr: TaskHost, handle: TaskHandle) -> None:
        """Its logmon outlived the agent as a rule; one that did not is started again and copies what
        waited in the pipe. A process task an agent before logmon started writes its own file
        (agent.command.logs.TaskDirLog): none."""
        if not plan_restart_logmon(tr.d.bugs):
            return
        if tr.driver.container_log or tr.d.task_logs.has_pipes(tr.ar.alloc_dir, tr.t.name):
            try:
                self.output(tr)
            except DriverError as exc:
                tr.event("Logmon Failure", f"{exc.reason}: its output waits in the pipe")
        self.poststart(tr, handle)


class ArtifactHook:
    """The task's artifacts (Nomad's artifact hook), fetched into its task dir before its first start,
    off the main loop, one after the other, by the agent's getter (agent.getter). Not fetched again at
    a restore: the task dir kept them. A download that failed is a "Failed Artifact Download" event
    and fails the setup; one whose server did not answer is tried again with the setup
    (plan_setup_retry)."""

    name = "artifacts"

    def setup(self, tr: TaskHost, then: Then) -> None:
        artifacts = tr.t.artifacts
        if not artifacts:
            then(None)
            return
        tr.event(DOWNLOADING_ARTIFACTS, "Client is downloading artifacts")
        getter, task_dir, env = tr.d.getter, tr.task_dir, tr.env()
        owner = task_user_owner(tr.t)  # for `chown = true`: the task's `user`, as Nomad's
        failed_source: list[str] = []
        cancel = tr.ar.setup_cancel  # set by the alloc's stop: the download ends at once, as Nomad's

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
                tr.event(ARTIFACT_DOWNLOAD_FAILED, message)
                if not isinstance(exc, AgentError | OSError):
                    log.error("alloc=%s task=%s: %s", tr.ar.id[:8], tr.name, message)
                then(_failure(exc, message))
                return
            then(None)

        tr.ar.serial.off_loop(f"artifacts {tr.t.name}", blocking, done)


def _failure(exc: Exception, message: str) -> Exception:
    """The setup's failure: retryable (Unavailable) when the server did not answer."""
    if isinstance(exc, Unavailable):
        return Unavailable(message)
    return AgentError(message)


class VaultHook:
    """The task's own Vault token (agent.runner.vaulttoken): made at setup, made again at a start
    when it expired while the task was down, checked at restore, revoked at the teardown."""

    name = "vault"

    def setup(self, tr: TaskHost, then: Then) -> None:
        token = tr.vault_token()
        if token is not None:
            self._may_derive(tr)
            token.ensure()
        then(None)

    def prestart(self, tr: TaskHost, req: StartRequest) -> None:
        token = tr.vault_token()
        if token is not None:
            self._may_derive(tr)
            token.ensure()  # a no-op unless the token expired while the task was down

    @staticmethod
    def _may_derive(tr: TaskHost) -> None:
        if not plan_vault_token_allowed(tr.ar.rec.desired is DesiredStatus.STOP, tr.d.bugs):
            raise VaultError(
                "derive token", "auth/token/create", "Can't request Vault token for terminal allocation"
            )

    def restore(self, tr: TaskHost) -> None:
        token = tr.vault_token()
        if token is not None and token.restore():
            tr.vault_changed_on_restore = True

    def stop(self, tr: TaskHost) -> None:
        token = tr.vault_token()
        if token is not None:
            token.revoke()


class TemplateHook:
    """The task's templates: the first render before its first start, off the main loop
    (agent.templates.runner.SetupPass). Their re-renders and change_mode live in the template
    runner; a restore's render is the restorer's (all tasks' at once, agent.runner.restorer)."""

    name = "template"

    def setup(self, tr: TaskHost, then: Then) -> None:
        if not tr.t.templates:
            then(None)
            return
        tt = tr.templates()
        try:
            setup = tt.begin_render_all()
        except (AgentError, OSError) as exc:
            then(exc)
            return
        if setup is None:
            then(None)
            return

        def done(result: object, exc: Exception | None) -> None:
            try:
                tt.finish_render_all(setup, result if isinstance(result, list) else None, exc)
            except Exception as failed:
                if isinstance(failed, TemplateRenderError):
                    tr.event("Template Failed", str(failed))
                then(failed)
                return
            then(None)

        tr.ar.serial.off_loop(f"render {tr.t.name}", lambda: tt.run_render_all(setup), done)


class VolumeHook:
    """The task's volume_mounts on this node's host volumes (Nomad's volume hook): read only when
    the client's volume, the group's request or the mount says so. A volume the node no longer has
    (its config changed since the job was placed) fails the start, naming it. Each path is resolved
    at every start and refused when it leads into the agent's own dirs, and held open until the
    driver has mounted it (agent.allocdir.hostvolumes: no window between the check and the mount)."""

    name = "volumes"

    def prestart(self, tr: TaskHost, req: StartRequest) -> None:
        requests = {v.alias: v for v in tr.ar.group.volumes}
        out = []
        for m in tr.t.volume_mounts:
            want = requests[m.volume]
            found = tr.d.host_volumes.get(want.source)
            if found is None:
                why = f"host volume validation error: missing {want.source}"
                raise DriverError("volume", f"task {tr.t.name}", why)
            path, client_ro = found
            try:  # resolved now, at every start, and held open: the driver mounts the checked dir
                held = hold_host_volume(want.source, path, (tr.d.data_dir, *tr.d.own_paths))
            except HostVolumeError as exc:
                raise DriverError("volume", f"task {tr.t.name}", str(exc)) from None
            req.held.append(held)  # closed by the task runner once the start returned
            read_only = client_ro or want.read_only or m.read_only
            out.append(Mount(held.path, m.destination, read_only, m.propagation_mode, fd=held.fd))
        req.mounts = tuple(out)
