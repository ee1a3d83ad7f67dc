"""How figures and times read, on the page, in the SVG tooltips and in the terminal."""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import UTC, datetime

from e2e.harness import history
from e2e.harness.report.model import Figure, Record, data_of, num, short_test, target_of, text, time_of

MAIN_OUTCOMES = ("passed", "failed", "skipped")


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m{secs:04.1f}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes):02d}m{int(secs):02d}s"


def fmt_offset(seconds: float) -> str:
    """A time axis label: 0s, 45s, 2m, 2m30s, 1h05m."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def fmt_clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t else "?"


def fmt_date(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M") if t else "?"


def outcome_names(counts: Counter[str]) -> list[str]:
    return [*MAIN_OUTCOMES, *sorted(set(counts) - set(MAIN_OUTCOMES))]


def fmt_outcomes(counts: Counter[str]) -> str:
    main = [f"{counts[o]} {o}" for o in MAIN_OUTCOMES]
    extra = [f"{n} {o}" for o, n in sorted(counts.items()) if o not in MAIN_OUTCOMES]
    return ", ".join(main + extra)


def outcome_class(outcome: str) -> str:
    return outcome if outcome in {"passed", "failed", "skipped", "error"} else "muted"


def replay_command(seed: str | None) -> str:
    return f"make e2e SEED={seed}" if seed is not None else ""


def fmt_stats(fig: Figure) -> str:
    if not fig.values:
        return "no value"
    if len(fig.values) == 1:
        return fmt_seconds(fig.values[0])
    lo, med, hi = min(fig.values), statistics.median(fig.values), max(fig.values)
    return f"n={len(fig.values)} min {fmt_seconds(lo)} / med {fmt_seconds(med)} / max {fmt_seconds(hi)}"


def fmt_number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def rel_time(start: float, rec: Record) -> str:
    return f"{time_of(rec) - start:+.1f}s"


def record_detail(rec: Record) -> str:
    """What the history table and the timeline's tooltips say about `rec` beyond its name."""
    data, detail = data_of(rec), text(rec.get("detail"))
    kind = rec.get("kind")
    if kind == history.EVENT:
        where = " ".join(text(data.get(k)) for k in ("task", "alloc") if data.get(k))
        return f"[{where}] {detail}" if where else detail
    if kind == history.MEASURE:
        target = target_of(rec)
        figure = fmt_seconds(num(rec.get("duration")))
        return figure + (f" (target {fmt_seconds(target)})" if target is not None else "")
    if kind == history.CHECK and isinstance(data.get("counts"), dict):
        counts = ", ".join(f"{name}={value}" for name, value in sorted(data["counts"].items()))
        return f"{detail}\ncounts: {counts}".strip()
    seconds = num(rec.get("duration"))
    if kind in {history.FAULT, history.HEAL} and seconds is not None:
        return f"{detail}\ntook {fmt_seconds(seconds)}".strip()
    return detail


def tooltip(start: float, rec: Record, head: str = "") -> str:
    """A record's <title>: what, when, where, in which test, and its detail."""
    kind, name = text(rec.get("kind")), text(rec.get("name"))
    where = " ".join(part for part in (rel_time(start, rec), text(rec.get("node")), short_test(rec)) if part)
    return "\n".join(part for part in (head or f"{kind}: {name}", where, record_detail(rec)) if part)
