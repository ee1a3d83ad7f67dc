"""A network namespace the agent creates by name (`/run/netns/<prefix><alloc>`, the alloc's layout:
agent.structs.layout), for bridge groups whose tasks all join a netns by path (exec, raw processes). A host
reboot clears /run: the owner is then gone and restore rebuilds the network."""

from __future__ import annotations

from pathlib import Path

from agent.drivers.base import NO_SANDBOX, Sandbox, TaskHandle, TaskStatus
from agent.network import netns
from agent.structs import layout


def netns_name(alloc_id: str) -> str:
    return layout.for_alloc(alloc_id).netns_name(alloc_id)


def pid_in_netns(path: Path, pid: int) -> bool:
    """Whether process `pid` is in the netns at `path` (False when either is gone)."""
    try:
        return netns.pid_netns_id(pid) == netns.netns_id(path)
    except netns.NetnsError:
        return False


class NamedNetns:
    kind = "netns"

    def create(
        self, job: str, group: str, alloc_id: str, *, sandbox: Sandbox = NO_SANDBOX
    ) -> TaskHandle | None:
        netns.create(netns_name(alloc_id), exist_ok=True)
        return None  # found again by the alloc id

    def path(self, alloc_id: str, handle: TaskHandle | None) -> Path | None:
        path = netns.netns_path(netns_name(alloc_id))
        return path if netns.is_netns(path) else None

    def status(self, alloc_id: str, handle: TaskHandle | None) -> TaskStatus:
        if self.path(alloc_id, handle) is None:
            return TaskStatus(False, None, "network namespace is gone")
        return TaskStatus(True)

    def holds(self, alloc_id: str, handle: TaskHandle | None, pid: int) -> bool:
        path = self.path(alloc_id, handle)
        return path is not None and pid_in_netns(path, pid)

    def remove(self, alloc_id: str, handle: TaskHandle | None) -> None:
        netns.delete(netns_name(alloc_id))
