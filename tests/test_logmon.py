"""logmon (agent.logmon): Nomad's rotation rules as pure functions, and the process itself on two
FIFOs in a temp dir (no root): rotation and purge, a restart that loses and doubles nothing, SIGTERM
draining, a failing disk, and names a task planted in the logs dir that it must not write through.

The test plays the task: it opens the FIFOs itself (its own open, as the driver gives the task its
own), writes lines, and polls the files with a named deadline until they hold them."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.logmon.rotate import LINE_SCAN, index_of, plan_write, to_purge
from lab.waits import wait_until

PROJECT = Path(__file__).resolve().parent.parent
WAIT = 20.0  # seconds for logmon to copy what was written
MIB = 1024 * 1024

# -- the rules, pure


def _sizes(current: int, pieces: list[tuple[bool, bytes]]) -> list[int]:
    """The size of each file the pieces fill (the first continues `current`)."""
    sizes = [current]
    for rotate, piece in pieces:
        if rotate:
            sizes.append(0)
        sizes[-1] += len(piece)
    return sizes


@settings(max_examples=300, deadline=None)
@given(
    file_size=st.sampled_from([1, 7, 100, 1000, LINE_SCAN, LINE_SCAN + 50, MIB]),
    fill=st.floats(0.0, 1.2),
    data=st.lists(st.sampled_from([b"\n", b"a", b"bc" * 40, b"x" * 5000, b"y" * 40000])).map(b"".join),
)
def test_every_byte_lands_once_in_order_and_no_file_overflows(
    file_size: int, fill: float, data: bytes
) -> None:
    current = int(file_size * fill)
    pieces = plan_write(current, file_size, data)
    assert b"".join(p for _, p in pieces) == data
    assert all(piece for _, piece in pieces)  # no empty step: a write always moves on
    assert all(size <= file_size for size in _sizes(current, pieces)[1:])
    assert _sizes(current, pieces)[0] <= max(current, file_size)


def test_far_from_the_end_a_write_goes_in_whole() -> None:
    lines = b"line of twenty chars\n" * 3
    assert plan_write(0, MIB, lines) == [(False, lines)]
    assert plan_write(0, MIB, b"") == []


def test_near_the_end_a_line_that_fits_goes_in_and_the_next_rotates() -> None:
    first, second = b"a" * 29 + b"\n", b"b" * 39 + b"\n"
    assert plan_write(MIB - 50, MIB, first + second) == [(False, first), (True, second)]


def test_near_the_end_a_line_that_does_not_fit_rotates_first() -> None:
    lines = b"line of twenty chars\n" * 3
    assert plan_write(MIB - 10, MIB, lines) == [(True, lines)]
    # even with more data behind it than a file holds: the newline is preferred (Nomad's order)
    data = b"x" * 20 + b"\n" + b"y" * 200
    assert plan_write(90, 100, data) == [
        (True, b"x" * 20 + b"\n"),
        (False, b"y" * 79),
        (True, b"y" * 100),
        (True, b"y" * 21),
    ]


def test_no_newline_rotates_when_it_fits_the_next_file_else_fills_the_room() -> None:
    assert plan_write(MIB - 10, MIB, b"z" * 40) == [(True, b"z" * 40)]
    big = b"z" * (2 * MIB + 5)  # more than a file: cut at exactly the room left, then file by file
    assert plan_write(MIB - 10, MIB, big) == [
        (False, big[:10]),
        (True, big[10 : MIB + 10]),
        (True, big[MIB + 10 :]),
    ]
    # files smaller than the line scan: filled up, cut at the room
    assert plan_write(990, 1000, b"q" * 50) == [(False, b"q" * 10), (True, b"q" * 40)]


def test_a_fresh_file_is_filled_when_a_line_does_not_fit_any_file() -> None:
    # Nomad would rotate into empty files without end; here the line is cut at the file's size
    line = b"w" * 150 + b"\n"
    assert plan_write(0, 100, line) == [(False, line[:100]), (True, line[100:])]


def test_a_full_file_is_rotated_before_anything() -> None:
    assert plan_write(100, 100, b"n\n") == [(True, b"n\n")]
    assert plan_write(250, 100, b"n\n") == [(True, b"n\n")]


def test_only_canonical_names_are_rotated_files() -> None:
    assert index_of("web.stdout.0", "web.stdout") == 0
    assert index_of("web.stdout.12", "web.stdout") == 12
    for name in (
        "web.stdout.²",
        "web.stdout.007",
        "web.stdout.-1",
        "web.stdout.+1",
        "web.stdout.",
        "web.stdout",
    ):
        assert index_of(name, "web.stdout") is None, name
    for name in ("web.stdout.1.gz", "web.stderr.1", "web.stdoutx.1", "web.stdout.\u0661"):
        assert index_of(name, "web.stdout") is None, name


def test_purge_keeps_the_newest_max_files() -> None:
    assert to_purge([3, 1, 2, 0], 2) == [0, 1]
    assert to_purge([5], 3) == []
    assert to_purge([], 1) == []
    assert to_purge([7, 7, 8], 1) == [7]


# -- the process


class Logmon:
    """A logmon on two FIFOs held open read-write by the test, as a task holds them."""

    def __init__(self, root: Path, max_files: int = 10, file_size: int = 10 * MIB) -> None:
        self.root, self.logs = root, root / "logs"
        self.logs.mkdir(exist_ok=True)
        for name in ("out", "err"):
            os.mkfifo(root / name)
        # logmon's ends and the task's are two opens of each FIFO, as the agent makes them: the
        # O_NONBLOCK logmon sets on its own never reaches the task's
        self.mon_out, self.mon_err = os.open(root / "out", os.O_RDWR), os.open(root / "err", os.O_RDWR)
        self.out, self.err = os.open(root / "out", os.O_RDWR), os.open(root / "err", os.O_RDWR)
        self.dfd = os.open(self.logs, os.O_RDONLY | os.O_DIRECTORY)
        self.max_files, self.file_size = max_files, file_size
        self.proc: subprocess.Popen[bytes] | None = None
        self.errlog = root / "logmon.err"

    def start(self, fsize_limit: int | None = None) -> subprocess.Popen[bytes]:
        def limit() -> None:
            if fsize_limit is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

        with self.errlog.open("ab") as errlog:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "agent.logmon", "--task", "web"),
                    *("--logs-fd", str(self.dfd), "--stdout-fd", str(self.mon_out)),
                    *("--stderr-fd", str(self.mon_err), "--max-files", str(self.max_files)),
                    *("--max-file-size", str(self.file_size)),
                ],
                pass_fds=(self.dfd, self.mon_out, self.mon_err),
                cwd=PROJECT,
                stderr=errlog,
                preexec_fn=limit,  # noqa: PLW1509 (a one-call rlimit, no lock taken)
            )
        return self.proc

    def said(self) -> str:
        return self.errlog.read_text() if self.errlog.exists() else ""

    def files(self, stream: str = "stdout") -> list[str]:
        names = [n for n in os.listdir(self.logs) if index_of(n, f"web.{stream}") is not None]
        return sorted(names, key=lambda n: int(n.rsplit(".", 1)[1]))

    def regular(self, stream: str = "stdout") -> list[str]:
        return [n for n in self.files(stream) if stat.S_ISREG(os.lstat(self.logs / n).st_mode)]

    def text(self, stream: str = "stdout") -> bytes:
        return b"".join((self.logs / n).read_bytes() for n in self.regular(stream))

    def holds(self, want: bytes, stream: str = "stdout") -> None:
        def check() -> tuple[bool | None, str]:
            got = self.text(stream)
            return (True if got == want else None), f"{len(got)} of {len(want)} bytes, {self.files(stream)}"

        wait_until(check, timeout=WAIT, what=f"logmon's {stream} files holding what was written")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(WAIT)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.out, self.err, self.mon_out, self.mon_err, self.dfd):
            os.close(fd)


@pytest.fixture
def logmon(tmp_path: Path) -> Iterator[Logmon]:
    m = Logmon(tmp_path)
    yield m
    m.close()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Logmon]:
    """1000-byte files, 3 kept."""
    m = Logmon(tmp_path, max_files=3, file_size=1000)
    yield m
    m.close()


def _lines(n0: int, n1: int) -> bytes:
    return b"".join(b"line %05d\n" % i for i in range(n0, n1))


def _write(fd: int, data: bytes) -> None:
    """All of `data`, as a task's blocking write (under 64 KiB at a time: one pipe's worth)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def test_both_streams_land_in_their_files(logmon: Logmon) -> None:
    logmon.start()
    _write(logmon.out, b"hello\n")
    _write(logmon.err, b"oops\n")
    logmon.holds(b"hello\n")
    logmon.holds(b"oops\n", "stderr")
    assert logmon.files() == ["web.stdout.0"] and logmon.files("stderr") == ["web.stderr.0"]
    assert logmon.stop() == 0 and logmon.said() == ""


def test_rotation_and_purge_with_small_files(small: Logmon) -> None:
    small.start()
    data = _lines(0, 400)  # 4400 bytes, 90 whole 11-byte lines (990 bytes) to a 1000-byte file: 5 files
    _write(small.out, data)

    def rotated() -> tuple[list[str] | None, str]:
        names = small.files()
        return (names if names[-1:] == ["web.stdout.4"] and len(names) == 3 else None), str(names)

    assert wait_until(rotated, timeout=WAIT, what="rotated and purged") == [
        "web.stdout.2",
        "web.stdout.3",
        "web.stdout.4",
    ]
    kept = small.text()
    assert kept == _lines(400 - len(kept) // 11, 400)  # the newest lines, each once, in order
    sizes = [(small.logs / n).stat().st_size for n in small.files()]
    assert sizes == [990, 990, 440]  # whole lines (11 bytes): each file cut at a newline
    assert small.stop() == 0


@pytest.mark.parametrize("file_size", [10 * MIB, 1000])
def test_a_restarted_logmon_loses_and_doubles_nothing(tmp_path: Path, file_size: int) -> None:
    m = Logmon(tmp_path, max_files=1000, file_size=file_size)
    try:
        first = m.start()
        _write(m.out, _lines(0, 1000))
        m.holds(_lines(0, 1000))
        before = m.files()
        first.kill()
        first.wait()
        _write(m.out, _lines(1000, 3000))  # while no logmon runs: they wait in the pipe
        m.start()
        _write(m.out, _lines(3000, 4000))
        m.holds(_lines(0, 4000))
        lines = m.text().splitlines()
        assert len(lines) == 4000 and len(set(lines)) == 4000  # counted: each once, in order (holds)
        assert m.files()[: len(before)] == before  # the new logmon carried on from the last file
        if file_size == 10 * MIB:
            assert m.files() == ["web.stdout.0"]
        assert m.stop() == 0
    finally:
        m.close()


def test_sigterm_drains_what_the_task_wrote(logmon: Logmon) -> None:
    logmon.start()
    _write(logmon.out, _lines(0, 1))
    logmon.holds(_lines(0, 1))  # logmon is up and copying
    _write(logmon.out, _lines(1, 5000))  # 50 KB: still in the pipe when the SIGTERM comes
    _write(logmon.err, _lines(0, 3000))
    assert logmon.stop() == 0
    assert logmon.text() == _lines(0, 5000)
    assert logmon.text("stderr") == _lines(0, 3000)


def test_a_logmon_whose_logs_dir_was_removed_exits(logmon: Logmon) -> None:
    """An alloc dir GC'd while no agent stopped its logmon (an agent that died, a sweep): no orphan."""
    proc = logmon.start()
    _write(logmon.out, _lines(0, 1))
    logmon.holds(_lines(0, 1))
    shutil.rmtree(logmon.logs)  # the test's own fd on it stays open: only the dir's links are gone

    def exited() -> tuple[int | None, str]:
        return proc.poll(), f"logmon pid {proc.pid} still running; said {logmon.said()!r}"

    assert wait_until(exited, timeout=WAIT, what="logmon exiting once its logs dir is removed") == 0
    assert "logs dir was removed" in logmon.said()


def test_a_failing_disk_drops_the_chunk_says_so_once_a_second_and_goes_on(logmon: Logmon) -> None:
    proc = logmon.start(fsize_limit=2000)  # past 2000 bytes a write fails (EFBIG), as a full disk
    for i in range(50):
        _write(logmon.out, _lines(i * 100, (i + 1) * 100))
    logmon.holds(_lines(0, 1000)[:2000])  # what fitted: the first write cut short, then nothing

    def said() -> tuple[str | None, str]:
        text = logmon.said()
        return (text if "output dropped" in text else None), text

    wait_until(said, timeout=WAIT, what="the failed write said on stderr")
    _write(logmon.err, b"stderr still copied\n")
    logmon.holds(b"stderr still copied\n", "stderr")
    assert proc.poll() is None and logmon.stop() == 0
    dropped = [line for line in logmon.said().splitlines() if "output dropped" in line]
    assert 1 <= len(dropped) <= 3  # 50 failing chunks, one line a second


# -- what a task can plant in the logs dir (0777: it is the tasks')


def _plant(kind: str, target: Path, outside: Path) -> None:
    if kind == "symlink":
        target.symlink_to(outside)
    elif kind in ("fifo", "fifo with a reader"):
        os.mkfifo(target)
    elif kind == "hardlink":
        os.link(outside, target)
    else:
        target.mkdir()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "fifo with a reader", "hardlink", "dir"])
def test_a_name_a_task_planted_is_skipped_never_written_through(logmon: Logmon, kind: str) -> None:
    outside = logmon.root / "outside"
    outside.write_bytes(b"not logmon's\n")
    target = logmon.logs / "web.stdout.0"
    _plant(kind, target, outside)
    reader = os.open(target, os.O_RDONLY | os.O_NONBLOCK) if kind == "fifo with a reader" else -1
    try:
        logmon.start()
        _write(logmon.out, b"mine\n")
        nxt = logmon.logs / "web.stdout.1"

        def written() -> tuple[bool | None, str]:
            return (True if nxt.exists() and nxt.read_bytes() == b"mine\n" else None), str(logmon.files())

        wait_until(written, timeout=WAIT, what="the line in web.stdout.1, the next index")
        assert logmon.files() == ["web.stdout.0", "web.stdout.1"]
        assert outside.read_bytes() == b"not logmon's\n"
        if reader >= 0:
            assert os.read(reader, 100) == b""  # nothing was written into the FIFO (no writer: EOF)
        assert logmon.stop() == 0
        assert "web.stdout.0" in logmon.said() and "skipped" in logmon.said()
        assert len(logmon.said().splitlines()) == 1
        assert os.path.lexists(target)  # left as the task made it
    finally:
        if reader >= 0:
            os.close(reader)


def test_names_planted_where_it_rotates_are_skipped_and_never_purged(small: Logmon) -> None:
    outside = small.root / "outside"
    outside.write_bytes(b"not logmon's\n")
    (small.logs / "web.stdout.1").symlink_to(outside)
    (small.logs / "web.stdout.2").mkdir()
    for odd in ("web.stdout.²", "web.stdout.007", "web.stdout.00"):
        (small.logs / odd).write_bytes(b"the task's\n")
    small.start()
    data = _lines(0, 900)  # 10 files of 90 lines, from .3 on: .1 and .2 are in the way
    _write(small.out, data)

    def purged() -> tuple[list[str] | None, str]:
        names = small.regular()
        return (names if names == ["web.stdout.10", "web.stdout.11", "web.stdout.12"] else None), str(names)

    wait_until(purged, timeout=WAIT, what="rotated past the planted names and purged")
    assert small.text() == data[-len(small.text()) :]
    assert outside.read_bytes() == b"not logmon's\n"
    assert (small.logs / "web.stdout.1").is_symlink() and (small.logs / "web.stdout.2").is_dir()
    for odd in ("web.stdout.²", "web.stdout.007", "web.stdout.00"):
        assert (small.logs / odd).read_bytes() == b"the task's\n"  # not a rotated file: untouched
    assert small.stop() == 0


def test_a_next_file_that_cannot_be_made_drops_output_and_never_hangs(small: Logmon) -> None:
    # a full file whose next index makes a name too long (256 bytes): the open fails for a reason
    # no other index would fix; logmon says so (once a second), drops, and goes on with stderr
    (small.logs / f"web.stdout.{'9' * 244}").write_bytes(b"x" * 1000)
    small.start()
    for i in range(20):
        _write(small.out, _lines(i * 10, (i + 1) * 10))

    def said() -> tuple[str | None, str]:
        text = small.said()
        return (text if "File name too long: output dropped" in text else None), text

    wait_until(said, timeout=WAIT, what="the failed open said on stderr")
    _write(small.err, b"stderr still copied\n")
    small.holds(b"stderr still copied\n", "stderr")
    assert small.stop() == 0
    assert 1 <= len(small.said().splitlines()) <= 3


def test_a_restart_carries_on_in_the_highest_file(small: Logmon) -> None:
    (small.logs / "web.stdout.0").write_bytes(b"x" * 1000)  # full
    (small.logs / "web.stdout.5").write_bytes(b"earlier\n")
    small.start()
    _write(small.out, b"later\n")
    small.holds(b"x" * 1000 + b"earlier\nlater\n")
    assert small.files() == ["web.stdout.0", "web.stdout.5"]
    assert small.stop() == 0


# -- the command line


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "agent.logmon", *args]
    return subprocess.run(cmd, cwd=PROJECT, capture_output=True, text=True, check=False, timeout=WAIT)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--task", "web", "--logs-fd", "97", "--stdout-fd", "98", "--stderr-fd", "99"), "fd 97 is not open"),
        (("--task", "web", "--logs-fd", "x", "--stdout-fd", "1", "--stderr-fd", "2"), "'x' is not an fd"),
        (
            ("--task", "web", "--logs-fd", "0", "--stdout-fd", "1", "--stderr-fd", "2", "--max-files", "0"),
            "0 is less than 1",
        ),
        (
            (
                "--task",
                "web",
                "--logs-fd",
                "0",
                "--stdout-fd",
                "1",
                "--stderr-fd",
                "2",
                "--max-file-size",
                "1MB",
            ),
            "'1MB' is not a whole number",
        ),
        (("--task", "../x", "--logs-fd", "0", "--stdout-fd", "1", "--stderr-fd", "2"), "not a task name"),
        (("--task", "web", "--logs-fd", "1", "--stdout-fd", "1", "--stderr-fd", "2"), "three different fds"),
        (("--task", "web", "--logs-fd", "0", "--stdout-fd", "1", "--stderr-fd", "2"), "not a directory"),
        (("--task", "web"), "required"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: tuple[str, ...], says: str) -> None:
    done = _run(*args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


def test_help_and_only_the_standard_library() -> None:
    assert _run("--help").returncode == 0
    code = (
        "import sys; before = set(sys.modules); import agent.logmon.__main__; "
        "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, check=True
    )
    assert set(done.stdout.split()) - set(sys.stdlib_module_names) == {"agent"}


# -- the docker logger (agent.logmon.docker): the engine's stream and timestamps, without an engine


def test_the_engines_timestamps_and_since() -> None:
    from agent.logmon.docker import since_arg, stamp_to_ns

    assert stamp_to_ns(b"2026-12-04T20:00:01.123456789Z") == 1796414401_123456789
    assert stamp_to_ns(b"2026-12-04T20:00:01.5Z") == 1796414401_500000000
    assert stamp_to_ns(b"2026-12-04T20:00:01Z") == 1796414401_000000000
    assert since_arg(1796414401_000000042) == "1796414401.000000042"
    with pytest.raises(ValueError):
        stamp_to_ns(b"not-a-time")


def test_what_a_logger_writes_is_decided_stream_by_stream() -> None:
    """The engine stamps each stream as it reads its pipe: a stderr line written after stdout lines
    can carry an earlier stamp. Compared across streams (as before), it was dropped by the same
    logger, or by the next one after a kill (the flaky docker logger test)."""
    from agent.logmon.docker import fresh, read_since

    def entry(stream: int, second: int, text: str) -> tuple[int, bytes]:
        return stream, f"2026-12-04T20:00:{second:02d}Z {text}\n".encode()

    log = [entry(1, 10, "a"), entry(1, 30, "b"), entry(2, 20, "late stderr"), entry(1, 40, "c")]
    s = 1796414400_000000000

    def lines(done: dict[int, int]) -> list[tuple[int, bytes]]:
        return [(stream, data) for stream, _, data in fresh(log, done)]

    assert lines({1: 0, 2: 0}) == [(1, b"a\n"), (1, b"b\n"), (2, b"late stderr\n"), (1, b"c\n")]
    # killed after writing stdout up to "b": the stderr line, stamped before "b", is still owed
    assert lines({1: s + 30 * 10**9, 2: 0}) == [(2, b"late stderr\n"), (1, b"c\n")]
    assert lines({1: s + 40 * 10**9, 2: s + 20 * 10**9}) == []
    assert [(st, ns) for st, ns, _ in fresh([(1, b"no stamp here")], {1: 5, 2: 5})] == [(1, 0)]
    assert read_since("00000000000000000030 00000000000000000020\n") == {1: 30, 2: 20}
    assert read_since("00000000000000000030\n") == {1: 30, 2: 30}, "an older logger's one stamp"
    assert read_since("") == read_since("garbage") == {1: 0, 2: 0}


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
