"""The agent's HTTP API routes over the core: jobs, allocations (adopted too), events, restart, signal."""

from __future__ import annotations

import json
import signal
from typing import Any

from agent.api import Handler, Response, json_response
from agent.core import Conflict, Core, InProgress, NotFound, NotRun, parse_submission
from agent.errors import AgentError
from agent.jobspec import JobspecError
from agent.jobspec.hclvars import parse_var_file


def _body_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are no UTF-8/16/32
        raise AgentError(f"request body is not JSON: {exc}") from None
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


STOP_MARGIN = 30.0  # seconds a job stop may take past the longest kill_timeout before it answers

# Exceptions of a handler and the HTTP status each answers with (the first that matches).
_STATUS: tuple[tuple[type[AgentError], int], ...] = (
    (NotFound, 404),
    (Conflict, 409),
    (NotRun, 503),  # withdrawn before the main loop took it: nothing done, a retry is safe
    (InProgress, 504),  # started, not finished: its outcome is not known yet
    (AgentError, 400),
)


def _guard(fn: Handler) -> Handler:
    def wrapped(groups: tuple[str, ...], body: bytes) -> Response:
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
            return [
                {"id": j, "allocs": [r.id for r in core.runners.values() if r.job.id == j]} for j in core.jobs
            ]

        return json_response(200, core.call(view))

    def stop_job(groups: tuple[str, ...], body: bytes) -> Response:
        # Answered once the allocs are stopped (their tasks' stops run off the main loop), so that
        # the job can be run again at once; bounded by the longest kill_timeout a task may have.
        stopped = core.call(lambda: core.stop_job(groups[0]))
        left = core.await_stopped(stopped, core.limits.max_kill_timeout + STOP_MARGIN)
        return json_response(200, {"stopped": stopped, **({"still_stopping": left} if left else {})})

    def allocs(groups: tuple[str, ...], body: bytes) -> Response:
        # Adopted allocs (found running after the state DB was lost) are listed with status "adopted".
        return json_response(
            200, core.call(lambda: [r.view() for r in core.runners.values()] + core.adoption.views())
        )

    def alloc(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> dict[str, Any]:
            adopted = core.adoption.find(groups[0])
            return adopted.view() if adopted is not None else core.runner(groups[0]).view()

        return json_response(200, core.call(view))

    def events(groups: tuple[str, ...], body: bytes) -> Response:
        def view() -> list[dict[str, Any]]:
            adopted = core.adoption.find(groups[0])
            alloc_id = adopted.id if adopted is not None else core.runner(groups[0]).id
            return [
                {"time": e.time, "task": e.task, "type": e.type, "message": e.message, "details": e.details}
                for e in core.store.events(alloc_id)
            ]

        return json_response(200, core.call(view))

    def restart(groups: tuple[str, ...], body: bytes) -> Response:
        data = _body_json(body)

        def do() -> dict[str, Any]:
            r = core.runner(groups[0])
            task = next((t for t in r.group.tasks if t.name == data.get("task")), None)
            if task is None:
                raise NotFound(f"alloc {r.id} has no task {data.get('task')!r}")
            r.user_restart(task)
            return r.view()

        return json_response(200, core.call(do))

    def send_signal(groups: tuple[str, ...], body: bytes) -> Response:
        data = _body_json(body)
        sig = str(data.get("signal", ""))
        if sig not in signal.Signals.__members__:
            raise AgentError(f"signal {sig!r} is not a signal name like SIGHUP")

        def do() -> dict[str, Any]:
            r = core.runner(groups[0])
            r.user_signal(str(data.get("task")), sig)
            return {"signalled": data.get("task"), "signal": sig}

        return json_response(200, core.call(do))

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
        ("GET", r"/v1/allocations", allocs),
        ("GET", r"/v1/allocation/([0-9a-f-]+)", alloc),
        ("GET", r"/v1/allocation/([0-9a-f-]+)/events", events),
        ("POST", r"/v1/allocation/([0-9a-f-]+)/restart", restart),
        ("POST", r"/v1/allocation/([0-9a-f-]+)/signal", send_signal),
        ("POST", r"/v1/allocation/([0-9a-f-]+)/stop", stop_alloc),
    ]
    return [(m, rx, _guard(h)) for m, rx, h in table]
