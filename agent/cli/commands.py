"""The `fieldlab-agent` verbs that talk to an agent over its mTLS API (agent.client): each asks the
API, then prints what agent.cli.format makes of the answer (or the JSON with -json)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from agent.cli import format as fmt
from agent.cli import session
from agent.cli.jobfiles import registration
from agent.errors import AgentError

if TYPE_CHECKING:
    from agent.client import ApiClient

EXEC_MAX_TIMEOUT = 300.0
EXEC_CLIENT_MARGIN = 30.0  # seconds the client waits past an exec's own timeout
EXEC_CANNOT_RUN = 126  # exit status when the command could not run or was killed at its timeout


def _q(part: str) -> str:
    return quote(part, safe="")


def client(args: argparse.Namespace, timeout: float | None = None) -> ApiClient:
    """The API client: FIELDLAB_AGENT_* with -address, -ca-cert, -client-cert, -client-key over them."""
    from agent.client import ApiClient

    given = {
        "address": args.address,
        "ca_file": args.ca_cert,
        "cert_file": args.client_cert,
        "key_file": args.client_key,
    }
    overrides = {k: v for k, v in given.items() if v}
    api = ApiClient.from_env(**overrides) if overrides else ApiClient.from_env()
    if timeout is not None and dataclasses.is_dataclass(api):
        api = dataclasses.replace(api, timeout=timeout)
    return api


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


# -- jobs ---------------------------------------------------------------------------------------


def job_status(args: argparse.Namespace) -> int:
    api = client(args)
    if getattr(args, "job_id", None):
        job = api.request("GET", f"/fieldlab/v1/job/{_q(args.job_id)}")
        if args.json:
            _print_json(job)
        else:
            print(fmt.job_status(job, time.time(), args.verbose))
        return 0
    jobs = api.request("GET", "/fieldlab/v1/jobs")
    if args.json:
        _print_json(jobs)
        return 0
    print(fmt.job_list(jobs, api.request("GET", "/fieldlab/v1/allocations")))
    return 0


def job_inspect(args: argparse.Namespace) -> int:
    job = client(args).request("GET", f"/fieldlab/v1/job/{_q(args.job_id)}")
    if job.get("spec") is None:
        print(
            f"fieldlab-agent: job {args.job_id} has only adopted allocs: its jobspec went with the lost "
            "state database",
            file=sys.stderr,
        )
    _print_json({"job": job.get("spec"), "submission": job.get("submission")})
    return 0


def job_run(args: argparse.Namespace) -> int:
    """Nomad's `job run`: parse here, register with `PUT /v1/jobs` (a job that runs gets a new
    version), then the evaluation's allocations (not with -detach)."""
    body, warnings = registration(args)
    job_id = str(body["Job"]["ID"])  # type: ignore[index]
    api = client(args)
    out = api.request("PUT", "/v1/jobs", body)
    if args.detach:
        print(f"Job registration successful\nEvaluation ID: {out.get('EvalID')}")
        return 0
    version = api.request("GET", f"/v1/job/{_q(job_id)}").get("Version")
    allocs = api.request("GET", f"/v1/evaluation/{_q(str(out.get('EvalID')))}/allocations")
    if args.json:
        _print_json({**out, "Version": version, "Allocations": [a.get("ID") for a in allocs]})
    else:
        agent_warnings = [w for w in str(out.get("Warnings") or "").splitlines() if w]
        print(fmt.job_registered(job_id, version, out, allocs, [*warnings, *agent_warnings]))
    return 0


def job_stop(args: argparse.Namespace) -> int:
    purge = "?purge=true" if getattr(args, "purge", False) else ""
    out = client(args).request("DELETE", f"/fieldlab/v1/job/{_q(args.job_id)}{purge}")
    if args.json:
        _print_json(out)
    else:
        print(fmt.job_stopped(args.job_id, out))
    return 0


# -- allocs -------------------------------------------------------------------------------------


def alloc_list(args: argparse.Namespace) -> int:
    allocs = client(args).request("GET", "/fieldlab/v1/allocations")
    if args.json:
        _print_json(allocs)
    else:
        print(fmt.alloc_list(allocs, time.time(), args.verbose))
    return 0


def alloc_status(args: argparse.Namespace) -> int:
    api = client(args)
    alloc = api.request("GET", f"/fieldlab/v1/allocation/{_q(args.alloc_id)}")
    events = api.request("GET", f"/fieldlab/v1/allocation/{_q(args.alloc_id)}/events")
    if args.json:
        _print_json({"alloc": alloc, "events": events})
    else:
        print(fmt.alloc_status(alloc, events, time.time(), args.verbose))
    return 0


def _only_task(api: ApiClient, alloc_id: str) -> tuple[str, str]:
    """(full alloc id, its group's only task); AgentError naming the tasks when there are more."""
    alloc = api.request("GET", f"/fieldlab/v1/allocation/{_q(alloc_id)}")
    tasks = sorted(alloc.get("tasks") or {})
    if len(tasks) != 1:
        raise AgentError(
            f"alloc {alloc.get('id')} has tasks {', '.join(tasks) or 'none'}: say which one (TASK)"
        )
    return str(alloc.get("id")), tasks[0]


def _write(data: bytes) -> None:
    out = sys.stdout
    out.flush()
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a text-only stdout (some test captures)
        out.write(data.decode(errors="replace"))
        out.flush()


TAIL_WINDOW = 64 * 1024  # bytes read back from the end to find -n lines


def alloc_logs(args: argparse.Namespace) -> int:
    api = client(args)
    task = args.task_flag or args.task
    alloc_id = args.alloc_id
    if task is None:
        alloc_id, task = _only_task(api, alloc_id)
    stream = "stderr" if args.stderr else "stdout"
    base = f"/fieldlab/v1/client/fs/logs/{_q(alloc_id)}"

    def get(offset: int, *, from_end: bool = False, follow: bool = False) -> dict[str, Any]:
        params = {"task": task, "type": stream, "offset": str(offset)}
        if from_end:
            params["origin"] = "end"
        if follow:
            params["follow"] = "true"
        answer: dict[str, Any] = api.request("GET", f"{base}?{urlencode(params)}")
        return answer

    try:
        if args.tail:
            answer = get(args.bytes if args.bytes is not None else TAIL_WINDOW, from_end=True)
            data = fmt.log_bytes(answer)
            _write(data if args.bytes is not None else fmt.last_lines(data, args.lines))
        else:
            answer = {"next_offset": 0}
        offset = int(answer.get("next_offset") or 0)
        while args.follow or not args.tail:
            answer = get(offset, follow=args.follow)
            if answer.get("reset") and offset:
                print(f"fieldlab-agent: the {stream} log started again (a new container)", file=sys.stderr)
            _write(fmt.log_bytes(answer))
            offset = int(answer.get("next_offset") or 0)
            if not args.follow and offset >= int(answer.get("size") or 0):
                break
        return 0
    except KeyboardInterrupt:
        return 0


def alloc_exec(args: argparse.Namespace) -> int:
    if not args.command:
        raise AgentError(
            "say the command: fieldlab-agent alloc exec ALLOC CMD [ARG...] (or ALLOC [TASK] -- CMD [ARG...])"
        )
    if args.stdin or args.tty:
        return _exec_session(args)
    if not 0 < args.timeout <= EXEC_MAX_TIMEOUT:
        raise AgentError(f"-timeout {args.timeout:g}: more than 0 and at most {EXEC_MAX_TIMEOUT:g} seconds")
    body: dict[str, Any] = {"cmd": list(args.command), "timeout": args.timeout}
    task = args.task_flag or args.task
    if task:
        body["task"] = task
    api = client(args, timeout=args.timeout + EXEC_CLIENT_MARGIN)
    out = api.request("POST", f"/fieldlab/v1/allocation/{_q(args.alloc_id)}/exec", body)
    code = int(out.get("exit_code", -1))
    if out.get("output"):
        _write(str(out["output"]).encode())
    if out.get("truncated"):
        print("fieldlab-agent: exec: the output was cut at 1 MiB", file=sys.stderr)
    if code < 0:
        print(f"fieldlab-agent: exec: {out.get('error') or 'the command could not run'}", file=sys.stderr)
        return EXEC_CANNOT_RUN
    return min(code, 255)


def _exec_session(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"cmd": list(args.command), "tty": bool(args.tty)}
    task = args.task_flag or args.task
    if task:
        body["task"] = task
    path = f"/fieldlab/v1/allocation/{_q(args.alloc_id)}/exec"
    return session.run(client(args), path, body, stdin=bool(args.stdin))


def alloc_signal(args: argparse.Namespace) -> int:
    if args.signal and args.legacy_signal:
        raise AgentError(f"two signals: -s {args.signal} and {args.legacy_signal}")
    try:
        sig = fmt.signal_name(args.signal or args.legacy_signal or "SIGKILL")
    except ValueError as exc:
        raise AgentError(str(exc)) from None
    body: dict[str, Any] = {"signal": sig}
    if args.task:
        body["task"] = args.task
    out = client(args).request("POST", f"/fieldlab/v1/allocation/{_q(args.alloc_id)}/signal", body)
    sent = out.get("signalled")
    names = ", ".join(sent) if isinstance(sent, list) else str(sent)
    print(f"Sent {sig} to task {names} of alloc {args.alloc_id}")
    return 0


def alloc_restart(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"task": args.task} if args.task else {}
    out = client(args).request("POST", f"/fieldlab/v1/allocation/{_q(args.alloc_id)}/restart", body)
    which = f"task {args.task}" if args.task else "every running task"
    print(f"Restarting {which} of alloc {fmt.short(out.get('id') or args.alloc_id)}")
    return 0


def alloc_stop(args: argparse.Namespace) -> int:
    out = client(args).request("POST", f"/fieldlab/v1/allocation/{_q(args.alloc_id)}/stop", {})
    print("\n".join(f'Allocation "{a}" stopped' for a in out.get("stopped") or []))
    return 0


# -- the node -----------------------------------------------------------------------------------


def node_status(args: argparse.Namespace) -> int:
    from agent.client import ApiError

    api = client(args)
    health = api.request("GET", "/fieldlab/v1/agent/health")
    try:
        node: dict[str, Any] | None = api.request("GET", "/fieldlab/v1/node")
    except ApiError as exc:
        if exc.status != 404:  # 404: an agent with jobs disabled, or one older than this route
            raise
        node = None
    if args.json:
        _print_json({"health": health, "node": node})
    else:
        print(fmt.node_status(health, node))
    return 0
