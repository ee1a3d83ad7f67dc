"""The index across runs and `latest`: rebuilt on every render, a row per run, the key measures'
trends, the newest run linked atomically, and nothing touched for a run dir outside a reports root."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from e2e.harness import history, report
from e2e.harness.history import History
from e2e.harness.report import index

DAY = 86_400.0
T0 = 1_717_000_000.0


def write_run(
    root: Path,
    rel: str,
    start: float,
    *,
    restore: list[float] = (),  # type: ignore[assignment]
    reboot: float | None = None,
    pause: float | None = None,
    failed: bool = False,
    flags: str = "",
) -> Path:
    """A run dir written through `History`, with the key measures under their suites' names."""
    run_dir = root / rel
    h = History(run_dir, run_dir.name, 7, "default")
    h.record(history.RUN, run_dir.name, seed=7, lab="default", at=start)
    if flags:
        h.record(history.NOTE, f"agent fault flags: {flags}", node="client1", at=start + 0.5)
    h.set_test("e2e/suites/test_restore.py::test_x")
    for i, took in enumerate(restore):
        h.record(history.FAULT, "agent-sigkill client1", node="client1", duration=0.5, at=start + 1 + i * 10)
        h.record(history.HEAL, "agent-sigkill client1", node="client1", duration=took, at=start + 2 + i * 10)
        h.record(
            history.MEASURE,
            "agent-sigkill: kill to restore done",
            node="client1",
            duration=took,
            target=5.0,
            at=start + 2 + i * 10,
        )
    if reboot is not None:
        h.record(
            history.MEASURE,
            "clean reboot to alloc reachable",
            node="client1",
            duration=reboot,
            target=30.0,
            at=start + 40,
        )
    if pause is not None:
        h.record(
            history.MEASURE, "kill pause + agent SIGKILL to network recovered", duration=pause, at=start + 50
        )
    h.check("invariants", ["orphan"] if failed else [], node="client1", at=start + 55)
    outcome = "failed" if failed else "passed"
    h.record(
        history.TEST,
        "e2e/suites/test_restore.py::test_x",
        ok=not failed,
        duration=50,
        outcome=outcome,
        at=start + 60,
    )
    return run_dir


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    write_run(root, "20240601-000000-default", T0, restore=[3.0, 4.0], reboot=20.0, pause=9.0)
    write_run(
        root, "20240603-000000-nightly/suites", T0 + 2 * DAY, restore=[6.0, 7.0], reboot=25.0, failed=True
    )
    write_run(
        root, "20240604-000000-repro-default/bug-on", T0 + 3 * DAY, restore=[60.0], flags="fail_restore"
    )
    return root


def cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_render_rebuilds_the_index_with_a_row_per_run_newest_first(root: Path) -> None:
    newest = write_run(root, "20240602-000000-default", T0 + DAY, restore=[4.5], pause=8.0)
    report.render(newest, index_root=root)
    page = (root / "index.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http://" not in page and "https://" not in page
    table = re.search(r'<table id="runs-table">(.*?)</table>', page, re.S)
    assert table
    rows = re.findall(r"<tr[ >].*?</tr>", table.group(1), re.S)[1:]
    paths = [cells(r)[1] for r in rows]
    assert paths == [
        "20240604-000000-repro-default/bug-on",
        "20240603-000000-nightly/suites",
        "20240602-000000-default",
        "20240601-000000-default",
    ]
    nightly = cells(rows[1])
    # date, run, lab, passed, failed, skipped, error, duration, faults, failed checks, 3 key measures, flags
    assert nightly[:2] == ["2024-05-31 16:26", "20240603-000000-nightly/suites"]
    assert nightly[3:12] == ["0", "1", "0", "0", "1m00.0s", "2", "1", "6.5s", "25.0s"]
    assert 'class="failed-run"' in rows[1] and 'class="num bad">6.5s' in rows[1]  # over its 5s target
    assert cells(rows[0])[-2:] == ["fail_restore", ""]  # its flags; no repro note
    # only the newest render had a report: its link goes to the page, the others' to their dir
    assert '<a href="20240602-000000-default/report.html">' in rows[2]
    assert '<a href="20240601-000000-default/">' in rows[3]


def test_trends_plot_the_key_measures_across_runs_without_flagged_runs(root: Path) -> None:
    report.render(root / "20240601-000000-default", index_root=root)
    page = (root / "index.html").read_text()
    charts = re.findall(
        r'<div class="plot trend-box" id="trend-(\d)">(.*?)</div>\n(?=<div class="plot|</div>)', page, re.S
    )
    by_label = {}
    for _, body in charts:
        label = re.search(r"<h3>(.*?)</h3>", body)
        assert label
        by_label[label.group(1)] = body
    assert set(by_label) == {"restore time", "reboot → reachable", "pause kill → recovered"}
    restore = ET.fromstring(re.search(r"<svg.*</svg>", by_label["restore time"], re.S).group(0))  # type: ignore[union-attr]
    points = [a for a in restore.iter("a") if "trend-point" in a.get("class", "")]
    # the repro run (agent fault flags, a 60 s restore) is left out
    assert [a.get("href") for a in points] == [
        "20240601-000000-default/report.html",
        "20240603-000000-nightly/suites/",
    ]
    assert [a.get("class") for a in points] == ["trend-point", "trend-point over"]
    pause = ET.fromstring(re.search(r"<svg.*</svg>", by_label["pause kill → recovered"], re.S).group(0))  # type: ignore[union-attr]
    assert len([a for a in pause.iter("a")]) == 1
    assert re.search(r'<svg class="outcomes"', page)


def test_latest_points_at_the_newest_run_and_is_replaced_by_a_rename(root: Path) -> None:
    (root / "latest").symlink_to("20240601-000000-default")
    report.render(root / "20240601-000000-default", index_root=root)  # an old run rendered again
    latest = root / "latest"
    assert latest.is_symlink() and os.readlink(latest) == "20240604-000000-repro-default/bug-on"
    assert (latest / "history.jsonl").is_file()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary link left behind
    newer = write_run(root, "20240610-000000-default", T0 + 9 * DAY, restore=[3.5])
    report.render(newer, index_root=root)
    assert os.readlink(latest) == "20240610-000000-default"


def test_a_real_directory_named_latest_is_left_alone(root: Path) -> None:
    (root / "latest").mkdir()
    (root / "latest" / "keep").write_text("mine")
    report.render(root / "20240601-000000-default", index_root=root)
    assert (root / "latest" / "keep").read_text() == "mine"
    assert (root / "index.html").is_file()


def test_rendering_outside_a_reports_root_leaves_no_index(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "20240601-000000-default", T0, restore=[3.0])
    report.render(run_dir)
    assert (run_dir / "report.html").is_file()
    assert not (tmp_path / "index.html").exists() and not (tmp_path / "latest").exists()
    assert index.reports_root_for(run_dir) is None
    assert index.reports_root_for(index.REPORTS / "some-run") == index.REPORTS


def test_the_run_summary_is_a_cache_refreshed_when_the_history_changes(root: Path) -> None:
    run_dir = root / "20240601-000000-default"
    report.render(run_dir, index_root=root)
    cached = json.loads((run_dir / index.SUMMARY_NAME).read_text())
    assert cached["measures"]["agent-sigkill: kill to restore done"] == [3.0, 4.0]
    stale = dict(cached, measures={})
    (run_dir / index.SUMMARY_NAME).write_text(json.dumps(stale))
    assert index.read_summary(run_dir).measures == {}  # fresh by its time: trusted
    later = (run_dir / "history.jsonl").stat().st_mtime + 5
    os.utime(run_dir / "history.jsonl", (later, later))
    assert index.read_summary(run_dir).measures["agent-sigkill: kill to restore done"] == [3.0, 4.0]
    (run_dir / index.SUMMARY_NAME).write_text("{not json")
    assert index.read_summary(run_dir).run_id == "20240601-000000-default"


def test_runs_are_found_a_few_levels_down_but_not_inside_run_dirs_or_links(root: Path) -> None:
    (root / "latest").symlink_to("20240601-000000-default")
    nested = root / "20240601-000000-default" / "nodes" / "inner"
    nested.mkdir(parents=True)
    (nested / "history.jsonl").write_text("")
    found = sorted(p.relative_to(root).as_posix() for p in index.find_runs(root))
    assert found == [
        "20240601-000000-default",
        "20240603-000000-nightly/suites",
        "20240604-000000-repro-default/bug-on",
    ]


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("agent-sigkill: kill to restore done", "restore time"),
        ("agent-sigterm: kill to restore done", "restore time"),
        ("clean reboot to alloc reachable", "reboot → reachable"),
        ("hard reboot to alloc reachable", "reboot → reachable"),
        ("kill pause to network recovered", "pause kill → recovered"),
        ("kill pause + agent SIGKILL to network recovered", "pause kill → recovered"),
        ("kill task to network recovered", None),
        ("chaos kill-pause: inject to recovered", None),
        ("hard-reboot: power off to ssh answering", None),
    ],
)
def test_key_measures_match_the_names_the_suites_measure(name: str, label: str | None) -> None:
    assert [key.label for key in index.KEY_MEASURES if key.matches(name)] == ([label] if label else [])


def test_main_index_rebuilds_the_index_alone(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--index", str(root)]) == 0
    assert (root / "index.html").is_file() and (root / "latest").is_symlink()
    assert capsys.readouterr().out.strip() == f"index of runs: {root / 'index.html'}"
    assert report.main(["--index", str(root / "nope")]) == 2
