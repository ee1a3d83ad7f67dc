"""Small fakes of the ports a task's hooks are made from and handed (agent/runner/interfaces.py):
an alloc as its hooks read it (AllocContext) and a task as its hooks are made from it (TaskHost),
over a fake node's deps; no AllocRunner, no TaskRunner. They record what the hooks say and do."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.client.offload import Serial
from agent.decide.decisions import StartCause
from agent.drivers.base import TaskDriver, TaskHandle
from agent.runner.deps import RunnerDeps
from agent.structs.model import Group, Job, Task
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus
from tests.fakes import FakeNode

ALLOC = "a1b2c3d4-0000-4000-8000-0000000000bb"


class Alloc:
    """An alloc as a task's hooks read it (AllocContext)."""

    def __init__(self, root: Path, job: Job, group: Group, deps: RunnerDeps) -> None:
        self.id, self.job, self.group = ALLOC, job, group
        self.rec = AllocRecord(id=ALLOC, job=job.id, group=group.name, status=AllocStatus.RUNNING)
        self.alloc_dir = root / "alloc" / ALLOC
        self.serial = Serial(deps.offload, "alloc=test")
        self.setup_cancel = threading.Event()

    def alloc_running(self) -> bool:
        return self.rec.status is AllocStatus.RUNNING

    def stopping(self) -> None:
        self.rec = dataclasses.replace(self.rec, desired=DesiredStatus.STOP)


class Task_:
    """A task as its hooks are made from it and act on it (TaskHost, TaskLifecycle, TaskEvents)."""

    def __init__(self, node: FakeNode, t: Task, job: Job | None = None, **deps: Any) -> None:
        self.d = dataclasses.replace(node.deps(), **deps)
        self.t = t
        self.ar = Alloc(
            node.root, job or Job(id="j", groups=(Group(name="g", tasks=(t,)),)), _group(job, t), self.d
        )
        self.events: list[tuple[str, str]] = []
        self.signals: list[str] = []
        self.restarts: list[tuple[StartCause, str]] = []
        self.is_running = True
        self.killed_as_failure = False
        self.base_env: dict[str, str] = {"NOMAD_TASK_NAME": t.name}

    @property
    def name(self) -> str:
        return self.t.name

    @property
    def driver(self) -> TaskDriver:
        return self.d.drivers.get(self.t.driver)

    @property
    def task_dir(self) -> Path:
        return self.ar.alloc_dir / self.t.name

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.events.append((type_, message))

    def running(self) -> bool:
        return self.is_running

    def signal(self, sig: str) -> None:
        self.signals.append(sig)

    def stop_then_restart(self, cause: StartCause, why: str) -> None:
        self.restarts.append((cause, why))

    def handle(self) -> TaskHandle | None:
        return None

    def env(self) -> dict[str, str]:
        return dict(self.base_env)

    def exec_env(self) -> dict[str, str]:
        return self.env()

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        then(-1, "no exec in these fakes")


def _group(job: Job | None, t: Task) -> Group:
    if job is None:
        return Group(name="g", tasks=(t,))
    return next(g for g in job.groups if any(x.name == t.name for x in g.tasks))
