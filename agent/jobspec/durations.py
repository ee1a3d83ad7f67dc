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


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string, as `time.ParseDuration` reads it (sign allowed, "0" alone allowed).

    Raises ValueError naming the text and the expected form.
    """
    s = text.strip()
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'invalid duration "{text}": expected {_EXAMPLE}')
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f'invalid duration "{text}": expected {_EXAMPLE}')
        total += Fraction(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    return float(sign * total / 1_000_000_000)
