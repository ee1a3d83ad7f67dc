"""The docker way of owning a group's network namespace (agent.drivers.docker's pause containers),
as the netns owner the runner asks (agent.network.owner)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent.drivers.base import NO_SANDBOX, Sandbox, TaskHandle, TaskStatus
from agent.network.owner import pid_in_netns

if TYPE_CHECKING:
    from agent.drivers.docker import DockerDriver


class PauseContainer:
    """The docker way of owning a group's netns (upstream's): a pause container with network mode
    none and restart policy unless-stopped; task containers join it. If it dies, docker restarts it
    with a new, empty netns while the tasks keep the old one: `status` says so (RESTARTED)."""

    kind = "pause"

    def __init__(self, docker: DockerDriver) -> None:
        self.docker = docker

    def create(
        self, job: str, group: str, alloc_id: str, *, sandbox: Sandbox = NO_SANDBOX
    ) -> TaskHandle | None:
        return self.docker.start_pause(job, group, alloc_id, sandbox=sandbox)

    def path(self, alloc_id: str, handle: TaskHandle | None) -> Path | None:
        return self.docker.netns_path(handle) if handle and self.docker.pid(handle) else None

    def status(self, alloc_id: str, handle: TaskHandle | None) -> TaskStatus:
        if handle is None:
            return TaskStatus(False, None, "no pause container recorded")
        return self.docker.status(handle)

    def holds(self, alloc_id: str, handle: TaskHandle | None, pid: int) -> bool:
        path = self.path(alloc_id, handle)
        return path is not None and pid_in_netns(path, pid)

    def remove(self, alloc_id: str, handle: TaskHandle | None) -> None:
        if handle is not None:
            self.docker.remove_container(handle.id)
