"""`fieldlab-agent alloc logs`: a task's stdout or stderr from Nomad's
`GET /v1/client/fs/logs/:alloc?task=&type=stdout|stderr`, as `nomad alloc logs` reads it.

- the whole log: `plain=true`, the bytes as they are, written as they come;
- `-tail`: `origin=end&offset=N` (N: -c bytes, or a window in which the last -n lines are found);
- `-f`: `follow=true`, Nomad's StreamFrames (`{"Offset", "Data": <base64>, "File"}`, one JSON
  object after another, `{}` heartbeats) until Ctrl-C; from the start, or with -tail from the end in
  the same request (-n: the last lines of what comes first, as Nomad's CLI). A frame of the same file
  that starts before where the last one ended means the log started again (a docker task's new
  container): said on stderr."""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlencode

from agent.cli.calls import Nomad, q
from agent.cli.format import last_lines
from agent.cli.session import write_out
from agent.errors import AgentError

TAIL_WINDOW = 64 * 1024  # bytes read back from the end to find -n lines
_DECODER = json.JSONDecoder()


def frames(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a stream of StreamFrames, however the pieces cut them (pure)."""
    buffer = ""
    pending = b""
    for chunk in chunks:
        pending += chunk
        try:
            buffer += pending.decode()
            pending = b""
        except UnicodeDecodeError:  # a piece ends inside a character: wait for the rest
            continue
        while True:
            text = buffer.lstrip()
            if not text:
                buffer = ""
                break
            try:
                obj, end = _DECODER.raw_decode(text)
            except ValueError:
                buffer = text  # an object cut in two: the next piece completes it
                break
            buffer = text[end:]
            if isinstance(obj, dict):
                yield obj
    if (buffer + pending.decode(errors="replace")).strip():
        raise AgentError("the log stream ended inside a frame")


def frame_data(frame: dict[str, Any]) -> tuple[int, bytes]:
    """(offset, bytes) of one StreamFrame; (offset, b"") for a heartbeat."""
    try:
        return int(frame.get("Offset") or 0), base64.b64decode(str(frame.get("Data") or ""), validate=True)
    except (binascii.Error, ValueError):
        raise AgentError("the agent sent a log frame whose Data is not base64") from None


def show(data: bytes) -> None:
    write_out(sys.stdout, data)


TAIL_QUIET = 0.5  # seconds without new bytes that end a followed tail's first window (the backlog came)
TAIL_SETTLE = 1.0  # seconds after the first piece that end it however busy the log (Nomad's CLI: 1 s)
LOOK = 0.1  # seconds of each wait for the next piece: short, so Ctrl-C is seen at once


def print_logs(nomad: Nomad, args: argparse.Namespace, alloc_id: str, task: str) -> int:
    stream = "stderr" if args.stderr else "stdout"
    base = f"/v1/client/fs/logs/{q(alloc_id)}?"
    params: dict[str, str] = {"task": task, "type": stream}
    what = f"the {stream} of task {task} in alloc {alloc_id[:8]}"

    def get(**more: str) -> Iterator[bytes]:
        return nomad.stream(base + urlencode({**params, **more}), what)

    try:
        if not args.tail and not args.follow:
            for data in get(plain="true"):
                show(data)
            return 0
        back = str(args.bytes if args.bytes is not None else TAIL_WINDOW)
        if not args.follow:
            data = b"".join(get(origin="end", offset=back, plain="true"))
            show(data if args.bytes is not None else last_lines(data, args.lines))
            return 0
        # One followed request, as Nomad's CLI makes it: from the end when tailing, else the start.
        # Ctrl-C ends it there and then: the stream's reader may sit in a TLS read that an
        # interpreter's shutdown would wait on, so the process exits at once, output flushed.
        signal.signal(signal.SIGINT, _quit)
        more = {"origin": "end", "offset": back} if args.tail else {"offset": "0"}
        datas = followed(frames(get(follow="true", **more)), stream)
        if args.tail and args.bytes is None:
            datas = tail_lines(datas, args.lines)
        for data in datas:
            show(data)
        return 0
    except KeyboardInterrupt:
        return 0


def _quit(signum: int, frame: object) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(0)


def followed(stream_frames: Iterable[dict[str, Any]], stream: str) -> Iterator[bytes]:
    """The data of followed frames; None for a heartbeat (the tail window's clock). A frame of the
    same file that starts before where the last one ended means the log started again (a docker
    task's new container): said on stderr. Frames of the next file (a rotation) go on as they are."""
    file, at = "", 0
    for frame in stream_frames:
        end, data = frame_data(frame)
        if not data:
            yield b""
            continue
        name = str(frame.get("File") or "")
        if name == file and end - len(data) < at:
            print(f"fieldlab-agent: the {stream} log started again (a new container)", file=sys.stderr)
        file, at = name, end
        yield data


def tail_lines(
    datas: Iterable[bytes], n: int, settle: float = TAIL_SETTLE, quiet_end: float = TAIL_QUIET
) -> Iterator[bytes]:
    """The last `n` lines of what comes first, then everything as it comes (as Nomad's CLI
    LineLimitReader). What comes first ends at a heartbeat, after `quiet_end` seconds with nothing
    new, or `settle` seconds after its first piece however busy the task is (a task that logs every
    second never falls quiet: its last lines come out at once all the same). The stream is read by a
    daemon thread; this one waits in short timed looks, so that Ctrl-C ends it at once."""
    q_: queue.Queue[bytes | None] = queue.Queue()

    def pump() -> None:
        try:
            for d in datas:
                q_.put(d)
        finally:
            q_.put(None)

    threading.Thread(target=pump, name="logs-follow", daemon=True).start()
    window, last = b"", time.monotonic()
    ends = last + settle  # nothing at all for `settle` seconds: an idle log (as Nomad's CLI reads it)
    while (now := time.monotonic()) < ends and (not window or now - last < quiet_end):
        try:
            got = q_.get(timeout=LOOK)
        except queue.Empty:
            continue
        if got is None:
            yield last_lines(window, n)
            return
        if not got:
            break  # a heartbeat: the log has been idle
        if not window:
            ends = time.monotonic() + settle
        window, last = window + got, time.monotonic()
    yield last_lines(window, n)
    while True:
        try:
            got = q_.get(timeout=LOOK)
        except queue.Empty:
            continue
        if got is None:
            return
        if got:
            yield got
