"""Reading a task's logs (agent.logs) and the node's driver health (agent.nodeinfo) with stand-ins
for the docker SDK: offsets, chunks, a log replaced by a shorter one, the long poll, a container
gone or an engine away, and a ping that never answers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

from agent.drivers.docker import DockerDriver
from agent.logs import (
    DockerLog,
    FileLog,
    LogChunk,
    LogsGone,
    LogsUnavailable,
    NoLog,
    adopted_log_source,
    log_source,
    read_log,
    slice_log,
)
from agent.nodeinfo import docker_health, driver_health
from tests.fakes import FakeDriver


@pytest.mark.parametrize(
    ("size", "offset", "limit", "expected"),
    [
        (10, 0, 100, (0, 10, False)),
        (10, 4, 100, (4, 6, False)),
        (10, 4, 3, (4, 3, False)),
        (10, 10, 100, (10, 0, False)),
        (10, 11, 100, (0, 10, True)),  # replaced by a shorter log: from the start, and said
        (0, 0, 100, (0, 0, False)),
    ],
)
def test_slice_log(size: int, offset: int, limit: int, expected: tuple[int, int, bool]) -> None:
    assert slice_log(size, offset, limit) == expected


@pytest.mark.parametrize(
    ("size", "back", "limit", "expected"),
    [
        (10, 3, 100, (7, 3, False)),
        (10, 30, 100, (0, 10, False)),
        (10, 6, 2, (4, 2, False)),
        (10, 0, 9, (10, 0, False)),
    ],
)
def test_slice_log_from_the_end(size: int, back: int, limit: int, expected: tuple[int, int, bool]) -> None:
    assert slice_log(size, back, limit, from_end=True) == expected


class FakeContainer:
    def __init__(self, out: bytes, err: bytes) -> None:
        self.out, self.err = out, err
        self.asked: list[dict[str, Any]] = []

    def logs(self, **kw: Any) -> bytes:
        self.asked.append(kw)
        return (self.out if kw["stdout"] else b"") + (self.err if kw["stderr"] else b"")


class FakeContainers:
    def __init__(self, known: dict[str, FakeContainer], error: Exception | None = None) -> None:
        self.known, self.error = known, error

    def get(self, cid: str) -> FakeContainer:
        if self.error is not None:
            raise self.error
        if cid not in self.known:
            raise docker.errors.NotFound(f"no container {cid}")
        return self.known[cid]


class FakeDockerClient:
    def __init__(self, known: dict[str, FakeContainer] | None = None, error: Exception | None = None) -> None:
        self.containers = FakeContainers(known or {}, error)
        self.ping_error: Exception | None = None
        self.ping_block: threading.Event | None = None

    def ping(self) -> bool:
        if self.ping_block is not None:
            self.ping_block.wait(10)
        if self.ping_error is not None:
            raise self.ping_error
        return True

    def version(self) -> dict[str, str]:
        return {"Version": "24.0.7"}


def test_a_docker_tasks_log_is_its_containers_stream_sliced_by_offset() -> None:
    c = FakeContainer(b"out-1\nout-2\n", b"err\n")
    driver = DockerDriver(client=FakeDockerClient({"cid": c}))
    source = log_source(driver, Path("/nowhere"), "cid", "stdout")
    assert isinstance(source, DockerLog)
    assert source.read(6, 100) == LogChunk(b"out-2\n", 6, 12)
    assert c.asked[-1] == {"stdout": True, "stderr": False, "timestamps": False}
    err = log_source(driver, Path("/nowhere"), "cid", "stderr").read(0, 100)
    assert err.data == b"err\n" and c.asked[-1]["stderr"] is True
    assert isinstance(log_source(driver, Path("/nowhere"), None, "stdout"), NoLog)


def test_a_gone_container_and_an_engine_away_are_told_apart() -> None:
    gone = DockerLog(FakeDockerClient, "cid", "stdout")
    with pytest.raises(LogsGone, match="container is gone"):
        gone.read(0, 10)
    away = DockerLog(lambda: FakeDockerClient(error=requests.ConnectionError("refused")), "cid", "stdout")
    with pytest.raises(LogsUnavailable, match="did not answer: refused"):
        away.read(0, 10)


def test_a_process_drivers_log_is_the_task_dirs_file(tmp_path: Path) -> None:
    source = log_source(FakeDriver("exec", joins_container_netns=False), tmp_path, "4242", "stderr")
    assert isinstance(source, FileLog) and source.what == str(tmp_path / "logs" / "stderr")
    assert source.read(0, 10) == LogChunk(b"", 0, 0)  # nothing written yet
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "stderr").write_bytes(b"0123456789")
    assert source.read(3, 4) == LogChunk(b"3456", 3, 10)
    assert source.read(20, 4) == LogChunk(b"0123", 0, 10, reset=True)


def test_a_logs_dir_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "stdout").write_text("not the task's")
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    (task_dir / "logs").symlink_to(elsewhere)
    with pytest.raises(Exception, match="symlink or not a directory"):
        FileLog(task_dir, "stdout").read(0, 100)


def test_adopted_tasks_read_their_container_or_their_files(tmp_path: Path) -> None:
    docker_driver = DockerDriver(client=FakeDockerClient({"cid": FakeContainer(b"x", b"")}))
    exec_driver = FakeDriver("exec", joins_container_netns=False)
    container = adopted_log_source([exec_driver, docker_driver], tmp_path, "container", "cid", "stdout")
    assert container.read(0, 10).data == b"x"
    assert isinstance(adopted_log_source([exec_driver], tmp_path, "container", "cid", "stdout"), NoLog)
    assert isinstance(adopted_log_source([exec_driver], tmp_path, "cgroup", "a.t", "stdout"), FileLog)


class Growing(NoLog):
    """A log that gets `data` after `after` reads."""

    def __init__(self, after: int, data: bytes) -> None:
        super().__init__("growing")
        self.reads, self.after, self.data = 0, after, data

    def read(self, offset: int, limit: int, from_end: bool = False) -> LogChunk:
        self.reads += 1
        if self.reads > self.after:
            return LogChunk(self.data, offset, offset + len(self.data))
        return LogChunk(b"", offset, offset)


def test_a_follow_polls_until_bytes_come_or_its_wait_is_over() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    src = Growing(after=3, data=b"new")
    chunk = read_log(src, 5, follow=True, wait=5.0, poll=0.25, clock=lambda: now[0], sleep=sleep)
    assert chunk.data == b"new" and src.reads == 4 and now[0] == 0.75
    idle = Growing(after=10**6, data=b"")
    chunk = read_log(idle, 5, follow=True, wait=1.0, poll=0.25, clock=lambda: now[0], sleep=sleep)
    assert chunk.data == b"" and idle.reads == 5  # the first read, then every 0.25 s for 1 s
    once = Growing(after=10**6, data=b"")
    read_log(once, 0, follow=False, clock=lambda: now[0], sleep=sleep)
    assert once.reads == 1


def test_driver_health_pings_the_docker_engine_with_a_deadline() -> None:
    client = FakeDockerClient()
    driver = DockerDriver(client=client)
    exec_driver = FakeDriver("exec", joins_container_netns=False)
    assert driver_health({"docker": driver, "exec": exec_driver}) == {
        "docker": {"healthy": True, "detail": "docker engine 24.0.7"},
        "exec": {"healthy": True, "detail": "runs processes on the node"},
    }
    client.ping_error = requests.ConnectionError("connection refused")
    assert docker_health(driver) == (False, "docker engine: connection refused")
    client.ping_error, client.ping_block = None, threading.Event()
    try:
        assert docker_health(driver, timeout=0.1) == (False, "the docker engine did not answer within 0.1s")
    finally:
        client.ping_block.set()
    assert docker_health(exec_driver) is None
