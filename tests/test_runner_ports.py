"""The runner's parts and hooks driven through their ports (agent/runner/interfaces.py), with no
AllocRunner or TaskRunner: a fake host gives each only what the port names. Covers the network part
of a recovery (AllocNetwork.recreate) and the kill's stop for a restart (agent.runner.kill); each
task hook has a test module of its own (tests/test_hook_*.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

from agent.client.offload import Serial
from agent.drivers.base import TaskDriver, TaskHandle
from agent.fieldbugs.bugs import Bugs
from agent.runner.deps import RunnerDeps
from agent.runner.interfaces import AllocHost
from agent.runner.kill import stop_for_restart
from agent.runner.network import AllocNetwork
from agent.runner.state import NETNS_OWNER, AllocState
from agent.structs.model import Group, Job, Network, Port, Task
from agent.structs.records import AllocRecord, NetworkState, PortAlloc, TaskState
from tests.fakes import FakeNode, FakeOwner

ALLOC = "a1b2c3d4-0000-4000-8000-0000000000aa"


class Host:
    """An alloc as its parts see it (the members of AllocHost they use), over a fake node."""

    def __init__(self, node: FakeNode, group: Group, job: Job) -> None:
        self.points: list[str] = []
        self.d: RunnerDeps = dataclasses.replace(node.deps(), kill_point=self.points.append)
        record = AllocRecord(id=ALLOC, job=job.id, group=group.name, ports=(PortAlloc("http", 20001, 8080),))
        node.store.put("alloc", ALLOC, record.to_record())
        self.state = AllocState(node.store, record)
        self.id, self.job, self.group = ALLOC, job, group
        self.serial = Serial(self.d.offload, "alloc=test")
        self.network_from_state = False
        self.events: list[tuple[str, str, str]] = []
        self.node = node

    @property
    def rec(self) -> AllocRecord:
        return self.state.rec

    @property
    def owner(self) -> FakeOwner:
        return self.node.pause

    def event(self, task: str, type_: str, message: str, **details: Any) -> None:
        self.events.append((task, type_, message))

    def kill_point(self, name: str) -> None:
        self.d.kill_point(name)

    def driver(self, t: Task) -> TaskDriver:
        return self.d.drivers.get(t.driver)

    def netns_path(self) -> Path | None:
        return self.owner.path(self.id, self.state.handle(NETNS_OWNER))


def _group() -> tuple[Group, Job]:
    group = Group(
        name="g",
        tasks=(Task(name="t0", driver="docker", config={"image": "x"}),),
        network=Network(mode="bridge", ports=(Port("http", to=8080),)),
    )
    return group, Job(id="web", groups=(group,))


def test_a_recovery_recreates_the_network_as_del_a_fresh_owner_then_add(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    host = Host(node, *_group())
    net = AllocNetwork(cast(AllocHost, host))
    net.setup()
    first = host.rec.address
    host.points.clear()
    net.recreate()
    assert host.points == [
        "recovery.after-del",
        "recovery.after-owner-remove",
        "start.before-network-add",
        "start.after-network-add",
    ]
    assert node.network.deletes == [ALLOC] and node.network.forgotten == []
    assert node.pause.removed == ["pause-1"] and node.pause.created == ["pause-1", "pause-2"]
    assert host.state.handle(NETNS_OWNER) == TaskHandle("pause", "pause-2", "t0")
    assert host.rec.network_state is NetworkState.READY and host.rec.address not in ("", first)


def test_a_recovery_under_the_stale_ipam_fault_forgets_the_attachment_without_del(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, Bugs(ipam_stale_after_reboot=True))
    host = Host(node, *_group())
    net = AllocNetwork(cast(AllocHost, host))
    net.setup()
    net.recreate()
    assert node.network.forgotten == [ALLOC] and node.network.deletes == []
    assert len(node.network.adds) == 2


def test_a_stop_for_a_restart_records_the_task_dead_before_it_is_killed(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    group, job = _group()
    host = Host(node, group, job)
    t = group.tasks[0]
    host.state.put_handle("t0", TaskHandle("docker", "c-1", "t0"))
    host.state.update_task("t0", state=TaskState.RUNNING)
    seen: list[TaskState] = []
    real_stop = node.docker.stop

    def stop(handle: TaskHandle, timeout: float, sig: str) -> None:
        seen.append(host.state.task("t0").state)
        real_stop(handle, timeout, sig)

    node.docker.stop = stop  # type: ignore[method-assign]
    done: list[bool] = []
    stop_for_restart(cast(AllocHost, host), [t], lambda: done.append(True), events=True)
    assert done == [True] and node.docker.stops == ["c-1"]
    assert seen == [TaskState.DEAD]  # recorded first: a kill now leaves a start to finish, no exit
    assert [(task, kind) for task, kind, _ in host.events] == [("t0", "Terminated"), ("t0", "Restarting")]


def test_a_stop_for_a_restart_of_a_task_without_a_handle_kills_nothing(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    group, job = _group()
    host = Host(node, group, job)
    done: list[bool] = []
    stop_for_restart(cast(AllocHost, host), list(group.tasks), lambda: done.append(True))
    assert done == [True] and node.docker.stops == [] and host.events == []
