"""Nomad's client endpoints for this node: restart, signal and GC an allocation, GC the node, and
read the alloc dir (`/v1/client/fs/{ls,stat,cat,readat,logs}/:alloc`).

The alloc dir is read by agent.nomadapi.allocfs (by dir fd, never following a link, never leaving
the alloc dir); logs are the tasks' own (agent.logs), served as Nomad serves them: a stream of
StreamFrame JSON objects, or the bytes themselves with `plain=true`; `follow=true` keeps the stream
open, sending what the task writes as it comes (and an empty frame every HEARTBEAT seconds).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from agent.api.server import Handler, Response, Streamed, query_params
from agent.errors import Conflict, NotFound
from agent.logs import STREAMS, LogChunk, LogSource, adopted_log_source, log_source, read_log
from agent.nomadapi import allocfs, fsjson
from agent.nomadapi.hoststats import host_stats
from agent.nomadapi.http import HttpError, answer, body_json, meta_headers
from agent.nomadapi.signals import NOT_SENT, signal_error, signal_name
from agent.nomadapi.usage import alloc_usage, no_usage
from agent.taskdecisions import plan_user_restart

if TYPE_CHECKING:
    from agent.core import Core
    from agent.nomadapi.routes import NomadApi

MAX_READ = 8 * 1024 * 1024  # bytes of one cat/readat answer
FRAME_BYTES = 64 * 1024  # bytes of log per frame
HEARTBEAT = 5.0  # seconds a followed stream waits for new bytes before an empty frame


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


def managed_alloc(core: Core, ref: str) -> Any:
    """On the loop: the managed alloc `ref` names, to act in (restart, signal, exec, GC); an adopted
    one (agent.runner.adopt) is refused with a 409 saying how to end it."""
    from agent.nomadapi.routes import _find_alloc

    adopted = core.adoption.find(ref)
    if adopted is not None:
        raise Conflict(
            f"alloc {adopted.id} is adopted (found running after the state database was lost): the agent "
            f"does not manage it; stop it with `fieldlab-agent alloc stop {adopted.id}`"
        )
    return _find_alloc(core, ref)


def client_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    core = api.core

    def managed(ref: str) -> Any:
        return managed_alloc(core, ref)

    def restart(groups: tuple[str, ...], body: bytes) -> Response:
        data = body_json(body)
        name, all_tasks = data.get("TaskName") or "", data.get("AllTasks") or False
        if not isinstance(name, str):
            raise HttpError(400, '"TaskName" must be a task name')
        if not isinstance(all_tasks, bool):
            raise HttpError(400, '"AllTasks" must be true or false')
        if all_tasks and name:  # Nomad's client refuses it in these words
            raise HttpError(400, "task name cannot be set when restarting all tasks")

        def do() -> None:
            r = managed(unquote(groups[0]))
            if all_tasks:  # finished lifecycle tasks too, from the first stage (Nomad 1.3.4+)
                if not r.alloc_running():
                    raise Conflict(
                        f"Failed to restart: alloc {r.id}: restart of an alloc that should not run"
                    )
                r.user_restart_all()
                return
            if name:
                task = next((t for t in r.group.tasks if t.name == name), None)
                if task is None:
                    raise NotFound(f"Failed to restart task {name!r}: task not found in alloc {r.id}")
                tasks = [task]
            else:
                tasks = list(r.group.tasks)
            names, refused = plan_user_restart([(t.name, r.task_running(t)) for t in tasks], name, core.bugs)
            if refused:
                raise Conflict(f"Failed to restart: alloc {r.id}: {refused}")
            reason = "User requested task to restart" if name else "User requested running tasks to restart"
            for t in tasks:
                if t.name in names:
                    r.user_restart(t, reason)

        core.call(do)
        meta_headers(core.changes.current())
        return answer({})

    def send_signal(groups: tuple[str, ...], body: bytes) -> Response:
        name, sig = _signal_request(body_json(body))

        def do() -> None:
            r = managed(unquote(groups[0]))
            names = [t.name for t in r.group.tasks if r.task_running(t) and (not name or t.name == name)]
            if name and name not in {t.name for t in r.group.tasks}:
                raise NotFound(f"Failed to signal task: {name!r} not found in alloc {r.id}")
            if not names:
                raise Conflict(
                    f"Failed to signal: no running task{' ' + name if name else ''} in alloc {r.id}"
                )
            if sig is None:  # Nomad's drivers' error, in its words (agent.nomadapi.signals)
                raise HttpError(400, signal_error(name, names))
            for n in names:
                r.user_signal(n, sig)

        core.call(do)
        meta_headers(core.changes.current())
        return answer({})

    routes: list[tuple[str, str, Handler]] = [
        ("PUT", r"/v1/client/allocation/([^/]+)/restart", restart),
        ("POST", r"/v1/client/allocation/([^/]+)/restart", restart),
        ("PUT", r"/v1/client/allocation/([^/]+)/signal", send_signal),
        ("POST", r"/v1/client/allocation/([^/]+)/signal", send_signal),
    ]
    return routes + _gc_routes(api, managed) + _fs_routes(api)


def _signal_request(data: dict[str, Any]) -> tuple[str, str | None]:
    """(task, signal name; None: a name Nomad's drivers refuse) of api.AllocSignalRequest's body."""
    name, raw = data.get("Task") or "", data.get("Signal") or "SIGKILL"
    if not isinstance(raw, str):
        raise HttpError(400, f'"Signal" {str(raw)[:32]!r} is not a signal name like SIGHUP')
    if not isinstance(name, str):
        raise HttpError(400, '"Task" must be a task name')
    if raw.upper() == NOT_SENT:
        raise HttpError(400, f'"Signal" {raw!r}: signal 0 (a liveness probe) is not sent to a task here')
    return name, signal_name(raw)


def _gc_routes(api: NomadApi, managed: Any) -> list[tuple[str, str, Handler]]:
    core = api.core

    def gc_alloc(groups: tuple[str, ...], body: bytes) -> Response:
        def do() -> None:
            r = managed(unquote(groups[0]))
            if r.rec.live:
                raise Conflict(f"alloc {r.id} is still running: stop it first (nomad alloc stop {r.id[:8]})")
            core.collector.collect_one(r.id)

        core.call(do)
        return answer({})

    def gc_node(groups: tuple[str, ...], body: bytes) -> Response:
        core.call(lambda: core.gc(force=True))
        return answer({})

    def stats(groups: tuple[str, ...], body: bytes) -> Response:
        """As Nomad's client (allocRunner.LatestAllocStats): the running tasks' usage (`?task=`: that
        task's alone), summed; an alloc with none running (stopped, not yet collected) answers 200
        with zero usage, as Nomad's does until GC."""
        only = query_params().get("task", "")

        def running() -> tuple[str, list[tuple[str, Any, Any]]]:
            r = managed(unquote(groups[0]))
            tasks = [
                (t.name, r.driver(t), h)
                for t in r.group.tasks
                if (not only or t.name == only)
                and r.task_running(t)
                and (h := r.state.handle(t.name)) is not None
            ]
            return r.id, tasks

        alloc_id, tasks = core.call(running)
        found = {}
        for name, driver, handle in tasks:  # off the loop: the engine's stats, cgroup files
            u = driver.usage(alloc_id, name, handle)
            if u is not None:
                found[name] = u
        return answer(alloc_usage(alloc_id, found, api.cpu_samples) if found else no_usage())

    def checks(groups: tuple[str, ...], body: bytes) -> Response:
        """api.AllocCheckStatuses: the last result of each nomad service check (agent.runner.checks)."""
        alloc_id = core.call(lambda: str(managed(unquote(groups[0])).id))
        return answer(core.deps.check_results.of(alloc_id))

    return [
        ("GET", r"/v1/client/allocation/([^/]+)/checks", checks),
        ("GET", r"/v1/client/allocation/([^/]+)/gc", gc_alloc),
        ("PUT", r"/v1/client/allocation/([^/]+)/gc", gc_alloc),
        ("GET", r"/v1/client/allocation/([^/]+)/stats", stats),
        ("GET", r"/v1/client/stats", lambda groups, body: answer(host_stats(core.deps.data_dir))),
        ("GET", r"/v1/client/gc", gc_node),
        ("PUT", r"/v1/client/gc", gc_node),
        ("POST", r"/v1/client/gc", gc_node),
    ]


def _fs_routes(api: NomadApi) -> list[tuple[str, str, Handler]]:
    core = api.core

    def alloc_dir(ref: str) -> Path:
        from agent.nomadapi.routes import _find_alloc

        def find() -> str:
            adopted = core.adoption.find(ref)
            return adopted.id if adopted is not None else str(_find_alloc(core, ref).id)

        return core.deps.data_dir / "alloc" / core.call(find)

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
        return Streamed(200, "application/json", _file_frames(where, path, start, follow))

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


def _logs(api: NomadApi) -> Handler:
    core = api.core

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
            from agent.nomadapi.routes import _find_alloc

            adopted = core.adoption.find(ref)
            if adopted is not None:
                at = next((t for t in adopted.tasks if t.role != "pause" and t.task == name), None)
                if at is None:  # Nomad's client answers 400 here (client/fs_endpoint.go), not 404
                    raise HttpError(400, f"unknown task name {json.dumps(name)}")
                alloc_dir = core.deps.data_dir / "alloc" / adopted.id
                drivers = core.drivers.all().values()
                return adopted_log_source(drivers, alloc_dir, at.task, at.kind, at.target, stream)
            r = _find_alloc(core, ref)
            task = next((t for t in r.group.tasks if t.name == name), None)
            if task is None:
                raise HttpError(400, f"unknown task name {json.dumps(name)}")
            handle = r.state.handle(task.name)
            return log_source(
                r.driver(task), r.alloc_dir, task.name, handle.id if handle else None, stream, r.d.bugs
            )

        source = core.call(resolve)
        file = f"alloc/logs/{name}.{stream}.0"
        # The first read here, before the status is sent: a log that cannot be read (a symlink or a
        # FIFO the task planted, its container gone, the engine not answering) is an error status,
        # as Nomad answers an error that comes before any output, not a 200 whose stream breaks.
        first = read_log(source, offset, from_end=origin == "end", limit=FRAME_BYTES)
        return Streamed(
            200,
            "text/plain; charset=utf-8" if plain else "application/json",
            _log_chunks(source, first, follow, plain, file),
        )

    return logs


def _log_chunks(source: LogSource, chunk: LogChunk, follow: bool, plain: bool, file: str) -> Iterator[bytes]:
    """What the log holds from its first read `chunk` on, then, when following, what is written
    next; each piece as bytes (plain) or a StreamFrame."""
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
        chunk = read_log(source, at, limit=FRAME_BYTES, follow=True, wait=HEARTBEAT, resume=resume)


FILE_POLL = 0.25  # seconds between looks at a followed file for appended bytes


def _file_frames(alloc_dir: Path, path: str, at: int, follow: bool) -> Iterator[bytes]:
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
        time.sleep(FILE_POLL)  # polling the file for appended bytes (no change notification here)
