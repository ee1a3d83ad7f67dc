"""Go's fmt, as far as templates see it: %v of every value the interpreter handles (maps with sorted
keys, `[1 2]` slices, Go's shortest float format), Sprint/Sprintln and Sprintf with its verbs,
flags, width and precision, and the `%!d(string=x)` forms for bad verbs or arguments."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from agent.gotemplate.gotime import go_format


class _Missing:
    """The value of a missing map key (Go's invalid reflect.Value): prints `<no value>`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no value>"


MISSING: Any = _Missing()
MAX_WIDTH = 1_000_000  # Go's fmt refuses widths and precisions past 1e6 (BADWIDTH, BADPREC)
LIST_TYPES = (list, tuple, range)
TIME_STRING = "2006-01-02 15:04:05.999999999 -0700 MST"  # Go's time.Time.String()
_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def type_name(v: Any) -> str:  # noqa: PLR0911 - one name per Go kind
    if v is None or v is MISSING:
        return "<nil>"
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is float:
        return "float64"
    if t is str:
        return "string"
    if isinstance(v, LIST_TYPES):
        return "[]interface {}"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, bytes | bytearray):
        return "[]uint8"
    if isinstance(v, dt.datetime):
        return "time.Time"
    go_type = getattr(v, "go_type", None)  # a GoObject
    if isinstance(go_type, str):
        return go_type
    if callable(v):
        return "func"
    return t.__name__


def _sort_key(k: Any) -> tuple[int, Any]:
    if k is None:
        return (0, 0)
    if isinstance(k, bool):
        return (1, k)
    if isinstance(k, int | float):
        return (2, k)
    if isinstance(k, str):
        return (3, k)
    return (4, repr(k))


def sorted_items(m: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """Go's fmtsort order: numbers by value, strings byte-wise."""
    return sorted(m.items(), key=lambda kv: _sort_key(kv[0]))


def _shortest(x: float) -> tuple[str, int]:
    """The shortest digits that round-trip and the decimal point position: x = 0.DIGITS * 10**dp."""
    _, digits, exp = Decimal(repr(x)).as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits))
    dp = len(ds) + exp
    ds = ds.rstrip("0") or "0"
    return ds, dp


def _e_form(ds: str, exp: int, upper: bool = False) -> str:
    mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    return f"{mant}{'E' if upper else 'e'}{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _f_form(ds: str, dp: int) -> str:
    if dp <= 0:
        return "0." + "0" * (-dp) + ds
    if dp >= len(ds):
        return ds + "0" * (dp - len(ds))
    return ds[:dp] + "." + ds[dp:]


def _special(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return None


def go_float(x: float, upper: bool = False) -> str:
    """strconv.FormatFloat(x, 'g', -1, 64): what %v prints for a float64."""
    special = _special(x)
    if special is not None:
        return special
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    ds, dp = _shortest(abs(x))
    exp = dp - 1
    body = _e_form(ds, exp, upper) if exp < -4 or exp >= 6 else _f_form(ds, dp)
    return ("-" if x < 0 else "") + body


def json_float(x: float) -> str:
    """encoding/json's float64 form: plain decimals, exponent only below 1e-6 or from 1e21."""
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    ds, dp = _shortest(abs(x))
    if abs(x) < 1e-6 or abs(x) >= 1e21:
        body = _e_form(ds, dp - 1)
        if body[-4:-2] == "-0":
            body = body[:-2] + body[-1]
    else:
        body = _f_form(ds, dp)
    return ("-" if x < 0 else "") + body


def fmt_v(v: Any) -> str:  # noqa: PLR0911 - one form per Go kind
    """Go's %v."""
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return go_float(v)
    if v is None or v is MISSING:
        return "<nil>"
    if isinstance(v, LIST_TYPES):
        return "[" + " ".join(fmt_v(e) for e in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{fmt_v(k)}:{fmt_v(x)}" for k, x in sorted_items(v)) + "]"
    if isinstance(v, bytes | bytearray):
        return "[" + " ".join(str(b) for b in v) + "]"
    if isinstance(v, str):
        return str(v)
    if isinstance(v, dt.datetime):
        return go_format(v, TIME_STRING)
    if callable(v):
        return f"<func {getattr(v, '__name__', '?')}>"
    return str(v)


def go_quote(s: str, ascii_only: bool = False, quote: str = '"') -> str:
    """strconv.Quote (or QuoteToASCII, or QuoteRune's body with quote="'")."""
    out = [quote]
    for ch in s:
        r = ord(ch)
        if ch in (quote, "\\"):
            out.append("\\" + ch)
        elif ch.isprintable() and not (ascii_only and r > 0x7E):
            out.append(ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append(_ESCAPES[ch])
        elif r < 0x20 or r == 0x7F:
            out.append(f"\\x{r:02x}")
        elif r < 0x10000:
            out.append(f"\\u{r:04x}")
        else:
            out.append(f"\\U{r:08x}")
    out.append(quote)
    return "".join(out)


def go_syntax(v: Any) -> str:
    """%#v, approximately: Go-syntax literals of the data types a template sees."""
    if isinstance(v, str) and not isinstance(v, bool):
        return go_quote(v)
    if v is None or v is MISSING:
        return "<nil>"
    if isinstance(v, LIST_TYPES):
        return "[]interface {}{" + ", ".join(go_syntax(e) for e in v) + "}"
    if isinstance(v, dict):
        items = ", ".join(f"{go_syntax(k)}:{go_syntax(x)}" for k, x in sorted_items(v))
        return "map[string]interface {}{" + items + "}"
    return fmt_v(v)


def sprint(args: Sequence[Any]) -> str:
    """fmt.Sprint: a space between operands when neither is a string."""
    out: list[str] = []
    prev_str = False
    for i, a in enumerate(args):
        is_str = isinstance(a, str)
        if i > 0 and not is_str and not prev_str:
            out.append(" ")
        out.append(fmt_v(a))
        prev_str = is_str
    return "".join(out)


def sprintln(args: Sequence[Any]) -> str:
    return " ".join(fmt_v(a) for a in args) + "\n"


class Spec:
    __slots__ = ("minus", "plus", "prec", "sharp", "space", "width", "zero")

    def __init__(self) -> None:
        self.minus = self.plus = self.sharp = self.space = self.zero = False
        self.width: int | None = None
        self.prec: int | None = None

    def pad(self, s: str, zero_ok: bool = True) -> str:
        if self.width is None or len(s) >= self.width:
            return s
        fill = self.width - len(s)
        if self.minus:
            return s + " " * fill
        if self.zero and zero_ok:
            return "0" * fill + s
        return " " * fill + s

    def pad_number(self, sign: str, prefix: str, digits: str) -> str:
        if self.zero and not self.minus and self.width is not None:
            fill = self.width - len(sign) - len(prefix) - len(digits)
            if fill > 0:
                return sign + prefix + "0" * fill + digits
        return self.pad(sign + prefix + digits, zero_ok=False)
