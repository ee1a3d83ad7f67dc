"""The `fieldlab-agent` verbs that talk to an agent: each speaks Nomad's HTTP API, as Nomad's CLI
does (over agent.api.client's mTLS, agent.cli.calls), then prints what agent.cli.format makes of the
answer (or the JSON with -json)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent.cli import allocformat, allocstatus, planformat, session
from agent.cli import format as fmt
from agent.cli.calls import CallError, Nomad, q
from agent.cli.jobfiles import registration
from agent.cli.logs import print_logs
from agent.cli.parser import DEFAULT_ADDRESS
from agent.errors import AgentError

if TYPE_CHECKING:
    from agent.api.client import ApiClient

EXEC_MAX_TIMEOUT = 300.0
NOT_FOUND = 404
PLAN_ERROR = 255  # `nomad job plan`'s exit code for an error (0: no changes, 1: allocs created or destroyed)
ENFORCE_INDEX_PREFIX = "Enforcing job modify index"  # api.RegisterEnforceIndexErrPrefix


# (flag, this CLI's variable, Nomad CLI's variable) of each API setting (Nomad's api.DefaultConfig
# reads NOMAD_*, its command.Meta lays the flags over them)
API_SETTINGS = {
    "address": ("-address", "FIELDLAB_AGENT_ADDR", "NOMAD_ADDR"),
    "ca_file": ("-ca-cert", "FIELDLAB_AGENT_CACERT", "NOMAD_CACERT"),
    "cert_file": ("-client-cert", "FIELDLAB_AGENT_CLIENT_CERT", "NOMAD_CLIENT_CERT"),
    "key_file": ("-client-key", "FIELDLAB_AGENT_CLIENT_KEY", "NOMAD_CLIENT_KEY"),
    "server_name": ("-tls-server-name", "", "NOMAD_TLS_SERVER_NAME"),
}
TRUE_WORDS = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool
FALSE_WORDS = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def api_settings(flags: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """ApiClient's settings as Nomad's CLI takes them: a flag over its variables, this CLI's
    FIELDLAB_AGENT_* over Nomad's NOMAD_* (pure). AgentError naming what is missing or wrong."""
    out: dict[str, Any] = {}
    for key, (_, ours, nomads) in API_SETTINGS.items():
        out[key] = flags.get(key) or (env.get(ours) if ours else "") or env.get(nomads) or ""
    missing = [
        f"{ours} or {nomads} (or {flag})"
        for key, (flag, ours, nomads) in API_SETTINGS.items()
        if key in ("ca_file", "cert_file", "key_file") and not out[key]
    ]
    if missing:
        raise AgentError(f"set {', '.join(missing)} (the lab's ca.pem, operator.crt, operator.key)")
    skip = env.get("NOMAD_SKIP_VERIFY", "")
    if skip and skip not in TRUE_WORDS | FALSE_WORDS:
        raise AgentError(f"NOMAD_SKIP_VERIFY={skip!r}: true or false (as Go's strconv.ParseBool reads it)")
    out["skip_verify"] = bool(flags.get("skip_verify")) or skip in TRUE_WORDS
    out["address"] = out["address"] or DEFAULT_ADDRESS
    return out


def client(args: argparse.Namespace) -> ApiClient:
    """The API client: -address, -ca-cert, -client-cert, -client-key, -tls-server-name and
    -tls-skip-verify over FIELDLAB_AGENT_* over NOMAD_* (agent.cli.commands.api_settings)."""
    from agent.api.client import ApiClient

    flags = {
        "address": args.address,
        "ca_file": args.ca_cert,
        "cert_file": args.client_cert,
        "key_file": args.client_key,
        "server_name": getattr(args, "tls_server_name", None),
        "skip_verify": getattr(args, "tls_skip_verify", False),
    }
    return ApiClient(**api_settings(flags, os.environ))


def nomad(args: argparse.Namespace) -> Nomad:
    return Nomad(client(args))


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


# -- jobs ---------------------------------------------------------------------------------------


def _job(api: Nomad, job_id: str) -> dict[str, Any] | None:
    """GET /v1/job/:id; None when the agent knows the job only by adopted allocs (found running after
    its state database was lost: the jobspec went with it); CallError 404 when it knows nothing."""
    try:
        job: dict[str, Any] = api.get(f"/v1/job/{q(job_id)}", f"job {job_id}")
        return job
    except CallError as exc:
        if exc.status != NOT_FOUND or not _job_allocs(api, job_id):
            raise
        return None


def _job_allocs(api: Nomad, job_id: str) -> list[dict[str, Any]]:
    allocs: list[dict[str, Any]] = api.get(f"/v1/job/{q(job_id)}/allocations", f"job {job_id}'s allocations")
    return allocs


def job_status(args: argparse.Namespace) -> int:
    api = nomad(args)
    job_id = getattr(args, "job_id", None)
    if not job_id:
        jobs = api.get("/v1/jobs", "the job list")
        if args.json:
            _print_json(jobs)
        else:
            print(fmt.job_list(jobs, time.time()))
        return 0
    job_id = api.job_id(job_id)
    job = _job(api, job_id)
    allocs = _job_allocs(api, job_id)
    summary = (
        api.get(f"/v1/job/{q(job_id)}/summary", f"job {job_id}'s summary")
        if job is not None
        else fmt.summary_of(job_id, allocs)
    )
    if args.json:
        _print_json({"Job": job, "Summary": summary, "Allocations": allocs})
    else:
        print(fmt.job_status(job_id, job, summary, allocs, time.time(), args.verbose))
    return 0


def job_inspect(args: argparse.Namespace) -> int:
    """As `nomad job inspect`: {"Job": api.Job}, which `job run` takes back; -hcl: the jobspec as it
    was submitted (GET /v1/job/:id/submission)."""
    api = nomad(args)
    args.job_id = api.job_id(args.job_id)
    job = _job(api, args.job_id)
    if job is None:
        raise AgentError(
            f"job {args.job_id} has only adopted allocs: its jobspec went with the lost state database"
        )
    if not args.hcl:
        _print_json({"Job": job})
        return 0
    version = int(job.get("Version") or 0)
    sub = api.get(
        f"/v1/job/{q(args.job_id)}/submission?version={version}",
        f"job {args.job_id}'s submission (version {version})",
    )
    source = str(sub.get("Source") or "")
    print(source, end="" if source.endswith("\n") else "\n")
    return 0


def job_run(args: argparse.Namespace) -> int:
    """Nomad's `job run`: parse here, register with `PUT /v1/jobs` (a job that runs gets a new
    version), then the evaluation's allocations (not with -detach). -check-index N registers only
    over version N of the job's modify index (0: only a new job), as `job plan` printed it."""
    body, warnings = registration(args)
    job_id = str(body["Job"]["ID"])  # type: ignore[index]
    if args.check_index is not None:
        body.update(EnforceIndex=True, JobModifyIndex=args.check_index)
    if args.preserve_counts:
        body["PreserveCounts"] = True
    if args.preserve_resources:
        body["PreserveResources"] = True
    if args.eval_priority:
        body["EvalPriority"] = args.eval_priority
    api = nomad(args)
    try:
        out = api.call("PUT", "/v1/jobs", f"job {job_id}: register", body)
    except CallError as exc:
        if not exc.reason.startswith(ENFORCE_INDEX_PREFIX):
            raise
        print(f"{exc.reason}\nJob not updated", file=sys.stderr)  # as `nomad job run -check-index`
        return 1
    if args.detach:
        print(f"Job registration successful\nEvaluation ID: {out.get('EvalID')}")
        return 0
    version = api.get(f"/v1/job/{q(job_id)}", f"job {job_id}").get("Version")
    allocs = api.get(
        f"/v1/evaluation/{q(str(out.get('EvalID')))}/allocations", "the evaluation's allocations"
    )
    if args.json:
        _print_json({**out, "Version": version, "Allocations": [a.get("ID") for a in allocs]})
    else:
        agent_warnings = [w for w in str(out.get("Warnings") or "").splitlines() if w]
        print(fmt.job_registered(job_id, version, out, allocs, [*warnings, *agent_warnings]))
    return 0


def job_plan(args: argparse.Namespace) -> int:
    """`PUT /v1/job/:id/plan` with the diff: what `job run` would do, changing nothing. Exit 0 when
    no alloc would be created or destroyed, 1 when some would, 255 on an error (Nomad's codes)."""
    try:
        body, _ = registration(args)
        job: dict[str, Any] = body["Job"]  # type: ignore[assignment]
        job_id = str(job["ID"])
        plan = nomad(args).call(
            "PUT", f"/v1/job/{q(job_id)}/plan", f"job {job_id}: plan", {"Job": job, "Diff": True}
        )
    except AgentError as exc:
        print(f"fieldlab-agent: error: {str(exc).strip()}", file=sys.stderr)
        return PLAN_ERROR
    if args.json_output:
        _print_json(plan)
        return planformat.plan_exit_code(plan)
    flags = [*(f"-var={v}" for v in args.var), *(f"-var-file={f}" for f in args.var_file)]
    index = int(plan.get("JobModifyIndex") or 0)
    rerun = shlex.join(["fieldlab-agent", "job", "run", "-check-index", str(index), *flags, str(args.file)])
    job_type = str(job.get("Type") or "service")
    print(planformat.plan_text(plan, job_type, rerun, args.verbose, args.diff == "true"))
    return planformat.plan_exit_code(plan)


def job_history(args: argparse.Namespace) -> int:
    """`GET /v1/job/:id/versions` (with -p `?diffs=true`): the job's versions, newest first; -version N
    only that one; -json the api.Job versions."""
    api = nomad(args)
    job_id = api.job_id(args.job_id)
    got = api.get(
        f"/v1/job/{q(job_id)}/versions{'?diffs=true' if args.p else ''}", f"job {job_id}'s versions"
    )
    versions: list[dict[str, Any]] = list(got.get("Versions") or [])
    diffs: list[dict[str, Any]] | None = got.get("Diffs")
    if args.version is not None:
        at = [i for i, v in enumerate(versions) if v.get("Version") == args.version]
        if not at:
            raise AgentError(f"job {job_id} has no version {args.version}")
        versions, diffs = [versions[at[0]]], (diffs[at[0] : at[0] + 1] if diffs else None)
    if args.json:
        _print_json(versions[0] if args.version is not None else versions)
    else:
        print(planformat.history_text(versions, diffs))
    return 0


def job_scale(args: argparse.Namespace) -> int:
    """`POST /v1/job/:id/scale`, as `nomad job scale JOB [GROUP] COUNT` (GROUP may be left out for a
    one-group job): the job's next version with the group at COUNT."""
    api = nomad(args)
    job_id = api.job_id(args.job_id)
    if args.count is None:  # JOB COUNT: the job's only group
        groups = [
            str(g.get("Name"))
            for g in api.get(f"/v1/job/{q(job_id)}", f"job {job_id}").get("TaskGroups") or []
        ]
        if len(groups) != 1:
            raise AgentError(
                f"job {job_id} has {len(groups)} groups ({', '.join(groups)}): name the one to scale"
            )
        group, count = groups[0], args.group
    else:
        group, count = args.group, args.count
    try:
        number = int(count)
    except ValueError:
        raise AgentError(f"count {count!r}: a whole number") from None
    body = {"Count": number, "Target": {"Group": group}, "Message": "fieldlab-agent job scale"}
    out = api.call("POST", f"/v1/job/{q(job_id)}/scale", f"job {job_id}: scale {group}", body)
    return _job_written(api, args, job_id, out, f'group "{group}" scaled to {number}')


def job_revert(args: argparse.Namespace) -> int:
    """`POST /v1/job/:id/revert`, as `nomad job revert JOB VERSION`: that version again, as the next."""
    api = nomad(args)
    job_id = api.job_id(args.job_id)
    body = {"JobID": job_id, "JobVersion": args.version}
    out = api.call(
        "POST", f"/v1/job/{q(job_id)}/revert", f"job {job_id}: revert to version {args.version}", body
    )
    return _job_written(api, args, job_id, out, f"reverted to version {args.version}")


def job_dispatch(args: argparse.Namespace) -> int:
    """`POST /v1/job/:id/dispatch`, as `nomad job dispatch [-meta k=v]... JOB [INPUT]`: the child job
    of a parameterized job, its payload INPUT's content (`-`: stdin), then its allocs as `job run`
    prints a register."""
    api = nomad(args)
    job_id = api.job_id(args.job_id)
    meta: dict[str, str] = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AgentError(f"-meta {item!r}: KEY=VALUE")
        meta[key] = value
    payload = b""
    if args.input == "-":
        payload = sys.stdin.buffer.read()
    elif args.input:
        try:
            with open(args.input, "rb") as fh:
                payload = fh.read()
        except OSError as exc:
            raise AgentError(f"input {args.input}: {exc.strerror or exc}") from None
    body = {
        "JobID": job_id,
        "Payload": base64.b64encode(payload).decode() if payload else None,
        "Meta": meta or None,
        "IdPrefixTemplate": args.id_prefix_template,
    }
    path = f"/v1/job/{q(job_id)}/dispatch"
    if args.idempotency_token:
        path += f"?idempotency_token={q(args.idempotency_token)}"
    out = api.call("POST", path, f"job {job_id}: dispatch", body)
    if args.json:
        _print_json(out)
        return 0
    print(f"Dispatched Job ID = {out.get('DispatchedJobID')}")
    print(f"Evaluation ID     = {out.get('EvalID')}")
    if not args.detach and out.get("EvalID"):
        child = str(out.get("DispatchedJobID"))
        return _job_written(api, args, child, out, "dispatched")
    return 0


def job_periodic_force(args: argparse.Namespace) -> int:
    """`POST /v1/job/:id/periodic/force`, as `nomad job periodic force JOB`: a child launched now,
    printed as `job run` prints a register (the child's ID from its evaluation)."""
    api = nomad(args)
    job_id = api.job_id(args.job_id)
    out = api.call("POST", f"/v1/job/{q(job_id)}/periodic/force", f"job {job_id}: periodic force")
    if args.json or args.detach:
        return _job_written(api, args, job_id, out, "")
    ev = api.get(f"/v1/evaluation/{q(str(out.get('EvalID')))}", "the launch's evaluation")
    return _job_written(api, args, str(ev.get("JobID")), out, f"launched by {job_id}")


def _job_written(api: Nomad, args: argparse.Namespace, job_id: str, out: dict[str, Any], what: str) -> int:
    if args.json:
        _print_json(out)
    elif args.detach:
        print(f"Evaluation ID: {out.get('EvalID')}")
    else:
        version = api.get(f"/v1/job/{q(job_id)}", f"job {job_id}").get("Version")
        allocs = api.get(
            f"/v1/evaluation/{q(str(out.get('EvalID')))}/allocations", "the evaluation's allocations"
        )
        print(fmt.job_registered(job_id, version, out, allocs, []).replace("registered", what, 1))
    return 0


STOP_WATCH = 120.0  # seconds `job stop` watches the allocs end (the client's max_kill_timeout and more)
STOP_POLL = 0.25


def _watch_stopped(api: Nomad, job_id: str, purge: bool) -> list[dict[str, Any]]:
    """After the stop was accepted: the job's allocs, once none still runs (polled, STOP_WATCH);
    a purged job's are gone with it."""
    deadline = time.monotonic() + STOP_WATCH
    while True:
        try:
            allocs = _job_allocs(api, job_id)
        except CallError:
            if purge:
                return []
            raise
        if not [a for a in allocs if a.get("ClientStatus") in ("pending", "running")]:
            return allocs
        if time.monotonic() >= deadline:
            return allocs
        time.sleep(STOP_POLL)


def job_stop(args: argparse.Namespace) -> int:
    """`DELETE /v1/job/:id` (`?purge=true`): answered once the stop is decided; then (unless
    -detach or -json) the allocs are watched until they have stopped, and summed up."""
    api = nomad(args)
    args.job_id = api.job_id(args.job_id)
    purge = bool(getattr(args, "purge", False))
    before = [] if args.detach or args.json else _job_allocs(api, args.job_id)
    path = f"/v1/job/{q(args.job_id)}" + ("?purge=true" if purge else "")
    out = api.call("DELETE", path, f"job {args.job_id}: stop")
    if args.json:
        _print_json(out)
    elif args.detach:
        print(out.get("EvalID"))
    else:
        after = _watch_stopped(api, args.job_id, purge)
        print(fmt.job_stopped(args.job_id, out, before, after, purge))
    return 0


# -- allocs -------------------------------------------------------------------------------------


def alloc_list(args: argparse.Namespace) -> int:
    allocs = nomad(args).get("/v1/allocations", "the allocation list")
    if args.json:
        _print_json(allocs)
    else:
        print(allocformat.alloc_list(allocs, time.time(), args.verbose))
    return 0


def alloc_status(args: argparse.Namespace) -> int:
    """GET /v1/allocation/:id and, as Nomad's CLI, its stats (GET /v1/client/allocation/:id/stats:
    each task's usage; when they cannot be read, said on stderr and the rest printed)."""
    api = nomad(args)
    alloc = api.alloc(args.alloc_id)
    if args.json:
        _print_json(alloc)
        return 0
    alloc_id = str(alloc.get("ID"))
    try:
        stats = api.get(f"/v1/client/allocation/{q(alloc_id)}/stats", f"alloc {alloc_id[:8]}'s stats")
    except CallError as exc:
        print(f"Couldn't retrieve stats: {exc.reason}", file=sys.stderr)
        stats = None
    print(allocstatus.alloc_status(alloc, time.time(), args.verbose, stats))
    return 0


def only_task(alloc: dict[str, Any]) -> str:
    """The group's only task, as Nomad's CLI takes it when none is named; AgentError naming the
    tasks when there are more."""
    tasks = sorted(fmt.task_names(alloc))
    if len(tasks) != 1:
        raise AgentError(
            f"alloc {alloc.get('ID')} has tasks {', '.join(tasks) or 'none'}: say which one (TASK or -task)"
        )
    return tasks[0]


def alloc_logs(args: argparse.Namespace) -> int:
    api = nomad(args)
    alloc = api.find_alloc(args.alloc_id)
    task = args.task_flag or args.task or only_task(alloc)
    return print_logs(api, args, str(alloc["ID"]), task)


def exec_modes(stdin_flag: bool | None, tty_flag: bool | None, terminals: bool) -> tuple[bool, bool]:
    """(stdin, tty) of `alloc exec` as Nomad's CLI sets them (pure): -i defaults to true, -t to
    whether stdin and stdout are both terminals; -t without -i is refused, as Nomad refuses it."""
    stdin = True if stdin_flag is None else stdin_flag
    tty = terminals if tty_flag is None else tty_flag
    if tty and not stdin:  # on a terminal -i=false needs -t=false too, as with Nomad's CLI
        raise AgentError("-i must be enabled if running with tty (-i=false needs -t=false)")
    return stdin, tty


def _terminals() -> bool:
    try:
        return os.isatty(sys.stdin.fileno()) and os.isatty(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stream with no descriptor (a test's capture)
        return False


def alloc_exec(args: argparse.Namespace) -> int:
    """Nomad's exec websocket, stdin attached (-i, the default) and a terminal (-t) or not: the
    command's exit code."""
    if not args.command:
        raise AgentError(
            "say the command: fieldlab-agent alloc exec ALLOC CMD [ARG...] (or ALLOC [TASK] -- CMD [ARG...])"
        )
    if args.timeout is not None and not 0 < args.timeout <= EXEC_MAX_TIMEOUT:
        raise AgentError(f"-timeout {args.timeout:g}: more than 0 and at most {EXEC_MAX_TIMEOUT:g} seconds")
    stdin, tty = exec_modes(args.stdin, args.tty, _terminals())
    api = nomad(args)
    alloc = api.find_alloc(args.alloc_id)
    task = args.task_flag or args.task or only_task(alloc)
    return session.run(
        api.api, str(alloc["ID"]), task, list(args.command), tty=tty, stdin=stdin, timeout=args.timeout
    )


def _running_tasks(alloc: dict[str, Any]) -> list[str]:
    states = alloc.get("TaskStates") or {}
    return sorted(name for name, t in states.items() if (t or {}).get("State") == "running")


def alloc_signal(args: argparse.Namespace) -> int:
    if args.signal and args.legacy_signal:
        raise AgentError(f"two signals: -s {args.signal} and {args.legacy_signal}")
    try:
        sig = fmt.signal_name(args.signal or args.legacy_signal or "SIGKILL")
    except ValueError as exc:
        raise AgentError(str(exc)) from None
    api = nomad(args)
    alloc = api.find_alloc(args.alloc_id)
    alloc_id = str(alloc["ID"])
    task = args.task_flag or args.task
    body: dict[str, Any] = {"Signal": sig, "Task": task or ""}
    api.call(
        "POST", f"/v1/client/allocation/{q(alloc_id)}/signal", f"signal {sig} to alloc {alloc_id[:8]}", body
    )
    names = task or ", ".join(_running_tasks(alloc)) or "every running task"
    print(f"Sent {sig} to task {names} of alloc {alloc_id[:8]}")
    return 0


def alloc_restart(args: argparse.Namespace) -> int:
    api = nomad(args)
    alloc = api.find_alloc(args.alloc_id)
    alloc_id = str(alloc["ID"])
    task = args.task_flag or args.task
    body: dict[str, Any] = {"TaskName": task or "", "AllTasks": bool(args.all_tasks)}
    api.call("POST", f"/v1/client/allocation/{q(alloc_id)}/restart", f"restart alloc {alloc_id[:8]}", body)
    which = f"task {task}" if task else ("every task" if args.all_tasks else "every running task")
    print(f"Restarting {which} of alloc {alloc_id[:8]}")
    return 0


def alloc_stop(args: argparse.Namespace) -> int:
    """`POST /v1/allocation/:id/stop`: a managed alloc stops and is replaced (NextAllocation), as
    Nomad's scheduler does; an adopted one's tasks are removed."""
    api = nomad(args)
    alloc_id = str(api.find_alloc(args.alloc_id)["ID"])
    out = api.call("POST", f"/v1/allocation/{q(alloc_id)}/stop", f"stop alloc {alloc_id[:8]}", {})
    if args.json:
        _print_json(out)
        return 0
    if args.detach:
        print(out.get("EvalID"))
        return 0
    try:
        after: dict[str, Any] | None = api.get(f"/v1/allocation/{q(alloc_id)}", f"alloc {alloc_id[:8]}")
    except CallError as exc:
        if exc.status != NOT_FOUND:
            raise
        after = None
    print(allocformat.alloc_stopped(alloc_id, out, after))
    return 0


# -- the node -----------------------------------------------------------------------------------


def node_status(args: argparse.Namespace) -> int:
    """The agent's node: GET /v1/agent/self (its node id, and this agent's own health in
    stats["fieldlab"]), /v1/agent/health (500 while degraded), /v1/node/:id, its allocations and
    the job count."""
    from agent.api.client import ApiError

    api = nomad(args)
    agent_self = api.get("/v1/agent/self", "the agent")
    try:
        health = api.api.request("GET", "/v1/agent/health")
    except ApiError as exc:  # 500 while the agent is degraded: the answer says why
        if not isinstance(exc.body, dict) or "client" not in exc.body:
            raise CallError("the agent's health", exc.status, str(exc.body).strip()) from None
        health = exc.body
    node_id = str(((agent_self.get("stats") or {}).get("client") or {}).get("node_id") or "")
    if not node_id:
        raise AgentError("the agent has no client node (stats.client.node_id of /v1/agent/self is empty)")
    node = api.get(f"/v1/node/{q(node_id)}", f"node {node_id[:8]}")
    allocs = api.get(f"/v1/node/{q(node_id)}/allocations", f"node {node_id[:8]}'s allocations")
    jobs = api.get("/v1/jobs", "the job list")
    if args.json:
        _print_json({"Self": agent_self, "Health": health, "Node": node, "Allocations": allocs})
    else:
        print(fmt.node_status(agent_self, health, node, allocs, len(jobs), args.verbose))
    return 0
