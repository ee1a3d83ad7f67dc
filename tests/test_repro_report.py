"""A run made by `make repro` says it is one: its header, its terminal summary and the index name
the bug, the half, the fault flag and the verdict, and give the repro's own replay command; every
half stays out of the trends. (Before: the report read the teardown's "none" as the run's flags.)"""

from __future__ import annotations

import json
from pathlib import Path

from e2e.harness import history, report
from e2e.harness.history import History
from e2e.harness.report import index
from e2e.harness.report.model import REPRO_NAME, load_run
from e2e.harness.report.summary import summary_of

T0 = 1_717_000_000.0


def repro_half(root: Path, name: str, half: str, flag: str, verdict: str | None) -> Path:
    run_dir = root / "20240604-000000-repro-default" / name
    h = History(run_dir, name, 7, "default")
    h.record(history.RUN, name, seed=7, lab="default", at=T0)
    h.record(
        history.NOTE,
        f"{history.REPRO_NOTE}nomad-5883",
        bug="nomad-5883",
        half=half,
        flag=flag,
        replay="make repro BUG=nomad-5883 LAB=default",
        at=T0 + 0.1,
    )
    h.record(history.NOTE, f"agent fault flags: {flag or 'none'}", node="client1", at=T0 + 0.5)
    h.set_test("e2e/suites/test_scenarios.py::test_scenario[nomad-5883]")
    h.record(history.MEASURE, "agent-sigterm: kill to restore done", node="client1", duration=60.0, at=T0 + 2)
    h.record(history.NOTE, "agent fault flags: none", node="client1", at=T0 + 9)  # the teardown's heal
    if verdict is not None:
        (run_dir / REPRO_NAME).write_text(json.dumps({"bug": "nomad-5883", "verdict": verdict}))
    return run_dir


def test_a_repro_half_names_its_bug_flag_verdict_and_replay(tmp_path: Path) -> None:
    on = repro_half(tmp_path, "nomad-5883-with-flag", "with-flag", "rerun-completed-on-restore", "REPRODUCED")
    run = load_run(on)
    assert run.agent_flags == "rerun-completed-on-restore"  # not the teardown's "none"
    assert run.repro is not None and run.repro.verdict == "REPRODUCED"
    text = summary_of(run)
    assert "repro of nomad-5883 (with-flag, fault flag rerun-completed-on-restore): REPRODUCED" in text
    assert "replay: make repro BUG=nomad-5883 LAB=default" in text and "make e2e SEED" not in text
    page = report.render(on, index_root=tmp_path).read_text()
    assert "repro of nomad-5883 (with-flag): REPRODUCED" in page
    assert "<code>make repro BUG=nomad-5883 LAB=default</code>" in page


def test_an_unjudged_half_says_so_and_both_halves_stay_out_of_the_trends(tmp_path: Path) -> None:
    off = repro_half(tmp_path, "nomad-5883-without", "without", "", None)
    assert "not judged yet" in summary_of(load_run(off))
    assert "no fault flag" in summary_of(load_run(off))
    report.render(off, index_root=tmp_path)
    (off / REPRO_NAME).write_text(json.dumps({"verdict": "FIXED"}))  # judged after the run
    summary = index.read_summary(off)
    assert (summary.bug, summary.verdict, summary.flags) == ("nomad-5883", "FIXED", "")
    page = report.render(off, index_root=tmp_path)
    idx = (tmp_path / "index.html").read_text()
    assert "nomad-5883: FIXED" in idx and "left out of the trends" in idx
    assert "trend-point" not in idx  # the only run is a repro half: no trend has a point
    assert page.exists()


def test_a_run_without_repro_is_no_repro(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    h = History(run_dir, "r", 7, "default")
    h.record(history.RUN, "r", seed=7, lab="default", at=T0)
    h.record(history.NOTE, "agent fault flags: none", node="client1", at=T0 + 1)
    run = load_run(run_dir)
    assert run.repro is None and run.agent_flags == ""
    assert "replay: make e2e SEED=7" in summary_of(run)
