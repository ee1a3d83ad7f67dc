"""`python -m agent.logmon.docker`: a docker task's output into its logmon's pipes, as Nomad's
docker driver does with its docker_logger: the container's log, followed through the engine's API,
written to the task's stdout and stderr FIFOs, from which the task's logmon makes the rotated files
`alloc/logs/<task>.std{out,err}.N`. So a docker task's log lives in the alloc dir like any other,
across its container's restarts (each new container gets a logger of its own).

    python -m agent.logmon.docker --container ID --stdout-fd N --stderr-fd N --since-file PATH

It asks for the log with timestamps and keeps the last one it wrote of each stream in `--since-file`
(root's, in the alloc's .logmon dir): a logger started again for the same container (the agent
found the old one gone) asks from the older of the two and skips, stream by stream, what it already
wrote, so no line is lost or written twice. Stamps are in order within a stream, not across the
two (the engine stamps each stream as it reads its pipe: a stderr line written after stdout lines
may carry an earlier stamp than they do), so nothing is ever compared across streams. It ends
(exit 0) when the engine ends the log: the container stopped. Exit 1: the engine did not answer or
the container is gone (one line on stderr). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from urllib.parse import quote, urlencode

DEFAULT_SOCKET = "/var/run/docker.sock"
HEADER = struct.Struct(">BxxxL")  # the multiplexed stream: stream (1 stdout, 2 stderr), size


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("docker", timeout=None)
        self.path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        self.sock = s


def engine_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    return host[len("unix://") :] if host.startswith("unix://") else DEFAULT_SOCKET


def stamp_to_ns(stamp: bytes) -> int:
    """Nanoseconds since the epoch of the engine's RFC 3339 timestamp (always UTC, `Z`, up to 9
    fractional digits)."""
    text = stamp.decode("ascii")
    main, _, frac = text.rstrip("Z").partition(".")
    whole = datetime.fromisoformat(main + "+00:00")
    return int(whole.timestamp()) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def since_arg(ns: int) -> str:
    """The engine's `since` (seconds.nanoseconds)."""
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def frames(body: http.client.HTTPResponse, multiplexed: bool) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of the log as it comes: 1 stdout, 2 stderr; a raw stream (a tty) is stdout,
    one line at a time."""
    if not multiplexed:
        while line := body.readline():
            yield 1, line
        return
    while True:
        head = body.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        kind, size = HEADER.unpack(head)
        payload = body.read(size)
        if len(payload) < size:
            return
        yield kind, payload


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class EngineError(Exception):
    pass


def _get(args: argparse.Namespace, path: str) -> http.client.HTTPResponse:
    """A GET on the engine's socket; EngineError naming what failed unless it answers 200."""
    conn = UnixHTTPConnection(args.socket)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
    except OSError as exc:
        raise EngineError(f"the engine at {args.socket}: {exc}") from None
    if resp.status != 200:
        said = resp.read(400).decode(errors="replace")
        with contextlib.suppress(ValueError, KeyError, TypeError):
            said = json.loads(said)["message"]
        raise EngineError(f"container {args.container[:12]}: {resp.status} {said}")
    return resp


def read_since(text: str) -> dict[int, int]:
    """The since-file's "<stdout stamp> <stderr stamp>" (one stamp: an older logger's, for both)."""
    try:
        stamps = [int(x) for x in text.split()]
    except ValueError:
        return {1: 0, 2: 0}
    if len(stamps) == 1:
        return {1: stamps[0], 2: stamps[0]}
    if len(stamps) == 2:
        return {1: stamps[0], 2: stamps[1]}
    return {1: 0, 2: 0}


def fresh(entries: Iterable[tuple[int, bytes]], done: dict[int, int]) -> Iterator[tuple[int, int, bytes]]:
    """(stream, stamp, line) of each log entry ("<stamp> <line>") that the logger before this one
    did not write: stamped after `done[stream]`, that stream's last written (0: none). Any other
    stream than stderr (2) is stdout (1); a line without a stamp is written as it is (stamp 0)."""
    for kind, payload in entries:
        stream = 2 if kind == 2 else 1
        stamp, _, data = payload.partition(b" ")
        try:
            ns = stamp_to_ns(stamp)
        except ValueError:
            ns, data = 0, payload
        if ns and ns <= done[stream]:
            continue
        yield stream, ns, data


def follow(args: argparse.Namespace) -> int:
    # The last timestamp written of each stream, at offset 0 of the since-file (one fixed-width
    # pwrite a line: a logger killed between a line and its stamp writes that line once more, never
    # loses one).
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    since_fd = os.open(args.since_file, flags, 0o600)
    done = read_since(os.pread(since_fd, 64, 0).decode(errors="replace"))
    last = dict(done)
    query = {"follow": 1, "stdout": 1, "stderr": 1, "timestamps": 1}
    if min(done.values()):  # from the older stream's last line (a stream with none: from the start)
        query["since"] = since_arg(min(done.values()))  # type: ignore[assignment]
    try:
        # The stream is multiplexed unless the container has a tty (the engine's Content-Type says
        # raw-stream either way before API 1.42: the container's config is what tells).
        inspect = _get(args, f"/containers/{quote(args.container)}/json")
        multiplexed = not json.loads(inspect.read()).get("Config", {}).get("Tty", False)
        resp = _get(args, f"/containers/{quote(args.container)}/logs?{urlencode(query)}")
    except EngineError as exc:
        print(f"docker logger: {exc}", file=sys.stderr)
        return 1
    fds = {1: args.stdout_fd, 2: args.stderr_fd}
    for stream, ns, data in fresh(frames(resp, multiplexed), done):
        write_all(fds[stream], data)
        if ns > last[stream]:
            last[stream] = ns
            os.pwrite(since_fd, f"{last[1]:020d} {last[2]:020d}\n".encode(), 0)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agent.logmon.docker", description=__doc__.splitlines()[0])
    p.add_argument("--container", required=True)
    p.add_argument("--stdout-fd", type=int, required=True)
    p.add_argument("--stderr-fd", type=int, required=True)
    p.add_argument("--since-file", required=True)
    p.add_argument("--socket", default=engine_socket())
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    for fd in (args.stdout_fd, args.stderr_fd):
        try:
            os.fstat(fd)
        except OSError:
            p.error(f"fd {fd} is not open")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return follow(args)


if __name__ == "__main__":
    sys.exit(main())
