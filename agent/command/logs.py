"""A task's stdout and stderr for `GET /v1/client/fs/logs/...` (`fieldlab-agent alloc logs`).

Where they are: an exec or raw_exec task's output goes through its logmon (agent.runner.logmonhook,
agent.logmon) into `alloc/<id>/alloc/logs/<task>.stdout.N` and `.stderr.N`, rotated as Nomad's, across
the task's and the agent's restarts; a docker task's output is its container's log (`docker logs`, the
SDK's `container.logs`), which goes with the container (a restart starts a new one). Reads are by byte
offset, at most `limit` bytes per answer, so that a client can follow (`follow`: wait up to `wait`
seconds for bytes past the offset). The logs dir is opened without following a symlink at `alloc/` or
`logs/`, and a file is read only if it is a regular file: a task that plants a link or a FIFO there
cannot make the agent read elsewhere or block.

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

from agent.decide.taskdecisions import plan_next_log_file
from agent.errors import AgentError
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.logmon.rotate import index_of

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
    resume: tuple[int, int] | None = None  # a file log's (file index, position) after `data`
    file: str = ""  # the file `data` is from, as Nomad names it ("": the stream's first file)
    file_offset: int | None = None  # where in `file` it starts (None: `offset`)

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
    """One stream of one task: `read(offset, limit)` -> LogChunk; a follow passes the last chunk's
    `resume` back (a source that has none ignores it)."""

    what: str

    def read(
        self, offset: int, limit: int, from_end: bool = False, resume: tuple[int, int] | None = None
    ) -> LogChunk: ...


class FileLog:
    """`alloc/<id>/alloc/logs/<task>.<stream>.N`, written by the task's logmon (process drivers),
    read as Nomad's client reads them: the files present, in index order, as one log. An offset from
    the start counts from the first file present; past the end it is the end (client/fs_endpoint.go
    findClosest). A follow goes on from where the last read ended (`LogChunk.resume`: the file's index
    and the position in it), into the next file when one is rotated in; a reader so slow that its file
    was purged goes on at the oldest file left. Each chunk holds bytes of one file, and says which."""

    def __init__(self, alloc_dir: Path, task: str, stream: str, bugs: Bugs = NO_BUGS) -> None:
        self.alloc_dir, self.base = alloc_dir, f"{task}.{stream}"
        self.bugs = bugs
        self.what = f"{alloc_dir / 'alloc' / 'logs' / self.base}.N"

    def _dir(self) -> int | None:
        """An fd of the logs dir, opened without following a link at `alloc/` or `logs/` (both the
        tasks' to write); None when there is none yet."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
        fd = -1
        try:
            fd = os.open(self.alloc_dir, flags)
            for name in ("alloc", "logs"):
                nxt = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except FileNotFoundError:
            if fd >= 0:
                os.close(fd)
            return None
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise AgentError(f"{self.what}: a symlink or not a directory on the way: not read") from None
            raise AgentError(f"{self.what}: {exc.strerror}") from None
        return fd

    def _files(self, dfd: int) -> list[tuple[int, int]]:
        """(index, size) of the regular files `<base>.N` present, by index (others are not ours)."""
        found = []
        for name in os.listdir(dfd):
            idx = index_of(name, self.base)  # canonical N only: `web.stdout.²` is not a log
            if idx is None:
                continue
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # purged between the listing and the look
            if stat.S_ISREG(st.st_mode):
                found.append((idx, st.st_size))
        return sorted(found)

    def present(self) -> bool:
        """Whether logmon has written any file of this stream yet."""
        try:
            dfd = self._dir()
        except AgentError:
            return True  # there, and not readable: read() says why
        if dfd is None:
            return False
        try:
            return bool(self._files(dfd))
        finally:
            os.close(dfd)

    def _read(self, dfd: int, idx: int, pos: int, limit: int) -> bytes:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(f"{self.base}.{idx}", flags, dir_fd=dfd)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise AgentError(f"{self.what}: {exc.strerror}: not read") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise AgentError(f"{self.what}: not a regular file: not read")
            return os.pread(fd, limit, pos) if limit else b""
        finally:
            os.close(fd)

    def read(
        self, offset: int, limit: int, from_end: bool = False, resume: tuple[int, int] | None = None
    ) -> LogChunk:
        dfd = self._dir()
        if dfd is None:
            return LogChunk(b"", 0, 0)
        try:
            files = self._files(dfd)
            if not files:
                return LogChunk(b"", 0, 0)
            total = sum(size for _, size in files)
            i, pos = _locate(files, offset, from_end, resume)
            # a file read to its end when a later one exists: the rotation moved on, so does the read
            while plan_next_log_file(pos, files[i][1], i + 1 < len(files), self.bugs):
                i, pos = i + 1, 0
            idx = files[i][0]
            data = self._read(dfd, idx, pos, max(0, min(limit, files[i][1] - pos)))
        finally:
            os.close(dfd)
        before = sum(size for _, size in files[:i])
        return LogChunk(
            data,
            before + pos,
            total,
            resume=(idx, pos + len(data)),
            file=f"alloc/logs/{self.base}.{idx}",
            file_offset=pos,
        )


def _resume_at(files: list[tuple[int, int]], resume: tuple[int, int]) -> tuple[int, int]:
    for i, (idx, size) in enumerate(files):
        if idx == resume[0]:
            return i, min(resume[1], size)
    if resume[0] > files[-1][0]:
        return len(files) - 1, files[-1][1]
    return 0, 0  # purged under a slow reader: on at the oldest file left


def _locate(
    files: list[tuple[int, int]], offset: int, from_end: bool, resume: tuple[int, int] | None
) -> tuple[int, int]:
    """(position in `files`, byte in that file) where a read starts (pure): at `resume` (a follow's
    last place) when its file is still there, else the oldest file's start; else `offset` bytes from
    the first file's start or back from the last one's end, clamped to the log (Nomad's findClosest)."""
    if resume is not None:
        return _resume_at(files, resume)
    if from_end:
        back = offset
        for i in range(len(files) - 1, -1, -1):
            if back <= files[i][1]:
                return i, files[i][1] - back
            back -= files[i][1]
        return 0, 0
    left = offset
    for i, (_, size) in enumerate(files):
        if left <= size:
            return i, left
        left -= size
    return len(files) - 1, files[-1][1]


class TaskDirLog:
    """`<task dir>/logs/<stream>`: where an exec or raw_exec task started by an agent before logmon
    writes (its stdout is that file, for as long as it runs): read as it was, so that an upgrade of
    the agent restarts no task to keep its log readable."""

    def __init__(self, task_dir: Path, stream: str) -> None:
        self.task_dir, self.stream = task_dir, stream
        self.what = f"{task_dir / 'logs' / stream}"

    def exists(self) -> bool:
        try:
            return stat.S_ISREG(os.stat(self.task_dir / "logs" / self.stream, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def read(
        self, offset: int, limit: int, from_end: bool = False, resume: tuple[int, int] | None = None
    ) -> LogChunk:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        fds: list[int] = []
        try:
            fds.append(os.open(self.task_dir, flags | os.O_DIRECTORY))
            fds.append(os.open("logs", flags | os.O_DIRECTORY, dir_fd=fds[-1]))
            fd = os.open(self.stream, flags | os.O_NONBLOCK, dir_fd=fds[-1])
        except FileNotFoundError:
            return LogChunk(b"", 0, 0, reset=offset > 0 and not from_end)
        except OSError as exc:
            raise AgentError(f"{self.what}: {exc.strerror}: not read") from None
        finally:
            for d in fds:
                os.close(d)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise AgentError(f"{self.what}: not a regular file: not read")
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

    def read(
        self, offset: int, limit: int, from_end: bool = False, resume: tuple[int, int] | None = None
    ) -> LogChunk:
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

    def read(
        self, offset: int, limit: int, from_end: bool = False, resume: tuple[int, int] | None = None
    ) -> LogChunk:
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
    resume: tuple[int, int] | None = None,
) -> LogChunk:
    """Read at `offset` (back from the end with `from_end`), or at `resume` (a follow's last chunk's);
    when following and nothing is there yet, look again at that point every `poll` seconds for up to
    `wait` seconds (a long poll: the client asks again from `next_offset`)."""
    deadline = clock() + wait
    chunk = source.read(offset, limit, from_end, resume)
    at, resume = chunk.next_offset, chunk.resume
    while follow and not chunk.data and not chunk.reset and clock() < deadline:
        sleep(poll)
        chunk = source.read(at, limit, resume=resume)
    return chunk


def log_source(
    driver: object, alloc_dir: Path, task: str, container: str | None, stream: str, bugs: Bugs = NO_BUGS
) -> LogSource:
    """Where a task of `driver` keeps `stream`: `alloc/logs/<task>.<stream>.N`, which its logmon
    writes (a docker task's through its docker logger). With no such file yet (a task an agent
    before logmon started, or logs disabled): a docker task's container log (None: no container
    yet), a process task's `<task dir>/logs/<stream>` when there is one. Cheap: a listing at most."""
    from agent.drivers.docker import DockerDriver

    files = FileLog(alloc_dir, task, stream, bugs)
    if files.present():
        return files
    if isinstance(driver, DockerDriver):
        if not container:
            return NoLog(f"{task} {stream}: the task has no container")
        return DockerLog(lambda: driver.client, container, stream)
    legacy = TaskDirLog(alloc_dir / task, stream)
    return legacy if legacy.exists() else files


def adopted_log_source(
    drivers: Iterable[object], alloc_dir: Path, task: str, kind: str, target: str, stream: str
) -> LogSource:
    """An adopted task's log (agent.runner.adopt): its container's through the docker driver, or the
    process drivers' files in its alloc dir (still there: the alloc dir is not swept while adopted)."""
    if kind == "container":
        from agent.drivers.docker import DockerDriver

        docker = next((d for d in drivers if isinstance(d, DockerDriver)), None)
        if docker is None:
            return NoLog(f"container {target[:12]}: this agent runs no docker driver")
        return log_source(docker, alloc_dir, task, target, stream)
    return FileLog(alloc_dir, task, stream)
