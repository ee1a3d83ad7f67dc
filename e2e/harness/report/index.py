"""Across runs: `e2e/reports/index.html` (a row per run and the trend of the key measures) and
`e2e/reports/latest`, a symlink to the newest run dir.

Both are rebuilt whenever a run's report is rendered (`build.render`). Each run dir keeps a small
`run-summary.json` (what its row and the trends need), written with its report and trusted while it
is newer than the run's history and junit.xml; a run dir without one (copied in, or rendered before
there was an index) is read in full once and gets one.

A run dir is any directory under the reports root, up to three levels down (`make nightly` puts its
suites in `<stamp>-nightly/suites/`, `make repro` a dir per bug and flag), that holds a history.jsonl.
Runs made with agent fault flags, and every half of a bug's reproduction, are listed but left out
of the trends.
"""

from __future__ import annotations

import json
import logging
import os
import re
import statistics
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from e2e.harness import history
from e2e.harness.report import fmt, plots, timeline
from e2e.harness.report.model import (
    HISTORY_NAME,
    JUNIT_NAME,
    REPORT_NAME,
    REPRO_NAME,
    Run,
    figures,
    load_run,
)
from e2e.harness.report.page import environment, write_atomically

log = logging.getLogger(__name__)

REPORTS = Path(__file__).resolve().parents[2] / "reports"
INDEX_NAME = "index.html"
LATEST_NAME = "latest"
SUMMARY_NAME = "run-summary.json"
SUMMARY_VERSION = 2
INDEX_TEMPLATE = "index.html.j2"
SCAN_DEPTH = 3
TREND_RUNS = 60  # the trends show this many of the latest runs


@dataclass(frozen=True)
class KeyMeasure:
    """A figure whose trend across runs the index plots: the measures whose names match `pattern`."""

    label: str
    pattern: str
    source: str  # where the measure is taken, for the reader

    def matches(self, name: str) -> bool:
        return re.fullmatch(self.pattern, name) is not None


KEY_MEASURES = (
    KeyMeasure(
        "restore time",
        r"agent-sig\w+: kill to restore done",
        "agent killed to its API answering with the restore done (AgentRestart, e2e/harness/faults.py)",
    ),
    KeyMeasure(
        "reboot → reachable",
        r"(clean|hard) reboot to alloc reachable",
        "node reboot to the restored alloc reachable (e2e/suites/test_restore.py)",
    ),
    KeyMeasure(
        "pause kill → recovered",
        r"kill pause( \+ agent \w+)? to network recovered",
        "pause container killed to the alloc's network recovered (e2e/suites/test_pause_kill.py)",
    ),
)


@dataclass
class RunSummary:
    """What the index needs of one run."""

    run_id: str
    lab: str
    seed: str | None
    start: float
    end: float
    outcomes: dict[str, int]
    flags: str
    faults: int
    unhealed: int
    failed_checks: int
    measures: dict[str, list[float]]
    targets: dict[str, float]
    bug: str = ""  # the bug a repro half reproduces ("" for any other run)
    verdict: str = ""  # that half's verdict
    version: int = SUMMARY_VERSION
    path: str = field(default="", compare=False)  # the run dir relative to the reports root
    has_report: bool = field(default=False, compare=False)

    @property
    def wall(self) -> float:
        return max(0.0, self.end - self.start)

    def key_values(self, key: KeyMeasure) -> list[float]:
        return [v for name, values in self.measures.items() if key.matches(name) for v in values]

    def key_target(self, key: KeyMeasure) -> float | None:
        targets = [t for name, t in self.targets.items() if key.matches(name)]
        return max(targets) if targets else None

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("path")
        data.pop("has_report")
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> RunSummary:
        """Raises ValueError (or TypeError, KeyError) on anything but this version's summary."""
        data: Any = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != SUMMARY_VERSION:
            raise ValueError("not a run summary of this version")
        summary = cls(**data)
        if not isinstance(summary.measures, dict) or not isinstance(summary.outcomes, dict):
            raise ValueError("malformed run summary")
        return summary


def summarize(run: Run) -> RunSummary:
    bands = timeline.fault_bands(run.records, run.end)
    figs = figures(run.records)
    return RunSummary(
        run_id=run.run_id,
        lab=run.lab,
        seed=run.seed,
        start=run.start,
        end=run.end,
        outcomes=dict(run.outcomes),
        flags=run.agent_flags,
        bug=run.repro.bug if run.repro else "",
        verdict=run.repro.verdict if run.repro else "",
        faults=len(bands),
        unhealed=sum(1 for band in bands if not band.healed),
        failed_checks=sum(1 for rec in run.of_kind(history.CHECK) if rec.get("ok") is False),
        measures={fig.name: fig.values for fig in figs if fig.values},
        targets={fig.name: fig.target for fig in figs if fig.target is not None},
    )


def write_summary(run: Run) -> RunSummary:
    summary = summarize(run)
    write_atomically(run.run_dir / SUMMARY_NAME, summary.to_json())
    return summary


def _fresh(run_dir: Path) -> bool:
    cache = run_dir / SUMMARY_NAME
    if not cache.is_file():
        return False
    written = cache.stat().st_mtime
    sources = [run_dir / HISTORY_NAME, run_dir / JUNIT_NAME, run_dir / REPRO_NAME]
    return all(not src.exists() or src.stat().st_mtime <= written for src in sources)


def read_summary(run_dir: Path) -> RunSummary:
    """The run's cached summary when fresh, else the run read in full (and the cache written)."""
    if _fresh(run_dir):
        try:
            return RunSummary.from_json((run_dir / SUMMARY_NAME).read_text())
        except (OSError, ValueError, TypeError, KeyError):
            pass
    run = load_run(run_dir)
    try:
        return write_summary(run)
    except OSError:  # a read-only copy of a run still gets its row
        return summarize(run)


# -- finding runs ------------------------------------------------------------------------------------
def find_runs(root: Path) -> Iterator[Path]:
    """Directories under `root` holding a history.jsonl, up to SCAN_DEPTH down; symlinks (`latest`)
    and hidden directories are not followed, and a run dir is not searched for runs inside it."""
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here != root and HISTORY_NAME in filenames:
            dirnames[:] = []
            yield here
            continue
        if len(here.parts) - base >= SCAN_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))


def reports_root_for(run_dir: Path) -> Path | None:
    """The reports root (e2e/reports) when `run_dir` is inside it; None for a run dir elsewhere
    (a copied run, a test's tmp dir): rendering that one leaves every index alone."""
    root = REPORTS.resolve()
    here = run_dir.resolve()
    return REPORTS if here != root and here.is_relative_to(root) else None


def index_page_for(run_dir: Path) -> Path | None:
    root = reports_root_for(run_dir)
    page = root / INDEX_NAME if root is not None else None
    return page if page is not None and page.is_file() else None


def load_summaries(root: Path) -> list[RunSummary]:
    """Every run under `root`, oldest first; a run dir that cannot be read is skipped (and logged)."""
    out = []
    for run_dir in find_runs(root):
        try:
            summary = read_summary(run_dir)
        except (OSError, ValueError) as exc:
            log.warning("index: skipping %s: %s", run_dir, exc)
            continue
        summary.path = run_dir.relative_to(root).as_posix()
        summary.has_report = (run_dir / REPORT_NAME).is_file()
        out.append(summary)
    return sorted(out, key=lambda s: (s.start, s.path))


def update_latest(root: Path, newest: RunSummary) -> Path | None:
    """Point `root/latest` at the newest run dir (relative, so the tree can be moved), atomically:
    a new symlink renamed over the old one. A real directory named `latest` is left alone."""
    link = root / LATEST_NAME
    if link.exists() and not link.is_symlink():
        log.warning("index: %s is not a symlink; not replacing it", link)
        return None
    tmp = root / f".{LATEST_NAME}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(newest.path, target_is_directory=True)
    os.replace(tmp, link)
    return link


# -- the page ----------------------------------------------------------------------------------------
def href(summary: RunSummary) -> str:
    base = quote(summary.path)
    return f"{base}/{REPORT_NAME}" if summary.has_report else f"{base}/"


@dataclass
class KeyCell:
    median: float | None
    target: float | None

    @property
    def over(self) -> bool:
        return self.median is not None and self.target is not None and self.median > self.target


@dataclass
class IndexRow:
    summary: RunSummary
    href: str
    date: str
    keys: list[KeyCell]


@dataclass
class Trend:
    key: KeyMeasure
    chart: Markup | None
    runs: int


def index_row(summary: RunSummary) -> IndexRow:
    keys = []
    for key in KEY_MEASURES:
        values = summary.key_values(key)
        keys.append(KeyCell(statistics.median(values) if values else None, summary.key_target(key)))
    return IndexRow(summary, href(summary), fmt.fmt_date(summary.start), keys)


def trends(summaries: list[RunSummary]) -> list[Trend]:
    recent = [s for s in summaries if not (s.flags or s.bug)][-TREND_RUNS:]
    out = []
    for key in KEY_MEASURES:
        points = [
            plots.TrendPoint(
                run=s.run_id,
                href=href(s),
                when=fmt.fmt_date(s.start),
                values=s.key_values(key),
                target=s.key_target(key),
            )
            for s in recent
            if s.key_values(key)
        ]
        chart = Markup(plots.trend_chart(points, key.label)) if points else None
        out.append(Trend(key, chart, len(points)))
    return out


def outcome_bars(summaries: list[RunSummary]) -> Markup | None:
    bars = [
        plots.OutcomeBar(
            run=s.run_id,
            href=href(s),
            passed=s.outcomes.get("passed", 0),
            failed=s.outcomes.get("failed", 0) + s.outcomes.get("error", 0),
            skipped=s.outcomes.get("skipped", 0),
        )
        for s in summaries[-TREND_RUNS:]
    ]
    return Markup(plots.outcomes_chart(bars)) if bars else None


def index_html(root: Path, summaries: list[RunSummary]) -> str:
    return (
        environment()
        .get_template(INDEX_TEMPLATE)
        .render(
            root=root,
            rows=[index_row(s) for s in reversed(summaries)],
            trends=trends(summaries),
            outcomes=outcome_bars(summaries),
            keys=KEY_MEASURES,
            trend_runs=TREND_RUNS,
            flagged=sum(1 for s in summaries if s.flags or s.bug),
        )
    )


def write_index(root: Path) -> Path:
    """Rebuild `root/index.html` and `root/latest` from every run under `root`."""
    summaries = load_summaries(root)
    page = root / INDEX_NAME
    write_atomically(page, index_html(root, summaries))
    if summaries:
        update_latest(root, max(summaries, key=lambda s: (s.start, s.path)))
    return page


def publish(run: Run, root: Path | None = None) -> Path | None:
    """After `run`'s report: its summary, then the index and `latest` of `root` (by default the
    reports root when the run is inside it). Returns the index page, or None when there is none.
    Never raises OSError: the run's own report is what matters."""
    try:
        write_summary(run)
    except OSError as exc:
        log.warning("index: cannot write %s: %s", run.run_dir / SUMMARY_NAME, exc)
    root = root if root is not None else reports_root_for(run.run_dir)
    if root is None:
        return None
    try:
        return write_index(root)
    except OSError as exc:
        log.warning("index: cannot update %s: %s", root, exc)
        return None
