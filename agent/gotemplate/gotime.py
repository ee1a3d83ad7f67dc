"""Go's time.Format: layouts written with the reference time Mon Jan 2 15:04:05 MST 2006."""

from __future__ import annotations

import datetime as dt

_LONG_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_LONG_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_ZONES = ("-070000", "-07:00:00", "-0700", "-07:00", "-07", "Z070000", "Z07:00:00", "Z0700", "Z07:00", "Z07")


def _std(layout: str, i: int) -> str:  # noqa: PLR0911, PLR0912 - Go's nextStdChunk, one case per token
    """The layout token starting at i, or "" when layout[i] is a literal character."""
    rest = layout[i:]
    after3 = layout[i + 3 : i + 4]
    c = layout[i]
    if c == "J" and rest.startswith("Jan"):
        if rest.startswith("January"):
            return "January"
        if not after3.islower():
            return "Jan"
    elif c == "M" and rest.startswith("Mon"):
        if rest.startswith("Monday"):
            return "Monday"
        if not after3.islower():
            return "Mon"
    elif c == "M" and rest.startswith("MST"):
        return "MST"
    elif c == "0":
        if rest[1:2] in ("1", "2", "3", "4", "5", "6"):
            return rest[:2]
        if rest.startswith("002"):
            return "002"
    elif c == "1":
        return "15" if rest.startswith("15") else "1"
    elif c == "2":
        return "2006" if rest.startswith("2006") else "2"
    elif c == "_":
        if rest.startswith("_2") and not rest.startswith("_2006"):
            return "_2"
        if rest.startswith("__2"):
            return "__2"
    elif c in "345":
        return c
    elif c == "P" and rest.startswith("PM"):
        return "PM"
    elif c == "p" and rest.startswith("pm"):
        return "pm"
    elif c in "-Z":
        for z in _ZONES:
            if rest.startswith(z):
                return z
    elif c in ".," and rest[1:2] in ("0", "9"):
        j = 1
        while j < len(rest) and rest[j] == rest[1]:
            j += 1
        if not rest[j : j + 1].isdigit():
            return rest[:j]
    return ""


def _zone(t: dt.datetime, token: str) -> str:
    off = t.utcoffset() or dt.timedelta(0)
    secs = int(off.total_seconds())
    if token.startswith("Z") and secs == 0:
        return "Z"
    sign = "-" if secs < 0 else "+"
    secs = abs(secs)
    hh, mm, ss = secs // 3600, secs // 60 % 60, secs % 60
    body = token.lstrip("-Z")
    sep = ":" if ":" in body else ""
    out = f"{sign}{hh:02d}"
    if len(body.replace(":", "")) >= 4:
        out += f"{sep}{mm:02d}"
    if len(body.replace(":", "")) >= 6:
        out += f"{sep}{ss:02d}"
    return out


def _value(t: dt.datetime, token: str) -> str:
    hour12 = t.hour % 12 or 12
    simple = {
        "January": _LONG_MONTHS[t.month - 1],
        "Jan": _LONG_MONTHS[t.month - 1][:3],
        "Monday": _LONG_DAYS[t.weekday()],
        "Mon": _LONG_DAYS[t.weekday()][:3],
        "01": f"{t.month:02d}",
        "1": str(t.month),
        "02": f"{t.day:02d}",
        "2": str(t.day),
        "_2": f"{t.day:2d}",
        "002": f"{t.timetuple().tm_yday:03d}",
        "__2": f"{t.timetuple().tm_yday:3d}",
        "03": f"{hour12:02d}",
        "3": str(hour12),
        "15": f"{t.hour:02d}",
        "04": f"{t.minute:02d}",
        "4": str(t.minute),
        "05": f"{t.second:02d}",
        "5": str(t.second),
        "06": f"{t.year % 100:02d}",
        "2006": f"{t.year:04d}",
        "PM": "PM" if t.hour >= 12 else "AM",
        "pm": "pm" if t.hour >= 12 else "am",
    }
    if token in simple:
        return simple[token]
    if token == "MST":  # noqa: S105 - a layout token
        name = t.tzname() or "UTC"
        return name if name != "UTC+00:00" else "UTC"
    if token[0] in "-Z":
        return _zone(t, token)
    digits = f"{t.microsecond:06d}000"[: len(token) - 1]
    if token[1] == "9":
        digits = digits.rstrip("0")
        return token[0] + digits if digits else ""
    return token[0] + digits


def go_format(t: dt.datetime, layout: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(layout):
        token = _std(layout, i)
        if not token:
            out.append(layout[i])
            i += 1
            continue
        out.append(_value(t, token))
        i += len(token)
    return "".join(out)


RFC3339 = "2006-01-02T15:04:05Z07:00"
