"""Go's fmt.Sprintf: verbs %v %+v %#v %T %s %q %d %x %X %o %O %b %c %U %e %E %f %F %g %G %t %%,
the flags `-+# 0`, width and precision (digits, `*`, or an argument index `[n]`), and Go's error
forms: `%!d(string=x)`, `%!d(MISSING)`, `%!(EXTRA int=1)`, `%!(NOVERB)`, `%!(BADWIDTH)`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agent.gotemplate.gofmt import (
    LIST_TYPES,
    MAX_WIDTH,
    MISSING,
    Spec,
    fmt_v,
    go_float,
    go_quote,
    go_syntax,
    sorted_items,
    type_name,
)

_INT_BASES = {"b": 2, "o": 8, "O": 8, "d": 10, "x": 16, "X": 16}


def _bad(verb: str, arg: Any) -> str:
    if arg is None or arg is MISSING:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({type_name(arg)}={fmt_v(arg)})"


def _fmt_int(v: int, verb: str, spec: Spec) -> str:
    if verb == "c":
        return spec.pad(chr(v) if 0 <= v <= 0x10FFFF and not 0xD800 <= v <= 0xDFFF else "\ufffd")
    if verb == "q":
        ch = chr(v) if 0 <= v <= 0x10FFFF and not 0xD800 <= v <= 0xDFFF else "\ufffd"
        return spec.pad(go_quote(ch, quote="'"))
    if verb == "U":
        s = f"U+{v:04X}"
        if spec.sharp and 0 <= v <= 0x10FFFF and chr(v).isprintable():
            s += f" '{chr(v)}'"
        return spec.pad(s)
    base = _INT_BASES.get(verb, 10)
    mag = abs(v)
    digits = {2: format(mag, "b"), 8: format(mag, "o"), 10: str(mag), 16: format(mag, "x")}[base]
    if verb == "X":
        digits = digits.upper()
    if spec.prec is not None:
        digits = "" if spec.prec == 0 and v == 0 else digits.rjust(spec.prec, "0")
    prefix = ""
    if verb == "O":
        prefix = "0o"
    elif spec.sharp:
        prefix = {"b": "0b", "o": "0" if not digits.startswith("0") else "", "x": "0x", "X": "0X"}.get(
            verb, ""
        )
    sign = "-" if v < 0 else ("+" if spec.plus else (" " if spec.space else ""))
    if spec.prec is not None:
        return spec.pad(sign + prefix + digits, zero_ok=False)
    return spec.pad_number(sign, prefix, digits)


def _fmt_float(v: float, verb: str, spec: Spec) -> str:
    sign = "-" if math.copysign(1.0, v) < 0 else ("+" if spec.plus else (" " if spec.space else ""))
    if math.isnan(v) or math.isinf(v):
        body = "NaN" if math.isnan(v) else "Inf"
        if math.isinf(v) and not sign:
            sign = "+" if v > 0 else sign
        return spec.pad(sign + body, zero_ok=False)
    mag = abs(v)
    if verb in "xXb":
        mant, _, exp = mag.hex().partition("p")
        mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
        body = f"{mant}p{'-' if exp.startswith('-') else '+'}{abs(int(exp)):02d}"
        body = body.upper() if verb == "X" else body
    elif verb in "gG" and spec.prec is None:
        body = go_float(mag, upper=verb == "G")
        if spec.sharp and "." not in body:
            body += "."
    else:
        prec = 6 if spec.prec is None else spec.prec
        body = format(mag, ("#" if spec.sharp else "") + f".{prec}" + verb)
    return spec.pad_number(sign, "", body)


def _fmt_str(s: str, verb: str, spec: Spec) -> str:
    if spec.prec is not None:
        s = s[: spec.prec]
    if verb in "sv":
        return spec.pad(s)
    if verb == "q":
        if spec.sharp and "`" not in s and all(c == "\t" or c.isprintable() for c in s):
            return spec.pad("`" + s + "`")
        return spec.pad(go_quote(s, ascii_only=spec.plus))
    hexed = [f"{b:02x}" if verb == "x" else f"{b:02X}" for b in s.encode("utf-8")]
    prefix = ("0x" if verb == "x" else "0X") if spec.sharp else ""
    if spec.space:
        return spec.pad(" ".join(prefix + h for h in hexed))
    return spec.pad(prefix + "".join(hexed))


def fmt_arg(arg: Any, verb: str, spec: Spec) -> str:  # noqa: PLR0911 - one return per Go kind
    if verb == "T":
        return spec.pad(type_name(arg))
    if verb == "v" and spec.sharp:
        return spec.pad(go_syntax(arg))
    if arg is None or arg is MISSING:
        return spec.pad("<nil>") if verb == "v" else _bad(verb, arg)
    t = type(arg)
    if t is bool:
        return spec.pad("true" if arg else "false") if verb in "tv" else _bad(verb, arg)
    if t is int:
        if verb == "v":
            saved, spec.plus = spec.plus, False
            try:
                return _fmt_int(arg, "d", spec)
            finally:
                spec.plus = saved
        return _fmt_int(arg, verb, spec) if verb in "bcdoOqxXU" else _bad(verb, arg)
    if t is float:
        if verb == "v":
            return _fmt_float(arg, "g", spec)
        return _fmt_float(arg, verb, spec) if verb in "bvEeFfGgxX" else _bad(verb, arg)
    if isinstance(arg, str):
        return _fmt_str(arg, verb, spec) if verb in "vsqxX" else _bad(verb, arg)
    if isinstance(arg, LIST_TYPES):
        return "[" + " ".join(fmt_arg(e, verb, spec) for e in arg) + "]"
    if isinstance(arg, dict):
        parts = (f"{fmt_arg(k, verb, spec)}:{fmt_arg(x, verb, spec)}" for k, x in sorted_items(arg))
        return "map[" + " ".join(parts) + "]"
    return spec.pad(fmt_v(arg)) if verb in "vs" else _bad(verb, arg)


class _Cursor:
    """Walks a format string; `argi` is the next argument, `reordered` records `[n]` use."""

    __slots__ = ("argi", "args", "fmt", "i", "reordered")

    def __init__(self, fmt: str, args: Sequence[Any]) -> None:
        self.fmt = fmt
        self.args = args
        self.i = 0
        self.argi = 0
        self.reordered = False

    def peek(self) -> str:
        return self.fmt[self.i] if self.i < len(self.fmt) else ""

    def number(self) -> int | None:
        start = self.i
        while self.peek().isdigit() and self.peek().isascii():
            self.i += 1
        return int(self.fmt[start : self.i]) if self.i > start else None

    def arg_index(self) -> bool:
        """Consume `[n]`; False when it is malformed or out of range."""
        if self.peek() != "[":
            return True
        self.reordered = True
        close = self.fmt.find("]", self.i)
        text = self.fmt[self.i + 1 : close] if close > 0 else ""
        self.i = close + 1 if close > 0 else len(self.fmt)
        if not text.isdigit() or not 1 <= int(text) <= len(self.args):
            return False
        self.argi = int(text) - 1
        return True

    def star(self) -> int | None:
        """A `*` width or precision from the arguments; None when it is not an int."""
        self.i += 1
        if self.argi >= len(self.args):
            return None
        value = self.args[self.argi]
        self.argi += 1
        if type(value) is not int or abs(value) > MAX_WIDTH:
            return None
        return value


def _spec(cur: _Cursor, out: list[str]) -> tuple[Spec, bool]:
    spec = Spec()
    while cur.peek() in ("+", "-", "#", " ", "0") and cur.peek():
        ch = cur.peek()
        spec.plus |= ch == "+"
        spec.minus |= ch == "-"
        spec.sharp |= ch == "#"
        spec.space |= ch == " "
        spec.zero |= ch == "0"
        cur.i += 1
    good = cur.arg_index()
    if cur.peek() == "*":
        spec.width = cur.star()
        if spec.width is None:
            out.append("%!(BADWIDTH)")
        elif spec.width < 0:
            spec.minus, spec.width = True, -spec.width
    else:
        spec.width = cur.number()
        if spec.width is not None and spec.width > MAX_WIDTH:
            spec.width = None
            out.append("%!(BADWIDTH)")
    if cur.peek() == ".":
        cur.i += 1
        good = cur.arg_index() and good
        if cur.peek() == "*":
            spec.prec = cur.star()
            if spec.prec is None or spec.prec < 0:
                spec.prec = None
                out.append("%!(BADPREC)")
        else:
            spec.prec = cur.number() or 0
            if spec.prec > MAX_WIDTH:
                spec.prec = None
                out.append("%!(BADPREC)")
    good = cur.arg_index() and good
    return spec, good


def sprintf(fmt: str, args: Sequence[Any]) -> str:
    out: list[str] = []
    cur = _Cursor(fmt, args)
    n = len(fmt)
    while cur.i < n:
        j = fmt.find("%", cur.i)
        if j < 0:
            out.append(fmt[cur.i :])
            break
        out.append(fmt[cur.i : j])
        cur.i = j + 1
        spec, good = _spec(cur, out)
        if cur.i >= n:
            out.append("%!(NOVERB)")
            break
        verb = fmt[cur.i]
        cur.i += 1
        if verb == "%":
            out.append("%")
        elif not good:
            out.append(f"%!{verb}(BADINDEX)")
        elif cur.argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
        else:
            out.append(fmt_arg(args[cur.argi], verb, spec))
            cur.argi += 1
    if not cur.reordered and cur.argi < len(args):
        extra = ", ".join(_bad("", a)[3:-1] if a is not None else "<nil>" for a in args[cur.argi :])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
