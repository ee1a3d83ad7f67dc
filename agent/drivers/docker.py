"""The docker driver. In bridge mode a group gets a pause container that owns the network
namespace (network mode none, restart unless-stopped, as upstream); the agent runs CNI on that
namespace and every task container joins it with `--network container:<pause>`.

The agent, not docker, applies restart policies: task containers run with restart policy "no" and
`--init`, and carry labels naming job, group, alloc and task so that a restarted agent (and the
orphan sweeper) can tell what belongs to whom.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors

from agent.drivers.base import (
    LABEL_ALLOC,
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_TASK,
    DriverError,
    TaskHandle,
    TaskStatus,
)
from agent.model import Task

log = logging.getLogger(__name__)
PAUSE_IMAGE = "fieldlab/pause:latest"


def pause_name(alloc_id: str) -> str:
    return f"fieldlab_init_{alloc_id}"


def task_container_name(task: str, alloc_id: str) -> str:
    return f"{task}-{alloc_id}"


class DockerDriver:
    name = "docker"

    def __init__(self, client: Any | None = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=60)
            except docker.errors.DockerException as exc:
                raise DriverError("docker", "connect", str(exc)) from None
        return self._client

    def _labels(self, job: str, group: str, alloc_id: str, task: str, role: str) -> dict[str, str]:
        return {
            LABEL_MANAGED: "true",
            LABEL_JOB: job,
            LABEL_GROUP: group,
            LABEL_ALLOC: alloc_id,
            LABEL_TASK: task,
            LABEL_ROLE: role,
        }

    # -- pause container ----------------------------------------------------------------------
    def start_pause(self, job: str, group: str, alloc_id: str, image: str = PAUSE_IMAGE) -> TaskHandle:
        """Create and start the alloc's pause container (or start the existing one)."""
        try:
            c = self.client.containers.get(pause_name(alloc_id))
            if c.status != "running":
                c.start()
        except docker.errors.NotFound:
            try:
                c = self.client.containers.run(
                    image,
                    name=pause_name(alloc_id),
                    detach=True,
                    network_mode="none",
                    init=True,
                    restart_policy={"Name": "unless-stopped"},
                    labels=self._labels(job, group, alloc_id, "", "pause"),
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

    def netns_path(self, handle: TaskHandle) -> Path:
        """The network namespace of a running container, as a path CNI can use."""
        pid = self.pid(handle)
        if not pid:
            raise DriverError(
                "docker", f"container {handle.id[:12]}", "not running: it has no network namespace"
            )
        return Path(f"/proc/{pid}/ns/net")

    def pid(self, handle: TaskHandle) -> int:
        try:
            c = self.client.containers.get(handle.id)
        except docker.errors.NotFound:
            return 0
        return int(c.attrs["State"]["Pid"] or 0)

    # -- tasks ---------------------------------------------------------------------------------
    def start_task(
        self,
        job: str,
        group: str,
        alloc_id: str,
        task: Task,
        *,
        pause: TaskHandle | None,
        network_mode: str = "",
        task_dir: Path,
        env: Mapping[str, str],
    ) -> TaskHandle:
        cfg = task.config
        image = str(cfg.get("image", ""))
        name = task_container_name(task.name, alloc_id)
        self.remove(name)  # a leftover of an earlier attempt of this very task
        kw: dict[str, Any] = {
            "name": name,
            "detach": True,
            "init": True,
            "restart_policy": {"Name": "no"},
            "labels": self._labels(job, group, alloc_id, task.name, "task"),
            "environment": dict(env),
            "mem_limit": f"{task.resources.memory}m",
            "cpu_shares": max(2, task.resources.cpu),
            "volumes": {
                str(task_dir / "local"): {"bind": "/local", "mode": "rw"},
                str(task_dir / "secrets"): {"bind": "/secrets", "mode": "rw"},
            },
            "stop_signal": task.kill_signal,
        }
        if pause is not None:
            kw["network_mode"] = f"container:{pause.id}"
        elif network_mode:
            kw["network_mode"] = network_mode
        if cfg.get("command"):
            kw["entrypoint"] = [str(cfg["command"])]
            kw["command"] = [str(a) for a in cfg.get("args", [])]
        elif cfg.get("args"):
            kw["command"] = [str(a) for a in cfg["args"]]
        try:
            c = self.client.containers.run(image, **kw)
        except docker.errors.ImageNotFound:
            raise DriverError(
                "docker", f"task {task.name}", f"image {image!r} not found on this node"
            ) from None
        except docker.errors.APIError as exc:
            # "cannot join network of a non running container" lands here: the caller recovers the
            # group's network rather than retrying into the same dead end (nomad-12216).
            raise DriverError("docker", f"task {task.name}", str(exc.explanation)) from None
        c.reload()
        return TaskHandle("docker", c.id, c.attrs["State"]["StartedAt"])

    def status(self, handle: TaskHandle) -> TaskStatus:
        try:
            c = self.client.containers.get(handle.id)
        except docker.errors.NotFound:
            return TaskStatus(False, None, "container is gone")
        st = c.attrs["State"]
        if st.get("Running"):
            if st.get("StartedAt") != handle.started_at:
                return TaskStatus(True, None, "restarted by docker")
            return TaskStatus(True)
        return TaskStatus(False, int(st.get("ExitCode", -1)), st.get("Error") or st.get("Status", ""))

    def signal(self, handle: TaskHandle, sig: str) -> None:
        try:
            self.client.containers.get(handle.id).kill(signal=sig)
        except docker.errors.NotFound:
            raise DriverError("docker", f"container {handle.id[:12]}", "is gone") from None
        except docker.errors.APIError as exc:
            raise DriverError("docker", f"signal {sig} to {handle.id[:12]}", str(exc.explanation)) from None

    def stop(self, handle: TaskHandle, timeout: float) -> None:
        try:
            self.client.containers.get(handle.id).stop(timeout=int(max(1, timeout)))
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            raise DriverError("docker", f"stop {handle.id[:12]}", str(exc.explanation)) from None

    def remove(self, id_or_name: str) -> bool:
        try:
            self.client.containers.get(id_or_name).remove(force=True)
            return True
        except docker.errors.NotFound:
            return False

    def exec(self, handle: TaskHandle, argv: list[str]) -> tuple[int, str]:
        try:
            rc, out = self.client.containers.get(handle.id).exec_run(argv)
        except docker.errors.DockerException as exc:
            raise DriverError("docker", f"exec in {handle.id[:12]}", str(exc)) from None
        return int(rc), out.decode(errors="replace")

    def managed_containers(self) -> list[Any]:
        return list(self.client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=true"}))
