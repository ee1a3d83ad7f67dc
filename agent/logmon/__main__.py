"""`python -m agent.logmon`: copy a task's stdout and stderr pipes into rotated files.

    python -m agent.logmon --task NAME --logs-fd N --stdout-fd N --stderr-fd N \\
        --max-files N --max-file-size BYTES

The fds are inherited from the agent (agent.runner.logmonhook): the logs dir (`alloc/<id>/alloc/logs`,
opened without following a link) and the task's two FIFOs, opened read-write so that this process
never sees an end while it lives and a task's restart needs nothing from it. SIGTERM or SIGINT: what is
in the pipes is copied, then it exits 0. Exit 2: bad arguments (one line on stderr).

The logs dir is the tasks' to write (0777, as Nomad's). Every file is opened relative to the dir's fd,
without following a link, without blocking, and used only when it is a regular file with one link: a
name a task planted (a link, a FIFO, a dir, a hard link to another file) is skipped for the next
index, never written through, never removed. A write that fails (ENOSPC) is said on stderr (once a
second at most) and the chunk dropped, as Nomad's logmon does: the task is never blocked by it.

Standard library only, so that it starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import signal
import stat
import sys
import time

from agent.logmon.rotate import index_of, plan_write, to_purge

READ_SIZE = 64 * 1024
_OPEN = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def say(message: str) -> None:
    print(f"logmon: {message}", file=sys.stderr, flush=True)


class Rotator:
    """One stream's files in the logs dir (`dfd`): `<base>.N`."""

    def __init__(self, dfd: int, base: str, max_files: int, file_size: int) -> None:
        self.dfd, self.base, self.max_files, self.file_size = dfd, base, max_files, file_size
        self.fd, self.idx, self.size = -1, 0, 0
        self._last_error = 0.0
        present = self._indexes()
        self._open(max(present) if present else 0)

    def _indexes(self) -> list[int]:
        found = []
        for name in os.listdir(self.dfd):
            idx = index_of(name, self.base)
            if idx is not None:
                found.append(idx)
        return found

    def _open(self, idx: int) -> None:
        """The first index from `idx` on whose file is ours to append to (or new) and not full."""
        while True:
            name = f"{self.base}.{idx}"
            try:
                fd = os.open(name, _OPEN, 0o644, dir_fd=self.dfd)
            except OSError as exc:  # a planted link (ELOOP), a dir (EISDIR), ...
                say(f"{name}: {exc.strerror}: not ours, skipped")
                idx += 1
                continue
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                os.close(fd)
                say(f"{name}: not a regular file of ours: skipped")
                idx += 1
                continue
            if st.st_size >= self.file_size:
                os.close(fd)
                idx += 1
                continue
            os.set_blocking(fd, True)
            if self.fd >= 0:
                os.close(self.fd)
            self.fd, self.idx, self.size = fd, idx, st.st_size
            return

    def _purge(self) -> None:
        for idx in to_purge(self._indexes(), self.max_files):
            name = f"{self.base}.{idx}"
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.stat(name, dir_fd=self.dfd, follow_symlinks=False).st_mode):
                    os.unlink(name, dir_fd=self.dfd)

    def write(self, data: bytes) -> None:
        for rotate, piece in plan_write(self.size, self.file_size, data):
            if rotate:
                self._open(self.idx + 1)
                self._purge()
            if not piece:
                continue
            try:
                os.write(self.fd, piece)
            except OSError as exc:
                now = time.monotonic()
                if now - self._last_error >= 1.0:
                    say(f"{self.base}.{self.idx}: {exc.strerror}: output dropped")
                    self._last_error = now
                continue
            self.size += len(piece)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def fd_number(text: str) -> int:
    value = positive(text) if text != "0" else 0
    try:
        os.fstat(value)
    except OSError:
        raise argparse.ArgumentTypeError(f"fd {value} is not open") from None
    return value


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agent.logmon", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--logs-fd", type=fd_number, required=True)
    p.add_argument("--stdout-fd", type=fd_number, required=True)
    p.add_argument("--stderr-fd", type=fd_number, required=True)
    p.add_argument("--max-files", type=positive, default=10)
    p.add_argument("--max-file-size", type=positive, default=10 * 1024 * 1024)
    args = p.parse_args(argv)
    if not args.task or "/" in args.task or args.task in (".", ".."):
        p.error(f"--task {args.task!r}: not a task name")
    return args


def drain(fd: int, rotator: Rotator) -> bool:
    """Copy what `fd` holds now; False when it is empty (EAGAIN)."""
    try:
        data = os.read(fd, READ_SIZE)
    except BlockingIOError:
        return False
    if not data:
        return False
    rotator.write(data)
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    rotators = {
        args.stdout_fd: Rotator(args.logs_fd, f"{args.task}.stdout", args.max_files, args.max_file_size),
        args.stderr_fd: Rotator(args.logs_fd, f"{args.task}.stderr", args.max_files, args.max_file_size),
    }
    sel = selectors.DefaultSelector()
    for fd in rotators:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)  # a signal wakes the select at once
    sel.register(wake_r, selectors.EVENT_READ)
    while not stopping:
        for key, _ in sel.select():
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                continue
            drain(int(key.fd), rotators[int(key.fd)])
    for fd, rotator in rotators.items():  # what the task wrote before it was stopped lands
        while drain(fd, rotator):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
