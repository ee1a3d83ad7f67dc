"""`python -m e2e.harness.report <run dir>`: re-render a run's report (and the index across runs when
the run is under e2e/reports), then print its summary. `--index [reports dir]` rebuilds the index alone."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from e2e.harness.report.index import REPORTS, publish, write_index
from e2e.harness.report.model import HISTORY_NAME, load_run
from e2e.harness.report.page import write_page
from e2e.harness.report.summary import summary_of

USAGE = "usage: python -m e2e.harness.report <run dir> | --index [reports dir]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--index"] and len(args) <= 2:
        return _index(Path(args[1]) if len(args) == 2 else REPORTS)
    if len(args) != 1 or args[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    if not run_dir.is_dir():
        print(f"report: no such run directory: {run_dir}", file=sys.stderr)
        return 2
    if not (run_dir / HISTORY_NAME).is_file():
        print(f"report: {run_dir} has no {HISTORY_NAME}", file=sys.stderr)
        return 2
    try:
        run = load_run(run_dir)
        write_page(run)
        index = publish(run)
        print(summary_of(run, index))
    except (OSError, ValueError) as exc:
        print(f"report: cannot report on {run_dir}: {exc}", file=sys.stderr)
        return 1
    return 0


def _index(root: Path) -> int:
    if not root.is_dir():
        print(f"report: no such reports directory: {root}", file=sys.stderr)
        return 2
    try:
        print(f"index of runs: {write_index(root)}")
    except (OSError, ValueError) as exc:
        print(f"report: cannot index {root}: {exc}", file=sys.stderr)
        return 1
    return 0
