"""logmon (agent.logmon): Nomad's rotation rules as pure functions, and the process itself on two
FIFOs in a temp dir (no root): rotation and purge, a restart that loses and doubles nothing, SIGTERM
draining, and names a task planted in the logs dir that it must not write through."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.logmon.rotate import LINE_SCAN, plan_write, to_purge
from lab.waits import wait_until

PROJECT = Path(__file__).resolve().parent.parent
WAIT = 20.0  # seconds for logmon to copy what was written


def _sizes(current: int, file_size: int, pieces: list[tuple[bool, bytes]]) -> list[int]:
    """The size of each file the pieces fill (the first continues `current`)."""
    sizes = [current]
    for rotate, piece in pieces:
        if rotate:
            sizes.append(0)
        sizes[-1] += len(piece)
    return sizes


@pytest.mark.parametrize(
    ("current", "file_size", "data"),
    [
        (0, 100, b"a" * 250),  # no newline, bigger than a file: cut at the room
        (90, 100, b"abc\n" * 5),
        (0, 100, b"x" * 150 + b"\n"),  # one line longer than a fresh file: cut, never a loop
        (1024 * 1024 - 10, 1024 * 1024, b"line of twenty chars\n" * 3),
        (0, 1024 * 1024, b"short\n"),
        (0, 1024 * 1024, b"y" * (3 * 1024 * 1024)),
    ],
)
def test_every_byte_lands_once_in_order_and_no_file_overflows(
    current: int, file_size: int, data: bytes
) -> None:
    pieces = plan_write(current, file_size, data)
    assert b"".join(p for _, p in pieces) == data
    assert all(size <= file_size for size in _sizes(current, file_size, pieces))


def test_near_a_files_end_the_cut_is_at_a_line_as_nomads_rotator() -> None:
    lines = b"line of twenty chars\n" * 3
    # 10 bytes left: the first line does not fit, the file is rotated before it, whole lines go on
    assert plan_write(1024 * 1024 - 10, 1024 * 1024, lines) == [(True, lines)]
    # room beyond LINE_SCAN: written as it is, no look for a newline
    assert plan_write(0, 1024 * 1024, lines) == [(False, lines)]
    # within LINE_SCAN of the end, a line that fits goes in, the next rotates
    room = LINE_SCAN
    out = plan_write(1024 * 1024 - room, 1024 * 1024, b"a" * (room - 1) + b"\n" + b"b\n")
    assert out == [(False, b"a" * (room - 1) + b"\n"), (True, b"b\n")]


def test_purge_keeps_the_newest_max_files() -> None:
    assert to_purge([3, 1, 2, 0], 2) == [0, 1]
    assert to_purge([5], 3) == []
    assert to_purge([], 1) == []


class Logmon:
    """A logmon on two FIFOs held open read-write by the test, as a task holds them."""

    def __init__(self, root: Path, max_files: int = 10, file_size: int = 10 * 1024 * 1024) -> None:
        self.logs = root / "logs"
        self.logs.mkdir(exist_ok=True)
        for name in ("out", "err"):
            if not (root / name).exists():
                os.mkfifo(root / name)
        self.out = os.open(root / "out", os.O_RDWR)
        self.err = os.open(root / "err", os.O_RDWR)
        self.dfd = os.open(self.logs, os.O_RDONLY | os.O_DIRECTORY)
        self.max_files, self.file_size = max_files, file_size
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        fds = (self.dfd, self.out, self.err)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent.logmon",
                "--task",
                "web",
                "--logs-fd",
                str(self.dfd),
                "--stdout-fd",
                str(self.out),
                "--stderr-fd",
                str(self.err),
                "--max-files",
                str(self.max_files),
                "--max-file-size",
                str(self.file_size),
            ],
            pass_fds=fds,
            cwd=PROJECT,
            stderr=subprocess.PIPE,
        )
        return self.proc

    def files(self, stream: str = "stdout") -> list[str]:
        names = [
            n for n in os.listdir(self.logs) if n.startswith(f"web.{stream}.") and n.split(".")[-1].isdigit()
        ]
        return sorted(names, key=lambda n: int(n.split(".")[-1]))

    def text(self, stream: str = "stdout") -> bytes:
        return b"".join((self.logs / n).read_bytes() for n in self.files(stream))

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.out, self.err, self.dfd):
            os.close(fd)


@pytest.fixture
def logmon(tmp_path: Path) -> Iterator[Logmon]:
    m = Logmon(tmp_path)
    yield m
    m.close()


def _lines(n0: int, n1: int) -> bytes:
    return b"".join(b"line %05d\n" % i for i in range(n0, n1))


def _holds(m: Logmon, want: bytes, stream: str = "stdout") -> tuple[bool | None, str]:
    got = m.text(stream)
    return (True if got == want else None), f"{len(got)} of {len(want)} bytes"


def test_both_streams_land_in_their_files(logmon: Logmon) -> None:
    logmon.start()
    os.write(logmon.out, b"hello\n")
    os.write(logmon.err, b"oops\n")
    wait_until(lambda: _holds(logmon, b"hello\n"), timeout=WAIT, what="stdout copied")
    wait_until(lambda: _holds(logmon, b"oops\n", "stderr"), timeout=WAIT, what="stderr copied")
    assert logmon.files() == ["web.stdout.0"] and logmon.files("stderr") == ["web.stderr.0"]


def test_rotation_and_purge_with_small_files(tmp_path: Path) -> None:
    m = Logmon(tmp_path, max_files=3, file_size=1000)
    try:
        m.start()
        data = _lines(0, 400)  # 4400 bytes over 1000-byte files: 5 files made, 3 kept
        os.write(m.out, data)

        def rotated() -> tuple[list[str] | None, str]:
            names = m.files()
            return (names if names and names[-1] == "web.stdout.4" and len(names) == 3 else None), str(names)

        assert wait_until(rotated, timeout=WAIT, what="rotated and purged") == [
            "web.stdout.2",
            "web.stdout.3",
            "web.stdout.4",
        ]
        assert data.endswith(m.text()) and all((m.logs / n).stat().st_size <= 1000 for n in m.files())
    finally:
        m.close()


def test_a_restarted_logmon_loses_and_doubles_nothing(logmon: Logmon) -> None:
    first = logmon.start()
    os.write(logmon.out, _lines(0, 1000))
    wait_until(lambda: _holds(logmon, _lines(0, 1000)), timeout=WAIT, what="the first lines copied")
    first.kill()
    first.wait()
    os.write(logmon.out, _lines(1000, 3000))  # while no logmon runs: they wait in the pipe
    logmon.start()
    os.write(logmon.out, _lines(3000, 4000))
    wait_until(lambda: _holds(logmon, _lines(0, 4000)), timeout=WAIT, what="every line once, in order")
    assert logmon.files() == ["web.stdout.0"]  # the new logmon appended to the same file


def test_sigterm_drains_what_the_task_wrote(logmon: Logmon) -> None:
    proc = logmon.start()
    os.write(logmon.out, _lines(0, 1))
    wait_until(lambda: _holds(logmon, _lines(0, 1)), timeout=WAIT, what="logmon up and copying")
    os.write(logmon.out, _lines(1, 5000))
    proc.send_signal(signal.SIGTERM)  # at once: what is still in the pipe must land
    assert proc.wait(WAIT) == 0
    assert logmon.text() == _lines(0, 5000)


@pytest.mark.parametrize("planted", ["symlink", "fifo", "hardlink", "dir"])
def test_a_name_a_task_planted_is_skipped_never_written_through(tmp_path: Path, planted: str) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"not logmon's\n")
    m = Logmon(tmp_path)
    target = m.logs / "web.stdout.0"
    if planted == "symlink":
        target.symlink_to(outside)
    elif planted == "fifo":
        os.mkfifo(target)
    elif planted == "hardlink":
        os.link(outside, target)
    else:
        target.mkdir()
    try:
        proc = m.start()
        os.write(m.out, b"mine\n")

        def written() -> tuple[bool | None, str]:
            nxt = m.logs / "web.stdout.1"
            there = nxt.exists() and nxt.read_bytes() == b"mine\n"
            return (True if there else None), str(sorted(os.listdir(m.logs)))

        wait_until(written, timeout=WAIT, what="the line in web.stdout.1, the next index")
        assert outside.read_bytes() == b"not logmon's\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
        assert proc.stderr is not None and b"skipped" in proc.stderr.read()
        assert os.path.lexists(target)  # left as it was, not removed
    finally:
        m.close()


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "agent.logmon", *args]
        return subprocess.run(cmd, cwd=PROJECT, capture_output=True, text=True, check=False)

    bad_fd = run("--task", "web", "--logs-fd", "97", "--stdout-fd", "98", "--stderr-fd", "99")
    assert (
        bad_fd.returncode == 2 and "fd 97 is not open" in bad_fd.stderr and "Traceback" not in bad_fd.stderr
    )
    bad_size = run(
        "--task", "web", "--logs-fd", "0", "--stdout-fd", "1", "--stderr-fd", "2", "--max-files", "0"
    )
    assert bad_size.returncode == 2 and "0 is less than 1" in bad_size.stderr
    bad_task = run("--task", "../x", "--logs-fd", "0", "--stdout-fd", "1", "--stderr-fd", "2")
    assert bad_task.returncode == 2 and "not a task name" in bad_task.stderr


# -- the docker logger (agent.logmon.docker): the engine's stream and timestamps, without an engine


def test_the_engines_timestamps_and_since() -> None:
    from agent.logmon.docker import since_arg, stamp_to_ns

    assert stamp_to_ns(b"2026-12-04T20:00:01.123456789Z") == 1796414401_123456789
    assert stamp_to_ns(b"2026-12-04T20:00:01.5Z") == 1796414401_500000000
    assert stamp_to_ns(b"2026-12-04T20:00:01Z") == 1796414401_000000000
    assert since_arg(1796414401_000000042) == "1796414401.000000042"
    with pytest.raises(ValueError):
        stamp_to_ns(b"not-a-time")


def test_the_multiplexed_stream_is_cut_into_frames_by_stream() -> None:
    import io
    import struct

    from agent.logmon.docker import frames

    def frame(kind: int, data: bytes) -> bytes:
        return struct.pack(">BxxxL", kind, len(data)) + data

    body = io.BufferedReader(
        io.BytesIO(frame(1, b"T1 out\n") + frame(2, b"T2 err\n") + frame(1, b"T3 cut")[:5])
    )
    assert list(frames(body, multiplexed=True)) == [(1, b"T1 out\n"), (2, b"T2 err\n")]  # type: ignore[arg-type]
    raw = io.BufferedReader(io.BytesIO(b"T1 a\nT2 b\n"))
    assert list(frames(raw, multiplexed=False)) == [(1, b"T1 a\n"), (1, b"T2 b\n")]  # type: ignore[arg-type]
