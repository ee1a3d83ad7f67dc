"""Jobspec files on the operator's side: HCL2 input variables (-var, -var-file), what HCL's file()
reads next to a jobspec, and `job validate` (offline, no agent)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.errors import AgentError
from agent.jobspec.hclvars import parse_var_args, parse_var_file


def files_read(path: Path, variables: dict[str, object]) -> dict[str, str]:
    """What the jobspec's HCL file() calls read next to it: sent with the jobspec, as Nomad's CLI
    evaluates file() on its side. A jobspec that does not parse here is sent as it is: the agent
    answers with its problems."""
    from agent.jobspec import JobspecError, load_jobspec

    try:
        return dict(load_jobspec(path, variables).files)
    except JobspecError:
        return {}


def variables(args: argparse.Namespace) -> dict[str, object]:
    """-var-file files in order, then -var (as Nomad: -var wins); AgentError for a bad one."""
    out: dict[str, object] = {}
    for path in args.var_file:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise AgentError(f"-var-file {path}: {reason}") from None
        out.update(parse_var_file(text, str(path)))
    if args.var:
        out.update(parse_var_args(list(args.var)))
    return out


def registration(args: argparse.Namespace) -> tuple[dict[str, object], list[str]]:
    """The body of Nomad's `PUT /v1/jobs` for `job run FILE`, and the parse's warnings: the jobspec
    is parsed here, as Nomad's CLI parses it on its side (variables, file() next to the jobspec),
    and registered as Nomad's API JSON with the Submission (the source as written, its -var
    flags) that `job inspect` shows. AgentError with every problem, naming the file, when it
    does not parse."""
    from agent.jobspec import JobspecError, load_jobspec
    from agent.nomadapi.jobjson import parsed_job_json

    try:
        source = args.file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentError(f"{args.file}: {getattr(exc, 'strerror', None) or exc}") from None
    given = variables(args)
    try:
        parsed = load_jobspec(args.file, given)
    except JobspecError as exc:  # every problem, one a line, each with its path in the file
        raise AgentError(str(exc)) from None
    job = parsed_job_json(parsed.job)
    submission = {
        "Source": source,
        "Format": "json" if args.file.suffix == ".json" else "hcl2",
        "VariableFlags": {k: str(v) for k, v in given.items()},
        "Variables": "",
    }
    return {"Job": job, "Submission": submission}, list(parsed.warnings)


def validate_command(args: argparse.Namespace) -> int:
    from agent.cli import validate

    try:
        given = variables(args)
        found = validate.collect_files(args.paths)
    except AgentError as exc:
        print(f"fieldlab-agent: error: {exc}", file=sys.stderr)
        return 2
    results: list[validate.FileResult] = []
    unreadable = False
    for path in found:
        try:
            result = validate.validate_file(path, given)
        except AgentError as exc:  # UsageError: the file vanished or cannot be opened
            print(f"fieldlab-agent: error: {exc}", file=sys.stderr)
            unreadable = True
            continue
        results.append(result)
        print(validate.format_result(result), flush=True)
    print()
    print(validate.format_summary(validate.summarize(results)))
    return 2 if unreadable else validate.exit_code(results)
