"""The run's report: one self-contained HTML page and a short terminal summary, built from a run dir.

A run dir (`e2e/reports/<run id>/`) holds `history.jsonl` (see `e2e.harness.history`), pytest's
`junit.xml` (missing if the run was killed), `commands.log` and, after a failure, the logs collected
from each node under `nodes/<node>/`. Nothing else is read: a report can be rebuilt from a copied
run dir on any machine, with

    python -m e2e.harness.report e2e/reports/<run id>

which writes `report.html` beside the history and prints the summary. The page has inline CSS, no
script and no network references; every text that came from the run is escaped.
"""

from __future__ import annotations

import html
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from e2e.harness import history

Record = dict[str, Any]

REPORT_NAME = "report.html"
JUNIT_NAME = "junit.xml"
NODES_DIR = "nodes"
# Agent task events (history.py has no constant for them).
EVENT = "event"
# What the timeline shows; commands go to commands.log and observations are too many to list.
TIMELINE_KINDS = frozenset({history.FAULT, history.HEAL, history.CHECK, EVENT, history.MEASURE, history.NOTE})
SUMMARY_ITEMS = 6  # at most this many suites, measurements and failures in the summary each


# -- reading a run ---------------------------------------------------------------------------------
@dataclass
class TestResult:
    nodeid: str
    outcome: str
    duration: float
    message: str = ""
    details: str = ""  # junit's failure text (the traceback), when there is one
    end: float | None = None  # history time of the test's record; None for a junit-only test

    @property
    def suite(self) -> str:
        return self.nodeid.partition("::")[0]

    @property
    def short(self) -> str:
        return self.nodeid.partition("::")[2] or self.nodeid


@dataclass
class Run:
    run_dir: Path
    records: list[Record]
    tests: list[TestResult]
    junit: str  # "read", "missing" or "unreadable"
    run_id: str = ""
    lab: str = "?"
    seed: str | None = None
    start: float = 0.0
    end: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def wall(self) -> float:
        return max(0.0, self.end - self.start)

    def of_kind(self, kind: str) -> list[Record]:
        return [rec for rec in self.records if rec.get("kind") == kind]


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _data(rec: Record) -> dict[str, Any]:
    data = rec.get("data")
    return data if isinstance(data, dict) else {}


def _time(rec: Record) -> float:
    return _num(rec.get("t")) or 0.0


def load_run(run_dir: Path) -> Run:
    """Everything the report shows, read from `run_dir`; raises FileNotFoundError without a history."""
    path = run_dir / "history.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no history.jsonl")
    records = [rec for rec in history.load(path) if isinstance(rec, dict)]
    records.sort(key=_time)  # stable: records written in the same millisecond keep their order
    tests, junit = _merge_junit(_history_tests(records), run_dir / JUNIT_NAME)
    run = Run(run_dir=run_dir, records=records, tests=tests, junit=junit, run_id=run_dir.name)
    run.outcomes = Counter(test.outcome for test in tests)
    _read_header(run)
    return run


def _read_header(run: Run) -> None:
    starts = run.of_kind(history.RUN)
    if starts:
        data = _data(starts[0])
        run.run_id = _text(starts[0].get("name")) or run.run_id
        run.lab = _text(data.get("lab")) or run.lab
        run.seed = _text(data.get("seed")) or None
    times = [_time(rec) for rec in run.records if _time(rec)]
    run.start = min(times, default=0.0)
    run.end = max(times, default=0.0)


def _history_tests(records: Iterable[Record]) -> dict[str, TestResult]:
    tests: dict[str, TestResult] = {}
    for rec in records:
        if rec.get("kind") != history.TEST:
            continue
        data = _data(rec)
        ok = rec.get("ok")
        outcome = _text(data.get("outcome")) or (
            "passed" if ok is True else "failed" if ok is False else "unknown"
        )
        nodeid = _text(rec.get("name"))
        tests[nodeid] = TestResult(
            nodeid=nodeid,
            outcome=outcome,
            duration=_num(rec.get("duration")) or 0.0,
            message=_text(data.get("message")),
            end=_time(rec),
        )
    return tests


def _junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) as pytest's junitxml writes `nodeid`."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def _junit_nodeid(classname: str, name: str) -> str:
    """A nodeid for a junit case that the history does not have: modules are lower case, classes not."""
    parts = classname.split(".") if classname else []
    first_class = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    module, classes = parts[:first_class], parts[first_class:]
    path = "/".join(module) + ".py" if module else "?"
    return "::".join([path, *classes, name])


def _junit_case(case: ET.Element) -> tuple[str, str, str]:
    """(outcome, message, details) of one <testcase>."""
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        found = case.find(tag)
        if found is not None:
            return outcome, found.get("message", ""), (found.text or "").strip()
    return "passed", "", ""


def _merge_junit(tests: dict[str, TestResult], path: Path) -> tuple[list[TestResult], str]:
    """The history's tests with junit's failure texts added, plus any test only junit has."""
    if not path.is_file():
        return list(tests.values()), "missing"
    try:
        root = ET.parse(path).getroot()  # our own pytest wrote it
    except (ET.ParseError, OSError):
        return list(tests.values()), "unreadable"
    by_key = {_junit_key(nodeid): test for nodeid, test in tests.items()}
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        outcome, message, details = _junit_case(case)
        test = by_key.get((classname, name))
        if test is None:
            test = TestResult(_junit_nodeid(classname, name), outcome, _num_attr(case, "time"), message)
            tests[test.nodeid] = by_key[(classname, name)] = test
        test.message = test.message or message
        test.details = test.details or details
    return list(tests.values()), "read"


def _num_attr(element: ET.Element, name: str) -> float:
    try:
        return float(element.get(name, "0"))
    except ValueError:
        return 0.0


# -- figures ---------------------------------------------------------------------------------------
@dataclass
class Suite:
    name: str
    tests: list[TestResult]

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(test.outcome for test in self.tests)

    @property
    def wall(self) -> float:
        """From the first test's start to the last one's end; the sum of durations without times."""
        ends = [test.end for test in self.tests]
        if not self.tests or any(end is None for end in ends):
            return sum(test.duration for test in self.tests)
        first = min((test.end or 0.0) - test.duration for test in self.tests)
        return max(end or 0.0 for end in ends) - first


def suites(run: Run) -> list[Suite]:
    grouped: dict[str, list[TestResult]] = {}
    for test in run.tests:
        grouped.setdefault(test.suite, []).append(test)
    return [Suite(name, grouped[name]) for name in sorted(grouped)]


@dataclass
class Figure:
    name: str
    values: list[float]
    target: float | None  # the latest target given for the name
    over: int  # how many values were over their own target


def over_target(rec: Record) -> bool:
    seconds, target = _num(rec.get("duration")), _num(_data(rec).get("target"))
    return seconds is not None and target is not None and seconds > target


def figures(run: Run) -> list[Figure]:
    """Each measured name, in order of first appearance."""
    out: dict[str, Figure] = {}
    for rec in run.of_kind(history.MEASURE):
        name, seconds = _text(rec.get("name")), _num(rec.get("duration"))
        fig = out.setdefault(name, Figure(name, [], None, 0))
        if seconds is not None:
            fig.values.append(seconds)
        target = _num(_data(rec).get("target"))
        fig.target = target if target is not None else fig.target
        fig.over += int(over_target(rec))
    return list(out.values())


def counts_checked(run: Run) -> dict[str, tuple[int, int]]:
    """Per count name: (sum over all checks, how many checks reported it)."""
    total: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    for rec in run.of_kind(history.CHECK):
        counts = _data(rec).get("counts")
        if not isinstance(counts, dict):
            continue
        for name, value in counts.items():
            number = _num(value)
            if number is not None:
                total[str(name)] += int(number)
                checks[str(name)] += 1
    return {name: (total[name], checks[name]) for name in sorted(total)}


def timeline(run: Run) -> list[Record]:
    return [rec for rec in run.records if rec.get("kind") in TIMELINE_KINDS]


def node_logs(run_dir: Path) -> list[Path]:
    """Files collected under nodes/, relative to the run dir."""
    root = run_dir / NODES_DIR
    if not root.is_dir():
        return []
    return sorted(path.relative_to(run_dir) for path in root.rglob("*") if path.is_file())


# -- formatting ------------------------------------------------------------------------------------
def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m{secs:04.1f}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes):02d}m{int(secs):02d}s"


def fmt_clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t else "?"


def fmt_outcomes(counts: Counter[str]) -> str:
    main = [f"{counts[o]} {o}" for o in ("passed", "failed", "skipped")]
    extra = [f"{n} {o}" for o, n in sorted(counts.items()) if o not in {"passed", "failed", "skipped"}]
    return ", ".join(main + extra)


def replay_command(run: Run) -> str:
    return f"make e2e SEED={run.seed}" if run.seed is not None else ""


def fmt_stats(fig: Figure) -> str:
    if not fig.values:
        return "no value"
    if len(fig.values) == 1:
        return fmt_seconds(fig.values[0])
    lo, med, hi = min(fig.values), statistics.median(fig.values), max(fig.values)
    return f"n={len(fig.values)} min {fmt_seconds(lo)} / med {fmt_seconds(med)} / max {fmt_seconds(hi)}"


# -- HTML ------------------------------------------------------------------------------------------
CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, monospace; font-size: 12px; }
pre { white-space: pre-wrap; margin: .3em 0; max-width: 110ch; }
.passed { color: #17692e; } .failed, .error, .bad { color: #b00020; font-weight: bold; }
.skipped, .muted { color: #777; }
tr.over td, tr.bad td { background: #fdecea; }
.kind { font-weight: bold; font-family: ui-monospace, monospace; }
.k-fault { color: #b00020; } .k-heal { color: #17692e; } .k-check { color: #0b5394; }
.k-event { color: #7b3fa0; } .k-measure { color: #b45f06; } .k-note { color: #555; }
nav a { margin-right: 1em; }
"""


def esc(value: object) -> str:
    return html.escape(_text(value))


def cell(value: object, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{esc(value)}</td>"


def table(head: Sequence[str], rows: Iterable[str], table_id: str = "") -> str:
    attr = f' id="{table_id}"' if table_id else ""
    heads = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "\n".join(rows)
    return f"<table{attr}>\n<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{section_id}">\n<h2>{esc(title)}</h2>\n{body}\n</section>'


def html_header(run: Run) -> str:
    replay = replay_command(run)
    rows = [
        ("lab", esc(run.lab)),
        ("seed", esc(run.seed or "?")),
        ("replay", f"<code>{esc(replay)}</code>" if replay else "no seed recorded"),
        ("start", esc(fmt_clock(run.start))),
        ("end", esc(fmt_clock(run.end))),
        ("wall time", esc(fmt_seconds(run.wall))),
        ("tests", html_outcomes(run.outcomes)),
        ("junit.xml", esc(run.junit)),
    ]
    body = "\n".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<h1>e2e run {esc(run.run_id)}</h1>\n<table id="header">\n{body}\n</table>'


def html_outcomes(counts: Counter[str]) -> str:
    names = ["passed", "failed", "skipped", *sorted(set(counts) - {"passed", "failed", "skipped"})]
    return ", ".join(f'<span class="{outcome_class(o)}">{counts[o]} {esc(o)}</span>' for o in names)


def outcome_class(outcome: str) -> str:
    return outcome if outcome in {"passed", "failed", "skipped", "error"} else "muted"


def html_test_row(test: TestResult) -> str:
    text = "\n\n".join(part for part in (test.message, test.details) if part)
    failure = ""
    if text:
        first = text.strip().splitlines()[0] if text.strip() else ""
        failure = f"<details><summary>{esc(first[:160])}</summary><pre>{esc(text)}</pre></details>"
    return (
        f"<tr>{cell(test.short)}{cell(test.outcome, outcome_class(test.outcome))}"
        f'<td class="num">{esc(fmt_seconds(test.duration))}</td><td>{failure}</td></tr>'
    )


def html_suites(run: Run) -> str:
    parts = []
    for suite in suites(run):
        title = f"<h3>{esc(suite.name)} <small>{html_outcomes(suite.outcomes)}, "
        title += f"wall {esc(fmt_seconds(suite.wall))}</small></h3>"
        rows = (html_test_row(test) for test in suite.tests)
        parts.append(title + "\n" + table(["test", "outcome", "time", "message"], rows))
    return "\n".join(parts) or '<p class="muted">No test finished.</p>'


def html_measure_row(run: Run, rec: Record) -> str:
    over = over_target(rec)
    target = _num(_data(rec).get("target"))
    seconds = _num(rec.get("duration"))
    return (
        f'<tr class="{"over" if over else ""}">{cell(rel_time(run, rec))}{cell(rec.get("name"))}'
        f"{cell(rec.get('node', ''))}{cell(short_test(rec))}"
        f'<td class="num">{esc("-" if seconds is None else f"{seconds:.1f}")}</td>'
        f'<td class="num">{esc("-" if target is None else f"{target:.1f}")}</td>'
        f"{cell('OVER target' if over else '', 'bad' if over else '')}</tr>"
    )


def html_stats_row(fig: Figure) -> str:
    stats = [min(fig.values), statistics.median(fig.values), max(fig.values)]
    cells = f'<td class="num">{len(fig.values)}</td>' + "".join(
        f'<td class="num">{v:.1f}</td>' for v in stats
    )
    target = "-" if fig.target is None else f"{fig.target:.1f}"
    over_cls = "bad" if fig.over else ""
    return f'<tr>{cell(fig.name)}{cells}<td class="num">{target}</td>{cell(fig.over, over_cls)}</tr>'


def html_measures(run: Run) -> str:
    recs = run.of_kind(history.MEASURE)
    if not recs:
        return '<p class="muted">No measurements.</p>'
    head = ["time", "name", "node", "test", "seconds", "target", ""]
    out = table(head, (html_measure_row(run, rec) for rec in recs), "measures")
    repeated = [fig for fig in figures(run) if len(fig.values) > 1]
    if repeated:
        head = ["name", "count", "min", "median", "max", "target", "over target"]
        out += "\n<h3>Repeated measurements (seconds)</h3>\n"
        out += table(head, (html_stats_row(fig) for fig in repeated), "measure-stats")
    return out


def html_counts(run: Run) -> str:
    counts = counts_checked(run)
    if not counts:
        return '<p class="muted">No check reported counts.</p>'
    rows = (
        f'<tr>{cell(n)}<td class="num">{t}</td><td class="num">{c}</td></tr>' for n, (t, c) in counts.items()
    )
    return table(["count", "total", "checks reporting it"], rows, "counts-table")


def rel_time(run: Run, rec: Record) -> str:
    return f"{_time(rec) - run.start:+.1f}s"


def short_test(rec: Record) -> str:
    nodeid = _text(rec.get("test"))
    return nodeid.partition("::")[2] or nodeid


def timeline_detail(rec: Record) -> str:
    data, detail = _data(rec), _text(rec.get("detail"))
    kind = rec.get("kind")
    if kind == EVENT:
        where = " ".join(_text(data.get(k)) for k in ("task", "alloc") if data.get(k))
        return f"[{where}] {detail}" if where else detail
    if kind == history.MEASURE:
        target = _num(data.get("target"))
        figure = f"{fmt_seconds(_num(rec.get('duration')))}"
        return figure + (f" (target {fmt_seconds(target)})" if target is not None else "")
    if kind == history.CHECK and isinstance(data.get("counts"), dict):
        counts = ", ".join(f"{name}={value}" for name, value in sorted(data["counts"].items()))
        return f"{detail}\ncounts: {counts}".strip()
    seconds = _num(rec.get("duration"))
    if kind in {history.FAULT, history.HEAL} and seconds is not None:
        return f"{detail}\ntook {fmt_seconds(seconds)}".strip()
    return detail


def html_timeline_row(run: Run, rec: Record) -> str:
    kind = _text(rec.get("kind"))
    bad = rec.get("ok") is False or (kind == history.MEASURE and over_target(rec))
    nodeid = _text(rec.get("test"))
    return (
        f'<tr class="{"bad" if bad else ""}" data-t="{_time(rec):.3f}">{cell(rel_time(run, rec))}'
        f'<td class="kind k-{esc(kind)}">{esc(kind)}</td>{cell(rec.get("node", ""))}'
        f'<td title="{esc(nodeid)}">{esc(short_test(rec))}</td>{cell(rec.get("name"))}'
        f"<td><pre>{esc(timeline_detail(rec))}</pre></td></tr>"
    )


def html_timeline(run: Run) -> str:
    commands = run.of_kind(history.COMMAND)
    failed = sum(1 for rec in commands if rec.get("ok") is False)
    log = run.run_dir / "commands.log"
    link = '<a href="commands.log">commands.log</a>' if log.is_file() else "commands.log (missing)"
    observed = len(run.of_kind(history.OBSERVE))
    note = (
        f'<p id="commands">Not listed here: {len(commands)} remote commands '
        f'(<span class="{"bad" if failed else ""}">{failed} failed</span>, see {link}) '
        f"and {observed} observe records. Times are when each record was written: "
        "a fault or heal is written when it ends.</p>"
    )
    rows = [html_timeline_row(run, rec) for rec in timeline(run)]
    head = ["time", "kind", "node", "test", "name", "detail"]
    return (
        note
        + "\n"
        + (table(head, rows, "timeline-table") if rows else '<p class="muted">Nothing happened.</p>')
    )


def html_logs(run: Run) -> str:
    logs = node_logs(run.run_dir)
    if not logs:
        return '<p class="muted">No logs collected.</p>'
    items = []
    for rel in logs:
        size = (run.run_dir / rel).stat().st_size
        href = quote(rel.as_posix())
        items.append(
            f'<li><a href="{esc(href)}">{esc(rel.as_posix())}</a> <small>({size} bytes)</small></li>'
        )
    return '<ul id="logs-list">\n' + "\n".join(items) + "\n</ul>"


def html_page(run: Run) -> str:
    sections = [
        ("tests", "Tests by suite", html_suites(run)),
        ("measurements", "Measurements", html_measures(run)),
        ("counts", "Counts checked", html_counts(run)),
        ("timeline", "Timeline", html_timeline(run)),
        ("logs", "Collected logs", html_logs(run)),
    ]
    nav = " ".join(f'<a href="#{sid}">{esc(title)}</a>' for sid, title, _ in sections)
    body = "\n".join(section(sid, title, content) for sid, title, content in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>e2e run {esc(run.run_id)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"{html_header(run)}\n<nav>{nav}</nav>\n{body}\n</body>\n</html>\n"
    )


def render(run_dir: Path) -> Path:
    """Write `run_dir/report.html` and return its path."""
    return render_run(load_run(run_dir))


def render_run(run: Run) -> Path:
    out = run.run_dir / REPORT_NAME
    out.write_text(html_page(run), encoding="utf-8")
    return out


# -- terminal summary ------------------------------------------------------------------------------
def _capped(lines: list[str], more: str) -> list[str]:
    if len(lines) <= SUMMARY_ITEMS:
        return lines
    return [*lines[: SUMMARY_ITEMS - 1], f"  ... {len(lines) - SUMMARY_ITEMS + 1} more {more}"]


def summary_measure(fig: Figure) -> str:
    target = f" vs target {fmt_seconds(fig.target)}" if fig.target is not None else ""
    over = f" ({fig.over} OVER)" if fig.over else ""
    return f"  {fig.name}: {fmt_stats(fig)}{target}{over}"


def summary(run_dir: Path) -> str:
    """A few lines for the terminal: totals, suites, figures, counts, failures and the report path."""
    return summary_of(load_run(run_dir))


def summary_of(run: Run) -> str:
    replay = replay_command(run)
    lines = [
        f"e2e run {run.run_id}  lab {run.lab}  seed {run.seed or '?'}"
        + (f"  (replay: {replay})" if replay else ""),
        f"tests: {fmt_outcomes(run.outcomes)}  wall {fmt_seconds(run.wall)}",
    ]
    suite_lines = [f"  {s.name}: {fmt_outcomes(s.outcomes)}  {fmt_seconds(s.wall)}" for s in suites(run)]
    lines += ["suites:", *_capped(suite_lines, "suites")] if suite_lines else []
    measure_lines = [summary_measure(fig) for fig in figures(run)]
    lines += ["measurements:", *_capped(measure_lines, "measurements")] if measure_lines else []
    counts = counts_checked(run)
    if counts:
        lines.append("counts checked: " + ", ".join(f"{n}={t}" for n, (t, _) in counts.items()))
    failures = [test for test in run.tests if test.outcome in {"failed", "error"}]
    fail_lines = [f"  {t.nodeid}: {(t.message.strip().splitlines() or [''])[0][:100]}" for t in failures]
    lines += ["failures:", *_capped(fail_lines, "failures")] if fail_lines else []
    lines.append(f"report: {run.run_dir / REPORT_NAME}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m e2e.harness.report <run dir>", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    if not run_dir.is_dir():
        print(f"report: no such run directory: {run_dir}", file=sys.stderr)
        return 2
    if not (run_dir / "history.jsonl").is_file():
        print(f"report: {run_dir} has no history.jsonl", file=sys.stderr)
        return 2
    try:
        run = load_run(run_dir)
        render_run(run)
        print(summary_of(run))
    except (OSError, ValueError) as exc:
        print(f"report: cannot report on {run_dir}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
