"""Small SVG charts: a measure's samples against its target (one run), and a figure across runs.

Pure functions: numbers in, SVG text out (see `svg` for the escaping).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from e2e.harness.report.fmt import fmt_seconds, tooltip
from e2e.harness.report.model import Figure, num, over_target, target_of
from e2e.harness.report.svg import (
    FAILED_RED,
    GRID_GREY,
    MEASURE_ORANGE,
    PASSED_GREEN,
    SAMPLE_BLUE,
    TEST_FILLS,
    Scale,
    el,
    nice_ceiling,
    svg,
    txt,
)

PLOT_W, PLOT_H = 320.0, 130.0
TREND_W, TREND_H = 440.0, 130.0
LEFT, RIGHT, TOP, BOTTOM = 44.0, 64.0, 10.0, 18.0


def _y_axis(
    y: Scale, top_value: float, width: float, height: float, fmt: Callable[[float], str] = fmt_seconds
) -> str:
    parts = [
        el("line", {"x1": LEFT, "y1": TOP, "x2": LEFT, "y2": height - BOTTOM, "stroke": "#999"}),
        el("line", {"x1": LEFT, "y1": y(0), "x2": width - RIGHT, "y2": y(0), "stroke": "#999"}),
        el(
            "line",
            {"x1": LEFT, "y1": y(top_value), "x2": width - RIGHT, "y2": y(top_value), "stroke": GRID_GREY},
        ),
    ]
    for value in (0.0, top_value):
        parts.append(
            el(
                "text",
                {"x": LEFT - 4, "y": y(value) + 4, "font-size": 10, "text-anchor": "end", "fill": "#555"},
                txt(fmt(value)),
            )
        )
    return el("g", {"class": "y-axis"}, *parts)


def _target_line(y: Scale, target: float, width: float) -> str:
    return el(
        "g",
        {"class": "target"},
        el(
            "line",
            {
                "x1": LEFT,
                "y1": y(target),
                "x2": width - RIGHT,
                "y2": y(target),
                "stroke": MEASURE_ORANGE,
                "stroke-width": 1.5,
                "stroke-dasharray": "6,3",
            },
        ),
        el(
            "text",
            {"x": width - RIGHT + 4, "y": y(target) + 4, "font-size": 10, "fill": MEASURE_ORANGE},
            txt(f"target {fmt_seconds(target)}"),
        ),
        title=f"target {fmt_seconds(target)}",
    )


def measure_plot(fig: Figure, start: float) -> str:
    """`fig`'s samples in the order taken, as dots (red over their own target), against the dashed
    target line; the SVG's class says `over` when any sample was over."""
    samples = [rec for rec in fig.records if num(rec.get("duration")) is not None]
    values = [num(rec.get("duration")) or 0.0 for rec in samples]
    targets = [t for t in (target_of(rec) for rec in samples) if t is not None]
    top_value = nice_ceiling(max([*values, *targets, 0.1]) * 1.1)
    y = Scale(0.0, top_value, PLOT_H - BOTTOM, TOP)
    n = max(1, len(samples))
    x_of = Scale(0.0, float(n), LEFT, PLOT_W - RIGHT)
    parts = [_y_axis(y, top_value, PLOT_W, PLOT_H)]
    if fig.target is not None:
        parts.append(_target_line(y, fig.target, PLOT_W))
    points = [(x_of(i + 0.5), y(value)) for i, value in enumerate(values)]
    if len(points) > 1:
        line = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(el("polyline", {"points": line, "fill": "none", "stroke": "#b0bec5"}))
    for rec, (px, py) in zip(samples, points, strict=True):
        over = over_target(rec)
        parts.append(
            el(
                "circle",
                {
                    "class": "sample over" if over else "sample",
                    "cx": px,
                    "cy": py,
                    "r": 4.5 if over else 3.5,
                    "fill": FAILED_RED if over else SAMPLE_BLUE,
                },
                title=tooltip(start, rec, head=f"{fig.name}: {fmt_seconds(num(rec.get('duration')))}"),
            )
        )
    parts.append(
        el(
            "text",
            {"x": LEFT, "y": PLOT_H - 4, "font-size": 10, "fill": "#555"},
            txt(f"{len(samples)} sample{'s' if len(samples) != 1 else ''}, in the order taken"),
        )
    )
    cls = "measure-plot over" if fig.over else "measure-plot"
    return svg(PLOT_W, PLOT_H, cls, *parts, label=f"{fig.name} against its target")


# -- across runs -------------------------------------------------------------------------------------
@dataclass
class TrendPoint:
    """One run's samples of a figure."""

    run: str  # the run's id, for the tooltip
    href: str  # its report, relative to the index page
    when: str  # its date, for the tooltip
    values: list[float]
    target: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def over(self) -> bool:
        return self.target is not None and self.median > self.target


def trend_chart(points: Sequence[TrendPoint], label: str) -> str:
    """Per run, oldest left: the median as a dot (red over target) with a min-max whisker, each
    linking to the run's report; the latest target as a dashed line."""
    points = [p for p in points if p.values]
    targets = [p.target for p in points if p.target is not None]
    target = targets[-1] if targets else None
    top_value = nice_ceiling(max([*(max(p.values) for p in points), *targets, 0.1]) * 1.1)
    y = Scale(0.0, top_value, TREND_H - BOTTOM, TOP)
    x_of = Scale(0.0, float(max(1, len(points))), LEFT, TREND_W - RIGHT)
    parts = [_y_axis(y, top_value, TREND_W, TREND_H)]
    if target is not None:
        parts.append(_target_line(y, target, TREND_W))
    coords = [(x_of(i + 0.5), y(p.median)) for i, p in enumerate(points)]
    if len(coords) > 1:
        line = " ".join(f"{px:.1f},{py:.1f}" for px, py in coords)
        parts.append(el("polyline", {"points": line, "fill": "none", "stroke": "#b0bec5"}))
    for point, (px, py) in zip(points, coords, strict=True):
        stats = (
            f"median {fmt_seconds(point.median)} of {len(point.values)} "
            f"(min {fmt_seconds(min(point.values))}, max {fmt_seconds(max(point.values))})"
        )
        title = "\n".join(
            [f"{point.run} ({point.when})", stats]
            + ([f"target {fmt_seconds(point.target)}"] if point.target is not None else [])
            + point.notes
        )
        whisker = el(
            "line",
            {"x1": px, "y1": y(min(point.values)), "x2": px, "y2": y(max(point.values)), "stroke": "#90a4ae"},
        )
        dot = el(
            "circle",
            {"cx": px, "cy": py, "r": 4, "fill": FAILED_RED if point.over else SAMPLE_BLUE},
        )
        cls = "trend-point over" if point.over else "trend-point"
        parts.append(el("a", {"href": point.href, "class": cls}, whisker, dot, title=title))
    parts.append(
        el(
            "text",
            {"x": LEFT, "y": TREND_H - 4, "font-size": 10, "fill": "#555"},
            txt(f"{len(points)} run{'s' if len(points) != 1 else ''}, oldest left"),
        )
    )
    return svg(TREND_W, TREND_H, "trend", *parts, label=f"{label} across runs")


@dataclass
class OutcomeBar:
    run: str
    href: str
    passed: int
    failed: int  # failed and errors
    skipped: int


def outcomes_chart(bars: Sequence[OutcomeBar]) -> str:
    """Per run, oldest left: a stacked bar of its tests, passed (green), failed (red), skipped (grey)."""
    most = max([b.passed + b.failed + b.skipped for b in bars] + [1])
    y = Scale(0.0, float(most), TREND_H - BOTTOM, TOP)
    x_of = Scale(0.0, float(max(1, len(bars))), LEFT, TREND_W - RIGHT)
    step = x_of(1) - x_of(0)
    bar_w = max(2.0, min(18.0, step * 0.7))
    parts = [_y_axis(y, float(most), TREND_W, TREND_H, fmt=lambda value: f"{value:.0f}")]
    for i, bar in enumerate(bars):
        px = x_of(i + 0.5) - bar_w / 2
        base, segments = 0, []
        for count, colour, cls in (
            (bar.passed, PASSED_GREEN, "passed"),
            (bar.failed, FAILED_RED, "failed"),
            (bar.skipped, TEST_FILLS["skipped"], "skipped"),
        ):
            if count:
                segments.append(
                    el(
                        "rect",
                        {
                            "class": cls,
                            "x": px,
                            "y": y(base + count),
                            "width": bar_w,
                            "height": y(base) - y(base + count),
                            "fill": colour,
                        },
                    )
                )
            base += count
        title = f"{bar.run}: {bar.passed} passed, {bar.failed} failed, {bar.skipped} skipped"
        parts.append(el("a", {"href": bar.href, "class": "outcome-bar"}, *segments, title=title))
    return svg(TREND_W, TREND_H, "outcomes", *parts, label="test outcomes across runs")


# -- a storm's curves ----------------------------------------------------------------------------------
SERIES_W, SERIES_H = 440.0, 150.0


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"


def series_chart(name: str, points: Sequence[tuple[float, float]], x_label: str, y_label: str) -> str:
    """One curve over (x, y) points: requests per second over a storm's seconds, probes converged
    over time, or a distribution (a sorted sample against its rank)."""
    xs = [float(x) for x, _ in points] or [0.0]
    ys = [float(y) for _, y in points] or [0.0]
    top_y = nice_ceiling(max([*ys, 1e-9]) * 1.1)
    top_x = max(xs) if max(xs) > 0 else 1.0
    y = Scale(0.0, top_y, SERIES_H - BOTTOM - 10, TOP)
    x_of = Scale(0.0, top_x, LEFT, SERIES_W - RIGHT)
    parts = [_y_axis(y, top_y, SERIES_W, SERIES_H - 10, fmt=_number)]
    coords = [(x_of(x), y(v)) for x, v in zip(xs, ys, strict=True)]
    if len(coords) > 1:
        line = " ".join(f"{px:.1f},{py:.1f}" for px, py in coords)
        parts.append(
            el("polyline", {"points": line, "fill": "none", "stroke": SAMPLE_BLUE, "stroke-width": 1.5})
        )
    elif coords:
        parts.append(el("circle", {"cx": coords[0][0], "cy": coords[0][1], "r": 3, "fill": SAMPLE_BLUE}))
    parts.append(
        el(
            "text",
            {"x": SERIES_W - RIGHT, "y": SERIES_H - 4, "font-size": 10, "text-anchor": "end", "fill": "#555"},
            txt(f"{x_label} (0 to {_number(top_x)})"),
        )
    )
    parts.append(el("text", {"x": LEFT + 4, "y": TOP + 10, "font-size": 10, "fill": "#555"}, txt(y_label)))
    return svg(SERIES_W, SERIES_H, "series-chart", *parts, label=name)


def distribution_points(values: Sequence[float]) -> list[tuple[float, float]]:
    """A sample as (percent of the sample at or below, value), sorted: its distribution (pure)."""
    ordered = sorted(values)
    n = len(ordered)
    return [(100.0 * (i + 1) / n, v) for i, v in enumerate(ordered)]
