"""An exec (or raw_exec) task never runs twice (issue 12, kill point
`start.after-task-start-before-record`): when the agent is killed between a driver starting a task
and the handle being recorded, the next agent does not know that process; its start of the same task
first kills whatever is left in the task's cgroup, so exactly one instance runs. On the real thing
(root: cgroups, namespaces), driven through the driver directly.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.drivers.base import TaskContext, TaskHandle
from agent.drivers.cgroups import Cgroups
from agent.drivers.exec import ExecDriver
from agent.drivers.hostproc import proc_start_time
from agent.drivers.raw_exec import RawExecDriver
from agent.structs.model import Resources, Task
from lab.waits import wait_until

pytestmark = [pytest.mark.root]
if os.geteuid() != 0:
    pytestmark.append(pytest.mark.skip(reason="needs root (cgroups, namespaces)"))

TIMEOUT = 20.0


def _driver(name: str) -> RawExecDriver | ExecDriver:
    if name == "raw_exec":
        return RawExecDriver(lambda alloc, handle: None)
    return ExecDriver(lambda alloc, handle: None, allow_root=True)


STARTED: list[TaskHandle] = []


@pytest.fixture
def allocs() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for h in STARTED:  # a process that had not joined its cgroup yet when a test failed
        if _alive(h):
            os.killpg(int(h.id), signal.SIGKILL)
    STARTED.clear()
    for alloc in made:
        Cgroups.of_task(alloc, "t").kill_all()


def _start(driver: RawExecDriver | ExecDriver, root: Path, alloc: str) -> TaskHandle:
    task = Task(
        "t",
        driver.name,
        config={"command": "/bin/sh", "args": ["-c", "echo up; exec sleep 600"]},
        resources=Resources(cpu=100, memory=32),
        user="root" if driver.name == "exec" else "",
    )
    task_dir = root / "alloc" / alloc / "t"
    for sub in ("local", "secrets"):
        (task_dir / sub).mkdir(parents=True, exist_ok=True)
    (task_dir.parent / "alloc").mkdir(exist_ok=True)
    env = {"NOMAD_ALLOC_ID": alloc, "NOMAD_TASK_NAME": "t", "NOMAD_ALLOC_DIR": str(task_dir.parent / "alloc")}
    ctx = TaskContext(job="j", group="g", alloc_id=alloc, task=task, task_dir=task_dir, env=env)
    STARTED.append(driver.start(ctx))
    return STARTED[-1]


def _alive(handle: TaskHandle) -> bool:
    return proc_start_time(int(handle.id)) == handle.started_at


@pytest.mark.parametrize("name", ["raw_exec", "exec"])
def test_a_start_whose_record_was_lost_is_replaced_not_doubled(
    tmp_path: Path, allocs: list[str], name: str
) -> None:
    alloc = str(uuid.uuid4())
    allocs.append(alloc)
    first = _start(_driver(name), tmp_path, alloc)
    cg = Cgroups.of_task(alloc, "t")
    wait_until(lambda: (True if cg.pids() else None, str(cg.pids())), timeout=TIMEOUT, what="the first task")
    assert _alive(first)
    before = cg.pids()
    # The agent is killed here: the handle is never recorded. A new agent (a new driver) starts the
    # task again, knowing nothing of the first process.
    second = _start(_driver(name), tmp_path, alloc)
    wait_until(
        lambda: (True if not _alive(first) else None, f"first pid {first.id} still alive"),
        timeout=TIMEOUT,
        what="the leftover instance to be killed",
    )
    assert _alive(second) and second.id != first.id
    after = wait_until(
        lambda: (cg.pids() if int(second.id) in cg.pids() else None, str(cg.pids())),
        timeout=TIMEOUT,
        what="the second instance in the task's cgroup",
    )
    assert after and not set(after) & set(before), f"a process of the first start survived: {before} {after}"
    assert int(second.id) in after, "the running instance is the recorded one"
    tops = [p for p in after if os.getsid(p) == p]  # one task = one session leader in the cgroup
    assert tops == [int(second.id)], f"exactly one instance runs: {tops}"
