"""Reading a task's logs (agent.command.logs) and the node's driver health (agent.node.nodeinfo) with
stand-ins
for the docker SDK: offsets, chunks, a log replaced by a shorter one, the long poll, a container
gone or an engine away, and a ping that never answers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

from agent.command.logs import (
    DockerLog,
    FileLog,
    LogChunk,
    LogsGone,
    LogsUnavailable,
    NoLog,
    TaskDirLog,
    adopted_log_source,
    log_source,
    read_log,
    slice_log,
)
from agent.drivers.docker import DockerDriver
from agent.node.nodeinfo import docker_health, driver_health
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
    source = log_source(driver, Path("/nowhere"), "web", "cid", "stdout")
    assert isinstance(source, DockerLog)
    assert source.read(6, 100) == LogChunk(b"out-2\n", 6, 12)
    assert c.asked[-1] == {"stdout": True, "stderr": False, "timestamps": False}
    err = log_source(driver, Path("/nowhere"), "web", "cid", "stderr").read(0, 100)
    assert err.data == b"err\n" and c.asked[-1]["stderr"] is True
    assert isinstance(log_source(driver, Path("/nowhere"), "web", None, "stdout"), NoLog)


def test_a_gone_container_and_an_engine_away_are_told_apart() -> None:
    gone = DockerLog(FakeDockerClient, "cid", "stdout")
    with pytest.raises(LogsGone, match="container is gone"):
        gone.read(0, 10)
    away = DockerLog(lambda: FakeDockerClient(error=requests.ConnectionError("refused")), "cid", "stdout")
    with pytest.raises(LogsUnavailable, match="did not answer: refused"):
        away.read(0, 10)


def test_a_process_drivers_log_is_its_logmons_files_in_the_alloc_dir(tmp_path: Path) -> None:
    source = log_source(FakeDriver("exec", joins_container_netns=False), tmp_path, "web", "4242", "stderr")
    assert isinstance(source, FileLog) and source.what == str(tmp_path / "alloc" / "logs" / "web.stderr.N")
    assert source.read(0, 10) == LogChunk(b"", 0, 0)  # nothing written yet
    logs = tmp_path / "alloc" / "logs"
    logs.mkdir(parents=True)
    (logs / "web.stderr.0").write_bytes(b"0123456789")
    chunk = source.read(3, 4)
    assert (chunk.data, chunk.offset, chunk.size, chunk.resume) == (b"3456", 3, 10, (0, 7))
    assert (chunk.file, chunk.file_offset, chunk.reset) == ("alloc/logs/web.stderr.0", 3, False)
    end = source.read(20, 4)  # past the end is the end, as Nomad's findClosest
    assert (end.data, end.offset, end.reset) == (b"", 10, False)


def test_a_task_started_before_logmon_is_read_where_it_writes(tmp_path: Path) -> None:
    """An agent upgraded under a running exec task: the task's stdout is still <task dir>/logs/stdout
    (an agent before logmon opened it for the task), read there until logmon's files exist."""
    exec_driver = FakeDriver("exec", joins_container_netns=False)
    (tmp_path / "web" / "logs").mkdir(parents=True)
    (tmp_path / "web" / "logs" / "stdout").write_bytes(b"from before the upgrade\n")
    source = log_source(exec_driver, tmp_path, "web", "4242", "stdout")
    assert isinstance(source, TaskDirLog) and source.read(5, 100).data == b"before the upgrade\n"
    assert isinstance(log_source(exec_driver, tmp_path, "web", "4242", "stderr"), FileLog)  # none there
    (tmp_path / "alloc" / "logs").mkdir(parents=True)
    (tmp_path / "alloc" / "logs" / "web.stdout.0").write_bytes(b"new\n")  # restarted under logmon
    assert isinstance(log_source(exec_driver, tmp_path, "web", "4242", "stdout"), FileLog)


def test_rotated_files_are_one_log_and_a_follow_resumes_across_rotation_and_purge(tmp_path: Path) -> None:
    logs = tmp_path / "alloc" / "logs"
    logs.mkdir(parents=True)
    (logs / "web.stdout.1").write_bytes(b"aaaa")
    (logs / "web.stdout.2").write_bytes(b"bb")
    (logs / "web.stdout.x").write_bytes(b"not a log index")
    (logs / "web.stdout.\u00b2").write_bytes(b"a task's name: isdigit() but no int")
    (logs / "web.stdout.01").write_bytes(b"not canonical: not logmon's")
    (logs / "web.stderr.7").write_bytes(b"the other stream")
    source = FileLog(tmp_path, "web", "stdout")
    first = source.read(0, 100)
    assert (first.data, first.file, first.resume, first.size) == (
        b"aaaa",
        "alloc/logs/web.stdout.1",
        (1, 4),
        6,
    )
    nxt = source.read(first.next_offset, 100, resume=first.resume)  # file 1 read out: on into file 2
    assert (nxt.data, nxt.offset, nxt.resume) == (b"bb", 4, (2, 2))
    assert source.read(5, 100).data == b"b" and source.read(3, 100, from_end=True).data == b"a"
    (logs / "web.stdout.3").write_bytes(b"cc")  # rotated while a follow waits at the end of file 2
    assert source.read(nxt.next_offset, 100, resume=nxt.resume).data == b"cc"
    (logs / "web.stdout.1").unlink()  # purged
    (logs / "web.stdout.2").unlink()
    behind = source.read(0, 100, resume=(1, 2))  # a reader so slow its file went: the oldest left
    assert (behind.data, behind.resume) == (b"cc", (3, 2))


@pytest.mark.parametrize(
    ("offset", "from_end", "resume", "expected"),
    [
        (0, False, None, (0, 0)),
        (4, False, None, (0, 4)),  # the end of the first file, as Nomad's findClosest (offset <= size)
        (5, False, None, (1, 1)),
        (99, False, None, (2, 3)),  # past the end: the end
        (0, True, None, (2, 3)),
        (3, True, None, (2, 0)),
        (5, True, None, (1, 0)),
        (99, True, None, (0, 0)),
        (0, False, (11, 2), (1, 2)),
        (0, False, (11, 9), (1, 2)),  # a resume past its file's end: that end
        (0, False, (5, 1), (0, 0)),  # purged: the oldest file
        (0, False, (13, 0), (2, 3)),  # ahead of what is there (read before a purge): the end
    ],
)
def test_where_a_read_of_rotated_files_starts(
    offset: int, from_end: bool, resume: tuple[int, int] | None, expected: tuple[int, int]
) -> None:
    from agent.command.logs import _locate

    assert _locate([(10, 4), (11, 2), (12, 3)], offset, from_end, resume) == expected


def test_a_logs_dir_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "web.stdout.0").write_text("not the task's")
    alloc_dir = tmp_path / "alloc-id"
    (alloc_dir / "alloc").mkdir(parents=True)
    (alloc_dir / "alloc" / "logs").symlink_to(elsewhere)
    with pytest.raises(Exception, match="symlink or not a directory"):
        FileLog(alloc_dir, "web", "stdout").read(0, 100)


def test_adopted_tasks_read_their_container_or_their_files(tmp_path: Path) -> None:
    docker_driver = DockerDriver(client=FakeDockerClient({"cid": FakeContainer(b"x", b"")}))
    exec_driver = FakeDriver("exec", joins_container_netns=False)
    drivers = [exec_driver, docker_driver]
    container = adopted_log_source(drivers, tmp_path, "web", "container", "cid", "stdout")
    assert container.read(0, 10).data == b"x"
    assert isinstance(adopted_log_source([exec_driver], tmp_path, "web", "container", "cid", "stdout"), NoLog)
    assert isinstance(adopted_log_source([exec_driver], tmp_path, "web", "cgroup", "a.t", "stdout"), FileLog)


class Growing(NoLog):
    """A log that gets `data` after `after` reads."""

    def __init__(self, after: int, data: bytes) -> None:
        super().__init__("growing")
        self.reads, self.after, self.data = 0, after, data

    def read(
        self, offset: int, limit: int, from_end: bool = False, resume: tuple[int, int] | None = None
    ) -> LogChunk:
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
