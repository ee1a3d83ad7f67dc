"""The e2e suites' per-test timeout (pytest-timeout, signal method): how long each test may take, and
that a test that runs out of time fails while the session goes on to write its junit.xml and report.

The run test starts pytest in a subprocess on a throw-away test file, with the suites' conftest
(`-p e2e.conftest`, no lab needed: no test asks for the cluster) and a 1 s timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from e2e import conftest
from e2e.harness import history

ROOT = Path(__file__).resolve().parent.parent

HANGS = """
import time


def test_hangs():
    time.sleep(60)


def test_after_the_timeout():
    pass
"""

# Written by the session's last hook: proves sessionfinish ran after the timed-out test.
SESSIONFINISH = """
from pathlib import Path


def pytest_sessionfinish(session, exitstatus):
    (Path(__file__).parent / "sessionfinish.txt").write_text(f"exitstatus {int(exitstatus)}\\n")
"""


def run_suite(tmp: Path, test: str, *args: str, conftest_text: str = "") -> subprocess.CompletedProcess[str]:
    """pytest on `test` (a test file's text) with the e2e suites' conftest as a plugin; run dir tmp/run."""
    (tmp / "test_throwaway.py").write_text(textwrap.dedent(test))
    if conftest_text:
        (tmp / "conftest.py").write_text(textwrap.dedent(conftest_text))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2E_", "PYTEST_", "LAB"))}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(tmp / "test_throwaway.py"),
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(tmp),
        "-p",
        "e2e.conftest",
        "-p",
        "no:cacheprovider",
        "--lab",
        "unit-test",
        "--seed",
        "7",
        "--report-dir",
        str(tmp / "run"),
        *args,
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_timed_out_test_fails_and_the_run_still_writes_its_junit_and_report(tmp_path: Path) -> None:
    proc = run_suite(tmp_path, HANGS, "--test-timeout", "1", conftest_text=SESSIONFINISH)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # tests failed; not killed (the thread method exits the process)
    assert "Timeout (>1.0s) from pytest-timeout" in out, out
    assert "1 failed, 1 passed" in out, out  # the session went on past the timeout
    assert (tmp_path / "sessionfinish.txt").read_text() == "exitstatus 1\n"
    run = tmp_path / "run"
    cases = {c.get("name"): c for c in ET.parse(run / "junit.xml").getroot().iter("testcase")}
    assert cases["test_hangs"].find("failure") is not None
    assert "Timeout" in (cases["test_hangs"].find("failure").get("message") or "")  # type: ignore[union-attr]
    assert cases["test_after_the_timeout"].find("failure") is None
    tests = {r["name"]: r for r in history.load(run / "history.jsonl") if r["kind"] == history.TEST}
    hung = next(r for name, r in tests.items() if name.endswith("::test_hangs"))
    assert hung["ok"] is False
    assert "Timeout" in hung["data"]["message"]
    assert "fieldlab e2e run" in out, out  # the suites' terminal summary, which renders the report
    assert list(run.glob("*.html")), f"no report written in {run}: {sorted(p.name for p in run.iterdir())}"


def test_the_timeout_shows_in_the_header_and_zero_turns_it_off(tmp_path: Path) -> None:
    quick = "def test_quick():\n    pass\n"
    shown = run_suite(tmp_path, quick, "--test-timeout", "300")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "fieldlab e2e timeouts: 300s per test" in shown.stdout
    off = run_suite(tmp_path, quick, "--test-timeout", "0")
    assert off.returncode == 0, off.stdout + off.stderr
    assert "fieldlab e2e timeouts: none" in off.stdout


@pytest.mark.parametrize(
    ("loops", "chaos_minutes", "expected"),
    [
        (None, None, 900.0),  # any test
        (5, None, 900.0 + 5 * conftest.LOOP_TIMEOUT),  # a loop suite in `make test`
        (50, None, 900.0 + 50 * conftest.LOOP_TIMEOUT),  # the same nightly
        (None, 15.0, 900.0 + 15 * 60),  # nightly chaos: its minutes on top
    ],
)
def test_each_test_gets_the_base_timeout_plus_its_loops_and_chaos_minutes(
    loops: int | None, chaos_minutes: float | None, expected: float
) -> None:
    assert conftest.timeout_for(900.0, loops=loops, chaos_minutes=chaos_minutes) == expected


def test_a_zero_base_means_no_timeout_at_all() -> None:
    assert conftest.timeout_for(0.0, loops=50, chaos_minutes=15.0) == 0.0


def test_the_fleet_suite_gets_time_per_client_it_storms(tmp_path: Path) -> None:
    assert conftest.timeout_for(900.0, clients=100) == 900.0 + 100 * conftest.CLIENT_TIMEOUT
    assert conftest.timeout_for(900.0, clients=10) < conftest.timeout_for(900.0, clients=100)


def test_fault_flags_go_to_the_fleet_only_when_the_run_storms_it() -> None:
    """A repro half on a lab of 100 clients restarted all 100 agents twice (~27 min a switch) for
    scenarios that use the two full clients only."""
    from e2e.harness.cluster import Cluster
    from e2e.harness.remote import Remote
    from lab.config import LabPaths
    from lab.ssh import SshTarget

    def node(name: str) -> Remote:
        return Remote(SshTarget(name, "10.213.0.99"))

    full, light = [node("client1"), node("client2")], [node(f"light{i:03}") for i in range(1, 99)]
    cluster = Cluster("fleet", LabPaths("fleet"), [node("server1")], full, light)

    class Item:
        def __init__(self, *fixtures: str) -> None:
            self.fixturenames = ["cluster", *fixtures]

    assert conftest.flag_targets(cluster, [Item(), Item("loops")]) == full
    assert conftest.flag_targets(cluster, [Item(), Item("fleet_size", "seed")]) == full + light
    assert conftest.flag_targets(cluster, []) == full
