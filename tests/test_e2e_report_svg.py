"""The report's drawings as pure functions: records in, SVG out. Each test reads the SVG back as XML
and looks where the drawing must be: a lane per node, a band from a fault's inject to its heal (to the
run's end when never healed), red for a failed check and a measure over its target."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from e2e.harness import history
from e2e.harness.report import plots, svg, timeline
from e2e.harness.report.model import figures

T0 = 1_700_000_000.0
END = T0 + 100.0


def rec(t: float, kind: str, name: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "t": T0 + t,
        "kind": kind,
        "name": name,
        "test": kw.pop("test", "e2e/t.py::test_x"),
    }
    return {**out, **kw}


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)  # well-formed, or this raises


def having(root: ET.Element, *classes: str) -> list[ET.Element]:
    """Elements whose class attribute holds all of `classes`."""
    return [e for e in root.iter() if set(classes) <= set(e.get("class", "").split())]


def draw(records: list[dict[str, Any]], end: float = END) -> ET.Element:
    return parse(timeline.timeline(records, start=T0, end=end))


def scale() -> svg.Scale:
    return svg.Scale(T0, END, timeline.GUTTER, timeline.WIDTH - timeline.RIGHT)


def title(element: ET.Element) -> str:
    found = element.find("title")
    assert found is not None, ET.tostring(element)
    return found.text or ""


def test_two_nodes_make_two_lanes_in_name_order() -> None:
    records = [
        rec(1, "command", "true", node="client2"),  # a node that only ran commands still gets its lane
        rec(2, "check", "invariants", node="client10", ok=True),
        rec(3, "note", "hello", node="client2"),
    ]
    assert timeline.lanes(records) == ["client2", "client10"]
    lanes = having(draw(records), "lane")
    assert [lane.get("data-lane") for lane in lanes] == ["client2", "client10"]
    tops = [float(lane.find("rect").get("y", "")) for lane in lanes]  # type: ignore[union-attr]
    assert tops[1] - tops[0] == timeline.LANE_H


def test_records_on_no_node_get_a_lane_of_their_own() -> None:
    records = [rec(1, "check", "deliveries", ok=True), rec(2, "note", "x", node="client1")]
    assert timeline.lanes(records) == [timeline.CLUSTER, "client1"]
    root = draw(records)
    assert [lane.get("data-lane") for lane in having(root, "lane")] == [timeline.CLUSTER_LABEL, "client1"]
    (mark,) = having(root, "check")
    assert mark.get("data-node") == timeline.CLUSTER_LABEL


def test_a_band_runs_from_the_start_of_the_inject_to_the_end_of_the_heal() -> None:
    records = [
        rec(20, "fault", "hard-reboot client1", node="client1", ok=True, duration=9.0),
        rec(27, "heal", "hard-reboot client1", node="client1", ok=True, duration=6.0),
    ]
    (band,) = timeline.fault_bands(records, END)
    assert (band.start, band.injected, band.heal_start, band.end) == (T0 + 11, T0 + 20, T0 + 21, T0 + 27)
    assert band.healed and band.node == "client1"
    (group,) = having(draw(records), "band")
    assert "unhealed" not in group.get("class", "")
    area = having(group, "band-area")[0]
    x = scale()
    assert float(area.get("x", "")) == pytest.approx(x(T0 + 11), abs=0.1)
    assert float(area.get("width", "")) == pytest.approx(x(T0 + 27) - x(T0 + 11), abs=0.2)
    assert area.get("fill") == svg.BAND_FILL
    assert len(having(group, "band-edge")) == 2  # the inject and the heal
    assert "disrupted for 16.0s" in title(group)


def test_a_fault_never_healed_lasts_to_the_end_of_the_run_and_is_drawn_hatched() -> None:
    records = [
        rec(84, "fault", "partition client2", node="client2", ok=True, duration=1.5),
        rec(90, "heal", "partition client1", node="client1", ok=True, duration=1.0),  # another node's
    ]
    bands = {band.node: band for band in timeline.fault_bands(records, END)}
    assert not bands["client2"].healed and bands["client2"].end == END
    root = draw(records)
    (group,) = having(root, "band", "unhealed")
    assert group.get("data-node") == "client2"
    area = having(group, "band-area")[0]
    x = scale()
    assert float(area.get("x", "")) + float(area.get("width", "")) == pytest.approx(x(END), abs=0.2)
    assert area.get("fill") == f"url(#{timeline.HATCH_ID})" and area.get("stroke-dasharray")
    assert root.find(f".//pattern[@id='{timeline.HATCH_ID}']") is not None
    assert "NOT HEALED" in title(group)
    assert any("(not healed)" in (t.text or "") for t in group.iter("text"))


def test_a_fault_the_system_heals_by_itself_is_its_own_span_not_never_healed() -> None:
    """A killed container or a storm has no heal step (the agent's recovery is what is tested):
    its band ends with its own span; one the harness did heal (chaos records a heal) pairs as usual;
    any other fault without a heal is still never healed."""
    itself = {"heals": history.HEALS_ITSELF}
    records = [
        rec(10, "fault", "kill-pause client1 alloc 1", node="client1", ok=True, duration=0.5, data=itself),
        rec(20, "fault", "kill-task client2 alloc 2", node="client2", ok=True, duration=0.4, data=itself),
        rec(21, "heal", "kill-task client2 alloc 2", node="client2", ok=True, duration=0.0),
        rec(80, "fault", "storm: all at once", ok=True, duration=50.0, data=itself),
        rec(90, "fault", "partition client1", node="client1", ok=True, duration=1.0),
    ]
    bands = {band.name: band for band in timeline.fault_bands(records, END)}
    kill = bands["kill-pause client1 alloc 1"]
    assert kill.healed and kill.by_itself and (kill.start, kill.end) == (T0 + 9.5, T0 + 10)
    assert (
        bands["kill-task client2 alloc 2"].end == T0 + 21 and not bands["kill-task client2 alloc 2"].by_itself
    )
    storm = bands["storm: all at once"]
    assert storm.healed and (storm.start, storm.end) == (T0 + 30, T0 + 80)
    assert not bands["partition client1"].healed and bands["partition client1"].end == END
    root = draw(records)
    assert [g.get("data-fault") for g in having(root, "band", "unhealed")] == ["partition client1"]
    group = next(g for g in having(root, "band") if g.get("data-fault") == "kill-pause client1 alloc 1")
    assert "recovers by itself" in title(group) and "NOT HEALED" not in title(group)


def test_faults_pair_with_their_own_heals_in_order() -> None:
    records = [
        rec(1, "fault", "kill-pause client1", node="client1", duration=1.0),
        rec(2, "heal", "kill-pause client1", node="client1", duration=0.5),
        rec(5, "fault", "kill-pause client1", node="client1", duration=1.0),
        rec(6, "fault", "agent-sigkill client1", node="client1", duration=0.5),
        rec(9, "heal", "agent-sigkill client1", node="client1", duration=2.0, ok=False),
        rec(10, "heal", "kill-pause client1", node="client1", duration=0.5),
    ]
    bands = timeline.fault_bands(records, END)
    assert [(b.name, b.start - T0, b.end - T0) for b in bands] == [
        ("kill-pause client1", 0.0, 2.0),
        ("kill-pause client1", 4.0, 10.0),
        ("agent-sigkill client1", 5.5, 9.0),
    ]
    assert all(b.healed for b in bands) and not bands[2].heal_ok
    failed_heal = next(
        g for g in having(draw(records), "band") if g.get("data-fault") == "agent-sigkill client1"
    )
    assert having(failed_heal, "band-edge", "failed")[0].get("fill") == svg.FAILED_RED
    assert "FAILED" in title(failed_heal)


def test_a_failed_check_is_red_and_a_passed_one_green() -> None:
    records = [
        rec(10, "check", "invariants", node="client1", ok=True),
        rec(20, "check", "invariants", node="client1", ok=False, detail="client1: orphan pause container"),
    ]
    root = draw(records)
    (failed,) = having(root, "mark", "check", "failed")
    (passed,) = having(root, "mark", "check", "passed")
    assert [p.get("fill") for p in failed.iter("path")] == [svg.FAILED_RED]
    assert [p.get("fill") for p in passed.iter("path")] == [svg.PASSED_GREEN]
    (rule,) = failed.iter("line")  # a failure is a rule through the whole lane, too
    assert rule.get("stroke") == svg.FAILED_RED
    assert float(rule.get("y2", "")) - float(rule.get("y1", "")) >= timeline.LANE_H - 2
    assert "orphan pause container" in title(failed) and "+20.0s" in title(failed)
    x = scale()
    assert float(rule.get("x1", "")) == pytest.approx(x(T0 + 20), abs=0.1)


def test_a_measure_over_its_target_is_flagged_in_the_timeline_and_its_plot() -> None:
    records = [
        rec(
            10,
            "measure",
            "agent-sigkill: kill to restore done",
            node="c1",
            duration=3.9,
            data={"target": 5.0},
        ),
        rec(
            20,
            "measure",
            "agent-sigkill: kill to restore done",
            node="c2",
            duration=6.2,
            data={"target": 5.0},
        ),
    ]
    root = draw(records)
    (over,) = having(root, "mark", "measure", "over")
    assert over.get("fill") == svg.FAILED_RED and over.get("data-node") == "c2"
    assert len(having(root, "mark", "measure")) == 2
    (fig,) = figures(records)
    plot = parse(plots.measure_plot(fig, T0))
    assert "over" in plot.get("class", "").split()
    samples = having(plot, "sample")
    assert [s.get("fill") for s in samples] == [svg.SAMPLE_BLUE, svg.FAILED_RED]
    (target,) = having(plot, "target")
    line = target.find("line")
    assert line is not None
    y_target = float(line.get("y1", ""))
    assert float(samples[1].get("cy", "")) < y_target < float(samples[0].get("cy", ""))  # above and below


def test_a_measure_within_its_target_is_not_flagged() -> None:
    records = [rec(10, "measure", "hard reboot to alloc reachable", duration=19.5, data={"target": 30.0})]
    assert not having(draw(records), "over")
    plot = parse(plots.measure_plot(figures(records)[0], T0))
    assert "over" not in plot.get("class", "").split() and not having(plot, "over")


def test_tests_strip_and_other_marks_and_what_is_left_out() -> None:
    records = [
        rec(5, "test", "e2e/t.py::test_a", ok=True, duration=4.0, data={"outcome": "passed"}),
        rec(
            9,
            "test",
            "e2e/t.py::test_b",
            ok=False,
            duration=3.0,
            data={"outcome": "failed", "message": "boom"},
        ),
        rec(6, "event", "Restored", node="client1", data={"task": "web", "alloc": "a1"}),
        rec(7, "command", "CMD-MARK", node="client1", ok=True),
        rec(8, "observe", "OBSERVE-MARK", node="client1", ok=True),
    ]
    text = timeline.timeline(records, start=T0, end=END)
    root = parse(text)
    assert [r.get("fill") for r in having(root, "test")] == [
        svg.TEST_FILLS["passed"],
        svg.TEST_FILLS["failed"],
    ]
    assert len(having(root, "mark", "event")) == 1
    assert "CMD-MARK" not in text and "OBSERVE-MARK" not in text


def test_text_from_the_run_is_escaped_in_the_svg() -> None:
    records = [
        rec(1, "check", "</title><script>x</script>", node='n"1<', ok=False, detail="a & b <b>"),
        rec(2, "fault", "<i>f</i>", node='n"1<', duration=1.0),
    ]
    text = timeline.timeline(records, start=T0, end=END)
    assert "<script" not in text and "<i>" not in text and "<b>" not in text
    root = parse(text)
    (mark,) = having(root, "check")
    assert "</title><script>x</script>" in title(mark) and "a & b <b>" in title(mark)
    assert [lane.get("data-lane") for lane in having(root, "lane")] == ['n"1<']


def test_an_empty_or_instant_run_still_draws() -> None:
    root = parse(timeline.timeline([], start=T0, end=T0))
    assert root.tag == "svg" and not having(root, "lane")
    root = parse(timeline.timeline([rec(0, "note", "n", node="c1")], start=T0, end=T0))
    assert len(having(root, "lane")) == 1


def test_trend_chart_marks_runs_over_target_and_links_each_run() -> None:
    points = [
        plots.TrendPoint("run-1", "run-1/report.html", "2024-01-01 10:00", [3.0, 4.0], target=5.0),
        plots.TrendPoint("run-2", "run%202/report.html", "2024-01-02 10:00", [6.0, 7.0], target=5.0),
    ]
    root = parse(plots.trend_chart(points, "restore time"))
    links = having(root, "trend-point")
    assert [a.get("href") for a in links] == ["run-1/report.html", "run%202/report.html"]
    assert [a.get("class") for a in links] == ["trend-point", "trend-point over"]
    assert [c.get("fill") for a in links for c in a.iter("circle")] == [svg.SAMPLE_BLUE, svg.FAILED_RED]
    assert "median 6.5s of 2" in title(links[1])


def test_outcomes_chart_stacks_passed_failed_skipped() -> None:
    bars = [plots.OutcomeBar("r1", "r1/report.html", passed=3, failed=1, skipped=2)]
    root = parse(plots.outcomes_chart(bars))
    (bar,) = having(root, "outcome-bar")
    heights = {r.get("class"): float(r.get("height", "")) for r in bar.iter("rect")}
    assert (
        heights["passed"] == pytest.approx(3 * heights["failed"]) == pytest.approx(1.5 * heights["skipped"])
    )


@pytest.mark.parametrize(
    ("span", "step"),
    [
        (1.5, 1),
        (10, 1),
        (100, 10),
        (104, 10),
        (900, 120),
        (5400, 600),
        (3 * 86400, 28800),
        (10 * 86400, 86400),
    ],
)
def test_time_ticks_are_few_and_readable(span: float, step: float) -> None:
    ticks = list(svg.time_ticks(span))
    assert ticks[0] == 0 and ticks[1] - ticks[0] == step and ticks[-1] <= span + 1e-9 and len(ticks) <= 13


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0.0, 1.0), (0.07, 0.1), (1.0, 1.0), (6.82, 10.0), (22, 25), (31, 50)]
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert svg.nice_ceiling(value) == pytest.approx(ceiling)


def test_history_kinds_drawn_are_the_harness_ones() -> None:
    assert {history.CHECK, history.MEASURE, history.EVENT, history.NOTE} == timeline.MARK_KINDS
