"""The Go encodings every Nomad API view shares: durations and times in nanoseconds, time.Time as
encoding/json writes it, os.FileMode as a string, Go's ints, bools and strings as Nomad's JSON
decoder takes them, plain data from the model, nil maps and slices as null."""

from __future__ import annotations

import json
import signal
import stat
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from agent.jobspec.durations import parse_duration

_NS_PER_S = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as encoding/json writes it


def ns(seconds: float) -> int:
    """Seconds as Go's int64 nanoseconds (a time.Duration, or a Unix time in ns): those of the float's
    shortest decimal spelling (0.1 s is 100000000 ns; a Unix time, which a float holds to about 0.2 µs,
    gets no digits of binary noise)."""
    exact = Decimal(repr(float(seconds))).scaleb(9)  # exact: a float's repr has at most 17 digits
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))


def go_time(seconds: float | None) -> str:
    """A Unix time (seconds) as Go's time.Time in JSON (RFC 3339 with nanoseconds, UTC, the fraction's
    trailing zeros trimmed); None is Go's zero time."""
    if seconds is None:
        return ZERO_TIME
    whole, frac = divmod(ns(seconds), _NS_PER_S)
    text = (_EPOCH + timedelta(seconds=whole)).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def go_string(value: object) -> str:
    """A value as a Go string (a map[string]string's value): Go's spelling of booleans, JSON for
    structures, "" for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def go_int(value: object) -> int:
    """A number (or its text) as a Go int; 0 when it is none."""
    if value is None:
        return 0
    if isinstance(value, int | float):
        return int(value)
    with suppress(TypeError, ValueError):
        return int(str(value))
    return 0


def duration_ns(value: object) -> int:
    """A duration detail (seconds, or a Go duration string) as nanoseconds; 0 when unreadable."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return ns(value)
    if isinstance(value, str):
        with suppress(ValueError):
            return ns(parse_duration(value))
    return 0


def signal_number(value: object) -> int:
    """A signal (its number, or a name: "SIGTERM", "term") as its number; 0 when unknown."""
    if isinstance(value, str) and not value.isdigit():
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        return int(signal.Signals[name]) if name in signal.Signals.__members__ else 0
    return go_int(value)


def go_bool(value: object) -> bool:
    """True, or Go's text of it ("true")."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


_TYPE_LETTERS = (  # Go's os.FileMode.String(): these type letters, in this order, before the permissions
    ("d", stat.S_ISDIR),
    ("L", stat.S_ISLNK),
    ("D", lambda m: stat.S_ISBLK(m) or stat.S_ISCHR(m)),
    ("p", stat.S_ISFIFO),
    ("S", stat.S_ISSOCK),
    ("u", lambda m: bool(m & stat.S_ISUID)),
    ("g", lambda m: bool(m & stat.S_ISGID)),
    ("c", stat.S_ISCHR),
    ("t", lambda m: bool(m & stat.S_ISVTX)),
)


def go_file_mode(mode: int, is_dir: bool = False) -> str:
    """A Unix st_mode as Go's os.FileMode.String(): "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx",
    "Dcrw-rw-rw-" (a character device), "dtrwxrwxrwx" (sticky)."""
    letters = "".join(c for c, test in _TYPE_LETTERS if test(mode) or (c == "d" and is_dir))
    perms = "".join(ch if mode & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    return (letters or "-") + perms


def plain(value: object) -> Any:
    """A JSON-ready copy: mappings as dicts, tuples and lists as lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def nil_map(value: Mapping[str, str]) -> dict[str, str] | None:
    return dict(value) if value else None  # a nil map, as Nomad writes an unset one


def nil_list(value: Sequence[str]) -> list[str] | None:
    return list(value) if value else None
