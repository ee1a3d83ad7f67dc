"""A small SVG writer: elements whose every attribute and text is escaped, linear scales, axis ticks.

The drawings (`timeline`, `plots`) build their SVG with `el` only, so a node name or a check's detail
from a run can never close a tag. The SVG is meant to sit inline in an HTML page: no xmlns, no script.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

# The palette, shared by the timeline, the plots and the page's legend.
FAILED_RED = "#d50000"  # a failed check, a measure over its target, a failed test's mark
PASSED_GREEN = "#2e7d32"
BAND_FILL = "#fbd3cf"  # a fault, from its inject to its heal
BAND_EDGE = "#f09d96"  # the inject and the heal themselves (their spans)
BAND_STROKE = "#c62828"
EVENT_PURPLE = "#7b3fa0"
NOTE_GREY = "#8a8a8a"
MEASURE_ORANGE = "#b45f06"
SAMPLE_BLUE = "#1f4e79"
GRID_GREY = "#e4e4e4"
LANE_FILLS = ("#fafafa", "#f1f3f6")
TEST_FILLS = {"passed": "#a5d6a7", "failed": "#ef9a9a", "error": "#ef9a9a", "skipped": "#d6d6d6"}
FONT = "font-family: system-ui, sans-serif"

Attrs = Mapping[str, object]


def fmt_attr(value: object) -> str:
    if isinstance(value, float):
        return f"{round(value, 1):g}"
    return str(value)


def esc(value: str) -> str:
    return html.escape(value, quote=True)


def el(tag: str, attrs: Attrs | None = None, *children: str, title: str = "") -> str:
    """`<tag attrs>children</tag>` with every attribute escaped; `title` becomes an escaped <title>
    first child (the tooltip). Children are trusted: build them with `el` or `txt`."""
    head = "<" + tag
    for key, value in (attrs or {}).items():
        if value is None or value is False:
            continue
        head += f' {key}="{esc(fmt_attr(value))}"'
    inner = ([f"<title>{esc(title)}</title>"] if title else []) + list(children)
    if not inner:
        return head + "/>"
    return head + ">" + "".join(inner) + f"</{tag}>"


def txt(value: str) -> str:
    """Text content, escaped."""
    return esc(value)


def svg(width: float, height: float, cls: str, *children: str, label: str = "") -> str:
    attrs = {
        "class": cls,
        "width": width,
        "height": height,
        "viewBox": f"0 0 {fmt_attr(width)} {fmt_attr(height)}",
        "role": "img",
        "aria-label": label or None,
        "style": FONT,
    }
    return el("svg", attrs, *children)


@dataclass(frozen=True)
class Scale:
    """Maps [lo, hi] linearly onto [a, b]; a zero-width domain maps everything onto a."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, value: float) -> float:
        if self.hi <= self.lo:
            return self.a
        return self.a + (value - self.lo) / (self.hi - self.lo) * (self.b - self.a)


# Tick steps in seconds: readable on a time axis, from a one-minute smoke run to a nightly of hours.
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)


def time_ticks(span: float, most: int = 12) -> Iterator[float]:
    """Offsets from 0 to `span` at the smallest readable step that gives at most `most` ticks."""
    step = next((s for s in TIME_STEPS if span / s <= most), TIME_STEPS[-1])
    tick = 0.0
    while tick <= span + 1e-9:
        yield tick
        tick += step


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= value (value > 0)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-9))
