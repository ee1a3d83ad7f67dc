"""What the startup restore reads of the node (agent.client.restore, agent.runner.restorer): each
task's driver is asked about it once, in the concurrent observation, and each alloc is restored by
the runner that observed it. On a FakeNode with the real Core."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.client.core import Core
from agent.client.offload import run_inline
from agent.decide.decisions import ObservedAlloc
from agent.drivers.base import TaskHandle, TaskStatus
from agent.runner.alloc import AllocRunner
from agent.state import record_key
from agent.structs.records import AllocStatus, TaskRecord, TaskState
from tests.fakes import FakeNode, FakeSweeper

ALLOCS = 3
JOB = f"""
job "web" {{
  group "g" {{
    count = {ALLOCS}
    task "t" {{
      driver = "docker"
      config {{ image = "x" }}
    }}
  }}
}}
"""


def _agent(node: FakeNode) -> Core:
    return node.core(sweeper=FakeSweeper(node), offload=run_inline)


def _restarted(tmp_path: Path) -> tuple[FakeNode, list[str], Core]:
    """ALLOCS running allocs of one job, then a new agent on the same node and state."""
    node = FakeNode(tmp_path)
    allocs = [str(a) for a in _agent(node).job_registry.submit(JOB, "hcl")["allocs"]]
    assert len(allocs) == ALLOCS
    return node, allocs, _agent(node)


def test_each_task_is_asked_about_once_and_reattached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, allocs, again = _restarted(tmp_path)
    asked: list[str] = []
    status = node.docker.status

    def counted(handle: TaskHandle) -> TaskStatus:
        asked.append(handle.id)
        return status(handle)

    monkeypatch.setattr(node.docker, "status", counted)
    again.restorer.restore()
    assert len(asked) == ALLOCS and len(set(asked)) == ALLOCS, asked  # once per task, not again to record it
    for alloc in allocs:
        runner = again.runners[alloc]
        assert runner.rec.status is AllocStatus.RUNNING
        assert [e.type for e in node.store.events(alloc)][-1] == "Restored"
        assert runner.state.task("t").state is TaskState.RUNNING


def test_an_alloc_is_restored_by_the_runner_that_observed_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, allocs, again = _restarted(tmp_path)
    observers: dict[str, list[AllocRunner]] = {}
    observe = AllocRunner.observe

    def recorded(runner: AllocRunner) -> ObservedAlloc:
        observers.setdefault(runner.id, []).append(runner)
        return observe(runner)

    monkeypatch.setattr(AllocRunner, "observe", recorded)
    again.restorer.restore()
    assert sorted(observers) == sorted(allocs)
    for alloc in allocs:
        (runner,) = observers[alloc]  # observed once
        assert again.runners[alloc] is runner, "a second runner was built for the restore"


def test_a_task_recorded_pending_but_observed_running_is_recorded_running(tmp_path: Path) -> None:
    """Killed between the start and its record: the observation says it runs, so it is recorded
    running (no second look at the driver) and nothing is started again."""
    node, allocs, again = _restarted(tmp_path)
    node.store.put("task", record_key(allocs[0], "t"), TaskRecord(TaskState.PENDING).to_record())
    starts = len(node.docker.starts)
    again.restorer.restore()
    assert again.runners[allocs[0]].state.task("t").state is TaskState.RUNNING
    assert len(node.docker.starts) == starts
