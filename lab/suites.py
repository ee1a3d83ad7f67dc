"""The lab CLI's suite commands: `fieldlab e2e`, `fieldlab repro BUG`, `fieldlab report RUN_DIR`,
each what its make target runs (the argv is pure), handed the terminal from the project's root."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from lab.config import PROJECT_DIR
from lab.errors import LabError
from lab.progress import say


def e2e_argv(args: argparse.Namespace) -> list[str]:
    """`fieldlab e2e`: what `make e2e` (or with --smoke, `make smoke`) runs (pure)."""
    argv = [sys.executable, "-m", "pytest", "e2e"]
    if args.smoke:
        argv += ["-m", "e2e and not nightly"]
    argv += ["--lab", args.lab]
    if args.loops is not None:
        argv += ["--loops", str(args.loops)]
    if args.chaos_minutes is not None:
        argv += ["--chaos-minutes", f"{args.chaos_minutes:g}"]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    if args.k:
        argv += ["-k", args.k]
    return argv + list(args.pytest_args)


def repro_argv(args: argparse.Namespace) -> list[str]:
    """`fieldlab repro BUG|FILE` (what `make repro BUG=...` runs) or `fieldlab repro new BUG
    --jobspec FILE` (pure). A scenario file's path is made absolute: the repro runs from the
    project's root."""
    if args.bug == "new":
        if not args.new_bug or not args.jobspec:
            raise LabError(
                "fieldlab repro new ID --jobspec FILE: say the bug id (a report id or URL) and the jobspec"
            )
        jobspec = str(Path(args.jobspec).resolve())
        where = ["--dir", str(Path(args.dir).resolve())] if args.dir else []
        return [sys.executable, "-m", "e2e.drivers.repro", "new", args.new_bug, "--jobspec", jobspec, *where]
    bug = args.bug
    if bug.endswith((".yml", ".yaml")) or "/" in bug:
        bug = str(Path(bug).resolve())
    argv = [sys.executable, "-m", "e2e.drivers.repro", "--lab", args.lab]
    if getattr(args, "target", ""):
        argv += ["--target", args.target]
    if args.loops is not None:
        argv += ["--loops", str(args.loops)]
    return [*argv, bug]


def report_argv(args: argparse.Namespace) -> list[str]:
    """`fieldlab report RUN_DIR`: re-render a run's report and print its summary (pure)."""
    return [sys.executable, "-m", "e2e.harness.report", str(Path(args.run_dir).resolve())]


def _run_in_project(argv: list[str]) -> int:
    """Hand the terminal to `argv`, run from the project's root (where e2e/ lives)."""
    if not (PROJECT_DIR / "e2e").is_dir():
        raise LabError(f"{PROJECT_DIR} has no e2e/: the suites run from a checkout of fieldlab")
    say(" ".join(shlex.quote(a) for a in argv[1:]))
    os.chdir(PROJECT_DIR)
    os.execv(argv[0], argv)  # noqa: S606 - the suites take over the terminal
    return 127  # pragma: no cover - exec does not return


def shrink_argv(args: argparse.Namespace) -> list[str]:
    """`fieldlab e2e shrink RUN`: a failed chaos run shrunk to the steps that matter (pure)."""
    if len(args.pytest_args) != 2:
        raise LabError(
            "fieldlab e2e shrink RUN: say which failed chaos run (its directory under e2e/reports/)"
        )
    run = str(Path(args.pytest_args[1]).resolve())
    return [sys.executable, "-m", "e2e.drivers.shrink", run, "--lab", args.lab]


def cmd_e2e(args: argparse.Namespace) -> int:
    if args.pytest_args[:1] == ["shrink"]:
        return _run_in_project(shrink_argv(args))
    return _run_in_project(e2e_argv(args))


def cmd_repro(args: argparse.Namespace) -> int:
    return _run_in_project(repro_argv(args))


def cmd_report(args: argparse.Namespace) -> int:
    return _run_in_project(report_argv(args))


def add_suite_commands(top: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab_default = os.environ.get("LAB", "default")
    e2e = top.add_parser(
        "e2e",
        help="run the e2e suites on a running lab (make e2e; --smoke: make smoke)",
        usage="fieldlab e2e [options] [-- PYTEST-ARGS...]  |  fieldlab e2e shrink RUN [--lab LAB]",
        description="Run the e2e suites against a running lab; the report goes to "
        "e2e/reports/<run>/. Arguments after -- go to pytest. `shrink RUN` replays a failed seeded "
        "chaos run's steps in ever smaller subsets until no step can be dropped, and writes the "
        "minimal schedule as a scenario file.",
    )
    e2e.add_argument("--lab", default=lab_default, help="lab name (env LAB)")
    e2e.add_argument("--smoke", action="store_true", help="all but the nightly suites (what make test runs)")
    e2e.add_argument("--seed", type=int, help="replay a run's random choices")
    e2e.add_argument("--loops", type=int, help="agent restarts per loop suite (default 5)")
    e2e.add_argument("--chaos-minutes", type=float, help="minutes of seeded chaos (default 3)")
    e2e.add_argument("-k", help="select tests (pytest -k)")
    e2e.add_argument("pytest_args", nargs="*", help=argparse.SUPPRESS)
    e2e.set_defaults(func=cmd_e2e)
    rp = top.add_parser(
        "repro",
        help="reproduce a field bug on a running lab (make repro)",
        usage="fieldlab repro [--lab LAB] [--target T] BUG|FILE|list|all  |  "
        "fieldlab repro new ID --jobspec FILE [--dir DIR]",
        description="Run a catalogue entry's scenario (e2e/scenarios/<bug>.yml, or a scenario FILE "
        "anywhere) with its fault flag (REPRODUCED) and without (FIXED); a scenario without a flag, "
        "or any on a target whose clients take none (TARGET=nomad), runs once: PRESENT or ABSENT. "
        "BUG: a bug id, list or all. `new ID --jobspec FILE` writes a scenario skeleton for a report "
        "(ID: any report id, or its URL; the jobspec HCL2 or JSON), to fill in.",
    )
    rp.add_argument("bug", metavar="BUG")
    rp.add_argument("new_bug", nargs="?", default="", help=argparse.SUPPRESS)
    rp.add_argument("--jobspec", default="", help="new: the report's jobspec")
    rp.add_argument(
        "--dir",
        default="",
        help="new: where to write it (default: e2e/scenarios for a nomad-<n> id, else beside the jobspec)",
    )
    rp.add_argument("--lab", default=lab_default, help="lab name (env LAB)")
    rp.add_argument(
        "--target",
        default=os.environ.get("TARGET", ""),
        help="what the clients run (env TARGET; default: the lab's): nomad runs each scenario once",
    )
    rp.add_argument("--loops", type=int, help="agent restarts in the template scenarios")
    rp.set_defaults(func=cmd_repro)
    rr = top.add_parser("report", help="re-render an e2e run's report and print its summary")
    rr.add_argument("run_dir", metavar="RUN_DIR", help="e.g. e2e/reports/<run>")
    rr.set_defaults(func=cmd_report)
