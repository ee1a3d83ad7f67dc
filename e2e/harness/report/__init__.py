"""The run's report: an HTML page with a Jepsen-style timeline, and a short terminal summary, built
from a run dir; plus the index across runs.

A run dir (`e2e/reports/<run id>/`) holds `history.jsonl` (see `e2e.harness.history`), pytest's
`junit.xml` (missing if the run was killed), `commands.log` and, after a failure, the logs collected
from each node under `nodes/<node>/`. Nothing else is read: a report can be rebuilt from a copied
run dir on any machine, with

    python -m e2e.harness.report e2e/reports/<run id>

which writes `report.html` beside the history and prints the summary; for a run dir under
e2e/reports it also rebuilds `e2e/reports/index.html` and points `e2e/reports/latest` at the newest
run. The pages have inline CSS, no script and no network references; every text from the run is
escaped. docs/report.md tells how to read them.

The parts, by purpose: `model` reads a run, `timeline` and `plots` draw SVG (pure functions over the
records, written with `svg`), `page` renders the Jinja2 templates in e2e/harness/templates/, `index`
keeps the index across runs, `summary` writes the terminal lines, `build` ties a render together and
`cli` is the command line.
"""

from __future__ import annotations

from e2e.harness.report.build import render, render_run
from e2e.harness.report.cli import main
from e2e.harness.report.index import KEY_MEASURES, REPORTS, write_index
from e2e.harness.report.model import REPORT_NAME, Run, TestResult, load_run
from e2e.harness.report.summary import summary, summary_of

__all__ = [
    "KEY_MEASURES",
    "REPORTS",
    "REPORT_NAME",
    "Run",
    "TestResult",
    "load_run",
    "main",
    "render",
    "render_run",
    "summary",
    "summary_of",
    "write_index",
]
