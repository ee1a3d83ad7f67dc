"""`fieldlab-agent`: run the agent daemon, check a config file, validate jobspecs, or talk to an
agent as Nomad's CLI does (job, alloc, node verbs; agent.cli.commands), print its version or a shell
completion script.

    parser.py      the command tree (Nomad's single-dash flags, `--` before a command to exec)
    commands.py    the verbs, each speaking Nomad's HTTP API (I/O)
    calls.py       their calls: errors naming what failed, alloc id prefixes, streamed answers
    logs.py        `alloc logs`: plain, -tail, -f (Nomad's StreamFrames)
    session.py     `alloc exec` over Nomad's exec websocket (wsclient.py: RFC 6455 over mTLS)
    format.py      what they print: tables, `Key = value` blocks, relative times (pure)
    allocformat.py the same for allocations (pure)
    allocstatus.py `alloc status` laid out as `nomad alloc status` (pure)
    jobfiles.py    jobspec files: -var/-var-file, file() reads, `job validate` (offline)
    completion.py  bash/zsh completion generated from the command tree
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

from agent import __version__
from agent.cli import commands
from agent.cli.completion import bash_script, zsh_script
from agent.cli.jobfiles import validate_command
from agent.cli.parser import PROG, Command, build_parser, split_command
from agent.command.config import load_config
from agent.errors import AgentError


def _logging(level: str, node: str) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format=f"%(asctime)s %(levelname)s node={node} %(name)s: %(message)s"
    )


def _version(args: argparse.Namespace) -> int:
    print(f"{PROG} v{__version__}")
    return 0


def _completion(args: argparse.Namespace) -> int:
    parser = parser_()
    print(bash_script(parser) if args.shell == "bash" else zsh_script(parser), end="")
    return 0


def _agent_main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        if args.cmd == "check-config":
            print(f"{args.config}: ok (node {config.node_name})")
            return 0
        _logging(config.log_level, config.node_name)
        from agent.command.lean import fewer_malloc_arenas, leave_out_unused_sdks

        leave_out_unused_sdks()  # before the docker SDK loads: no paramiko in the daemon
        fewer_malloc_arenas()  # before the daemon's threads start
        from agent.command.daemon import Agent

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


COMMANDS: dict[str, Command] = {
    "run": _agent_main,
    "check-config": _agent_main,
    "version": _version,
    "completion": _completion,
    "job status": commands.job_status,
    "job list": commands.job_status,
    "job inspect": commands.job_inspect,
    "job run": commands.job_run,
    "job plan": commands.job_plan,
    "job history": commands.job_history,
    "job scale": commands.job_scale,
    "job revert": commands.job_revert,
    "job dispatch": commands.job_dispatch,
    "job periodic force": commands.job_periodic_force,
    "job validate": validate_command,
    "job stop": commands.job_stop,
    "alloc list": commands.alloc_list,
    "alloc status": commands.alloc_status,
    "alloc logs": commands.alloc_logs,
    "alloc exec": commands.alloc_exec,
    "alloc signal": commands.alloc_signal,
    "alloc restart": commands.alloc_restart,
    "alloc stop": commands.alloc_stop,
    "node status": commands.node_status,
}


SIGPIPE_EXIT = 128 + 13  # what a shell reports for a command killed by SIGPIPE, as Nomad's CLI is


def reader_gone() -> int:
    """stdout's reader went away: nothing more is written (stdout goes to /dev/null, so the
    interpreter's last flush has nowhere to fail) and the exit code is SIGPIPE's, as a Unix
    command killed by it (Go's runtime kills Nomad's CLI so on a broken stdout)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return SIGPIPE_EXIT


def parser_() -> argparse.ArgumentParser:
    return build_parser(COMMANDS)


def main(argv: list[str] | None = None) -> int:
    head, command = split_command(sys.argv[1:] if argv is None else argv)
    args = parser_().parse_args(head)
    if command is not None:
        args.command = command
    func: Command = args.func
    if func in (_agent_main, validate_command):
        return func(args)
    try:
        code = func(args)
        sys.stdout.flush()  # here, where a reader gone away is seen, not at the interpreter's exit
        return code
    except BrokenPipeError:  # `| head -1`: the reader went away; end as Nomad's CLI (SIGPIPE), quietly
        return reader_gone()
    except AgentError as exc:  # what failed and the agent's reason (Nomad's are plain text, one a line)
        print(f"fieldlab-agent: error: {str(exc).strip()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fieldlab-agent: interrupted", file=sys.stderr)
        return 130


__all__ = ["COMMANDS", "main", "parser_"]
