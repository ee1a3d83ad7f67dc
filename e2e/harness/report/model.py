"""Reading a run dir: the records, the tests (history merged with junit.xml) and the figures over them.

Nothing here writes or formats; the page, the timeline, the plots, the index and the terminal summary
are all built from a `Run`.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.harness import history

Record = dict[str, Any]

HISTORY_NAME = "history.jsonl"
REPORT_NAME = "report.html"
JUNIT_NAME = "junit.xml"
COMMANDS_NAME = "commands.log"
NODES_DIR = "nodes"
# What the history table lists; commands go to commands.log and observations are too many to list.
TIMELINE_KINDS = frozenset(
    {history.FAULT, history.HEAL, history.CHECK, history.EVENT, history.MEASURE, history.NOTE}
)
# conftest's note when a run's agents carry fault flags (e2e.harness.faults.set_agent_faults).
FLAGS_NOTE = "agent fault flags: "
REPRO_NAME = "repro.json"  # a repro half's verdict, written beside its run by e2e/drivers/repro.py


@dataclass(frozen=True)
class Repro:
    """The run is one half of a bug's reproduction (`make repro`)."""

    bug: str
    half: str  # with-flag, without, once
    flag: str  # the fault flag the agents ran with ("" without)
    verdict: str  # REPRODUCED, FIXED, ... ("" while the run is not judged yet)
    replay: str  # the repro's own command
    kind: str = ""  # the kind of run in words: two halves (flag, then none) or once, PRESENT/ABSENT


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

    @property
    def agent_flags(self) -> str:
        """The agent fault flags the run was made with ("" for none): such a run reproduces a bug.
        Every run ends by setting the flags to none (the heal): that note is not what it ran with."""
        seen: list[str] = []
        for rec in self.of_kind(history.NOTE):
            name = text(rec.get("name"))
            if name.startswith(FLAGS_NOTE):
                flags = name.removeprefix(FLAGS_NOTE).strip()
                if flags and flags != "none" and flags not in seen:
                    seen.append(flags)
        return ",".join(seen)

    @property
    def repro(self) -> Repro | None:
        """The reproduction this run is a half of: conftest's note (`--repro`), and the verdict
        e2e/drivers/repro.py wrote beside the run once it judged it; None for any other run."""
        note = next(
            (r for r in self.of_kind(history.NOTE) if text(r.get("name")).startswith(history.REPRO_NOTE)),
            None,
        )
        if note is None:
            return None
        data = data_of(note)
        judged: dict[str, object] = {}
        try:
            read = json.loads((self.run_dir / REPRO_NAME).read_text())
            judged = read if isinstance(read, dict) else {}
        except (OSError, ValueError):
            pass
        return Repro(
            bug=text(data.get("bug")),
            half=text(data.get("half")),
            flag=text(data.get("flag")) or self.agent_flags,
            verdict=text(judged.get("verdict")),
            # the repro's own word on how to run it again (a scenario file's path, a target)
            replay=text(judged.get("replay")) or text(data.get("replay")),
            kind=text(judged.get("kind")),
        )


# -- field access (records are JSON written by other processes: never trust a field's type) ----------
def text(value: object) -> str:
    return "" if value is None else str(value)


def num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def data_of(rec: Record) -> dict[str, Any]:
    data = rec.get("data")
    return data if isinstance(data, dict) else {}


def time_of(rec: Record) -> float:
    return num(rec.get("t")) or 0.0


def start_of(rec: Record) -> float:
    """When what `rec` records began: spans (faults, heals, tests) are written when they end."""
    return time_of(rec) - max(0.0, num(rec.get("duration")) or 0.0)


def target_of(rec: Record) -> float | None:
    return num(data_of(rec).get("target"))


def over_target(rec: Record) -> bool:
    seconds, target = num(rec.get("duration")), target_of(rec)
    return seconds is not None and target is not None and seconds > target


def short_test(rec: Record) -> str:
    nodeid = text(rec.get("test"))
    return nodeid.partition("::")[2] or nodeid


# -- reading a run -----------------------------------------------------------------------------------
def load_run(run_dir: Path) -> Run:
    """Everything the report shows, read from `run_dir`; raises FileNotFoundError without a history."""
    path = run_dir / HISTORY_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no {HISTORY_NAME}")
    records = [rec for rec in history.load(path) if isinstance(rec, dict)]
    records.sort(key=time_of)  # stable: records written in the same millisecond keep their order
    tests, junit = _merge_junit(_history_tests(records), run_dir / JUNIT_NAME)
    run = Run(run_dir=run_dir, records=records, tests=tests, junit=junit, run_id=run_dir.name)
    run.outcomes = Counter(test.outcome for test in tests)
    _read_header(run)
    return run


def _read_header(run: Run) -> None:
    starts = run.of_kind(history.RUN)
    if starts:
        data = data_of(starts[0])
        run.run_id = text(starts[0].get("name")) or run.run_id
        run.lab = text(data.get("lab")) or run.lab
        run.seed = text(data.get("seed")) or None
    times = [time_of(rec) for rec in run.records if time_of(rec)]
    run.start = min(times, default=0.0)
    run.end = max(times, default=0.0)


def _history_tests(records: Iterable[Record]) -> dict[str, TestResult]:
    tests: dict[str, TestResult] = {}
    for rec in records:
        if rec.get("kind") != history.TEST:
            continue
        data = data_of(rec)
        ok = rec.get("ok")
        outcome = text(data.get("outcome")) or (
            "passed" if ok is True else "failed" if ok is False else "unknown"
        )
        nodeid = text(rec.get("name"))
        tests[nodeid] = TestResult(
            nodeid=nodeid,
            outcome=outcome,
            duration=num(rec.get("duration")) or 0.0,
            message=text(data.get("message")),
            end=time_of(rec),
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


# -- figures -------------------------------------------------------------------------------------------
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
    records: list[Record] = field(default_factory=list, repr=False)


def figures(records: Iterable[Record]) -> list[Figure]:
    """Each measured name, in order of first appearance."""
    out: dict[str, Figure] = {}
    for rec in records:
        if rec.get("kind") != history.MEASURE:
            continue
        name, seconds = text(rec.get("name")), num(rec.get("duration"))
        fig = out.setdefault(name, Figure(name, [], None, 0))
        fig.records.append(rec)
        if seconds is not None:
            fig.values.append(seconds)
        target = target_of(rec)
        fig.target = target if target is not None else fig.target
        fig.over += int(over_target(rec))
    return list(out.values())


def counts_checked(run: Run) -> dict[str, tuple[int, int]]:
    """Per count name: (sum over all checks, how many checks reported it)."""
    total: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    for rec in run.of_kind(history.CHECK):
        counts = data_of(rec).get("counts")
        if not isinstance(counts, dict):
            continue
        for name, value in counts.items():
            number = num(value)
            if number is not None:
                total[str(name)] += int(number)
                checks[str(name)] += 1
    return {name: (total[name], checks[name]) for name in sorted(total)}


def listed(run: Run) -> list[Record]:
    """The records the history table lists."""
    return [rec for rec in run.records if rec.get("kind") in TIMELINE_KINDS]


def node_logs(run_dir: Path) -> list[Path]:
    """Files collected under nodes/, relative to the run dir."""
    root = run_dir / NODES_DIR
    if not root.is_dir():
        return []
    return sorted(path.relative_to(run_dir) for path in root.rglob("*") if path.is_file())
