"""The logmon hook and a docker task's logger hook (agent.runner.hooks.LogmonHook,
DockerLoggerHook), handed a fake of the task logs (TaskLogs): the start gets the logmon's pipes, a
container is followed, an exit drains the logmon, a restore brings back one that is gone; what
fails is the start's error or an event, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.drivers.base import DriverError, TaskHandle
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.runner.hooks import DockerLoggerHook, LogmonHook
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


def logmon(logs: Logs, *, always: bool = False, bugs: Bugs = NO_BUGS) -> tuple[LogmonHook, Events]:
    events = Events()
    made = LogmonHook(events, logs, Path("/a"), "web", LogLimits(3, 5), always=always, bugs=bugs)
    return made, events


def logger(logs: Logs, bugs: Bugs = NO_BUGS) -> tuple[DockerLoggerHook, Events]:
    events = Events()
    return DockerLoggerHook(events, logs, Path("/a"), "web", bugs), events


def test_a_start_gets_its_logmons_pipes_started_with_the_tasks_limits() -> None:
    logs = Logs()
    h, _ = logmon(logs)
    req = StartRequest()
    h.prestart(req)
    assert logs.calls == [("ensure", "web", "3x5")]
    assert isinstance(req.output, LogmonOutput) and (req.output.task, req.output.logs) == ("web", logs)


def test_a_logmon_that_cannot_start_fails_the_start_naming_it() -> None:
    logs = Logs()
    logs.fail.add("ensure")
    h, _ = logmon(logs)
    with pytest.raises(DriverError, match="cannot start its logmon: ensure failed"):
        h.prestart(StartRequest())


def test_a_container_is_followed_and_a_logger_that_cannot_start_is_an_event() -> None:
    logs = Logs()
    h, events = logger(logs)
    h.poststart(HANDLE)
    assert logs.calls == [("follow", "web", "c-1")] and events.seen == []
    logs.fail.add("follow")
    h.poststart(HANDLE)
    assert events.seen == [("Logmon Failure", "cannot follow its container's log: follow failed")]


def test_an_exit_drains_its_logmon() -> None:
    logs = Logs()
    h, _ = logmon(logs)
    h.exited()
    assert logs.calls == [("stop", "web")]


def test_a_restore_brings_back_a_gone_logmon_and_follows_a_container_again() -> None:
    logs = Logs(pipes=False)  # a container's task: its logger writes to the pipes at every start
    mon, _ = logmon(logs, always=True)
    log_, _ = logger(logs)
    mon.reattached(HANDLE)
    log_.reattached(HANDLE)
    assert logs.calls == [("ensure", "web", "3x5"), ("follow", "web", "c-1")]


def test_a_restore_of_a_process_task_an_agent_before_logmon_started_starts_none() -> None:
    logs = Logs(pipes=False)
    h, _ = logmon(logs)
    h.reattached(HANDLE)
    assert logs.calls == []
    with_pipes = Logs(pipes=True)
    h, _ = logmon(with_pipes)
    h.reattached(HANDLE)
    assert with_pipes.calls == [("ensure", "web", "3x5")]


def test_a_logmon_that_cannot_come_back_at_a_restore_is_an_event() -> None:
    logs = Logs()
    logs.fail.add("ensure")
    h, events = logmon(logs)
    h.reattached(HANDLE)
    why = "cannot start its logmon: ensure failed: its output waits in the pipe"
    assert events.seen == [("Logmon Failure", why)]


def test_the_nomad_5577_fault_starts_no_logmon_and_no_logger_at_a_restore() -> None:
    logs = Logs()
    fault = Bugs(no_logmon_recovery=True)
    logmon(logs, always=True, bugs=fault)[0].reattached(HANDLE)
    logger(logs, fault)[0].reattached(HANDLE)
    assert logs.calls == []
