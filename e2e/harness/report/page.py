"""The run's page: `report.html` rendered from the Jinja2 templates in `e2e/harness/templates/`.

Autoescape is on, so every text from the run is escaped by the template; the only markup handed to
it unescaped is the SVG built by `timeline` and `plots`, which escape on their own.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from e2e.harness import history
from e2e.harness.report import fmt, plots, timeline
from e2e.harness.report.model import (
    COMMANDS_NAME,
    REPORT_NAME,
    Figure,
    Record,
    Run,
    TestResult,
    counts_checked,
    figures,
    listed,
    node_logs,
    num,
    over_target,
    short_test,
    suites,
    target_of,
    text,
    time_of,
)

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
REPORT_TEMPLATE = "report.html.j2"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["seconds"] = fmt.fmt_seconds
    env.filters["number"] = fmt.fmt_number
    env.filters["clock"] = fmt.fmt_clock
    env.filters["outcome_class"] = fmt.outcome_class
    env.globals["outcome_names"] = fmt.outcome_names
    return env


def write_atomically(path: Path, content: str) -> None:
    """Readers (a browser, a CI upload) see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(content, encoding="utf-8")
    os.replace(tmp, path)


# -- what the template shows ------------------------------------------------------------------------
@dataclass
class TestRow:
    test: TestResult
    summary: str  # the failure's first line
    text: str  # message and traceback


@dataclass
class MeasureRow:
    rel: str
    name: str
    node: str
    test: str
    seconds: float | None
    target: float | None
    over: bool


@dataclass
class PlotRow:
    figure: Figure
    plot: Markup
    median: float | None


@dataclass
class HistoryRow:
    t: float
    rel: str
    kind: str
    node: str
    test: str
    nodeid: str
    name: str
    detail: str
    bad: bool


def test_row(test: TestResult) -> TestRow:
    body = "\n\n".join(part for part in (test.message, test.details) if part)
    first = body.strip().splitlines()[0] if body.strip() else ""
    return TestRow(test, first[:160], body)


def measure_row(run: Run, rec: Record) -> MeasureRow:
    return MeasureRow(
        rel=fmt.rel_time(run.start, rec),
        name=text(rec.get("name")),
        node=text(rec.get("node")),
        test=short_test(rec),
        seconds=num(rec.get("duration")),
        target=target_of(rec),
        over=over_target(rec),
    )


def history_row(run: Run, rec: Record) -> HistoryRow:
    kind = text(rec.get("kind"))
    return HistoryRow(
        t=time_of(rec),
        rel=fmt.rel_time(run.start, rec),
        kind=kind,
        node=text(rec.get("node")),
        test=short_test(rec),
        nodeid=text(rec.get("test")),
        name=text(rec.get("name")),
        detail=fmt.record_detail(rec),
        bad=rec.get("ok") is False or (kind == history.MEASURE and over_target(rec)),
    )


def context(run: Run) -> dict[str, Any]:
    figs = figures(run.records)
    commands = run.of_kind(history.COMMAND)
    bands = timeline.fault_bands(run.records, run.end)
    checks = run.of_kind(history.CHECK)
    logs = [
        (quote(rel.as_posix()), rel.as_posix(), (run.run_dir / rel).stat().st_size)
        for rel in node_logs(run.run_dir)
    ]
    return {
        "run": run,
        "replay": run.repro.replay if run.repro and run.repro.replay else fmt.replay_command(run.seed),
        "repro": run.repro,
        "suites": [(suite, [test_row(test) for test in suite.tests]) for suite in suites(run)],
        "timeline": Markup(timeline.timeline(run.records, start=run.start, end=run.end)),
        "lanes": timeline.lanes(run.records),
        "faults": len(bands),
        "unhealed": sum(1 for band in bands if not band.healed),
        "checks": len(checks),
        "failed_checks": sum(1 for rec in checks if rec.get("ok") is False),
        "measure_rows": [measure_row(run, rec) for rec in run.of_kind(history.MEASURE)],
        "plots": [
            PlotRow(
                fig,
                Markup(plots.measure_plot(fig, run.start)),
                statistics.median(fig.values) if fig.values else None,
            )
            for fig in figs
        ],
        "repeated": [fig for fig in figs if len(fig.values) > 1],
        "measures_over": sum(fig.over for fig in figs),
        "counts": counts_checked(run),
        "history_rows": [history_row(run, rec) for rec in listed(run)],
        "commands": len(commands),
        "failed_commands": sum(1 for rec in commands if rec.get("ok") is False),
        "commands_log": (run.run_dir / COMMANDS_NAME).is_file(),
        "observed": len(run.of_kind(history.OBSERVE)),
        "logs": logs,
        "median": statistics.median,
        "storms": storm_rows(run),
    }


@dataclass(frozen=True)
class StormRow:
    name: str
    detail: str
    charts: list[Markup]


# A fleet storm's curves (e2e/suites/test_fleet_storm.py records them): series name -> (x label, y label).
SERIES_AXES = {
    "requests per second": ("seconds into the storm", "OpenBao requests per second"),
    "probes converged": ("seconds into the storm", "probes with the new certificate loaded"),
}


def storm_rows(run: Run) -> list[StormRow]:
    """Every note that carries curves: its request rate, convergence curve and restore times."""
    rows = []
    for rec in run.of_kind(history.NOTE):
        data = rec.get("data") or {}
        series = data.get("series") or {}
        if not series:
            continue
        charts = []
        for key, points in series.items():
            x_label, y_label = SERIES_AXES.get(key, ("x", key))
            pts = [(float(x), float(y)) for x, y in points]
            charts.append(Markup(plots.series_chart(f"{rec.get('name')}: {key}", pts, x_label, y_label)))
        restore = [float(v) for v in data.get("restore_seconds") or []]
        if restore:
            charts.append(
                Markup(
                    plots.series_chart(
                        f"{rec.get('name')}: restore times",
                        plots.distribution_points(restore),
                        "percent of agents",
                        "agent restore seconds (sorted)",
                    )
                )
            )
        rows.append(StormRow(str(rec.get("name", "")), str(rec.get("detail", "")), charts))
    return rows


def html_page(run: Run) -> str:
    return environment().get_template(REPORT_TEMPLATE).render(context(run))


def write_page(run: Run) -> Path:
    """Write `report.html` into the run dir and return its path."""
    out = run.run_dir / REPORT_NAME
    write_atomically(out, html_page(run))
    return out
