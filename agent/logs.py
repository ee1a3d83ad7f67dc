"""A task's stdout and stderr for `GET /v1/client/fs/logs/...` (`fieldlab-agent alloc logs`).

Where they are: the exec and raw_exec drivers append a task's output to `<task dir>/logs/stdout` and
`logs/stderr` (agent.drivers.process.spawn), across restarts; a docker task's output is its
container's log (`docker logs`, the SDK's `container.logs`), which goes with the container (a restart
starts a new one). Reads are by byte offset, at most `limit` bytes per answer, so that a client can
follow (`follow`: wait up to `wait` seconds for bytes past the offset). A file log is opened without
following a symlink at any of its last three components and must be a regular file: a task that
plants a link or a FIFO there cannot make the agent read elsewhere or block.

Runs in the API's handler threads, never on the main loop: the route resolves the source on the loop
(`LogSource`), reads here.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.errors import AgentError

STREAMS = ("stdout", "stderr")
READ_LIMIT = 256 * 1024  # bytes per answer
FOLLOW_WAIT = 5.0  # seconds a follow waits for new bytes before answering with none
FOLLOW_POLL = 0.25  # seconds between looks while following


class LogsGone(AgentError):
    """What held the log is gone (the task's container was removed): answered 404."""


class LogsUnavailable(AgentError):
    """The runtime that holds the log did not answer (dockerd down): answered 503, retry later."""


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    offset: int  # where `data` starts
    size: int  # the log's size now
    reset: bool = False  # the log is shorter than the offset asked for (a new container): read from 0

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.data)


def slice_log(size: int, offset: int, limit: int, from_end: bool = False) -> tuple[int, int, bool]:
    """(start, length, reset) of a read at `offset` in a log of `size` bytes (pure); `from_end`: the
    offset counts back from the end (Nomad's origin=end). An offset past the end (from the start)
    means the log was replaced by a shorter one: start again at 0 and say so."""
    if from_end:
        start = max(0, size - offset)
        return start, max(0, min(limit, size - start)), False
    reset = offset > size
    start = 0 if reset else offset
    return start, max(0, min(limit, size - start)), reset


class LogSource(Protocol):
    """One stream of one task: `read(offset, limit)` -> LogChunk."""

    what: str

    def read(self, offset: int, limit: int, from_end: bool = False) -> LogChunk: ...


class FileLog:
    """`<task dir>/logs/<stream>`, written by the process drivers."""

    def __init__(self, task_dir: Path, stream: str) -> None:
        self.task_dir, self.stream = task_dir, stream
        self.what = f"{task_dir / 'logs' / stream}"

    def _open(self) -> int | None:
        """An fd of the log file, or None when there is none yet (the task never wrote)."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        fds: list[int] = []
        try:
            fds.append(os.open(self.task_dir, flags | os.O_DIRECTORY))
            fds.append(os.open("logs", flags | os.O_DIRECTORY, dir_fd=fds[-1]))
            fd = os.open(self.stream, flags | os.O_NONBLOCK, dir_fd=fds[-1])
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise AgentError(f"{self.what}: a symlink or not a directory on the way: not read") from None
            raise AgentError(f"{self.what}: {exc.strerror}") from None
        finally:
            for d in fds:
                os.close(d)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise AgentError(f"{self.what}: not a regular file: not read")
        return fd

    def read(self, offset: int, limit: int, from_end: bool = False) -> LogChunk:
        fd = self._open()
        if fd is None:
            return LogChunk(b"", 0, 0, reset=offset > 0 and not from_end)
        try:
            size = os.fstat(fd).st_size
            start, length, reset = slice_log(size, offset, limit, from_end)
            data = os.pread(fd, length, start) if length else b""
        finally:
            os.close(fd)
        return LogChunk(data, start, size, reset)


class DockerLog:
    """A container's log through the docker SDK (`client()` gives a docker.DockerClient). The
    engine gives a whole stream at a time: the offset is applied here."""

    def __init__(self, client: Callable[[], Any], container: str, stream: str) -> None:
        self.client, self.container, self.stream = client, container, stream
        self.what = f"container {container[:12]} {stream}"

    def read(self, offset: int, limit: int, from_end: bool = False) -> LogChunk:
        import docker.errors
        import requests

        try:
            raw = (
                self.client()
                .containers.get(self.container)
                .logs(stdout=self.stream == "stdout", stderr=self.stream == "stderr", timestamps=False)
            )
        except docker.errors.NotFound:
            raise LogsGone(f"{self.what}: the container is gone, and its log with it") from None
        except (docker.errors.DockerException, requests.RequestException, AgentError) as exc:
            raise LogsUnavailable(f"{self.what}: the docker engine did not answer: {exc}") from None
        data = bytes(raw)
        start, length, reset = slice_log(len(data), offset, limit, from_end)
        return LogChunk(data[start : start + length], start, len(data), reset)


class NoLog:
    """A task with nothing to read yet (a docker task whose container was never created)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def read(self, offset: int, limit: int, from_end: bool = False) -> LogChunk:
        return LogChunk(b"", 0, 0, reset=offset > 0 and not from_end)


def read_log(
    source: LogSource,
    offset: int,
    *,
    from_end: bool = False,
    limit: int = READ_LIMIT,
    follow: bool = False,
    wait: float = FOLLOW_WAIT,
    poll: float = FOLLOW_POLL,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LogChunk:
    """Read at `offset` (back from the end with `from_end`); when following and nothing is there
    yet, look again at that point every `poll` seconds for up to `wait` seconds (a long poll: the
    client asks again from `next_offset`)."""
    deadline = clock() + wait
    chunk = source.read(offset, limit, from_end)
    at = chunk.next_offset
    while follow and not chunk.data and not chunk.reset and clock() < deadline:
        sleep(poll)
        chunk = source.read(at, limit)
    return chunk


def log_source(driver: object, task_dir: Path, container: str | None, stream: str) -> LogSource:
    """Where a task of `driver` keeps `stream`: its container's log for the docker driver (None:
    no container yet), `<task dir>/logs/<stream>` for the process drivers. Cheap: nothing is read."""
    from agent.drivers.docker import DockerDriver

    if isinstance(driver, DockerDriver):
        if not container:
            return NoLog(f"{task_dir.name} {stream}: the task has no container")
        return DockerLog(lambda: driver.client, container, stream)
    return FileLog(task_dir, stream)


def adopted_log_source(
    drivers: Iterable[object], task_dir: Path, kind: str, target: str, stream: str
) -> LogSource:
    """An adopted task's log (agent.runner.adopt): its container's through the docker driver, or the
    process drivers' files in its task dir (still there: the alloc dir is not swept while adopted)."""
    if kind == "container":
        from agent.drivers.docker import DockerDriver

        docker = next((d for d in drivers if isinstance(d, DockerDriver)), None)
        if docker is None:
            return NoLog(f"container {target[:12]}: this agent runs no docker driver")
        return log_source(docker, task_dir, target, stream)
    return FileLog(task_dir, stream)
