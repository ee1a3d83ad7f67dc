"""Go-style durations ("20s", "5m", "1h30m", "250ms", "1.5h") as Nomad's jobspec writes them."""

from __future__ import annotations

import re
from fractions import Fraction

_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_UNITS = "|".join(sorted((re.escape(u) for u in _UNIT_NS), key=len, reverse=True))
_PART = re.compile(rf"(\d+(?:\.\d*)?|\.\d+)({_UNITS})")
_EXAMPLE = 'a number with a unit (ns, us, ms, s, m, h), e.g. "20s", "1h30m", "250ms"'
_MAX_DIGITS = 40  # more digits than any duration Go can hold: refused before arithmetic on them
MAX_NS = (1 << 63) - 1  # Go's time.Duration: an int64 of nanoseconds (about 292 years)


def duration_seconds(text: str) -> Fraction:
    """The exact seconds of a Go duration string, however large (see `parse_duration` for the range).

    Raises ValueError naming the text and the expected form."""
    s = text.strip()
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return Fraction(0)
    if not s:
        raise ValueError(f'invalid duration "{_short(text)}": expected {_EXAMPLE}')
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f'invalid duration "{_short(text)}": expected {_EXAMPLE}')
        if len(m.group(1)) > _MAX_DIGITS:
            raise ValueError(f'duration "{_short(text)}" is out of range (at most about 292 years)')
        total += Fraction(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    return sign * total / 1_000_000_000


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string, as `time.ParseDuration` reads it (sign allowed, "0" alone allowed).

    Raises ValueError naming the text and the expected form, or when the duration does not fit Go's
    time.Duration (more than about 292 years), as Go refuses it."""
    seconds = duration_seconds(text)
    if abs(seconds) * 1_000_000_000 > MAX_NS:
        raise ValueError(f'duration "{_short(text)}" is out of range (at most about 292 years)')
    return float(seconds)


def format_duration(seconds: float) -> str:
    """A duration as a jobspec would write it: 30 -> "30s", 90 -> "1m30s", 0.25 -> "250ms", 3600 -> "1h"."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    if ms and not (hours or minutes or secs):
        parts.append(f"{ms}ms")
    elif secs or ms:
        parts.append(f"{secs}.{ms:03d}".rstrip("0").rstrip(".") + "s")
    return sign + "".join(parts)


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
