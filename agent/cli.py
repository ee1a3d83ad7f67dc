"""`fieldlab-agent`: run the agent daemon, check a config file, validate jobspecs, or talk to an agent."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from agent.config import DEFAULT_CONFIG, load_config
from agent.errors import AgentError
from agent.jobspec.hclvars import parse_var_args, parse_var_file


def _logging(level: str, node: str) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format=f"%(asctime)s %(levelname)s node={node} %(name)s: %(message)s"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fieldlab-agent", description="fieldlab's reference client agent")
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"config file (default {DEFAULT_CONFIG})"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run", help="run the agent until SIGTERM/SIGINT")
    sub.add_parser("check-config", help="validate the config file and exit")
    job = sub.add_parser(
        "job", help="submit or stop jobs (env FIELDLAB_AGENT_ADDR, _CACERT, _CLIENT_CERT, _CLIENT_KEY)"
    )
    job_sub = job.add_subparsers(dest="job_cmd", required=True)
    jr = job_sub.add_parser("run", help="submit a jobspec file (HCL or JSON)")
    jr.add_argument("file", type=Path)
    _var_options(jr)
    jv = job_sub.add_parser(
        "validate",
        help="check jobspec files offline, as a submission would (no agent, no config)",
        description="Parse each jobspec (a directory: every *.hcl, *.nomad, *.json in it, recursively) "
        "and check its templates. Exit 0 when every file is accepted, 1 when any is refused, 2 for a "
        "usage error.",
    )
    jv.add_argument("paths", nargs="+", type=Path, metavar="FILE|DIR")
    _var_options(jv)
    js = job_sub.add_parser("stop", help="stop a job's allocations")
    js.add_argument("job_id")
    job_sub.add_parser("list", help="list jobs")
    alloc = sub.add_parser("alloc", help="inspect allocations")
    alloc_sub = alloc.add_subparsers(dest="alloc_cmd", required=True)
    alloc_sub.add_parser("list", help="list allocations")
    ast = alloc_sub.add_parser("status", help="an allocation's detail and events")
    ast.add_argument("alloc_id")
    for name in ("restart", "signal"):
        sp = alloc_sub.add_parser(name, help=f"{name} a task")
        sp.add_argument("alloc_id")
        sp.add_argument("task")
        if name == "signal":
            sp.add_argument("signal", help="e.g. SIGHUP")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "job" and args.job_cmd == "validate":
        return _validate_command(args)
    if args.cmd in ("job", "alloc"):
        try:
            return _client_command(args)
        except AgentError as exc:
            print(f"fieldlab-agent: error: {exc}", file=sys.stderr)
            return 2
    return _agent_main(args)


def _agent_main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        if args.cmd == "check-config":
            print(f"{args.config}: ok (node {config.node_name})")
            return 0
        _logging(config.log_level, config.node_name)
        from agent.daemon import Agent

        agent = Agent(config)
        agent.install_signal_handlers()
        agent.startup()
        try:
            agent.run()
        finally:
            agent.shutdown()
        return 0
    except AgentError as exc:
        print(f"fieldlab-agent: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # e.g. dockerd unreachable at start: one line, not a traceback
        if type(exc).__module__.startswith(("docker", "requests", "urllib3")):
            print(f"fieldlab-agent: error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        raise


def _client_command(args: argparse.Namespace) -> int:
    import json

    from agent.client import ApiClient

    api = ApiClient.from_env()
    out: object
    if args.cmd == "job" and args.job_cmd == "run":
        try:
            text = args.file.read_text()
        except OSError as exc:
            raise AgentError(f"{args.file}: {exc.strerror}") from None
        body: dict[str, object] = {"jobspec": text, "source": str(args.file)}
        variables = _variables(args)
        if variables:
            body["variables"] = variables
        files = _files_read(args.file, variables)
        if files:
            body["files"] = files
        out = api.request("POST", "/v1/jobs", body)
    elif args.cmd == "job" and args.job_cmd == "stop":
        out = api.request("DELETE", f"/v1/job/{args.job_id}")
    elif args.cmd == "job":
        out = api.request("GET", "/v1/jobs")
    elif args.alloc_cmd == "list":
        out = api.request("GET", "/v1/allocations")
    elif args.alloc_cmd == "status":
        out = {
            "alloc": api.request("GET", f"/v1/allocation/{args.alloc_id}"),
            "events": api.request("GET", f"/v1/allocation/{args.alloc_id}/events"),
        }
    elif args.alloc_cmd == "restart":
        out = api.request("POST", f"/v1/allocation/{args.alloc_id}/restart", {"task": args.task})
    else:
        out = api.request(
            "POST", f"/v1/allocation/{args.alloc_id}/signal", {"task": args.task, "signal": args.signal}
        )
    print(json.dumps(out, indent=2))
    return 0


def _var_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-var",
        "--var",
        dest="var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an HCL2 input variable (repeatable; wins over -var-file)",
    )
    parser.add_argument(
        "-var-file",
        "--var-file",
        dest="var_file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a file of HCL2 input variables, HCL (k = v) or JSON (repeatable, later files win)",
    )


def _files_read(path: Path, variables: dict[str, object]) -> dict[str, str]:
    """What the jobspec's HCL file() calls read next to it: sent with the jobspec, as Nomad's CLI
    evaluates file() on its side. A jobspec that does not parse here is sent as it is: the agent
    answers with its problems."""
    from agent.jobspec import JobspecError, load_jobspec

    try:
        return dict(load_jobspec(path, variables).files)
    except JobspecError:
        return {}


def _variables(args: argparse.Namespace) -> dict[str, object]:
    """-var-file files in order, then -var (as Nomad: -var wins); AgentError for a bad one."""
    variables: dict[str, object] = {}
    for path in args.var_file:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise AgentError(f"-var-file {path}: {reason}") from None
        variables.update(parse_var_file(text, str(path)))
    if args.var:
        variables.update(parse_var_args(list(args.var)))
    return variables


def _validate_command(args: argparse.Namespace) -> int:
    from agent import validate

    try:
        variables = _variables(args)
        files = validate.collect_files(args.paths)
    except AgentError as exc:
        print(f"fieldlab-agent: error: {exc}", file=sys.stderr)
        return 2
    results: list[validate.FileResult] = []
    unreadable = False
    for path in files:
        try:
            result = validate.validate_file(path, variables)
        except AgentError as exc:  # UsageError: the file vanished or cannot be opened
            print(f"fieldlab-agent: error: {exc}", file=sys.stderr)
            unreadable = True
            continue
        results.append(result)
        print(validate.format_result(result), flush=True)
    print()
    print(validate.format_summary(validate.summarize(results)))
    return 2 if unreadable else validate.exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
