"""What the benches share: each figure a bench measures is recorded in reports/bench/figures.json
(name, value, unit, target, the floor it is compared with), so `make bench` can print one table
of every figure beside its target and its ratio to a floor measured in the same run (machines here
are noisy: a ratio to a bare operation of the same sitting says more than seconds do).

The floors (scripts/bench_floors.py, and the bare node boot in scripts/bench_lab.py) are figures
too, with floor=None.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
FIGURES = Path(os.environ.get("BENCH_FIGURES", PROJECT / "reports" / "bench" / "figures.json"))

# The floors, by name (what `floor=` refers to).
NODE_BOOT = "floor: bare nodes boot (server + 2 clients, to SSH)"
AGENT_START = "floor: bare agent start (empty state, to API up)"
CNI_ADD = "floor: one CNI ADD (loopback, bridge, firewall, portmap)"
PKI_ISSUE = "floor: one PKI issue (OpenBao, pki_int)"


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str  # "s", "ms", "MB", "x", "count"
    target: str = ""  # e.g. "<= 1.0 s"; "" for a floor or a figure without a target
    floor: str | None = None  # the floor's name this figure is divided by
    order: int = 0  # position in the table (the bench's own order)


def _load() -> dict[str, dict[str, object]]:
    try:
        data = json.loads(FIGURES.read_text())
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def record(fig: Figure) -> None:
    """Add or replace one figure (the file is rewritten whole: benches run one after another)."""
    data = _load()
    data[fig.name] = {**asdict(fig), "order": fig.order or len(data) + 1}
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    tmp = FIGURES.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(FIGURES)


def reset() -> None:
    FIGURES.unlink(missing_ok=True)


def figures() -> list[Figure]:
    out = []
    for raw in _load().values():
        try:
            out.append(Figure(**raw))  # type: ignore[arg-type]
        except TypeError:
            continue  # a figure of an older layout: not shown
    return sorted(out, key=lambda f: f.order)


def _seconds(f: Figure) -> float:
    return f.value / 1000 if f.unit == "ms" else f.value


def ratio(fig: Figure, floors: dict[str, Figure]) -> str:
    floor = floors.get(fig.floor or "")
    if floor is None or fig.unit not in ("s", "ms") or floor.unit not in ("s", "ms"):
        return ""
    base = _seconds(floor)
    if base <= 0 or math.isnan(base) or math.isnan(fig.value):
        return ""
    return f"{_seconds(fig) / base:.1f}x"


def _value(f: Figure) -> str:
    if math.isnan(f.value):
        return "n/a"
    if f.unit == "count":
        return f"{f.value:.0f}"
    if f.unit == "x":
        return f"{f.value:.2f}x"
    digits = 0 if f.unit == "ms" and f.value >= 10 else 2 if f.value < 10 else 1
    return f"{f.value:.{digits}f} {f.unit}"


def table(figs: list[Figure]) -> str:
    floors = {f.name: f for f in figs if f.floor is None and f.name.startswith("floor:")}
    rows = [("figure", "value", "target", "ratio to floor")]
    for f in figs:
        rows.append((f.name, _value(f), f.target, ratio(f, floors)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(widths[j]) for j, c in enumerate(r)) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
