"""The e2e run: the lab to test (`--lab` or LAB), the run's directory and history, agent fault flags,
log collection on failure, and the report at the end.

Every run gets `e2e/reports/<run id>/` (or `--report-dir`): history.jsonl, commands.log, junit.xml,
nodes/ (logs collected from every node when a test fails) and report.html. The seed (`--seed`, or
random) is printed at the start and the end, and replays the same chaos schedule.

Each step of the run (fault, heal, check, measurement) is printed as it happens, one timestamped line,
past pytest's capture (`--no-progress` or E2E_PROGRESS=0: quiet). Each test has a timeout
(pytest-timeout, `signal` method: the test fails, its teardown heals, and the run's junit.xml and
report are still written): `--test-timeout` (E2E_TEST_TIMEOUT, 0: none) plus LOOP_TIMEOUT per loop for a
test that takes `--loops`, plus `--chaos-minutes` for a nightly (chaos) test. pytest's own `--timeout`
or a test's `timeout` marker wins.

This file stays at e2e/, above e2e/suites/: pytest takes `pytest_addoption` only from a conftest it
loads at start-up (at or above the paths it is given), so `pytest e2e` and `pytest e2e/suites/x.py`
both see the options and the fixtures.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import fleet, history, invariants
from e2e.harness.cluster import Cluster, load_cluster
from e2e.harness.collect import collect
from e2e.harness.faults import FaultError, faults_dropin, set_agent_faults
from e2e.harness.history import History
from e2e.harness.hostile import canary  # the hostile suites' fixture (e2e/harness/hostile.py)
from e2e.harness.remote import Remote
from e2e.harness.target import TargetError
from lab.config import LabPaths
from lab.errors import LabError
from lab.providers.base import LabRecord

REPORTS = Path(__file__).resolve().parent / "reports"
TEST_TIMEOUT = 900.0  # seconds per test by default (the slowest test of `make test` takes 2-3 minutes)
LOOP_TIMEOUT = 60.0  # seconds more per loop for a test that takes `--loops` (50 nightly)
# Seconds more per client stormed for a test that takes `fleet_size` (the fleet suite: measured 4 min
# at 10 clients, 20 min at 100: setup, three storms and their checks all grow with the fleet).
CLIENT_TIMEOUT = 15.0


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("fieldlab e2e")
    g.addoption("--lab", default=os.environ.get("LAB", "default"), help="lab to run against")
    g.addoption(
        "--target",
        default=os.environ.get("TARGET", ""),
        help="what the clients run: fieldlab (this project's agent) or nomad (e2e/targets/); "
        "default: the lab inventory's fieldlab_target, else fieldlab",
    )
    g.addoption(
        "--seed", type=int, default=None, help="seed of the random choices (chaos schedule); replays a run"
    )
    g.addoption(
        "--agent-faults",
        default=os.environ.get("FIELDLAB_AGENT_FAULTS", ""),
        help="run the lab's agents with these fault flags (comma-separated) for the session",
    )
    g.addoption(
        "--loops", type=int, default=int(os.environ.get("E2E_LOOPS", "5")), help="restarts per loop suite"
    )
    g.addoption(
        "--chaos-minutes",
        type=float,
        default=float(os.environ.get("E2E_CHAOS_MINUTES", "3")),
        help="how long the seeded chaos suite runs",
    )
    g.addoption(
        "--chaos-schedule",
        default="",
        help="the chaos suite runs exactly these steps (';'-separated, as a run's history writes them: "
        "'kill-pause client#1 hold 5s job#0'), with no deadline: a shrink's replay",
    )
    g.addoption(
        "--fleet",
        type=int,
        default=int(os.environ.get("FLEET", "0") or 0),
        help="clients the fleet suite storms: the first N of the lab's (0: every client, full and light)",
    )
    g.addoption("--report-dir", default=os.environ.get("E2E_REPORT_DIR", ""), help="the run's directory")
    g.addoption(
        "--scenario",
        default="",
        help="a scenario file (e2e/scenarios/ format) for test_scenarios.py::test_scenario_file",
    )
    g.addoption(
        "--repro",
        default="",
        help="this run is one half of `make repro`: BUG,HALF (HALF: with-flag, without or once); the "
        "report says so, and the run stays out of the trends",
    )
    g.addoption(
        "--test-timeout",
        type=float,
        default=float(os.environ.get("E2E_TEST_TIMEOUT", str(TEST_TIMEOUT))),
        help=f"seconds a test may take (+{LOOP_TIMEOUT:g}s per loop, + the chaos minutes; 0: no timeout)",
    )
    g.addoption(
        "--no-progress",
        action="store_true",
        default=os.environ.get("E2E_PROGRESS", "1") == "0",
        help="do not print a line for each fault, heal, check and measurement as it happens",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.option.collectonly or not hasattr(config.option, "lab"):
        return
    seed = config.getoption("--seed")
    if seed is None:
        seed = random.SystemRandom().randrange(1, 2**31)
    lab = config.getoption("--lab")
    run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{lab}"
    run_dir = Path(config.getoption("--report-dir") or REPORTS / run_id)
    h = History(run_dir, run_id, seed, lab)
    if not config.getoption("--no-progress"):
        h.listeners.append(_progress_printer(config, h))
    history.open_run(h)
    config.stash[_HISTORY] = h
    repro = config.getoption("--repro")
    if repro:
        bug, _, half = repro.partition(",")
        flags = config.getoption("--agent-faults")
        # The report's header reads this note: the bug, the flag, the half and its replay command.
        h.record(
            history.NOTE,
            f"{history.REPRO_NOTE}{bug}",
            bug=bug,
            half=half,
            flag=flags,
            replay=f"make repro BUG={bug} LAB={lab}",
        )
    if not config.option.xmlpath:
        config.option.xmlpath = str(run_dir / "junit.xml")


_HISTORY = pytest.StashKey[History]()


def _progress_printer(config: pytest.Config, h: History) -> history.Listener:
    """A history listener printing `history.progress_line` of each step to the terminal as it happens,
    with pytest's capture suspended for the line (a test's output is captured, its steps are not)."""

    def show(rec: dict[str, Any]) -> None:
        line = history.progress_line(rec, h.started)
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if line is None or tr is None:
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        # Capture is process-wide: only the main thread (the test's) suspends it; another thread's
        # line goes where the test's output goes.
        main = threading.current_thread() is threading.main_thread()
        uncaptured = capman.global_and_fixture_disabled() if capman is not None and main else None
        with uncaptured or contextlib.nullcontext():
            tr.write_line(line)
            tr.flush()

    return show


def pytest_report_header(config: pytest.Config) -> list[str]:
    h = config.stash.get(_HISTORY, None)
    if h is None:
        return []
    base = float(config.getoption("--test-timeout"))
    timeouts = (
        f"{base:g}s per test (+{LOOP_TIMEOUT:g}s per loop, +{CLIENT_TIMEOUT:g}s per client stormed,"
        " + the chaos minutes; signal method)"
        if base > 0
        else "none"
    )
    return [
        f"fieldlab e2e: lab {h.lab}, seed {h.seed} (replay: --seed {h.seed}), run dir {h.run_dir}",
        f"fieldlab e2e timeouts: {timeouts}",
    ]


def timeout_for(
    base: float,
    *,
    loops: int | None = None,
    chaos_minutes: float | None = None,
    clients: int | None = None,
) -> float:
    """A test's timeout: `base`, plus LOOP_TIMEOUT per loop when it takes `--loops`, plus the chaos
    minutes when it is the chaos suite, plus CLIENT_TIMEOUT per client it storms (the fleet suite);
    0 (no timeout) when `base` is 0."""
    if base <= 0:
        return 0.0
    return (
        base + LOOP_TIMEOUT * (loops or 0) + 60.0 * (chaos_minutes or 0.0) + CLIENT_TIMEOUT * (clients or 0)
    )


def fleet_clients(config: pytest.Config) -> int:
    """The clients the fleet suite storms: `--fleet`, or every client of the lab's record (0 when
    the lab has none yet: the suite itself then says so)."""
    wanted = int(config.getoption("--fleet") or 0)
    if wanted:
        return wanted
    try:
        record = LabRecord.load(LabPaths(str(config.getoption("--lab"))))
    except LabError:
        return 0
    return sum(1 for n in record.nodes if n.role != "server") if record else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    base = float(getattr(config.option, "test_timeout", 0.0) or 0.0)
    timed = (
        base > 0
        and config.pluginmanager.hasplugin("timeout")
        and getattr(config.option, "timeout", None) is None  # pytest-timeout's own --timeout wins
        and not os.environ.get("PYTEST_TIMEOUT")
    )
    for item in items:
        item.add_marker(pytest.mark.e2e)
        if not timed or item.get_closest_marker("timeout") is not None:
            continue
        seconds = timeout_for(
            base,
            loops=config.option.loops if "loops" in getattr(item, "fixturenames", ()) else None,
            chaos_minutes=config.option.chaos_minutes if item.get_closest_marker("nightly") else None,
            clients=fleet_clients(config) if "fleet_size" in getattr(item, "fixturenames", ()) else None,
        )
        # signal: the test fails with "Timeout", its teardown heals and the session goes on to write
        # junit.xml and the report (the thread method would end the process, and the report with it).
        item.add_marker(pytest.mark.timeout(seconds, method="signal"))


@pytest.fixture(scope="session")
def run(request: pytest.FixtureRequest) -> History:
    return request.config.stash[_HISTORY]


@pytest.fixture(scope="session")
def seed(run: History) -> int:
    return run.seed


@pytest.fixture(scope="session")
def loops(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--loops"))


@pytest.fixture(scope="session")
def fleet_size(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--fleet"))


@pytest.fixture(autouse=True)
def _agent_own_only_on_fieldlab(request: pytest.FixtureRequest) -> None:
    """A test marked agent_own tests this project's agent itself: on another target it is skipped."""
    if request.node.get_closest_marker("agent_own") is None:
        return
    target = request.getfixturevalue("cluster").target
    if target.name != "fieldlab":
        pytest.skip(
            f"tests this project's agent itself (its files, credentials, state): "
            f"not on the {target.name} target"
        )


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    lab = request.config.getoption("--lab")
    try:
        c = load_cluster(lab, request.config.getoption("--target") or None)
    except (FileNotFoundError, TargetError) as exc:
        pytest.fail(str(exc), pytrace=False)
    request.config.stash[_CLUSTER] = c
    flags = [f.strip() for f in request.config.getoption("--agent-faults").split(",") if f.strip()]
    targets = flag_targets(c, request.session.items)
    # The clients this run uses are looked at (a few at once: a storm's fleet is a hundred),
    # whatever it flags; the light clients only by a run that storms them (they are its targets).
    dropin = faults_dropin(c.target)
    has_dropin = fleet.pmap(
        lambda n: c.target.fault_flags and n.run(f"test -e {dropin}", check=False).rc == 0, targets
    )
    stale = [n for n, has in zip(targets, has_dropin, strict=True) if has]
    try:
        # A killed run with fault flags left them behind: never test a faulty agent unknowingly.
        leftover = [n for n in stale if not flags or n not in targets]
        if leftover:
            print(f"[e2e] removing fault flags left on {[n.name for n in leftover]} by an earlier run")
            set_agent_faults(c, [], leftover)
        if flags:
            set_agent_faults(c, flags, targets)
    except FaultError as exc:
        if flags and not str(exc).startswith("unknown"):
            with contextlib.suppress(FaultError):
                set_agent_faults(c, [], targets)  # never leave an agent half-configured behind
        pytest.fail(f"could not set the agents' fault flags to {flags or 'none'}: {exc}", pytrace=False)
    _clean_slate(c, targets)
    try:  # a run starts from a clean lab, or says why not: leftovers would fake or hide a symptom
        invariants.wait_invariants(c, "the start of the run (leftovers of earlier runs?)")
    except AssertionError as exc:
        pytest.fail(f"the lab is not clean at the start of the run: {exc}", pytrace=False)
    yield c
    if flags:
        set_agent_faults(c, [], targets)  # heal: the lab is left with clean agents


def flag_targets(cluster: Cluster, items: Iterable[Any]) -> list[Remote]:
    """The agents a run's fault flags go to: the whole fleet, full and light clients, when the run
    storms it (a test that takes `fleet_size`); else the full clients, the only ones the other suites
    use. Each agent restarted with a flag is waited for until it answers: at 100 clients that was
    ~16 s an agent, ~27 minutes a switch and two switches a repro half, for agents no test looked at."""
    storms = any("fleet_size" in getattr(item, "fixturenames", ()) for item in items)
    return cluster.fleet if storms else list(cluster.clients)


_CLUSTER = pytest.StashKey[Cluster]()


def _clean_slate(c: Cluster, nodes: list[Remote]) -> None:
    """Stop jobs left over on `nodes` (the run's) by an earlier run that was killed, so every suite
    starts from zero allocs."""
    for node in nodes:
        agent = c.agent(node)
        live = {a["job"] for a in agent.allocs() if a.get("status") in ("running", "pending")}
        for job in sorted(live):
            agent.stop_job(job)
            print(f"[e2e] {node.name}: stopped job {job} left over by an earlier run")


@pytest.fixture(autouse=True)
def _test_in_history(request: pytest.FixtureRequest, run: History) -> Iterator[None]:
    run.set_test(request.node.nodeid)
    yield
    run.set_test("")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    h = item.config.stash.get(_HISTORY, None)
    if h is None:
        return rep
    if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed"):
        msg = ""
        if rep.failed:
            crash = getattr(rep.longrepr, "reprcrash", None)
            msg = crash.message if crash is not None else str(rep.longrepr)[-2000:]
        elif rep.skipped and isinstance(rep.longrepr, tuple):
            msg = str(rep.longrepr[2])
        h.record(
            history.TEST,
            item.nodeid,
            ok=not rep.failed,
            duration=rep.duration,
            outcome=rep.outcome,
            message=msg[:4000],
        )
        if rep.failed:
            c = item.config.stash.get(_CLUSTER, None)
            if c is not None:
                collect(c, h.run_dir, item.nodeid)
    return rep


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    h = config.stash.get(_HISTORY, None)
    if h is None:
        return
    try:
        from e2e.harness import report

        report.render(h.run_dir)
        text = report.summary(h.run_dir)
    except Exception as exc:  # the report must never hide the test results
        text = f"report could not be rendered: {exc}"
    terminalreporter.section("fieldlab e2e run")
    for line in text.splitlines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"seed {h.seed} (replay: --seed {h.seed}); run dir {h.run_dir}")


__all__ = ["canary"]
