"""Live progress of the e2e suites: a short timestamped line for each fault, heal, check and
measurement as it is recorded, on the terminal even while pytest captures the test's output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from e2e.harness import history
from e2e.harness.history import History

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000.0  # 22:13:20 UTC
STAMP = r"\[e2e \d\d:\d\d:\d\dZ \+\d+m\d\ds\]"


def rec(kind: str, name: str, t: float = 65.0, **kw: Any) -> dict[str, Any]:
    return {"t": T0 + t, "kind": kind, "name": name, "test": "", **kw}


def test_a_fault_line_has_the_time_since_the_start_node_name_and_duration() -> None:
    line = history.progress_line(rec("fault", "agent SIGKILL", node="client1", duration=1.84, ok=True), T0)
    assert line == "[e2e 22:14:25Z +1m05s] FAULT client1 agent SIGKILL 1.8s"


def test_checks_say_ok_or_failed_with_their_problems_on_one_line() -> None:
    ok = history.progress_line(rec("check", "invariants", node="client2", ok=True), T0)
    assert ok is not None and ok.endswith("CHECK client2 invariants ok")
    bad = rec("check", "invariants", node="client2", ok=False, detail="orphan netns\nfl-1; stray rule")
    assert (history.progress_line(bad, T0) or "").endswith("invariants FAILED: orphan netns fl-1; stray rule")
    long = rec("check", "invariants", ok=False, detail="x" * 1000)
    assert len(history.progress_line(long, T0) or "") < 200 + history.PROGRESS_DETAIL


def test_a_failed_span_is_not_called_failed_twice() -> None:
    heal = rec("heal", "partition", node="client1", ok=False, duration=3.0, detail="FAILED: ssh timed out")
    line = history.progress_line(heal, T0) or ""
    assert line.endswith("HEAL client1 partition 3.0s FAILED: ssh timed out")


def test_a_measure_line_shows_its_target() -> None:
    m = rec("measure", "reboot: power off to ssh answering", duration=12.25, data={"target": 30.0})
    assert (history.progress_line(m, T0) or "").endswith(
        "MEASURE reboot: power off to ssh answering 12.2s (target 30s)"
    )


def test_commands_observations_notes_and_events_print_nothing() -> None:
    for kind in ("run", "test", "command", "observe", "note", "event"):
        assert history.progress_line(rec(kind, "x"), T0) is None


def test_listeners_see_every_record_as_it_is_written(tmp_path: Path) -> None:
    h = History(tmp_path, "run", 1, "lab")
    seen: list[str] = []
    h.listeners.append(lambda r: seen.append(r["kind"]))
    h.record(history.FAULT, "f", node="n")
    h.check("c", [])
    assert seen == ["fault", "check"]
    assert len(history.load(h.path)) == 2


def test_a_broken_terminal_never_fails_the_record(tmp_path: Path) -> None:
    h = History(tmp_path, "run", 1, "lab")

    def closed(_: dict[str, Any]) -> None:
        raise ValueError("I/O operation on closed file")

    h.listeners.append(closed)
    h.record(history.HEAL, "h")
    assert [r["kind"] for r in history.load(h.path)] == ["heal"]


STEPS = """
from e2e.harness import history


def test_steps():
    print("captured test output")
    history.record(history.FAULT, "agent SIGTERM", node="client1", ok=True, duration=0.5)
    history.record(history.COMMAND, "systemctl restart fieldlab-agent", node="client1", ok=True)
    history.check("invariants", [], node="client1")
    history.measure("agent restart to healthy", 2.5, node="client1", target=10.0)
    history.record(history.HEAL, "agent SIGTERM", node="client1", ok=True, duration=0.1)
"""


def run_suite(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on STEPS with the e2e suites' conftest as a plugin (capture on: pytest's default)."""
    (tmp / "test_steps.py").write_text(textwrap.dedent(STEPS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2E_", "PYTEST_", "LAB"))}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(tmp / "test_steps.py"),
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
        "--report-dir",
        str(tmp / "run"),
        *args,
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_each_step_is_printed_as_it_happens_past_pytests_capture(tmp_path: Path) -> None:
    proc = run_suite(tmp_path, "-q")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("[e2e ")]
    kinds = [re.sub(STAMP + r" (\w+) .*", r"\1", ln) for ln in lines]
    assert kinds == ["FAULT", "CHECK", "MEASURE", "HEAL"], out
    assert "MEASURE client1 agent restart to healthy 2.5s (target 10s)" in out
    assert "captured test output" not in out  # the test's own output stays captured (it passed)
    assert "systemctl restart" not in out  # commands are in commands.log, not on the terminal


def test_no_progress_keeps_the_terminal_quiet(tmp_path: Path) -> None:
    proc = run_suite(tmp_path, "-q", "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [ln for ln in proc.stdout.splitlines() if ln.startswith("[e2e ")], proc.stdout
