"""The logmon hook (agent.runner.hooks.LogmonHook), handed a fake of the task logs (TaskLogs) and
what its driver keeps (files through logmon, a container log): the start gets the logmon's pipes,
a container is followed, an exit drains the logmon, a restore brings back one that is gone; what
fails is the start's error or an event, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.drivers.base import DriverError, TaskHandle
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.runner.hooks import LogmonHook
from agent.runner.interfaces import StartRequest
from agent.runner.logmonhook import LogLimits, LogmonOutput

HANDLE = TaskHandle("docker", "c-1", "t0")


class Logs:
    """TaskLogs: records the calls; `fail`: the next call of that name raises OSError."""

    def __init__(self, pipes: bool = True) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail: set[str] = set()
        self.with_pipes = pipes

    def _call(self, *call: str) -> None:
        self.calls.append(call)
        if call[0] in self.fail:
            raise OSError(f"{call[0]} failed")

    def ensure(self, alloc_dir: Path, task: str, limits: LogLimits) -> None:
        self._call("ensure", task, f"{limits.max_files}x{limits.max_file_size_mb}")

    def pipes(self, alloc_dir: Path, task: str) -> tuple[int, int]:
        return (-1, -1)

    def has_pipes(self, alloc_dir: Path, task: str) -> bool:
        return self.with_pipes

    def follow_container(self, alloc_dir: Path, task: str, container: str) -> None:
        self._call("follow", task, container)

    def stop(self, alloc_dir: Path, task: str) -> None:
        self._call("stop", task)

    def stop_all(self, alloc_dir: Path) -> None:
        self._call("stop_all")


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.seen.append((type_, message))


def hook(
    logs: Logs, *, files: bool = True, container: bool = False, bugs: Bugs = NO_BUGS
) -> tuple[LogmonHook, Events]:
    events = Events()
    limits = LogLimits(3, 5)
    return LogmonHook(
        events, logs, Path("/a"), "web", limits, files=files, container=container, bugs=bugs
    ), events


def test_a_start_gets_its_logmons_pipes_started_with_the_tasks_limits() -> None:
    logs = Logs()
    h, _ = hook(logs)
    req = StartRequest()
    h.prestart(req)
    assert logs.calls == [("ensure", "web", "3x5")]
    assert isinstance(req.output, LogmonOutput) and (req.output.task, req.output.logs) == ("web", logs)


def test_a_logmon_that_cannot_start_fails_the_start_naming_it() -> None:
    logs = Logs()
    logs.fail.add("ensure")
    h, _ = hook(logs)
    with pytest.raises(DriverError, match="cannot start its logmon: ensure failed"):
        h.prestart(StartRequest())


def test_a_container_is_followed_and_a_logger_that_cannot_start_is_an_event() -> None:
    logs = Logs()
    h, events = hook(logs, container=True)
    h.poststart(HANDLE)
    assert logs.calls == [("follow", "web", "c-1")] and events.seen == []
    logs.fail.add("follow")
    h.poststart(HANDLE)
    assert events.seen == [("Logmon Failure", "cannot follow its container's log: follow failed")]


def test_a_process_task_is_not_followed_and_an_exit_drains_its_logmon() -> None:
    logs = Logs()
    h, _ = hook(logs)
    h.poststart(HANDLE)
    h.exited()
    assert logs.calls == [("stop", "web")]


def test_a_restore_brings_back_a_gone_logmon_and_follows_a_container_again() -> None:
    logs = Logs()
    h, _ = hook(logs, container=True)
    h.reattached(HANDLE)
    assert logs.calls == [("ensure", "web", "3x5"), ("follow", "web", "c-1")]


def test_a_restore_of_a_process_task_an_agent_before_logmon_started_starts_none() -> None:
    logs = Logs(pipes=False)
    h, _ = hook(logs)
    h.reattached(HANDLE)
    assert logs.calls == []


def test_a_logmon_that_cannot_come_back_at_a_restore_is_an_event() -> None:
    logs = Logs()
    logs.fail.add("ensure")
    h, events = hook(logs)
    h.reattached(HANDLE)
    assert events.seen == [
        ("Logmon Failure", "cannot start its logmon: ensure failed: its output waits in the pipe")
    ]


def test_the_nomad_5577_fault_starts_no_logmon_at_a_restore() -> None:
    logs = Logs()
    h, _ = hook(logs, container=True, bugs=Bugs(no_logmon_recovery=True))
    h.reattached(HANDLE)
    assert logs.calls == []
