"""`fieldlab-agent alloc logs`: a task's stdout or stderr from Nomad's
`GET /v1/client/fs/logs/:alloc?task=&type=stdout|stderr`, as `nomad alloc logs` reads it.

- the whole log: `plain=true`, the bytes as they are, written as they come;
- `-tail`: `origin=end&offset=N` (N: -c bytes, or a window in which the last -n lines are found);
- `-f`: `follow=true`, Nomad's StreamFrames (`{"Offset", "Data": <base64>, "File"}`, one JSON
  object after another, `{}` heartbeats) until Ctrl-C; from the start, or from where -tail ended.
  A frame that starts before the offset reached means the log started again (a docker task's new
  container): said on stderr."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
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
        at = 0
        if args.tail:
            back = str(args.bytes if args.bytes is not None else TAIL_WINDOW)
            if not args.follow:
                data = b"".join(get(origin="end", offset=back, plain="true"))
                show(data if args.bytes is not None else last_lines(data, args.lines))
                return 0
            tail = b""
            for frame in frames(get(origin="end", offset=back)):
                offset, data = frame_data(frame)
                if data:
                    tail += data
                    at = offset + len(data)
            show(tail if args.bytes is not None else last_lines(tail, args.lines))
        for frame in frames(get(offset=str(at), follow="true")):
            offset, data = frame_data(frame)
            if not data:
                continue  # a heartbeat
            if offset < at:
                print(f"fieldlab-agent: the {stream} log started again (a new container)", file=sys.stderr)
            show(data)
            at = offset + len(data)
        return 0
    except KeyboardInterrupt:
        return 0
