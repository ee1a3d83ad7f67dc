"""consul-template's pure helper functions (no data source): strings, parsing, encoding, math,
collections. Argument order follows consul-template, so that the piped value comes last:
`{{ "a,b" | split "," }}`, `{{ 5 | subtract 2 }}` (= 3)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections.abc import Callable
from typing import Any

from agent.gocompat import goregex
from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import LIST_TYPES, MISSING, fmt_v, go_quote, type_name

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_INDENT = 1_000_000


def _str(fn: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    raise GoError(f"{fn}: wrong type for value; expected string; got {type_name(v)}")


def _list(fn: str, v: Any) -> list[Any] | tuple[Any, ...] | range:
    if isinstance(v, LIST_TYPES):
        return v
    raise GoError(f"{fn}: wrong type for value; expected a list; got {type_name(v)}")


def wrap64(n: int) -> int:
    """Go's int64 two's-complement wrap-around."""
    return (n + 2**63) % 2**64 - 2**63


# -- strings


def split(sep: Any, s: Any) -> list[str]:
    text = _str("split", s).strip()
    sep = _str("split", sep)
    if not text:
        return []
    return list(text) if sep == "" else text.split(sep)


def join(sep: Any, items: Any) -> str:
    return _str("join", sep).join(x if isinstance(x, str) else fmt_v(x) for x in _list("join", items))


def trim_space(s: Any) -> str:
    return _str("trimSpace", s).strip()


def trim(cutset: Any, s: Any) -> str:
    return _str("trim", s).strip(_str("trim", cutset))


def trim_prefix(prefix: Any, s: Any) -> str:
    return _str("trimPrefix", s).removeprefix(_str("trimPrefix", prefix))


def trim_suffix(suffix: Any, s: Any) -> str:
    return _str("trimSuffix", s).removesuffix(_str("trimSuffix", suffix))


def to_lower(s: Any) -> str:
    return _str("toLower", s).lower()


def to_upper(s: Any) -> str:
    return _str("toUpper", s).upper()


def _separator(ch: str) -> bool:
    if ch.isascii():
        return not (ch.isalnum() or ch == "_")
    return not ch.isalnum() and ch.isspace()


def to_title(s: Any) -> str:
    """Go's strings.Title: upper-case the first letter of each word."""
    out, prev = [], " "
    for ch in _str("toTitle", s):
        out.append(ch.upper() if _separator(prev) else ch)
        prev = ch
    return "".join(out)


def replace_all(old: Any, new: Any, s: Any) -> str:
    return _str("replaceAll", s).replace(_str("replaceAll", old), _str("replaceAll", new))


def _compile(fn: str, pattern: Any) -> goregex.Regexp:
    """Go's regexp.Compile (RE2: linear in the input); its error is Go's, as consul-template returns it."""
    try:
        return goregex.compile(_str(fn, pattern))
    except goregex.GoRegexError as exc:
        raise GoError(str(exc)) from None


def regex_replace_all(pattern: Any, repl: Any, s: Any) -> str:
    """consul-template's regexReplaceAll: Go's ReplaceAllString ($1, ${1}, $name, ${name}, $$)."""
    rx = _compile("regexReplaceAll", pattern)
    return rx.replace_all(_str("regexReplaceAll", s), _str("regexReplaceAll", repl))


def regex_match(pattern: Any, s: Any) -> bool:
    """consul-template's regexMatch: Go's MatchString (a match anywhere in s)."""
    return _compile("regexMatch", pattern).match(_str("regexMatch", s))


def indent(spaces: Any, s: Any) -> str:
    if type(spaces) is not int or spaces < 0:
        raise GoError("indent value must be a positive integer")
    if spaces > MAX_INDENT:
        raise GoError(f"indent value {spaces} is too large")
    prefix = " " * spaces
    return "\n".join(prefix + line if line else line for line in _str("indent", s).split("\n"))


# -- parsing

_INT = re.compile(r"[+-]?[0-9]+")
_UINT = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_FLOATS = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}
_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_BOOLS |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def _syntax(fn: str, s: str) -> GoError:
    return GoError(f"{fn}: strconv.{fn[0].upper()}{fn[1:]}: parsing {go_quote(s)}: invalid syntax")


def parse_int(s: Any) -> int:
    text = _str("parseInt", s)
    if text == "":
        return 0
    if not _INT.fullmatch(text):
        raise _syntax("parseInt", text)
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise GoError(f"parseInt: strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def parse_uint(s: Any) -> int:
    text = _str("parseUint", s)
    if text == "":
        return 0
    if not _UINT.fullmatch(text):
        raise _syntax("parseUint", text)
    value = int(text)
    if value >= 2**64:
        raise GoError(f"parseUint: strconv.ParseUint: parsing {go_quote(text)}: value out of range")
    return value


def parse_float(s: Any) -> float:
    text = _str("parseFloat", s)
    if text == "":
        return 0.0
    bare = text.lstrip("+-")
    if bare.lower() in _SPECIAL_FLOATS and len(text) - len(bare) <= 1:
        value = _SPECIAL_FLOATS[bare.lower()]
        return -value if text.startswith("-") else value
    try:
        if bare[:2] in ("0x", "0X"):
            value = float.fromhex(text)
        elif _FLOAT.fullmatch(text):
            value = float(text)
        else:
            raise ValueError(text)
    except (ValueError, OverflowError):
        raise _syntax("parseFloat", text) from None
    return value


def parse_bool(s: Any) -> bool:
    text = _str("parseBool", s)
    if text == "":
        return False
    if text not in _BOOLS:
        raise _syntax("parseBool", text)
    return _BOOLS[text]


# -- encodings and digests


def base64_encode(s: Any) -> str:
    return base64.b64encode(_str("base64Encode", s).encode("utf-8")).decode("ascii")


def base64_decode(s: Any) -> str:
    text = _str("base64Decode", s).replace("\r", "").replace("\n", "")
    try:
        return base64.b64decode(text, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError) as exc:
        raise GoError(f"base64Decode: {exc}") from None


def base64_url_encode(s: Any) -> str:
    return base64.urlsafe_b64encode(_str("base64URLEncode", s).encode("utf-8")).decode("ascii")


def base64_url_decode(s: Any) -> str:
    text = _str("base64URLDecode", s).replace("\r", "").replace("\n", "")
    try:
        return base64.b64decode(text, altchars=b"-_", validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError) as exc:
        raise GoError(f"base64URLDecode: {exc}") from None


def sha256_hex(s: Any) -> str:
    return hashlib.sha256(_str("sha256Hex", s).encode("utf-8")).hexdigest()


def md5sum(s: Any) -> str:
    return hashlib.md5(_str("md5sum", s).encode("utf-8"), usedforsecurity=False).hexdigest()


# -- math


def _num(fn: str, v: Any) -> int | float:
    if type(v) is int or type(v) is float:
        return v
    raise GoError(f"{fn}: unknown type for {fmt_v(v) if v is not MISSING else '<nil>'} ({type_name(v)})")


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _math(
    fn: str, op: Callable[[Any, Any], Any], int_op: Callable[[int, int], int] | None = None
) -> Callable[..., Any]:
    def apply(b: Any, a: Any) -> Any:
        x, y = _num(fn, a), _num(fn, b)
        if fn in ("divide", "modulo") and y == 0:
            raise GoError(f"{fn}: division by zero")
        if type(x) is int and type(y) is int:
            return wrap64((int_op or op)(x, y))
        return float(op(float(x), float(y)))

    apply.__name__ = fn
    return apply


add = _math("add", lambda x, y: x + y)
subtract = _math("subtract", lambda x, y: x - y)
multiply = _math("multiply", lambda x, y: x * y)
divide = _math("divide", lambda x, y: x / y, _trunc_div)
modulo = _math("modulo", math.fmod, lambda x, y: x - y * _trunc_div(x, y))
minimum = _math("minimum", min)
maximum = _math("maximum", max)


# -- collections


def in_(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, LIST_TYPES):
        return any(type(e) is type(needle) and e == needle for e in haystack)
    if isinstance(haystack, str):
        return isinstance(needle, str) and needle in haystack
    return False


def contains(needle: Any, haystack: Any) -> bool:
    return in_(haystack, needle)


def contains_all(needles: Any, haystack: Any) -> bool:
    return all(in_(haystack, n) for n in _list("containsAll", needles))


def contains_any(needles: Any, haystack: Any) -> bool:
    return any(in_(haystack, n) for n in _list("containsAny", needles))


def contains_none(needles: Any, haystack: Any) -> bool:
    return not any(in_(haystack, n) for n in _list("containsNone", needles))


def contains_not_all(needles: Any, haystack: Any) -> bool:
    return not all(in_(haystack, n) for n in _list("containsNotAll", needles))


def _loop_int(v: Any) -> int:
    if type(v) is int:
        return int(v)
    if isinstance(v, str) and _INT.fullmatch(v):
        return int(v)
    raise GoError(f"loop: expected integer arguments, got {type_name(v)}")


def loop(*args: Any) -> range:
    if len(args) == 1:
        return range(_loop_int(args[0]))
    if len(args) == 2:
        return range(_loop_int(args[0]), _loop_int(args[1]))
    raise GoError(f"loop: wrong number of arguments, expected 1 or 2, but got {len(args)}")
