"""The docker driver. In bridge mode a group gets a pause container that owns the network
namespace (network mode none, restart unless-stopped, as upstream); the agent runs CNI on that
namespace and every task container joins it with `--network container:<pause>`.

The agent, not docker, applies restart policies: task containers run with restart policy "no"
(and, as Nomad's, without `--init` unless the task says `init = true`), and carry labels naming
job, group, alloc and task so that a restarted agent (and the orphan sweeper) can tell what belongs
to whom. The task's options are mapped as Nomad's driver maps them by agent.drivers.dockeropts
(docs/drivers.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests
from docker.types import LogConfig

from agent.allocdir.hostvolumes import pin_path, staged_bind
from agent.command.plugins import DockerPlugin
from agent.drivers.base import (
    LABEL_ALLOC,
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_TASK,
    NO_SANDBOX,
    RESTARTED,
    DriverError,
    Mount,
    Sandbox,
    TaskContext,
    TaskHandle,
    TaskStatus,
    inside_env,
)
from agent.drivers.dockerengine import EngineReads, engine_errors
from agent.drivers.dockermounts import volume_bind
from agent.drivers.dockernames import (
    CONTAINER_LOG_OPTS,
    NOMAD_LABEL_ALLOC,
    NOMAD_LABEL_PREFIX,
    etc_hosts,
    legacy_pause_name,
    no_image,
    pause_name,
    pause_sandbox,
    task_container_name,
)
from agent.drivers.dockeropts import (
    effective_network,
    from_task,
    plan,
    port_map_env,
    published,
    refusals,
)
from agent.drivers.dockerpull import EnginePullApi, Puller
from agent.drivers.dockervalues import DockerOpts, TaskFacts
from agent.drivers.hostproc import EXEC_OUTPUT_MAX
from agent.drivers.pullconfig import task_pull
from agent.drivers.session import DockerSession, ExecSession, kill_tree
from agent.drivers.usage import Usage, docker_usage
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.network.netns import same_netns
from agent.structs.model import Task

log = logging.getLogger(__name__)
PAUSE_IMAGE = "fieldlab/pause:latest"
# where a host volume's held dir is bound for dockerd during a start (the agent passes its data dir's)
STAGING_DIR = Path("/run/fieldlab-agent/hostvolumes")
EXEC_START_WAIT = 10.0  # seconds a timed-out exec is given to show its pid so it can be killed
EXEC_START_POLL = 0.05  # seconds between looks at that exec


def _no_event(message: str, details: Mapping[str, str]) -> None:
    """A start with no task to tell (a test's): the pull's events go to the log."""
    log.info("%s %s", message, dict(details))


class DockerDriver(EngineReads):
    name = "docker"
    joins_container_netns = True
    keeps_exit_status = True  # the engine keeps it with the container
    log_files = True  # the container's log, copied into the task's logmon pipes by a docker logger
    container_log = True

    def __init__(
        self,
        client: Any | None = None,
        *,
        pids_limit: int = 0,
        publish_address: str = "",
        node_name: str = "",
        plugin: DockerPlugin | None = None,
        own_paths: Sequence[Path] = (),
        bugs: Bugs = NO_BUGS,
        staging_dir: Path = STAGING_DIR,
    ) -> None:
        self._client = client
        self.node_name = node_name  # Nomad's label com.hashicorp.nomad.node_name
        super().__init__()
        self.plugin = plugin or DockerPlugin()  # Nomad's plugin "docker" config
        self.pids_limit = pids_limit  # of every task container; 0: none (client config docker_pids_limit)
        self.own_paths = tuple(own_paths)  # the agent's own files: no bind reaches them (hostvolumes)
        self.bugs = bugs  # the fault flags the option mapping takes (dockeropts.plan, via TaskFacts)
        self.staging_dir = staging_dir  # host volumes' binds for dockerd, during a start (hostvolumes)
        # Host-mode groups: published ports bind this address (the node's advertise address), as
        # Nomad's docker driver binds the host network's; "" binds every address.
        self.publish_address = publish_address
        # Nomad's image pull (createImage): one pull per image at a time, the plugin's timeouts and auth
        self.puller = Puller(EnginePullApi(lambda: self.client), self.plugin.pull, bugs=bugs)

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                client = docker.from_env(timeout=60)
            except docker.errors.DockerException as exc:
                raise DriverError("docker", "connect", str(exc), unavailable=True) from None
            # The engine's socket takes no HTTP proxy and no .netrc: without this, requests reads the
            # environment's proxy settings for every call (a third of an inspect's CPU at restore).
            client.api.trust_env = False
            self._client = client
        return self._client

    def _labels(self, job: str, group: str, alloc_id: str, task: str, role: str) -> dict[str, str]:
        """The agent's own labels (what restore, adoption and the sweeper read), and Nomad's: a task
        container carries those of Nomad's docker driver with `extra_labels = ["*"]`, the pause
        container the alloc ID only, as Nomad's `nomad_init_<alloc>` does."""
        nomad = {NOMAD_LABEL_ALLOC: alloc_id}
        if role == "task":
            nomad |= {
                NOMAD_LABEL_PREFIX + "job_name": job,
                NOMAD_LABEL_PREFIX + "job_id": job,
                NOMAD_LABEL_PREFIX + "task_group_name": group,
                NOMAD_LABEL_PREFIX + "task_name": task,
                NOMAD_LABEL_PREFIX + "namespace": "default",
                NOMAD_LABEL_PREFIX + "node_name": self.node_name,
            }
        return {
            LABEL_MANAGED: "true",
            LABEL_JOB: job,
            LABEL_GROUP: group,
            LABEL_ALLOC: alloc_id,
            LABEL_TASK: task,
            LABEL_ROLE: role,
            **nomad,
        }

    # -- pause container ----------------------------------------------------------------------
    @engine_errors("start pause container")
    def start_pause(
        self, job: str, group: str, alloc_id: str, image: str = PAUSE_IMAGE, *, sandbox: Sandbox = NO_SANDBOX
    ) -> TaskHandle:
        """Create and start the alloc's pause container (or start the existing one). The group
        network's hostname and DNS are the pause container's (Nomad's docker driver creates it with
        the hostname; its DNS options give the resolv.conf the task containers that join it share)."""
        try:
            try:
                c = self.client.containers.get(pause_name(alloc_id))
            except docker.errors.NotFound:
                c = self.client.containers.get(legacy_pause_name(alloc_id))
            if c.status != "running":
                c.start()
        except docker.errors.NotFound:
            try:
                c = self.client.containers.run(
                    image,
                    name=pause_name(alloc_id),
                    detach=True,
                    network_mode="none",
                    restart_policy={"Name": "unless-stopped"},
                    security_opt=["no-new-privileges"],
                    labels=self._labels(job, group, alloc_id, "", "pause"),
                    **pause_sandbox(sandbox),
                )
            except docker.errors.ImageNotFound:
                raise DriverError(
                    "docker",
                    f"pause container for alloc {alloc_id}",
                    f"image {image} not found (built by the workload_images role)",
                ) from None
            except docker.errors.APIError as exc:
                raise DriverError(
                    "docker", f"pause container for alloc {alloc_id}", str(exc.explanation)
                ) from None
        c.reload()
        return TaskHandle("docker", c.id, c.attrs["State"]["StartedAt"])

    @engine_errors("netns of a container")
    def netns_path(self, handle: TaskHandle) -> Path:
        """The network namespace of a running container, as a path CNI can use: docker's own handle
        of the container's sandbox (NetworkSettings.SandboxKey, the path Nomad's network hook hands
        CNI), which names that netns only and goes away with it; `/proc/<pid>/ns/net` only where the
        engine gives no live one. A /proc path outlives its container as a number: once the pid is
        another process's, a CNI command run in it would act on that process's netns (the host's)."""
        attrs = self._attrs(handle.id)
        pid = int(attrs["State"]["Pid"] or 0) if attrs is not None else 0
        if attrs is None or not pid:
            raise DriverError(
                "docker", f"container {handle.id[:12]}", "not running: it has no network namespace"
            )
        by_pid = f"/proc/{pid}/ns/net"
        key = str((attrs.get("NetworkSettings") or {}).get("SandboxKey") or "")
        return Path(key if key and same_netns(key, by_pid) else by_pid)

    @engine_errors("inspect")
    def pid(self, handle: TaskHandle) -> int:
        attrs = self._attrs(handle.id)
        return int(attrs["State"]["Pid"] or 0) if attrs is not None else 0

    # -- tasks ---------------------------------------------------------------------------------
    @engine_errors("start")
    def prepare(self, ctx: TaskContext) -> None:
        """The task's image, pulled as Nomad's driver pulls it (createImage; a `Driver` event
        "Downloading image"); the runner runs this off the main loop before the start. A failed
        pull is the start's DriverError (recoverable unless the image was not found)."""
        task = ctx.task
        image = str(task.config.get("image", ""))
        emit = ctx.driver_event or _no_event
        self.puller.ensure(image, task_pull(task.config, DockerOpts()), emit, f"task {task.name}")

    @engine_errors("start")
    def start(self, ctx: TaskContext) -> TaskHandle:
        # the host volumes' held dirs, bound for dockerd until the container runs
        with contextlib.ExitStack() as staged:
            binds = [self._volume_bind(ctx, m, staged) for m in ctx.mounts]
            return self._start(ctx, binds, staged)

    def _volume_bind(self, ctx: TaskContext, m: Mount, staged: contextlib.ExitStack) -> str:
        """A host volume's docker bind. Its held dir (m.fd) is bound on a fresh dir of the agent's
        own first (agent.allocdir.hostvolumes.staged_bind), which dockerd is given: dockerd and runc mount it
        in the container's namespace, where the fd's /proc link cannot be a source, and a path a
        task could swap is never resolved again."""
        if m.fd < 0:
            return volume_bind(m)
        try:
            where = staged.enter_context(staged_bind(m.fd, self.staging_dir))
        except OSError as exc:
            why = f"host volume at {m.task_path}: {exc}"
            raise DriverError("docker", f"task {ctx.task.name}", why) from None
        return volume_bind(replace(m, host_path=where))

    def _group_network_files(self, ctx: TaskContext, mode: str, kw: dict[str, Any]) -> None:
        """In its group's network (a pause container's): Nomad's /etc/hosts, with the task's
        extra_hosts in it rather than the engine's (which refuses them in a joined namespace, as it
        does under Nomad when there is no such file); elsewhere the group's network.dns as the
        container's own DNS options in place of the task's (Nomad mounts a resolv.conf of them)."""
        if mode == "container" and ctx.netns_owner is not None:
            if hosts := self._etc_hosts(ctx, ctx.netns_owner.id, kw.get("extra_hosts", [])):
                kw.pop("extra_hosts", None)
                kw["volumes"].append(f"{hosts}:/etc/hosts:rw")
        elif dns := pause_sandbox(replace(ctx.sandbox, hostname="")):
            # Nomad's: with the group's network.dns the task's dns_* options are not used
            for key in ("dns", "dns_search", "dns_opt"):
                kw.pop(key, None)
            kw.update(dns)

    def _etc_hosts(self, ctx: TaskContext, pause_id: str, extra_hosts: Sequence[str]) -> Path | None:
        """Nomad's /etc/hosts of a task in its group's network (drivers/shared/hostnames): the
        localhost lines and the alloc's address with the pause container's hostname (the group's
        network.hostname, else docker's), written once into the task dir (the task may change it, as
        Nomad's); None when the alloc has no address yet."""
        address = ctx.env.get("NOMAD_ALLOC_IP", "")
        attrs = self._attrs(pause_id)
        hostname = str(attrs["Config"].get("Hostname") or "") if attrs else ""
        if not address or not hostname:
            return None
        path = ctx.task_dir / "hosts"
        if not path.exists():
            path.write_text(etc_hosts(address, hostname, extra_hosts))
            path.chmod(0o644)
        return path

    def _pin_binds(self, ctx: TaskContext, opts: DockerOpts, staged: contextlib.ExitStack) -> None:
        """The task's own binds (config `volumes`, `mount` of type bind: sources checked by
        dockermounts) handed to dockerd as binds of what was checked, made through an fd
        (agent.allocdir.hostvolumes.pin_path): a component swapped for a link since the check is refused."""

        def pin(src: str) -> str:
            try:
                fd = pin_path(src)
            except OSError as exc:
                why = f"bind source {src} changed while it was mounted ({exc.strerror or exc}): refused"
                raise DriverError("docker", f"task {ctx.task.name}", why) from None
            try:
                return staged.enter_context(staged_bind(fd, self.staging_dir))
            except OSError as exc:
                raise DriverError("docker", f"task {ctx.task.name}", f"bind source {src}: {exc}") from None
            finally:
                os.close(fd)

        kw = opts.kwargs
        if "volumes" in kw:
            kw["volumes"] = [":".join([pin(v.split(":")[0]), *v.split(":")[1:]]) for v in kw["volumes"]]
        for m in kw.get("mounts", []):
            if m.get("Type") == "bind":
                m["Source"] = pin(str(m["Source"]))

    def _start(self, ctx: TaskContext, binds: list[str], staged: contextlib.ExitStack) -> TaskHandle:
        task = ctx.task
        cfg = task.config
        image = str(cfg.get("image", ""))
        name = task_container_name(task.name, ctx.alloc_id)
        opts = self.options(ctx)
        if opts.refused:
            why = "; ".join(f"config.{k}: {w}" for k, w in opts.refused)
            raise DriverError("docker", f"task {task.name}", why)
        self._pin_binds(ctx, opts, staged)
        self.remove_container(name)  # a leftover of an earlier attempt of this very task
        kw: dict[str, Any] = {
            "name": name,
            "detach": True,
            "restart_policy": {"Name": "no"},
            # NOMAD_ALLOC_DIR=/alloc ..., and a port_map's NOMAD_PORT_<label>, as Nomad's docker driver
            "environment": inside_env({**ctx.env, **port_map_env(opts.port_map)}),
            # the engine's own copy of the output, bounded whatever the daemon's defaults (the agent's
            # logger copies it into alloc/logs), as Nomad's docker driver since 0.9.2 (nomad#5782)
            "log_config": {"type": "json-file", "config": CONTAINER_LOG_OPTS},
            **opts.kwargs,  # the task's options (dockeropts): Cmd, memory, user, security_opt ...
            # the task's labels, then the agent's and Nomad's (as Nomad's driver: its own win)
            "labels": {
                **opts.kwargs.get("labels", {}),
                **self._labels(ctx.job, ctx.group, ctx.alloc_id, task.name, "task"),
            },
            # the alloc's shared dir, the task's own dirs, as Nomad's docker driver; then its volumes
            "volumes": [
                *(
                    f"{ctx.task_dir.parent / d if d == 'alloc' else ctx.task_dir / d}:/{d}:rw"
                    for d in ctx.task_dirs
                ),
                # the alloc's logs: written by the agent from the tasks' output, read-only to tasks
                *([f"{ctx.task_dir.parent / 'alloc' / 'logs'}:/alloc/logs:ro"] if ctx.logs_read_only else []),
                *binds,
                *opts.kwargs.get("volumes", []),
            ],
        }
        kw["log_config"] = LogConfig(type=kw["log_config"]["type"], config=kw["log_config"]["config"])
        for key in ctx.host_namespaces:  # the runner refused the start unless they are allowed
            kw[key] = "host"
        mode = effective_network(cfg, ctx.network_mode)
        if mode == "container" and ctx.netns_owner is not None:
            kw["network_mode"] = f"container:{ctx.netns_owner.id}"
        elif mode in ("default", "bridge"):
            # Nomad's docker driver in a host-mode group (or network_mode "bridge"): docker's own
            # bridge, and each port the task lists in `ports` published from its host port to `to` (the
            # same number when `to` is 0), or to its port_map's.
            kw["ports"] = published(
                ctx.ports, cfg.get("ports"), opts.port_map, self.publish_address, ctx.port_host_ips
            )
        elif mode in ("host", "none"):
            kw["network_mode"] = mode
        self._group_network_files(ctx, mode, kw)
        if not ctx.prepared:  # the image pull, unless the runner ran it off the loop already
            self.prepare(ctx)
        try:
            c = self.client.containers.run(image, **kw)
        except docker.errors.ImageNotFound:
            raise DriverError("docker", f"task {task.name}", no_image(image, self._local_tags())) from None
        except docker.errors.APIError as exc:
            # "cannot join network of a non running container" lands here: the caller recovers the
            # group's network rather than retrying into the same dead end (nomad-12216). Elsewhere
            # a create or start error is recoverable, as Nomad's docker driver says.
            raise DriverError("docker", f"task {task.name}", str(exc.explanation), recoverable=True) from None
        c.reload()
        return TaskHandle("docker", c.id, c.attrs["State"]["StartedAt"])

    def options(self, ctx: TaskContext) -> DockerOpts:
        """The task's docker options on this node (dockeropts.plan), host paths resolved now."""
        facts = TaskFacts(
            network_mode=ctx.network_mode,
            memory_mb=ctx.task.resources.memory,
            memory_max_mb=ctx.task.resources.memory_max,
            task_dir=str(ctx.task_dir),
            alloc_dir=str(ctx.task_dir.parent),
            own_paths=tuple(os.path.realpath(p) for p in self.own_paths),
            resolve=os.path.realpath,
            bugs=self.bugs,
        )
        opts = plan(ctx.task.config, replace(self.plugin, pids_limit=self.pids_limit), facts)
        opts.kwargs = {**from_task(ctx.task.user, ctx.task.resources.cpu), **opts.kwargs}
        return opts

    def refusals(self, task: Task, group_network: str) -> list[tuple[str, str]]:
        """(config key, why) of each option of `task` this node refuses (at submission)."""
        own = tuple(os.path.realpath(p) for p in self.own_paths)
        facts = TaskFacts(
            network_mode=group_network,
            memory_mb=task.resources.memory,
            memory_max_mb=task.resources.memory_max,
            own_paths=own,
        )
        return refusals(task.config, replace(self.plugin, pids_limit=self.pids_limit), facts)

    def _local_tags(self) -> list[str]:
        try:
            return [t for i in self.client.images.list() for t in (i.tags or ())]
        except docker.errors.DockerException:
            return []

    @engine_errors("inspect")
    def status(self, handle: TaskHandle) -> TaskStatus:
        attrs = self._attrs(handle.id)
        if attrs is None:
            return TaskStatus(False, None, "container is gone")
        st = attrs["State"]
        if st.get("Running"):
            if st.get("StartedAt") != handle.started_at:
                return TaskStatus(True, None, RESTARTED)
            return TaskStatus(True)
        return TaskStatus(False, int(st.get("ExitCode", -1)), st.get("Error") or st.get("Status", ""))

    @engine_errors("signal")
    def signal(self, handle: TaskHandle, sig: str) -> None:
        try:
            self.client.containers.get(handle.id).kill(signal=sig)
        except docker.errors.NotFound:
            raise DriverError("docker", f"container {handle.id[:12]}", "is gone") from None
        except docker.errors.APIError as exc:
            raise DriverError("docker", f"signal {sig} to {handle.id[:12]}", str(exc.explanation)) from None

    def usage(self, alloc_id: str, task: str, handle: TaskHandle) -> Usage | None:
        try:
            stats = self.client.api.stats(handle.id, stream=False, one_shot=True)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise DriverError("docker", f"stats of {handle.id[:12]}", str(exc.explanation)) from None
        return docker_usage(stats)

    @engine_errors("stop")
    def stop(self, handle: TaskHandle, timeout: float, sig: str = "") -> None:
        """Nomad's taskHandle.Kill: no `sig` (the task set no kill_signal): `docker stop`, the
        image's STOPSIGNAL (SIGTERM when it sets none), SIGKILL after `timeout`. With one: that
        signal (the engine's kill), a wait of `timeout` for the container to exit, then a stop with
        no grace (SIGKILL). The container itself carries no StopSignal of the agent's."""
        try:
            c = self.client.containers.get(handle.id)
            if not sig:
                c.stop(timeout=int(max(1, timeout)))
                return
            try:
                c.kill(signal=sig)
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # not running: stopped already (Nomad: not modified)
                    return
                raise
            with contextlib.suppress(requests.ConnectionError, requests.Timeout):
                # the engine answers when the container exits; the read timeout ends the grace
                c.wait(timeout=max(1.0, timeout))
                return
            c.stop(timeout=0)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            raise DriverError("docker", f"stop {handle.id[:12]}", str(exc.explanation)) from None

    @engine_errors("remove")
    def remove_container(self, id_or_name: str) -> bool:
        try:
            self.client.containers.get(id_or_name).remove(force=True)
            return True
        except docker.errors.NotFound:
            return False

    @engine_errors("remove")
    def remove(self, alloc_id: str, task: Task, handle: TaskHandle) -> None:
        self.remove_container(handle.id)

    def reattach(self, alloc_id: str, handle: TaskHandle) -> None:
        """Nothing to do: the event stream (watch) reports every managed container's death."""

    def exec(
        self,
        handle: TaskHandle,
        argv: list[str],
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, str]:
        """Run argv in the task's container (a change_script), in the container's own environment
        (`env` is the process drivers'); past `timeout` the command and what it started are killed
        and a DriverError says so (docker's exec API has no timeout). The output is read as it
        streams, keeping its last EXEC_OUTPUT_MAX bytes."""
        what = f"exec in {handle.id[:12]}"
        api = self.client.api
        try:
            exec_id = api.exec_create(handle.id, argv)["Id"]
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise DriverError("docker", what, str(exc)) from None
        result: dict[str, Any] = {}

        def run() -> None:
            kept = b""
            try:
                for chunk in api.exec_start(exec_id, stream=True):
                    kept = (kept + chunk)[-EXEC_OUTPUT_MAX:]
                    result["out"] = kept
            except Exception as exc:  # reported below, in the caller's thread
                result["error"] = exc

        runner = threading.Thread(target=run, name=f"docker-exec-{handle.id[:12]}", daemon=True)
        runner.start()
        runner.join(timeout)
        try:
            if runner.is_alive():
                self._kill_exec(api, exec_id)
                runner.join(5.0)
                raise DriverError("docker", what, f"{argv[0]} ran past its {timeout:g}s timeout: killed")
            if "error" in result:
                raise DriverError("docker", what, str(result["error"]))
            rc = api.exec_inspect(exec_id).get("ExitCode")
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise DriverError("docker", what, str(exc)) from None
        out = result.get("out") or b""
        return int(rc if rc is not None else -1), out.decode(errors="replace")

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
        """`alloc exec -i/-t`: an engine exec with stdin attached (and a tty when asked), as `exec`
        runs a change script: in the task's container, as its user."""
        what = f"interactive exec in {handle.id[:12]}"
        api = self.client.api
        try:
            exec_id = api.exec_create(handle.id, argv, stdin=True, tty=tty)["Id"]
            sock = api.exec_start(exec_id, tty=tty, socket=True)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise DriverError("docker", what, str(exc)) from None
        raw = getattr(sock, "_sock", sock)  # the socket under docker-py's SocketIO on a unix socket
        session = DockerSession(api, exec_id, raw, tty=tty, kill=_kill_pid)
        session.resize(rows, cols)
        return session

    @staticmethod
    def _kill_exec(api: Any, exec_id: str) -> None:
        """SIGKILL an exec'd process and its descendants (host pids: the agent runs in the host's pid
        namespace). An exec whose process docker has not started yet (no Pid; under load a second
        can pass) is polled for it, EXEC_START_WAIT at most, so that it is not left to run."""
        deadline = time.monotonic() + EXEC_START_WAIT
        while True:
            info = api.exec_inspect(exec_id)
            pid = int(info.get("Pid") or 0)
            if pid > 0:
                kill_tree(pid)
                return
            if info.get("ExitCode") is not None or time.monotonic() >= deadline:
                return  # it ran and ended, or never started
            time.sleep(EXEC_START_POLL)


def _kill_pid(pid: int) -> None:
    """An exec session's kill: its process and descendants, when docker gave it a pid."""
    if pid > 0:
        kill_tree(pid)
