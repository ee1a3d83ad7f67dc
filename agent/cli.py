"""`fieldlab-agent`: run the agent daemon, or check a config file."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from agent.config import DEFAULT_CONFIG, load_config
from agent.errors import AgentError


def _logging(level: str, node: str) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format=f"%(asctime)s %(levelname)s node={node} %(name)s: %(message)s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fieldlab-agent", description="fieldlab's reference client agent")
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"config file (default {DEFAULT_CONFIG})"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run", help="run the agent until SIGTERM/SIGINT")
    sub.add_parser("check-config", help="validate the config file and exit")
    args = p.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
