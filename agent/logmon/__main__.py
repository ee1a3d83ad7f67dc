"""`python -m agent.logmon`: a task's stdout and stderr pipes copied into rotated files, as Nomad's logmon.

    python -m agent.logmon --task NAME --logs-fd N --stdout-fd N --stderr-fd N \\
        --max-files N --max-file-size BYTES

Started by agent.runner.logmonhook with three inherited fds: the logs dir (`alloc/<id>/alloc/logs`)
and the task's two FIFOs, opened read-write so that no end is ever seen and a task's restart needs
nothing from logmon. A chunk read is written at once (no buffer: a SIGKILL loses nothing read).
SIGTERM or SIGINT: the pipes are drained, then exit 0. The logs dir removed (the alloc dir deleted
while no agent stopped logmon): exit 0 at the next idle check, so no logmon outlives its alloc.
Exit 2: bad arguments; exit 1: the logs dir unusable (one line on stderr). A failed write (ENOSPC)
is said on stderr, once a second at most, and the chunk dropped, as Nomad's logmon does: logmon
goes on and the task is never blocked by it.

The logs dir is the tasks' (0777) and logmon runs as root: each file is opened by the dir's fd,
without following a link or blocking, and used only as a regular file with one link. A name a task
planted (a link, a FIFO, a dir, a hard link) is skipped for the next index, never written through,
never removed. Standard library only, so that it starts fast; the cutting rules are in rotate.py.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import selectors
import signal
import stat
import sys
import time

from agent.logmon.rotate import index_of, plan_write, to_purge

TYPE_CHECKING = False  # typing costs a few ms at each start; mypy takes the name as true
if TYPE_CHECKING:
    from typing import NoReturn

READ_SIZE = 64 * 1024
DRAIN_FOR = 4.0  # seconds of draining after SIGTERM: the agent SIGKILLs at 5 (a task that never stops)
FULL = "full"
GONE_CHECK = 2.0  # seconds idle between checks that the logs dir still exists (its alloc dir GC'd)
MAX_SKIPS = 1000  # names in the way skipped in one go before giving up (a task can plant many)
_OPEN = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# open() errors that mean a task's name is in the way (skip it), not that the disk or the dir fails
_IN_THE_WAY = {
    errno.ELOOP: "a symbolic link",
    errno.EISDIR: "a directory",
    errno.ENXIO: "a FIFO or socket",
    errno.EAGAIN: "a file with a lease",  # O_NONBLOCK: a lease the task holds does not block us
    errno.EACCES: "a file we may not open",
    errno.EPERM: "a file we may not open",
    errno.ETXTBSY: "a running program",
}


def say(message: str) -> None:
    """One line on stderr; a broken stderr (the agent's terminal gone) must not end logmon."""
    with contextlib.suppress(OSError):
        os.write(2, f"logmon: {message}\n".encode(errors="replace"))


class Rotator:
    """One stream's files `<base>.N` in the logs dir (`dfd`), written as Nomad's FileRotator."""

    def __init__(self, dfd: int, base: str, max_files: int, file_size: int) -> None:
        self.dfd, self.base, self.max_files, self.file_size = dfd, base, max_files, file_size
        self.fd, self.size = -1, 0
        self._last_said = -1.0
        # Nomad's lastFile: carry on in the highest file present (a restarted logmon appends to it)
        self.idx = max(self._indexes(regular_only=False), default=0)
        self._move_to(self.idx)

    def _indexes(self, regular_only: bool) -> list[int]:
        found = []
        with os.scandir(self.dfd) as entries:  # the dir fd: the dir's path may have been replaced
            for entry in entries:
                idx = index_of(entry.name, self.base)
                if idx is None or entry.is_dir(follow_symlinks=False):
                    continue
                if regular_only and not entry.is_file(follow_symlinks=False):
                    continue
                found.append(idx)
        return found

    def _open(self, name: str) -> tuple[int, int, str]:
        """(fd, size, "") when `name` is ours to append to, else (-1, 0, why it is passed over)."""
        try:
            fd = os.open(name, _OPEN, 0o644, dir_fd=self.dfd)
        except OSError as exc:
            if exc.errno in _IN_THE_WAY:
                return -1, 0, _IN_THE_WAY[exc.errno]
            raise
        st = os.fstat(fd)
        why = "" if stat.S_ISREG(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a file"
        if not why and st.st_nlink != 1:
            why = f"a hard link ({st.st_nlink} names)"
        if not why and st.st_size >= self.file_size:
            why = FULL  # Nomad's nextFile passes over full files too, silently
        if why:
            os.close(fd)
            return -1, 0, why
        os.set_blocking(fd, True)  # O_NONBLOCK was for the open only (a FIFO, a lease)
        return fd, st.st_size, ""

    def _move_to(self, idx: int) -> bool:
        """The first file from index `idx` on that is ours and not full becomes the current one."""
        skipped: list[str] = []
        for i in range(idx, idx + MAX_SKIPS):
            name = f"{self.base}.{i}"
            try:
                fd, size, why = self._open(name)
            except OSError as exc:  # the disk or the dir fails (ENOSPC, ENAMETOOLONG): try later
                self._say_limited(f"{name}: {exc.strerror}: output dropped")
                return False
            if fd < 0:
                if why != FULL:
                    skipped.append(f"{name} ({why})")
                continue
            if skipped:
                say(f"{', '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''}: skipped, writing {name}")
            if self.fd >= 0:
                os.close(self.fd)
            self.fd, self.idx, self.size = fd, i, size
            return True
        self._say_limited(f"{self.base}.{idx} to .{idx + MAX_SKIPS - 1}: all in the way: output dropped")
        return False

    def _purge(self) -> None:
        """Nomad's purgeOldFiles: the oldest go so that `max_files` remain; only our regular files."""
        try:
            for idx in to_purge(self._indexes(regular_only=True), self.max_files):
                if idx != self.idx:  # a task's file with a higher index must not cost us the current one
                    self._remove(f"{self.base}.{idx}")
        except OSError as exc:  # logmon goes on: the next rotation purges again
            self._say_limited(f"{self.base}: {exc.strerror}: old files not purged")

    def _remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            # unlink never follows a link nor removes a dir: a swap since the listing is harmless
            if stat.S_ISREG(os.stat(name, dir_fd=self.dfd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=self.dfd)

    def _say_limited(self, message: str) -> None:
        now = time.monotonic()
        if self._last_said < 0 or now - self._last_said >= 1.0:
            self._last_said = now
            say(message)

    def write(self, data: bytes) -> None:
        """`data` into the files; what cannot be written is dropped (and said), never retried."""
        if self.fd < 0 and not self._move_to(self.idx):
            return
        for rotate, piece in plan_write(self.size, self.file_size, data):
            if rotate:
                if not self._move_to(self.idx + 1):
                    return
                self._purge()
            if not self._write_all(piece):
                return

    def _write_all(self, piece: bytes) -> bool:
        view = memoryview(piece)
        while view:
            try:
                n = os.write(self.fd, view)
            except OSError as exc:
                self._say_limited(f"{self.base}.{self.idx}: {exc.strerror}: output dropped")
                return False
            self.size += n
            view = view[n:]
        return True


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def _fd(text: str) -> int:
    try:
        value = int(text)
        os.fstat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an fd number") from None
    except (OSError, OverflowError):
        raise argparse.ArgumentTypeError(f"fd {text} is not open") from None
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not argparse's usage block: the agent logs what logmon says line by line."""
        say(f"{message} (see --help)")
        sys.exit(2)


def parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(
        prog="python -m agent.logmon",
        description="Copy a task's stdout and stderr pipes into rotated files (Nomad's logmon).",
    )
    p.add_argument("--task", required=True, help="the task's name: files are TASK.stdout.N, TASK.stderr.N")
    p.add_argument("--logs-fd", type=_fd, required=True, help="an open fd of the logs dir")
    p.add_argument("--stdout-fd", type=_fd, required=True, help="an open fd of the stdout FIFO")
    p.add_argument("--stderr-fd", type=_fd, required=True, help="an open fd of the stderr FIFO")
    p.add_argument("--max-files", type=_count, default=10, help="files kept per stream (10)")
    p.add_argument("--max-file-size", type=_count, default=10 * 1024 * 1024, help="bytes per file (10 MiB)")
    args = p.parse_args(argv)
    if not args.task or "/" in args.task or args.task in (".", ".."):
        p.error(f"--task {args.task!r}: not a task name")
    if len({args.logs_fd, args.stdout_fd, args.stderr_fd}) != 3:
        p.error("--logs-fd, --stdout-fd and --stderr-fd must be three different fds")
    if not stat.S_ISDIR(os.fstat(args.logs_fd).st_mode):
        p.error(f"--logs-fd {args.logs_fd}: not a directory")
    return args


def _copy(fd: int, rotator: Rotator) -> int | None:
    """Bytes copied by one read of `fd`: 0 at its end (no writer left), None when it is empty."""
    try:
        data = os.read(fd, READ_SIZE)
    except BlockingIOError:
        return None
    if data:
        rotator.write(data)
    return len(data)


class Stop:
    """SIGTERM and SIGINT set `asked` and wake the select (`wake`): no race between check and wait."""

    def __init__(self) -> None:
        self.asked = False
        self.wake, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._ask)
        signal.signal(signal.SIGINT, self._ask)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the agent's session ending is not a stop

    def _ask(self, signum: int, frame: object) -> None:
        self.asked = True


def dir_gone(dfd: int) -> bool:
    """The logs dir was removed (its alloc dir GC'd while no agent stopped us): no link left to it."""
    return os.fstat(dfd).st_nlink == 0


def serve(rotators: dict[int, Rotator], stop: Stop, logs_fd: int) -> None:
    """Copy until asked to stop or the logs dir is removed, then drain what the pipes hold."""
    sel = selectors.DefaultSelector()
    sel.register(stop.wake, selectors.EVENT_READ)
    for fd in rotators:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    while not stop.asked:
        ready = sel.select(timeout=GONE_CHECK)
        if not ready and dir_gone(logs_fd):
            say("the logs dir was removed: nothing left to write to, exiting")
            return
        for key, _ in ready:
            if key.fd == stop.wake:
                with contextlib.suppress(BlockingIOError):
                    os.read(stop.wake, 512)
            elif _copy(key.fd, rotators[key.fd]) == 0:  # an fd opened read-only whose writers left
                sel.unregister(key.fd)
    # what the task wrote before it was stopped lands: each pipe is read until it is empty
    deadline = time.monotonic() + DRAIN_FOR
    for fd, rotator in rotators.items():
        while time.monotonic() < deadline and _copy(fd, rotator):
            pass


def main(argv: list[str] | None = None) -> int:
    stop = Stop()  # first: a SIGTERM while starting still ends in a drain and exit 0
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        rotators = {
            args.stdout_fd: Rotator(args.logs_fd, f"{args.task}.stdout", args.max_files, args.max_file_size),
            args.stderr_fd: Rotator(args.logs_fd, f"{args.task}.stderr", args.max_files, args.max_file_size),
        }
        serve(rotators, stop, args.logs_fd)
    except OSError as exc:
        say(f"{exc.strerror or exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
