"""The run's timeline as SVG, in the manner of Jepsen's: a lane per node, time left to right.

Each fault is a band in its node's lane from the start of its inject to the end of its heal (a fault
never healed runs to the end of the run, hatched); checks are diamonds (red when they failed, with a
rule through the lane so that one failure among hundreds still shows); measures are triangles (red
over their target); agent task events are dots and notes ticks. A lane above the nodes holds what
happened on no node in particular (most checks), and a strip at the top shows each test's span.
Every mark carries a <title>: hovering it in a browser tells what, when, where and in which test.

All functions are pure: records in, layout or SVG text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from e2e.harness import history
from e2e.harness.report.fmt import fmt_offset, fmt_seconds, tooltip
from e2e.harness.report.model import (
    Record,
    data_of,
    over_target,
    short_test,
    start_of,
    text,
    time_of,
)
from e2e.harness.report.svg import (
    BAND_EDGE,
    BAND_FILL,
    BAND_STROKE,
    EVENT_PURPLE,
    FAILED_RED,
    GRID_GREY,
    LANE_FILLS,
    MEASURE_ORANGE,
    NOTE_GREY,
    PASSED_GREEN,
    TEST_FILLS,
    Scale,
    el,
    svg,
    time_ticks,
    txt,
)

WIDTH = 1300.0
GUTTER = 110.0  # lane labels
RIGHT = 16.0
LEGEND_H = 24.0
TESTS_H = 18.0
LANE_H = 46.0
AXIS_H = 24.0
CLUSTER = ""  # the lane of records made on no node in particular
CLUSTER_LABEL = "(no node)"
HATCH_ID = "fieldlab-unhealed"
# The kinds drawn as marks in a lane (faults and heals become bands, tests the strip at the top).
MARK_KINDS = frozenset({history.CHECK, history.MEASURE, history.EVENT, history.NOTE})
LANE_KINDS = MARK_KINDS | {history.FAULT, history.HEAL}


@dataclass(frozen=True)
class Band:
    """A fault from the start of its inject to the end of its heal (or to the end of the run)."""

    node: str
    name: str
    start: float
    injected: float  # when the inject returned: the fault was in effect from here
    heal_start: float | None  # when the heal began; None when never healed
    end: float
    inject_ok: bool
    heal_ok: bool
    test: str
    by_itself: bool = False  # no heal step: the system recovered by itself (history.HEALS_ITSELF)

    @property
    def healed(self) -> bool:
        return self.heal_start is not None


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def lane_of(rec: Record) -> str:
    return text(rec.get("node"))


def lanes(records: Iterable[Record]) -> list[str]:
    """The lanes to draw: the no-node lane first when anything drawn has no node, then every node
    named by any record (commands included: a node that only ran commands still gets its lane)."""
    nodes: set[str] = set()
    cluster = False
    for rec in records:
        node = lane_of(rec)
        if node:
            nodes.add(node)
        elif rec.get("kind") in LANE_KINDS:
            cluster = True
    return ([CLUSTER] if cluster else []) + sorted(nodes, key=_natural)


def fault_bands(records: Sequence[Record], end: float) -> list[Band]:
    """Pair each fault with the next heal of the same name on the same node (Fault.describe() names
    both alike); a fault left without its heal lasts until `end`, unless the system heals it by
    itself (its `heals` datum: a kill, a storm), when its band is its own span. A heal with no fault
    before it (the inject was not recorded) is a band of its own span."""
    open_faults: dict[tuple[str, str], list[Record]] = {}
    bands: list[Band] = []
    for rec in sorted(records, key=time_of):
        kind = rec.get("kind")
        key = (lane_of(rec), text(rec.get("name")))
        if kind == history.FAULT:
            open_faults.setdefault(key, []).append(rec)
        elif kind == history.HEAL:
            pending = open_faults.get(key)
            fault = pending.pop(0) if pending else rec
            bands.append(
                Band(
                    node=key[0],
                    name=key[1],
                    start=start_of(fault),
                    injected=time_of(fault),
                    heal_start=start_of(rec),
                    end=time_of(rec),
                    inject_ok=fault.get("ok") is not False,
                    heal_ok=rec.get("ok") is not False,
                    test=short_test(fault),
                )
            )
    for (node, name), faults in open_faults.items():
        for fault in faults:
            by_itself = data_of(fault).get("heals") == history.HEALS_ITSELF
            bands.append(
                Band(
                    node=node,
                    name=name,
                    start=start_of(fault),
                    injected=time_of(fault),
                    heal_start=time_of(fault) if by_itself else None,
                    end=time_of(fault) if by_itself else max(end, time_of(fault)),
                    inject_ok=fault.get("ok") is not False,
                    heal_ok=fault.get("ok") is not False if by_itself else False,
                    test=short_test(fault),
                    by_itself=by_itself,
                )
            )
    return sorted(bands, key=lambda band: band.start)


def band_title(band: Band, start: float) -> str:
    where = f"{band.node or CLUSTER_LABEL}" + (f", in {band.test}" if band.test else "")
    lines = [f"fault: {band.name} ({where})"]
    lines.append(
        f"inject +{band.start - start:.1f}s to +{band.injected - start:.1f}s"
        + ("" if band.inject_ok else " FAILED")
    )
    if band.heal_start is None:
        lines.append("NOT HEALED: in effect until the end of the run")
    elif band.by_itself:
        lines.append("no heal step: the system recovers by itself (the checks and measures say how)")
    else:
        lines.append(
            f"heal +{band.heal_start - start:.1f}s to +{band.end - start:.1f}s"
            + ("" if band.heal_ok else " FAILED")
        )
        lines.append(f"disrupted for {fmt_seconds(band.end - band.start)}")
    return "\n".join(lines)


def mark_class(rec: Record) -> str:
    """The mark's CSS classes: its kind, and `failed` for a failed check or a measure over target."""
    kind = text(rec.get("kind"))
    if kind == history.CHECK:
        ok = rec.get("ok")
        return "mark check " + ("passed" if ok is True else "failed" if ok is False else "unknown")
    if kind == history.MEASURE:
        return "mark measure over" if over_target(rec) else "mark measure"
    return f"mark {kind}"


# -- drawing ---------------------------------------------------------------------------------------
def _defs() -> str:
    hatch = el(
        "pattern",
        {
            "id": HATCH_ID,
            "width": 8,
            "height": 8,
            "patternUnits": "userSpaceOnUse",
            "patternTransform": "rotate(45)",
        },
        el("rect", {"width": 8, "height": 8, "fill": BAND_FILL}),
        el("line", {"x1": 0, "y1": 0, "x2": 0, "y2": 8, "stroke": BAND_STROKE, "stroke-width": 3}),
    )
    return el("defs", None, hatch)


def _diamond(x: float, y: float, r: float) -> str:
    return f"M{x:.1f},{y - r:.1f}L{x + r:.1f},{y:.1f}L{x:.1f},{y + r:.1f}L{x - r:.1f},{y:.1f}Z"


def _triangle(x: float, y: float, r: float) -> str:
    return f"M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y - r:.1f}L{x:.1f},{y + r:.1f}Z"


LEGEND = (
    ("band", "fault: inject to heal"),
    ("unhealed", "fault never healed"),
    ("passed", "check passed"),
    ("failed", "check failed"),
    ("measure", "measure"),
    ("over", "measure over target"),
    ("event", "task event"),
    ("note", "note"),
)


def _legend_swatch(key: str, x: float, y: float) -> str:
    if key in {"band", "unhealed"}:
        healed = key == "band"
        box = {
            "x": x,
            "y": y - 6,
            "width": 16,
            "height": 12,
            "fill": BAND_FILL if healed else f"url(#{HATCH_ID})",
            "stroke": BAND_STROKE,
            "stroke-dasharray": None if healed else "3,2",
        }
        return el("rect", box)
    if key in {"passed", "failed"}:
        colour = PASSED_GREEN if key == "passed" else FAILED_RED
        return el("path", {"d": _diamond(x + 8, y, 5), "fill": colour})
    if key in {"measure", "over"}:
        colour = MEASURE_ORANGE if key == "measure" else FAILED_RED
        return el("path", {"d": _triangle(x + 8, y, 4.5), "fill": colour})
    if key == "event":
        return el("circle", {"cx": x + 8, "cy": y, "r": 3, "fill": EVENT_PURPLE})
    return el("line", {"x1": x + 8, "y1": y - 5, "x2": x + 8, "y2": y + 5, "stroke": NOTE_GREY})


def _legend() -> str:
    items, x, y = [], GUTTER, LEGEND_H / 2
    for key, label in LEGEND:
        items.append(_legend_swatch(key, x, y))
        items.append(el("text", {"x": x + 20, "y": y + 4, "font-size": 11}, txt(label)))
        x += 20 + 6.2 * len(label) + 18
    return el("g", {"class": "legend"}, *items)


def _lane(name: str, index: int, top: float, height: float, width: float) -> str:
    label = name or CLUSTER_LABEL
    return el(
        "g",
        {"class": "lane", "data-lane": label},
        el(
            "rect",
            {
                "class": "lane-bg",
                "x": 0,
                "y": top,
                "width": width,
                "height": height,
                "fill": LANE_FILLS[index % 2],
            },
        ),
        el(
            "text",
            {"class": "lane-label", "x": 6, "y": top + height / 2 + 4, "font-size": 12, "font-weight": 600},
            txt(label),
        ),
    )


def _axis(x: Scale, start: float, end: float, top: float, bottom: float) -> str:
    parts = []
    for tick in time_ticks(end - start):
        px = x(start + tick)
        parts.append(el("line", {"x1": px, "y1": top, "x2": px, "y2": bottom, "stroke": GRID_GREY}))
        anchor = "start" if tick == 0 else "middle"
        parts.append(
            el(
                "text",
                {"x": px, "y": bottom + 15, "font-size": 11, "text-anchor": anchor, "fill": "#555"},
                txt(fmt_offset(tick)),
            )
        )
    return el("g", {"class": "axis"}, *parts)


def _test_bar(rec: Record, x: Scale, top: float, start: float) -> str:
    data = data_of(rec)
    outcome = text(data.get("outcome")) or ("failed" if rec.get("ok") is False else "passed")
    x0, x1 = x(start_of(rec)), x(time_of(rec))
    message = text(data.get("message")).strip().splitlines()
    title = "\n".join(
        [
            f"test: {text(rec.get('name'))} {outcome}",
            f"+{start_of(rec) - start:.1f}s to +{time_of(rec) - start:.1f}s",
            *message[:1],
        ]
    )
    return el(
        "rect",
        {
            "class": f"test {outcome}",
            "x": x0,
            "y": top + 3,
            "width": max(1.5, x1 - x0 - 1),
            "height": TESTS_H - 6,
            "fill": TEST_FILLS.get(outcome, TEST_FILLS["skipped"]),
        },
        title=title,
    )


def _band(band: Band, x: Scale, top: float, start: float) -> str:
    x0, x1 = x(band.start), x(band.end)
    width = max(2.0, x1 - x0)
    cls = "band" if band.healed else "band unhealed"
    box = {
        "class": "band-area",
        "x": x0,
        "y": top + 2,
        "width": width,
        "height": LANE_H - 4,
        "fill": BAND_FILL if band.healed else f"url(#{HATCH_ID})",
        "stroke": BAND_STROKE,
        "stroke-width": 1,
        "stroke-dasharray": None if band.healed else "5,3",
    }
    parts = [el("rect", box)]
    # The inject and the heal themselves, darker at each end of the band.
    spans = [(band.start, band.injected, band.inject_ok)]
    if band.heal_start is not None:
        spans.append((band.heal_start, band.end, band.heal_ok))
    for a, b, ok in spans:
        parts.append(
            el(
                "rect",
                {
                    "class": "band-edge" if ok else "band-edge failed",
                    "x": x(a),
                    "y": top + 2,
                    "width": max(1.0, x(b) - x(a)),
                    "height": LANE_H - 4,
                    "fill": BAND_EDGE if ok else FAILED_RED,
                },
            )
        )
    label = band.name if band.healed else f"{band.name} (not healed)"
    if width > 40 or not band.healed:
        parts.append(
            el("text", {"class": "band-label", "x": x0 + 3, "y": top + 12, "font-size": 10}, txt(label))
        )
    return el(
        "g",
        {"class": cls, "data-node": band.node or CLUSTER_LABEL, "data-fault": band.name},
        *parts,
        title=band_title(band, start),
    )


def _mark(rec: Record, x: Scale, top: float, start: float) -> str:
    kind, cls, px = text(rec.get("kind")), mark_class(rec), x(time_of(rec))
    attrs = {"class": cls, "data-node": lane_of(rec) or CLUSTER_LABEL}
    title = tooltip(start, rec)
    if kind == history.CHECK:
        failed = rec.get("ok") is False
        colour = FAILED_RED if failed else PASSED_GREEN if rec.get("ok") is True else NOTE_GREY
        parts = []
        if failed:
            parts.append(
                el(
                    "line",
                    {
                        "x1": px,
                        "y1": top + 1,
                        "x2": px,
                        "y2": top + LANE_H - 1,
                        "stroke": colour,
                        "stroke-width": 2,
                    },
                )
            )
        parts.append(el("path", {"d": _diamond(px, top + 26, 6 if failed else 4.5), "fill": colour}))
        return el("g", attrs, *parts, title=title)
    if kind == history.MEASURE:
        colour = FAILED_RED if over_target(rec) else MEASURE_ORANGE
        return el("path", {**attrs, "d": _triangle(px, top + 16, 4.5), "fill": colour}, title=title)
    if kind == history.EVENT:
        return el("circle", {**attrs, "cx": px, "cy": top + 38, "r": 2.5, "fill": EVENT_PURPLE}, title=title)
    return el(
        "line",
        {
            **attrs,
            "x1": px,
            "y1": top + 33,
            "x2": px,
            "y2": top + 43,
            "stroke": NOTE_GREY,
            "stroke-width": 1.5,
        },
        title=title,
    )


def timeline(records: Sequence[Record], *, start: float, end: float, width: float = WIDTH) -> str:
    """The SVG timeline of `records` from `start` to `end` (epoch seconds)."""
    end = max(end, start + 1.0)
    x = Scale(start, end, GUTTER, width - RIGHT)
    tests = [rec for rec in records if rec.get("kind") == history.TEST]
    names = lanes(records)
    top = LEGEND_H
    tests_top = top
    if tests:
        top += TESTS_H
    lane_top = {name: top + i * LANE_H for i, name in enumerate(names)}
    bottom = top + len(names) * LANE_H
    height = bottom + AXIS_H

    parts = [_defs(), _legend()]
    if tests:
        parts.append(
            el(
                "g",
                {"class": "lane tests", "data-lane": "tests"},
                el(
                    "text",
                    {"class": "lane-label", "x": 6, "y": tests_top + 13, "font-size": 11},
                    txt("tests"),
                ),
            )
        )
    parts += [_lane(name, i, lane_top[name], LANE_H, width) for i, name in enumerate(names)]
    parts.append(_axis(x, start, end, LEGEND_H, bottom))
    parts += [_test_bar(rec, x, tests_top, start) for rec in tests]
    parts += [_band(band, x, lane_top[band.node], start) for band in fault_bands(records, end)]
    # Checks last: drawn over everything else in their lane.
    order = {history.NOTE: 0, history.EVENT: 1, history.MEASURE: 2, history.CHECK: 3}
    marks = sorted(
        (rec for rec in records if rec.get("kind") in MARK_KINDS),
        key=lambda rec: order[text(rec.get("kind"))],
    )
    parts += [_mark(rec, x, lane_top[lane_of(rec)], start) for rec in marks]
    return svg(width, height, "timeline", *parts, label="timeline: a lane per node, faults as bands")
