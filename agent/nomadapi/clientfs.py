"""Nomad's client file system endpoints (command/agent/fs_endpoint.go) for this node's allocs:
read the alloc dir (`/v1/client/fs/{ls,stat,cat,readat,stream}/:alloc`) and the tasks' logs
(`/v1/client/fs/logs/:alloc`).

The alloc dir is read by agent.nomadapi.allocfs (by dir fd, never following a link, never leaving
the alloc dir); logs are the tasks' own (agent.command.logs), served as Nomad serves them: a stream of
StreamFrame JSON objects, or the bytes themselves with `plain=true`; `follow=true` keeps the stream
open, sending what the task writes as it comes (and an empty frame every HEARTBEAT seconds).
An adopted alloc's files and logs are read as a managed one's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Idle, Response, Streamed, pulled, query_params
from agent.command.logs import (
    FOLLOW_POLL,
    STREAMS,
    LogChunk,
    LogSource,
    adopted_log_source,
    log_source,
    read_log,
)
from agent.nomadapi import allocfs, fsjson
from agent.nomadapi.context import Allocs, NodeParts, OnLoop, find_alloc
from agent.nomadapi.http import HttpError, answer

MAX_READ = 8 * 1024 * 1024  # bytes of one cat/readat answer
FRAME_BYTES = 64 * 1024  # bytes of log per frame
HEARTBEAT = 5.0  # seconds a followed stream waits for new bytes before an empty frame


class FsPort(OnLoop, Allocs, NodeParts, Protocol):
    """The allocs (managed and adopted) found on the loop, and the node's data dir and drivers."""


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0", ""):
        raise HttpError(400, f"{name}={value[:32]!r}: true or false")
    return value in ("true", "1", "")


def _count(params: dict[str, str], name: str, default: int) -> int:
    raw = params.get(name, "")
    if not raw:
        return default
    if not raw.lstrip("-").isdigit() or len(raw) > 19:
        raise HttpError(400, f"{name}={raw[:32]!r}: a whole number of bytes")
    return int(raw)


def fs_routes(api: FsPort) -> list[tuple[str, str, Handler]]:
    def alloc_dir(ref: str) -> Path:
        def find() -> str:
            adopted = api.adoption.find(ref)
            return adopted.id if adopted is not None else str(find_alloc(api, ref).id)

        return api.deps.data_dir / "alloc" / api.call(find)

    def path_param(required: bool = True) -> str:
        """`?path=`: "/" when ls is given none; stat, cat, readat and stream need one (Nomad's 400)."""
        path = query_params().get("path", "")
        if not path and required:
            raise HttpError(400, "must provide a file name")
        return path or "/"

    def ls(groups: tuple[str, ...], body: bytes) -> Response:
        where = alloc_dir(unquote(groups[0]))
        entries = _fs(lambda: allocfs.listdir(where, path_param(required=False)))
        return answer([_info(e) for e in entries])

    def stat_(groups: tuple[str, ...], body: bytes) -> Response:
        where = alloc_dir(unquote(groups[0]))
        return answer(_info(_fs(lambda: allocfs.stat(where, path_param()))))

    def cat(groups: tuple[str, ...], body: bytes) -> Response:
        where = alloc_dir(unquote(groups[0]))
        data = _fs(lambda: allocfs.read(where, path_param(), 0, MAX_READ), missing=400)
        return 200, "text/plain; charset=utf-8", data

    def stream(groups: tuple[str, ...], body: bytes) -> Streamed:
        """A file of the alloc dir as StreamFrames from `offset` (`origin=end`: back from its end),
        following what is appended (`follow`, Nomad's default: true)."""
        params = query_params()
        where = alloc_dir(unquote(groups[0]))
        path = path_param()
        offset = _count(params, "offset", 0)
        origin = params.get("origin", "start")
        if origin not in ("start", "end") or offset < 0:
            raise HttpError(400, f'origin={origin[:32]!r}: "start" or "end", and offset a byte count')
        follow = _flag({"follow": params.get("follow", "true")}, "follow")
        found = _fs(lambda: allocfs.stat(where, path), missing=400)
        if found.is_dir:  # as Nomad's FileSystem.Stream
            raise HttpError(400, f"file {json.dumps(path)} is a directory")
        size = found.size
        start = max(0, size - offset) if origin == "end" else offset
        return Streamed(200, "application/json", _file_frames(where, path, start, follow, pulled()))

    def readat(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        where = alloc_dir(unquote(groups[0]))
        offset = _count(params, "offset", 0)
        limit = _count(params, "limit", MAX_READ)
        if offset < 0 or limit < 0:
            raise HttpError(400, "offset and limit must not be negative")
        data = _fs(lambda: allocfs.read(where, path_param(), offset, min(limit, MAX_READ)), missing=400)
        return 200, "text/plain; charset=utf-8", data

    return [
        ("GET", r"/v1/client/fs/ls/([^/]+)", ls),
        ("GET", r"/v1/client/fs/stat/([^/]+)", stat_),
        ("GET", r"/v1/client/fs/cat/([^/]+)", cat),
        ("GET", r"/v1/client/fs/readat/([^/]+)", readat),
        ("GET", r"/v1/client/fs/stream/([^/]+)", stream),
        ("GET", r"/v1/client/fs/logs/([^/]+)", _logs(api)),
    ]


def _fs(fn: Any, missing: int = 404) -> Any:
    """`fn`'s answer; its FsError as Nomad's code: a path that does not exist is a 404 for ls and stat
    (FileSystem.List/Stat: ErrNoSuchFileOrDirectory) and a 400 for cat, readat and stream (`missing`:
    FileSystem.Stream answers every Stat error of its path 400); a path refused is a 400."""
    try:
        return fn()
    except allocfs.FsNotFound as exc:
        raise HttpError(missing, str(exc)) from None
    except allocfs.FsError as exc:
        raise HttpError(400, str(exc)) from None


def _info(e: allocfs.Entry) -> dict[str, Any]:
    return fsjson.file_info(e.name, e.is_dir, e.size, e.mode, e.mod_time)


def _logs(api: FsPort) -> Handler:
    def logs(groups: tuple[str, ...], body: bytes) -> Response | Streamed:
        params = query_params()
        ref = unquote(groups[0])
        name = params.get("task", "")
        stream = params.get("type", "")
        if not name:
            raise HttpError(400, "must include task name")
        if stream not in STREAMS:
            raise HttpError(
                400,
                "must include type as stdout or stderr"
                if not stream
                else f"type={stream[:32]!r}: stdout or stderr",
            )
        origin = params.get("origin", "start")
        if origin not in ("start", "end"):
            raise HttpError(400, f'origin={origin[:32]!r}: "start" or "end"')
        offset = _count(params, "offset", 0)
        if offset < 0:
            raise HttpError(400, f"offset={offset}: a byte count (origin=end counts back from the end)")
        follow, plain = _flag(params, "follow"), _flag(params, "plain")

        def resolve() -> LogSource:
            adopted = api.adoption.find(ref)
            if adopted is not None:
                at = next((t for t in adopted.tasks if t.role != "pause" and t.task == name), None)
                if at is None:  # Nomad's client answers 400 here (client/fs_endpoint.go), not 404
                    raise HttpError(400, f"unknown task name {json.dumps(name)}")
                alloc_dir = api.deps.data_dir / "alloc" / adopted.id
                drivers = api.drivers.all().values()
                return adopted_log_source(drivers, alloc_dir, at.task, at.kind, at.target, stream)
            r = find_alloc(api, ref)
            task = next((t for t in r.group.tasks if t.name == name), None)
            if task is None:
                raise HttpError(400, f"unknown task name {json.dumps(name)}")
            handle = r.state.handle(task.name)
            return log_source(
                r.driver(task), r.alloc_dir, task.name, handle.id if handle else None, stream, r.d.bugs
            )

        source = api.call(resolve)
        file = f"alloc/logs/{name}.{stream}.0"
        # The first read here, before the status is sent: a log that cannot be read (a symlink or a
        # FIFO the task planted, its container gone, the engine not answering) is an error status,
        # as Nomad answers an error that comes before any output, not a 200 whose stream breaks.
        first = read_log(source, offset, from_end=origin == "end", limit=FRAME_BYTES)
        return Streamed(
            200,
            "text/plain; charset=utf-8" if plain else "application/json",
            _log_chunks(source, first, follow, plain, file, pulled()),
        )

    return logs


def _log_chunks(
    source: LogSource, chunk: LogChunk, follow: bool, plain: bool, file: str, served: bool = False
) -> Iterator[bytes | Idle]:
    """What the log holds from its first read `chunk` on, then, when following, what is written
    next; each piece as bytes (plain) or a StreamFrame. `served`: a server pulls it, and waits out
    the follow's polls on its loop (Idle) rather than in a thread."""
    while True:
        if chunk.data:
            if plain:
                yield chunk.data
            else:
                # Offset: where in its file the frame's data ends, as Nomad's streamFile sends it
                at_file = chunk.offset if chunk.file_offset is None else chunk.file_offset
                frame = fsjson.stream_frame(at_file + len(chunk.data), chunk.data, chunk.file or file)
                yield json.dumps(frame).encode()
        elif not follow:
            return
        else:
            yield b"" if plain else b"{}"  # a heartbeat: Nomad sends an empty frame while idle
        at, resume = chunk.next_offset, chunk.resume
        if chunk.data and len(chunk.data) == FRAME_BYTES:
            chunk = read_log(source, at, limit=FRAME_BYTES, resume=resume)
            continue
        if resume is not None and not follow:  # a file log: the next file may hold more
            chunk = read_log(source, at, limit=FRAME_BYTES, resume=resume)
            if chunk.data:
                continue
            return
        if not follow:
            return
        if served:
            chunk = yield from _follow(source, at, resume)
        else:
            chunk = read_log(source, at, limit=FRAME_BYTES, follow=True, wait=HEARTBEAT, resume=resume)


def _follow(source: LogSource, at: int, resume: tuple[int, int] | None) -> Generator[Idle, None, LogChunk]:
    """read_log's follow (a look every FOLLOW_POLL seconds for up to HEARTBEAT), each pause an Idle."""
    deadline = time.monotonic() + HEARTBEAT
    chunk = read_log(source, at, limit=FRAME_BYTES, resume=resume)
    at, resume = chunk.next_offset, chunk.resume
    while not chunk.data and not chunk.reset and time.monotonic() < deadline:
        yield Idle(FOLLOW_POLL)
        chunk = read_log(source, at, limit=FRAME_BYTES, resume=resume)
    return chunk


FILE_POLL = 0.25  # seconds between looks at a followed file for appended bytes


def _file_frames(
    alloc_dir: Path, path: str, at: int, follow: bool, served: bool = False
) -> Iterator[bytes | Idle]:
    """Frames of what the file holds from `at`; when following, of what is appended (a heartbeat
    `{}` each HEARTBEAT seconds without any), until the file goes or the client does."""
    idle_since = time.monotonic()
    while True:
        try:
            data = allocfs.read(alloc_dir, path, at, FRAME_BYTES)
        except allocfs.FsError:
            return  # the file went (or became something else): the stream ends
        if data:
            yield json.dumps(fsjson.stream_frame(at, data, path.lstrip("/"))).encode()
            at += len(data)
            idle_since = time.monotonic()
            continue
        if not follow:
            return
        if time.monotonic() - idle_since >= HEARTBEAT:
            yield b"{}"
            idle_since = time.monotonic()
        yield from Idle(FILE_POLL).waited(served)  # polling the file for appended bytes (no notification)
