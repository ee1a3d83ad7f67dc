"""The e2e run report: built from a run dir alone, escaped, time-ordered, loud about figures over target."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import report

T0 = 1_700_000_000.0
SMOKE_A = "e2e/suites/test_smoke.py::test_agent_up"
SMOKE_B = "e2e/suites/test_smoke.py::test_restart_keeps_alloc"
JOBS_C = "e2e/suites/test_jobs.py::TestJobs::test_stop[batch]"
REBOOT = "reboot: power off to ssh answering"
RUN_ID = "20240101-120000-4242"


def rec(t: float, kind: str, name: str, **kw: Any) -> dict[str, Any]:
    return {"t": T0 + t, "kind": kind, "name": name, "test": kw.pop("test", SMOKE_B), **kw}


RECORDS = [
    rec(0.0, "run", RUN_ID, test="", data={"seed": 4242, "lab": "default"}),
    rec(1.0, "note", "job submitted from jobs/web.hcl", node="n1"),
    rec(2.0, "command", "systemctl restart fieldlab-agent # CMD-MARK", node="n1", ok=True, duration=0.2),
    rec(3.0, "command", "nomad job status CMD-MARK", node="n2", ok=False, duration=0.1, data={"rc": 1}),
    rec(4.0, "test", SMOKE_A, test=SMOKE_A, ok=True, duration=3.5, data={"outcome": "passed", "message": ""}),
    # written out of order: the report sorts by time
    rec(12.0, "fault", "reboot n1", node="n1", ok=True, duration=5.0),
    rec(
        11.0,
        "event",
        "Restarting",
        node="n1",
        detail="<script>alert(1)</script>",
        data={"alloc": "a1b2", "task": "web"},
    ),
    rec(13.0, "measure", REBOOT, node="n1", duration=20.0, data={"target": 15.0}),
    rec(14.0, "observe", "alloc status OBSERVE-MARK", node="n1", ok=True),
    rec(15.0, "heal", "reboot n1", node="n1", ok=True, duration=1.0),
    rec(
        16.0,
        "check",
        "no orphans",
        ok=False,
        detail="orphan pause container",
        data={"counts": {"orphans": 1, "restarts": 2}},
    ),
    rec(17.0, "check", "deliveries", ok=True, data={"counts": {"restarts": 1, "deliveries": 5}}),
    rec(18.0, "measure", REBOOT, node="n2", duration=10.0, data={"target": 15.0}),
    rec(19.0, "measure", "submit to running", node="n2", duration=3.0, data={"target": None}),
    rec(
        20.0, "test", SMOKE_B, ok=False, duration=16.0, data={"outcome": "failed", "message": "assert 1 == 2"}
    ),
    rec(
        21.0,
        "test",
        JOBS_C,
        test=JOBS_C,
        ok=True,
        duration=0.5,
        data={"outcome": "skipped", "message": "no batch"},
    ),
]

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="21.0">
<testcase classname="e2e.suites.test_smoke" name="test_agent_up" time="3.5" />
<testcase classname="e2e.suites.test_smoke" name="test_restart_keeps_alloc" time="16.0">
<failure message="assert 1 == 2">def test_restart_keeps_alloc():
&gt;   assert 1 == 2  # TRACEBACK-MARK &lt;b&gt;
E   assert 1 == 2</failure></testcase>
<testcase classname="e2e.suites.test_jobs.TestJobs" name="test_stop[batch]" time="0.5">
<skipped type="pytest.skip" message="no batch">skipped</skipped></testcase>
<testcase classname="e2e.suites.test_jobs.TestJobs" name="test_drain" time="2.0">
<error message="fixture failed">setup error JUNIT-ONLY</error></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / RUN_ID
    run.mkdir()
    lines = [json.dumps(r) for r in RECORDS] + ['{"t": 1700000030.0, "kind": "no']  # a killed run's last line
    (run / "history.jsonl").write_text("\n".join(lines))
    (run / "junit.xml").write_text(JUNIT)
    (run / "commands.log").write_text("--- 12:00:02 n1 rc=0 0.20s\n$ systemctl restart fieldlab-agent\n")
    (run / "nodes" / "n1").mkdir(parents=True)
    (run / "nodes" / "n1" / "agent.log").write_text("agent log\n")
    (run / "nodes" / "n2" / "journal").mkdir(parents=True)
    (run / "nodes" / "n2" / "journal" / "boot 1.txt").write_text("journal\n")
    return run


def section(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert match, section_id
    return match.group(1)


def rows(fragment: str) -> list[str]:
    return re.findall(r"<tr[ >].*?</tr>", fragment, re.S)


def first_number(row: str) -> str:
    match = re.search(r'<td class="num">([0-9.]+)</td>', row)
    assert match, row
    return match.group(1)


def test_render_writes_a_self_contained_page(run_dir: Path) -> None:
    out = report.render(run_dir)
    assert out == run_dir / "report.html"
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page  # neither scripts nor an unescaped detail
    assert "http://" not in page and "https://" not in page
    assert f"<h1>e2e run {RUN_ID}</h1>" in page
    assert "<code>make e2e SEED=4242</code>" in page
    assert "default" in page
    assert "2023-11-14 22:13:20 UTC" in page  # start
    assert "21.0s" in page  # wall time: first record to last whole one
    header = re.search(r'<table id="header">(.*?)</table>', page, re.S)
    assert header
    assert ">1 passed<" in header.group(1) and ">1 failed<" in header.group(1)
    assert ">1 skipped<" in header.group(1) and ">1 error<" in header.group(1)


def test_text_from_the_run_is_escaped(run_dir: Path) -> None:
    page = report.render(run_dir).read_text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "TRACEBACK-MARK &lt;b&gt;" in page  # junit's traceback, unescaped by the XML parser, escaped again


def test_suites_group_tests_by_file_with_failures_in_details(run_dir: Path) -> None:
    tests = section(report.render(run_dir).read_text(), "tests")
    assert "<h3>e2e/suites/test_jobs.py" in tests and "<h3>e2e/suites/test_smoke.py" in tests
    failed = next(r for r in rows(tests) if "test_restart_keeps_alloc" in r)
    assert 'class="failed">failed<' in failed
    assert "<details><summary>assert 1 == 2</summary>" in failed
    assert "TRACEBACK-MARK" in failed
    assert "16.0s" in failed
    junit_only = next(r for r in rows(tests) if "TestJobs::test_drain" in r)
    assert ">error<" in junit_only and "JUNIT-ONLY" in junit_only
    # the smoke suite's wall time: from test_agent_up's start (t=0.5) to test_restart's end (t=20)
    assert "wall 19.5s" in tests


def test_timeline_is_time_ordered_and_leaves_commands_out(run_dir: Path) -> None:
    timeline = section(report.render(run_dir).read_text(), "history")
    times = [float(t) for t in re.findall(r'data-t="([0-9.]+)"', timeline)]
    assert times == sorted(times) and len(times) == 9
    kinds = re.findall(r'<td class="kind k-(\w+)">', timeline)
    assert kinds == ["note", "event", "fault", "measure", "heal", "check", "check", "measure", "measure"]
    assert "CMD-MARK" not in timeline and "OBSERVE-MARK" not in timeline
    assert "2 remote commands" in timeline and ">1 failed<" in timeline
    assert '<a href="commands.log">commands.log</a>' in timeline
    assert "<td>+11.0s</td>" in timeline and "<td>+12.0s</td>" in timeline
    failed_check = next(r for r in rows(timeline) if "no orphans" in r)
    assert 'class="bad"' in failed_check and "orphan pause container" in failed_check


def test_the_page_draws_the_timeline_and_counts_faults_and_checks(run_dir: Path) -> None:
    page = report.render(run_dir).read_text()
    timeline = section(page, "timeline")
    assert timeline.count('<svg class="timeline"') == 1
    lanes = re.findall(r'<g class="lane" data-lane="([^"]*)"', timeline)
    assert lanes == ["(no node)", "n1", "n2"]  # the checks were made on no node in particular
    assert len(re.findall(r'<g class="band" data-node="n1" data-fault="reboot n1"', timeline)) == 1
    assert len(re.findall(r'class="mark check failed"', timeline)) == 1
    assert len(re.findall(r'class="mark check passed"', timeline)) == 1
    assert len(re.findall(r'class="mark measure over"', timeline)) == 1
    assert "CMD-MARK" not in timeline and "OBSERVE-MARK" not in timeline
    header = re.search(r'<table id="header">(.*?)</table>', page, re.S)
    assert header
    assert "<tr><th>faults</th><td>1</td></tr>" in header.group(1)
    assert '<tr><th>checks</th><td>2 (<span class="bad">1 failed</span>)</td></tr>' in header.group(1)


def test_each_measure_is_plotted_against_its_target(run_dir: Path) -> None:
    measures = section(report.render(run_dir).read_text(), "measurements")
    plots = re.findall(r'<div class="plot( over)?">\n<h3>(.*?)</h3>(.*?)</svg>', measures, re.S)
    by_name = {name: (over, body) for over, name, body in plots}
    assert set(by_name) == {REBOOT, "submit to running"}
    over, body = by_name[REBOOT]
    assert over and '<span class="flag">1 of 2 over target</span>' in body
    assert '<svg class="measure-plot over"' in body and body.count('class="sample over"') == 1
    assert 'class="target"' in body
    over, body = by_name["submit to running"]
    assert not over and "no target" in body and 'class="target"' not in body


def test_measure_over_target_is_marked(run_dir: Path) -> None:
    measures = section(report.render(run_dir).read_text(), "measurements")
    table = re.search(r'<table id="measures">(.*?)</table>', measures, re.S)
    assert table
    by_value = {first_number(r): r for r in rows(table.group(1))[1:]}
    assert 'class="over"' in by_value["20.0"] and "OVER target" in by_value["20.0"]
    assert "OVER" not in by_value["10.0"]
    assert "OVER" not in by_value["3.0"]  # no target, no mark
    stats = re.search(r'<table id="measure-stats">(.*?)</table>', measures, re.S)
    assert stats
    (row,) = rows(stats.group(1))[1:]  # only the repeated name gets a stats row
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells == [REBOOT, "2", "10.0", "15.0", "20.0", "15.0", "1"]


def test_counts_checked_are_summed(run_dir: Path) -> None:
    counts = section(report.render(run_dir).read_text(), "counts")
    found = dict(re.findall(r'<tr><td>(\w+)</td><td class="num">(\d+)</td>', counts))
    assert found == {"deliveries": "5", "orphans": "1", "restarts": "3"}


def test_collected_logs_are_relative_links(run_dir: Path) -> None:
    logs = section(report.render(run_dir).read_text(), "logs")
    assert '<a href="nodes/n1/agent.log">nodes/n1/agent.log</a>' in logs
    assert '<a href="nodes/n2/journal/boot%201.txt">nodes/n2/journal/boot 1.txt</a>' in logs


def test_summary_is_short_and_names_seed_failures_and_figures(run_dir: Path) -> None:
    text = report.summary(run_dir)
    lines = text.splitlines()
    assert len(lines) <= 30
    assert "seed 4242" in lines[0] and "make e2e SEED=4242" in lines[0]
    assert lines[1].startswith("tests: 1 passed, 1 failed, 1 skipped, 1 error")
    assert "  e2e/suites/test_smoke.py: 1 passed, 1 failed, 0 skipped  19.5s" in lines
    reboot = next(line for line in lines if REBOOT in line)
    assert "min 10.0s / med 15.0s / max 20.0s vs target 15.0s (1 OVER)" in reboot
    assert "counts checked: deliveries=5, orphans=1, restarts=3" in lines
    assert f"  {SMOKE_B}: assert 1 == 2" in lines
    assert lines[-1] == f"report: {run_dir / 'report.html'}"


def test_a_run_without_junit_or_logs_still_reports(run_dir: Path) -> None:
    (run_dir / "junit.xml").unlink()
    (run_dir / "commands.log").unlink()
    for path in sorted((run_dir / "nodes").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    page = report.render(run_dir).read_text()
    assert "No logs collected." in page
    assert "commands.log (missing)" in page
    assert "TestJobs::test_drain" not in page  # only junit knew of it
    assert "<tr><th>junit.xml</th><td>missing</td></tr>" in page


def test_unreadable_junit_is_ignored(run_dir: Path) -> None:
    (run_dir / "junit.xml").write_text("<testsuites><testsuite")  # killed while writing
    assert "1 passed, 1 failed, 1 skipped" in report.summary(run_dir)


def test_main_renders_and_prints_the_summary(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main([str(run_dir)]) == 0
    assert (run_dir / "report.html").is_file()
    out = capsys.readouterr().out
    assert "make e2e SEED=4242" in out and "1 failed" in out


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_main_on_a_bad_dir_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str
) -> None:
    target = tmp_path / "run"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("not a dir")
    assert report.main([str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run" / "report.html").exists()


def test_main_without_an_argument_is_usage_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main([]) == 2
    assert capsys.readouterr().err.startswith("usage:")


def test_a_storm_note_draws_its_request_rate_convergence_and_restore_distribution(run_dir: Path) -> None:
    storm = rec(
        22.0,
        "note",
        "storm all at once, SIGKILL: OpenBao load",
        detail="STORM-MARK 120 requests",
        data={
            "series": {
                "requests per second": [[0, 5], [1, 40], [2, 12]],
                "probes converged": [[3.5, 1], [4.0, 2]],
            },
            "restore_seconds": [0.4, 0.2, 0.9],
        },
    )
    with (run_dir / "history.jsonl").open("a") as fh:
        fh.write("\n" + json.dumps(storm))
    page = report.render(run_dir).read_text()
    storms = section(page, "storms")
    assert "storm all at once, SIGKILL: OpenBao load" in storms and "STORM-MARK" in storms
    charts = re.findall(r'<svg[^>]*class="series-chart".*?</svg>', storms, re.S)
    assert len(charts) == 3, "request rate, convergence curve, restore distribution"
    assert "OpenBao requests per second" in charts[0] and "probes with the new certificate" in charts[1]
    assert "percent of agents" in charts[2]
    # Three points each: a polyline of three coordinates in the rate chart.
    assert len(re.search(r'<polyline points="([^"]+)"', charts[0]).group(1).split()) == 3  # type: ignore[union-attr]


def test_a_run_without_storms_has_no_storm_section(run_dir: Path) -> None:
    assert '<section id="storms">' not in report.render(run_dir).read_text()
