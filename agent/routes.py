"""The agent's HTTP API routes over the core: jobs, allocations (adopted too), events, restart,
signal, exec, a task's logs and the node.

Handlers are thin: they check the request (every bad input is a 4xx JSON error naming what and
where), look up what they need on the main loop (`core.call`), and do what blocks in their own
thread (reading logs, pinging the docker engine, waiting for an exec). The views are pure
(agent.apiviews, agent.runner.view). Query parameters (the log route's, as Nomad's) are read with
agent.api.query_params in the handler's own thread.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from agent.api import Handler, Response, StreamOpener, json_response, query_params
from agent.apiviews import alloc_counts, job_view
from agent.core import Core, parse_submission
from agent.drivers.base import DriverError, TaskDriver, TaskHandle
from agent.drivers.session import ExecSession
from agent.errors import AgentError, Conflict, InProgress, NotFound, NotRun
from agent.execframes import FrameError, parse_resize
from agent.jobspec import JobspecError
from agent.logs import STREAMS, LogsGone, LogSource, LogsUnavailable, adopted_log_source, log_source, read_log
from agent.model import Task
from agent.nodeinfo import driver_health

if TYPE_CHECKING:
    from agent.runner.alloc import AllocRunner

log = logging.getLogger(__name__)


def _body_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are no UTF-8/16/32
        raise AgentError(f"request body is not JSON: {exc}") from None
    except RecursionError:  # the decoder recurses per [ and {: thousands of them exhaust the stack
        raise AgentError(
            "request body is nested too deeply to read (JSON arrays and objects within each other)"
        ) from None
    if not isinstance(data, dict):
        raise AgentError("request body must be a JSON object")
    return data


def _variables(data: dict[str, Any], source: str) -> dict[str, object]:
    """The request's HCL2 input variables: `"variables": {name: value}`, and Nomad's API spelling
    `"Variables": "<var-file text>"` (HCL `name = value` lines or a JSON object); the object wins."""
    given = data.get("variables")
    if given is not None and not isinstance(given, dict):
        raise AgentError('"variables" must be an object of variable name: value')
    var_file = data.get("Variables")
    if var_file is not None and not isinstance(var_file, str):
        raise AgentError(
            '"Variables" must be a string: the text of a variables file, as Nomad\'s API takes it'
        )
    merged: dict[str, object] = {}
    if var_file and var_file.strip():
        from agent.jobspec.hclvars import parse_var_file  # the HCL parser loads with the first use

        merged.update(parse_var_file(var_file, f"{source} Variables"))
    merged.update(given or {})
    return merged


def _files(data: dict[str, Any]) -> dict[str, str] | None:
    """`"files": {path as written in file(): text}`: what the CLI read for HCL's file() and sent along."""
    given = data.get("files")
    if given is None:
        return None
    if not isinstance(given, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()
    ):
        raise AgentError('"files" must be an object of path: text (what the jobspec\'s file() calls read)')
    return dict(given)


# The agent's own routes, kept under this prefix while its CLI verbs, the e2e harness and the
# benches move to Nomad's API (agent.nomadapi) at Nomad's own paths; then they go.
LEGACY_PREFIX = "/fieldlab"

STOP_MARGIN = 30.0  # seconds a job stop may take past the longest kill_timeout before it answers
EXEC_TIMEOUT = 30.0  # seconds an exec may run when the request does not say
EXEC_MAX_TIMEOUT = 300.0
EXEC_MARGIN = 10.0  # seconds past the exec's own timeout before the handler stops waiting for it
EXEC_MAX_OUTPUT = 1024 * 1024  # characters of an exec's output answered (the rest is cut, and said)

_ALLOC_REF = re.compile(r"[0-9a-f-]{2,36}")
_OFFSET = re.compile(r"[0-9]{1,18}")


def _alloc_ref(raw: str) -> str:
    ref = unquote(raw)
    if not _ALLOC_REF.fullmatch(ref):
        raise AgentError(
            f"alloc id {ref[:64]!r} in the path: give an alloc id or a prefix of at least 2 of its "
            "characters (0-9, a-f, -)"
        )
    return ref


def _task_name(data: dict[str, Any]) -> str | None:
    """The body's optional "task": None when it is left out (every task, or the only one)."""
    name = data.get("task")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise AgentError('"task" must be a task name (a non-empty string), or left out')
    return name


def _task_of(tasks: Sequence[Task], name: str | None, alloc_id: str) -> Task:
    """The task called `name`; with no name, the group's only task."""
    names = ", ".join(t.name for t in tasks)
    if name is None:
        if len(tasks) == 1:
            return tasks[0]
        raise AgentError(f"alloc {alloc_id} has tasks {names}: say which one")
    task = next((t for t in tasks if t.name == name), None)
    if task is None:
        raise NotFound(f"alloc {alloc_id} has no task {name!r} (its tasks: {names})")
    return task


def _managed(core: Core, ref: str, action: str) -> AllocRunner:
    """On the loop: the managed alloc `ref` names; an adopted one cannot be acted on (409)."""
    adopted = core.adoption.find(ref)
    if adopted is not None:
        raise Conflict(
            f"alloc {adopted.id} is adopted (found running after the state database was lost): "
            f"the agent does not manage it, so it cannot {action} in it; "
            f"stop it with `fieldlab-agent alloc stop {adopted.id}` (POST /v1/allocation/{adopted.id}/stop)"
        )
    return core.runner(ref)


def _exec_request(data: dict[str, Any]) -> tuple[list[str], float]:
    cmd = data.get("cmd")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd) or not cmd[0]:
        raise AgentError('"cmd" must be the command as a non-empty list of strings, e.g. ["ls", "-l"]')
    timeout = data.get("timeout", EXEC_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= EXEC_MAX_TIMEOUT
    ):
        raise AgentError(f'"timeout" must be seconds, more than 0 and at most {EXEC_MAX_TIMEOUT:g}')
    return list(cmd), float(timeout)


_LOG_PARAMS = ("task", "type", "offset", "origin", "follow", "plain")
_TRUE, _FALSE = frozenset({"true", "1", ""}), frozenset({"false", "0"})


@dataclass(frozen=True)
class _LogRequest:
    task: str | None
    stream: str
    offset: int
    from_end: bool
    follow: bool
    plain: bool


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in _TRUE | _FALSE:
        raise AgentError(f"query parameter {name}={value[:32]!r}: true or false")
    return value in _TRUE


def _log_request(params: dict[str, str]) -> _LogRequest:
    """Nomad's /v1/client/fs/logs/<alloc> query: task (the group's only task when left out),
    type=stdout|stderr, offset (bytes), origin=start|end, follow, plain (the bytes, not JSON)."""
    unknown = sorted(set(params) - set(_LOG_PARAMS))
    if unknown:
        raise AgentError(f"unknown query parameter {unknown[0][:32]!r} (known: {', '.join(_LOG_PARAMS)})")
    task = params.get("task") or None
    stream = params.get("type", "stdout")
    if stream not in STREAMS:
        raise AgentError(f"query parameter type={stream[:32]!r}: stdout or stderr")
    offset = params.get("offset", "0")
    if not _OFFSET.fullmatch(offset):
        raise AgentError(f"query parameter offset={offset[:32]!r}: a byte count")
    origin = params.get("origin", "start")
    if origin not in ("start", "end"):
        raise AgentError(f"query parameter origin={origin[:32]!r}: start or end")
    return _LogRequest(
        task, stream, int(offset), origin == "end", _flag(params, "follow"), _flag(params, "plain")
    )


# Exceptions of a handler and the HTTP status each answers with (the first that matches).
_STATUS: tuple[tuple[type[AgentError], int], ...] = (
    (LogsGone, 404),
    (LogsUnavailable, 503),
    (NotFound, 404),
    (Conflict, 409),
    (NotRun, 503),  # withdrawn before the main loop took it: nothing done, a retry is safe
    (InProgress, 504),  # started, not finished: its outcome is not known yet
    (AgentError, 400),
)


_T = TypeVar("_T")


def _guard(fn: Callable[[tuple[str, ...], bytes], _T]) -> Callable[[tuple[str, ...], bytes], _T | Response]:
    """A handler's (or stream opener's) AgentError answered as a JSON error with its status."""

    def wrapped(groups: tuple[str, ...], body: bytes) -> _T | Response:
        try:
            return fn(groups, body)
        except JobspecError as exc:
            return json_response(
                400, {"error": str(exc), "problems": [{"path": p, "reason": r} for p, r in exc.problems]}
            )
        except AgentError as exc:
            status = next(code for kind, code in _STATUS if isinstance(exc, kind))
            body_ = {"error": str(exc)}
            if status in (503, 504):
                body_["retry"] = "safe" if status == 503 else "check the outcome first"
            return json_response(status, body_)

    return wrapped


def build_routes(core: Core) -> list[tuple[str, str, Handler]]:
    def submit(groups: tuple[str, ...], body: bytes) -> Response:
        data = _body_json(body)
        text = data.get("jobspec")
        if not isinstance(text, str) or not text.strip():
            raise AgentError('body needs "jobspec": the job file\'s text (HCL or JSON)')
        fmt = data.get("format")
        fmt = fmt if isinstance(fmt, str) else None
        source = str(data.get("source") or "<request>")
        variables = _variables(data, source)
        # Parsed here, in the handler's thread: only the commit runs on the main loop.
        parsed = parse_submission(text, fmt, source, variables, core.limits, files=_files(data))
        out = core.call(lambda: core.commit(parsed, text, fmt, variables, source))
        return json_response(201, out)

    def jobs(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> list[dict[str, Any]]:
            allocs = core.alloc_views()  # terminal ones of an earlier run too, as GET /v1/allocations
            return [
                {"id": j, "type": job.type, "allocs": [a["id"] for a in allocs if a["job"] == j]}
                for j, job in core.jobs.items()
            ]

        return json_response(200, core.call(view))

    def stop_job(groups: tuple[str, ...], body: bytes) -> Response:
        # Answered once the allocs are stopped (their tasks' stops run off the main loop), so that
        # the job can be run again at once; bounded by the longest kill_timeout a task may have.
        # `?purge=true` (Nomad's `job stop -purge`): then the job and its allocs are removed.
        purge = _flag(query_params(), "purge")
        stopped = core.call(lambda: core.stop_job(groups[0]))
        left = core.await_stopped(stopped, core.limits.max_kill_timeout + STOP_MARGIN)
        out: dict[str, Any] = {"stopped": stopped, **({"still_stopping": left} if left else {})}
        if purge:
            out["purged"] = core.call(lambda: core.purge_job(groups[0]))
        return json_response(200, out)

    def gc(groups: tuple[str, ...], body: bytes) -> Response:
        # Nomad's `POST /v1/client/gc`: every terminal alloc collected now.
        report = core.call(lambda: core.gc(force=True))
        return json_response(200, {"collected": report.collected, "jobs_purged": report.jobs_purged})

    def allocs(groups: tuple[str, ...], body: bytes) -> Response:
        # Adopted allocs (found running after the state DB was lost) are listed with status "adopted".
        return json_response(200, core.call(lambda: core.alloc_views() + core.adoption.views()))

    def alloc(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> dict[str, Any]:
            adopted = core.adoption.find(groups[0])
            return adopted.view() if adopted is not None else core.alloc(groups[0]).view()

        return json_response(200, core.call(view))

    def events(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> list[dict[str, Any]]:
            adopted = core.adoption.find(groups[0])
            alloc_id = adopted.id if adopted is not None else core.alloc(groups[0]).id
            return [
                {"time": e.time, "task": e.task, "type": e.type, "message": e.message, "details": e.details}
                for e in core.store.events(alloc_id)
            ]

        return json_response(200, core.call(view))

    def stop_alloc(groups: tuple[str, ...], body: bytes) -> Response:
        return json_response(200, {"stopped": core.call(lambda: core.stop_alloc(groups[0]))})

    def services(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> list[dict[str, Any]]:
            return [svc for r in core.runners.values() if r.alloc_running() for svc in r.services()]

        return json_response(200, core.call(view))

    table: list[tuple[str, str, Handler]] = [
        ("GET", r"/v1/services", services),
        ("POST", r"/v1/jobs", submit),
        ("GET", r"/v1/jobs", jobs),
        ("DELETE", r"/v1/job/([A-Za-z0-9_.-]+)", stop_job),
        ("POST", r"/v1/client/gc", gc),
        ("GET", r"/v1/allocations", allocs),
        ("GET", r"/v1/allocation/([0-9a-f-]+)", alloc),
        ("GET", r"/v1/allocation/([0-9a-f-]+)/events", events),
        ("POST", r"/v1/allocation/([0-9a-f-]+)/stop", stop_alloc),
        *_task_routes(core),
        ("POST", r"/v1/allocation/([^/]+)/exec", _exec_handler(core)),
        ("GET", r"/v1/client/fs/logs/([^/]+)", _logs_handler(core)),
        *_info_routes(core),
    ]
    return [(m, LEGACY_PREFIX + rx, _guard(h)) for m, rx, h in table]


def _task_routes(core: Core) -> list[tuple[str, str, Handler]]:
    """Restart and signal a running alloc's tasks."""

    def restart(groups: tuple[str, ...], body: bytes) -> Response:
        """One task (`"task"`), or every running task of the alloc (as `nomad alloc restart`)."""
        ref = _alloc_ref(groups[0])
        name = _task_name(_body_json(body))

        def do() -> dict[str, Any]:
            r = _managed(core, ref, "restart tasks")
            if name is not None:
                tasks = [_task_of(r.group.tasks, name, r.id)]
            else:
                tasks = [t for t in r.group.tasks if r.task_running(t)]
                if not tasks:
                    raise Conflict(f"alloc {r.id} has no running task to restart")
            for t in tasks:
                r.user_restart(t)
            return r.view()

        return json_response(200, core.call(do))

    def send_signal(groups: tuple[str, ...], body: bytes) -> Response:
        """One task (`"task"`), or every task of the alloc that runs (as `nomad alloc signal`)."""
        ref = _alloc_ref(groups[0])
        data = _body_json(body)
        name = _task_name(data)
        sig = data.get("signal")
        if not isinstance(sig, str) or sig not in signal.Signals.__members__:
            raise AgentError(f'"signal" {sig!r} is not a signal name like SIGHUP')

        def do() -> dict[str, Any]:
            r = _managed(core, ref, "signal tasks")
            if name is not None:
                task = _task_of(r.group.tasks, name, r.id)
                if not r.task_running(task):
                    raise Conflict(f"task {task.name} of alloc {r.id} is not running")
                r.user_signal(task.name, sig)
                return {"signalled": task.name, "signal": sig}
            names = [t.name for t in r.group.tasks if r.task_running(t)]
            if not names:
                raise Conflict(f"alloc {r.id} has no running task to signal")
            for n in names:
                r.user_signal(n, sig)
            return {"signalled": names, "signal": sig}

        return json_response(200, core.call(do))

    return [
        ("POST", r"/v1/allocation/([^/]+)/restart", restart),
        ("POST", r"/v1/allocation/([^/]+)/signal", send_signal),
    ]


def _info_routes(core: Core) -> list[tuple[str, str, Handler]]:
    """A job with its allocs, and the node."""

    def job(groups: tuple[str, ...], body: bytes) -> Response:
        job_id = unquote(groups[0])

        def view() -> dict[str, Any]:
            spec = core.jobs.get(job_id)
            allocs = [a for a in core.alloc_views() + core.adoption.views() if a.get("job") == job_id]
            if spec is None and not allocs:
                raise NotFound(f"no job {job_id!r}")
            record = core.store.get("job", job_id) if spec is not None else None
            return job_view(job_id, spec, record, allocs)

        return json_response(200, core.call(view))

    def node(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> dict[str, Any]:
            statuses = [{"status": a["status"]} for a in core.alloc_views() + core.adoption.views()]
            return {
                "datacenter": core.datacenter,
                "jobs": len(core.jobs),
                "allocs": alloc_counts(statuses),
                "restore_seconds": round(core.restore_seconds, 3),
                "sweeps": core.sweeps,
            }

        out = core.call(view)
        out["drivers"] = driver_health(core.drivers.all())  # pings the docker engine: off the loop
        return json_response(200, out)

    return [("GET", r"/v1/job/([^/]+)", job), ("GET", r"/v1/node", node)]


def _exec_handler(core: Core) -> Handler:
    def exec_(groups: tuple[str, ...], body: bytes) -> Response:
        """Run a command in a running task through its driver's exec (off the main loop), and answer
        with its exit code and output (stdout and stderr together); not interactive."""
        ref = _alloc_ref(groups[0])
        data = _body_json(body)
        name = _task_name(data)
        cmd, timeout = _exec_request(data)
        done: Future[tuple[int, str]] = Future()

        def finish(code: int, out: str) -> None:
            if not done.done():
                done.set_result((code, out))

        def start() -> tuple[str, str]:
            r = _managed(core, ref, "exec")
            task = _task_of(r.group.tasks, name, r.id)
            if not r.task_running(task):
                state = r.state.task(task.name).state.value
                raise Conflict(f"task {task.name} of alloc {r.id} is not running (it is {state})")
            log.info("exec in alloc=%s task=%s: %s (%d args)", r.id[:8], task.name, cmd[0], len(cmd) - 1)
            r.exec_in_task(task, cmd, timeout, finish)
            return r.id, task.name

        alloc_id, task_name = core.call(start)
        try:
            code, out = done.result(timeout + EXEC_MARGIN)
        except FutureTimeout:
            raise InProgress(
                f"exec of {cmd[0]} in alloc {alloc_id} task {task_name} did not report back within "
                f"{timeout + EXEC_MARGIN:g}s"
            ) from None
        answer: dict[str, Any] = {"alloc": alloc_id, "task": task_name, "exit_code": code}
        if code < 0:  # the command could not run, or ran past its timeout and was killed
            answer.update(output="", error=out or "the command could not run")
        else:
            answer.update(output=out[:EXEC_MAX_OUTPUT], truncated=len(out) > EXEC_MAX_OUTPUT)
        return json_response(200, answer)

    return exec_


def build_streams(core: Core) -> list[tuple[str, str, StreamOpener]]:
    """The interactive exec session (`alloc exec -i/-t`, agent.execframes)."""
    return [("POST", LEGACY_PREFIX + r"/v1/allocation/([^/]+)/exec", _guard(_session_opener(core)))]


def _session_opener(core: Core) -> Callable[[tuple[str, ...], bytes], ExecSession]:
    def open_session(groups: tuple[str, ...], body: bytes) -> ExecSession:
        """Body: "cmd", "task", "tty" (a pseudo-terminal), "rows" and "cols" (its size). The task
        is found and checked running on the main loop; the command starts in this handler thread."""
        ref = _alloc_ref(groups[0])
        data = _body_json(body)
        name = _task_name(data)
        cmd, _ = _exec_request({k: v for k, v in data.items() if k != "timeout"})
        tty = data.get("tty", False)
        if not isinstance(tty, bool):
            raise AgentError('"tty" must be true or false')
        try:
            rows, cols = parse_resize(
                json.dumps({"rows": data.get("rows", 24), "cols": data.get("cols", 80)}).encode()
            )
        except FrameError as exc:
            raise AgentError(str(exc).replace("a resize frame's", "the body's")) from None

        def find() -> tuple[TaskDriver, TaskHandle, str, str, dict[str, str]]:
            r = _managed(core, ref, "exec")
            task = _task_of(r.group.tasks, name, r.id)
            handle = r.state.handle(task.name)
            if not r.task_running(task) or handle is None:
                state = r.state.task(task.name).state.value
                raise Conflict(f"task {task.name} of alloc {r.id} is not running (it is {state})")
            return r.driver(task), handle, r.id, task.name, r.exec_env(task)

        driver, handle, alloc_id, task_name, env = core.call(find)
        log.info(
            "interactive exec in alloc=%s task=%s: %s (%d args, tty %s)",
            alloc_id[:8],
            task_name,
            cmd[0],
            len(cmd) - 1,
            "yes" if tty else "no",
        )
        try:
            return driver.exec_session(handle, cmd, tty=tty, rows=rows, cols=cols, env=env)
        except DriverError as exc:
            raise Conflict(
                f"exec of {cmd[0]} in alloc {alloc_id} task {task_name} could not start: {exc}"
            ) from None

    return open_session


def _logs_handler(core: Core) -> Handler:
    def logs(groups: tuple[str, ...], body: bytes) -> Response:
        """A task's stdout or stderr from a byte offset: base64 `data` and `next_offset` to ask for
        next (or, with plain, the bytes themselves); `follow` waits a few seconds for bytes past the
        offset (a long poll)."""
        ref = _alloc_ref(groups[0])
        req = _log_request(query_params())  # read in this thread: the loop does not see the request
        name, stream = req.task, req.stream

        def resolve() -> tuple[str, str, LogSource]:
            adopted = core.adoption.find(ref)
            if adopted is not None:
                found = [t for t in adopted.tasks if t.role != "pause"]
                names = sorted(t.task for t in found)
                if name is None and len(found) != 1:
                    raise AgentError(f"alloc {adopted.id} has tasks {', '.join(names)}: say which one")
                at = next((t for t in found if name is None or t.task == name), None)
                if at is None:
                    raise NotFound(f"alloc {adopted.id} has no task {name!r} (its tasks: {', '.join(names)})")
                task_dir = core.deps.data_dir / "alloc" / adopted.id / at.task
                source = adopted_log_source(core.drivers.all().values(), task_dir, at.kind, at.target, stream)
                return adopted.id, at.task, source
            r = core.alloc(ref)  # a terminal alloc's logs too, until the GC collects it
            task = _task_of(r.group.tasks, name, r.id)
            handle = r.state.handle(task.name)
            source = log_source(r.driver(task), r.task_dir(task), handle.id if handle else None, stream)
            return r.id, task.name, source

        alloc_id, task_name, source = core.call(resolve)
        chunk = read_log(source, req.offset, from_end=req.from_end, follow=req.follow)
        if req.plain:
            return 200, "text/plain; charset=utf-8", chunk.data
        return json_response(
            200,
            {
                "alloc": alloc_id,
                "task": task_name,
                "type": stream,
                "offset": chunk.offset,
                "next_offset": chunk.next_offset,
                "size": chunk.size,
                "reset": chunk.reset,
                "data": base64.b64encode(chunk.data).decode("ascii"),
            },
        )

    return logs
