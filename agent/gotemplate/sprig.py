"""The Sprig functions consul-template offers as `sprig_<name>` (Masterminds/sprig v3): the subset
Nomad jobspecs use, with Sprig's argument order (the piped value is the last argument: `default`
takes the default first), its value conversions (spf13/cast for `int`, `add`, ...; the `empty`
rule of `default`) and its quirks (`b64dec` returns the error text, `get` returns "" for a missing
key). Sizes are bounded: strings to MAX_STRING characters, generated lists to MAX_LIST elements.
Date functions format in the time zone of the clock they are given (UTC in the agent)."""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable
from typing import Any

from agent.gotemplate import helpers
from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import LIST_TYPES, MISSING, fmt_v, go_quote, type_name

MAX_STRING = 1_000_000  # characters a string function may build
MAX_LIST = 100_000  # elements until / untilStep / seq may generate


# -- conversions


def strval(v: Any) -> str:
    """Sprig's strval: strings as they are, bytes as text, anything else as %v."""
    if isinstance(v, str):
        return v
    if isinstance(v, bytes | bytearray):
        return bytes(v).decode("utf-8", "replace")
    return fmt_v(v)


def _str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise GoError(f"wrong type for value; expected string; got {type_name(v)}")


def _int(v: Any) -> int:
    if type(v) is int:
        return int(v)
    raise GoError(f"wrong type for value; expected int; got {type_name(v)}")


def _map(v: Any) -> dict[Any, Any]:
    if isinstance(v, dict):
        return v
    raise GoError(f"wrong type for value; expected map[string]interface {{}}; got {type_name(v)}")


def _bounded(s: str) -> str:
    if len(s) > MAX_STRING:
        raise GoError(f"result of {len(s)} characters is over the limit of {MAX_STRING}")
    return s


def _trim_zero_decimal(s: str) -> str:
    head, dot, tail = s.rpartition(".")
    return head if dot and tail and set(tail) == {"0"} else s


def _parse_go_int(s: str) -> int | None:
    """strconv.ParseInt(s, 0, 64): sign, then 0x / 0o / 0b / 0 (octal) prefixes or decimal."""
    sign, body = (-1, s[1:]) if s[:1] == "-" else (1, s[1:] if s[:1] == "+" else s)
    low = body.lower()
    bases = {"0x": 16, "0o": 8, "0b": 2}
    try:
        if low[:2] in bases:
            value = int(body[2:], bases[low[:2]])
        elif len(body) > 1 and body[0] == "0":
            value = int(body[1:], 8)
        elif re.fullmatch(r"[0-9](?:_?[0-9])*", body):
            value = int(body)
        else:
            return None
    except ValueError:
        return None
    value *= sign
    return value if helpers.INT64_MIN <= value <= helpers.INT64_MAX else None


def to_int64(v: Any) -> int:
    """spf13/cast ToInt64: numbers truncated, bools 0/1, strings parsed (0 when they do not parse)."""
    if v is None or v is MISSING:
        return 0
    if type(v) is bool:
        return int(v)
    if type(v) is int:
        return helpers.wrap64(v)
    if type(v) is float:
        return helpers.wrap64(int(v)) if math.isfinite(v) else helpers.INT64_MIN
    if isinstance(v, str):
        return _parse_go_int(_trim_zero_decimal(v)) or 0
    return 0


def to_float64(v: Any) -> float:
    """spf13/cast ToFloat64: numbers, bools 0/1, strings parsed (0 when they do not parse)."""
    if type(v) is bool or type(v) is int or type(v) is float:
        return float(v)
    if isinstance(v, str):
        try:
            return helpers.parse_float(v)
        except GoError:
            return 0.0
    return 0.0


def empty(v: Any) -> bool:
    """Sprig's empty: nil, false, 0, "" and empty lists and maps; any other value is not."""
    if v is None or v is MISSING:
        return True
    if type(v) is bool:
        return not v
    if type(v) is int or type(v) is float:
        return v == 0
    if isinstance(v, str | bytes | bytearray | dict | list | tuple | range):
        return len(v) == 0
    return False


def _kind(v: Any) -> str:
    if isinstance(v, LIST_TYPES):
        return "list"
    return type(v).__name__


def deep_equal(a: Any, b: Any) -> bool:
    """reflect.DeepEqual on template values: an int never equals a float, nor a bool an int."""
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, LIST_TYPES):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    return bool(a == b)


# -- strings


def title(s: Any) -> str:
    return helpers.to_title(_str(s))


def untitle(s: Any) -> str:
    out, in_word = [], False
    for ch in _str(s):
        if ch.isspace():
            in_word = False
        elif not in_word:
            in_word = True
            out.append(ch.lower())
            continue
        out.append(ch)
    return "".join(out)


def repeat(count: Any, s: Any) -> str:
    n, text = _int(count), _str(s)
    if n < 0:
        raise GoError("strings: negative Repeat count")
    if n * len(text) > MAX_STRING:
        raise GoError(f"repeat: {n} copies of {len(text)} characters is over the limit of {MAX_STRING}")
    return text * n


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def substr(start: Any, end: Any, s: Any) -> str:
    """Byte offsets: start < 0 is s[:end]; end < 0 or past the end is s[start:]."""
    lo, hi, b = _int(start), _int(end), _utf8(_str(s))
    if lo < 0:
        lo = 0
    elif hi < 0 or hi > len(b):
        hi = len(b)
    if not 0 <= lo <= hi <= len(b):
        raise GoError(f"runtime error: slice bounds out of range [{lo}:{hi}]")
    return _text(b[lo:hi])


def nospace(s: Any) -> str:
    return "".join(ch for ch in _str(s) if not ch.isspace())


def trunc(count: Any, s: Any) -> str:
    c, b = _int(count), _utf8(_str(s))
    if c < 0 and len(b) + c > 0:
        return _text(b[len(b) + c :])
    if c >= 0 and len(b) > c:
        return _text(b[:c])
    return _str(s)


def abbrev(width: Any, s: Any) -> str:
    w, text = _int(width), _str(s)
    if w < 4 or len(text) <= w:
        return text
    return text[: w - 3] + "..."


def initials(s: Any) -> str:
    return "".join(word[0] for word in _str(s).split())


def wrap(width: Any, s: Any) -> str:
    """Word-wrap at `width` columns, breaking at spaces; a longer word stays whole."""
    w, text = max(1, _int(width)), _str(s)
    out: list[str] = []
    i = 0
    while len(text) - i > w:
        if text[i] == " ":
            i += 1
            continue
        space = text.rfind(" ", i, i + w + 1)
        if space < 0:
            space = text.find(" ", i + w)
            if space < 0:
                break
        out.append(text[i:space] + "\n")
        i = space + 1
    out.append(text[i:])
    return "".join(out)


def quote(*args: Any) -> str:
    return " ".join(go_quote(strval(a)) for a in args if a is not None)


def squote(*args: Any) -> str:
    return " ".join("'" + strval(a) + "'" for a in args if a is not None)


def cat(*args: Any) -> str:
    return _bounded(" ".join(strval(a) for a in args if a is not None))


def indent(spaces: Any, s: Any) -> str:
    n, text = _int(spaces), _str(s)
    if n < 0:
        raise GoError("strings: negative Repeat count")
    if n * (text.count("\n") + 1) + len(text) > MAX_STRING:
        raise GoError(f"indent: the result is over the limit of {MAX_STRING} characters")
    pad = " " * n
    return pad + text.replace("\n", "\n" + pad)


def nindent(spaces: Any, s: Any) -> str:
    return "\n" + indent(spaces, s)


def replace(old: Any, new: Any, src: Any) -> str:
    o, n, text = _str(old), _str(new), _str(src)
    count = text.count(o) if o else len(text) + 1
    if len(text) + count * (len(n) - len(o)) > MAX_STRING:
        raise GoError(f"replace: the result is over the limit of {MAX_STRING} characters")
    return text.replace(o, n)


def plural(one: Any, many: Any, count: Any) -> str:
    return _str(one) if _int(count) == 1 else _str(many)


_WORD = re.compile(r"[A-Z]+(?![a-z])[0-9]*|[A-Z]?[a-z]+[0-9]*|[0-9]+[a-z]*|[^\W_]+")


def _words(s: str) -> list[str]:
    """camelCase, PascalCase, ACRONYMWord and separator-delimited words."""
    return _WORD.findall(s)


def snakecase(s: Any) -> str:
    return "_".join(w.lower() for w in _words(_str(s)))


def kebabcase(s: Any) -> str:
    return "-".join(w.lower() for w in _words(_str(s)))


def camelcase(s: Any) -> str:
    """snake_case to CamelCase: each part capitalised; an empty part (leading, trailing or doubled
    underscore) stays an underscore."""
    return "".join(p[:1].upper() + p[1:] if p else "_" for p in _str(s).split("_"))


def contains(substr_: Any, s: Any) -> bool:
    return _str(substr_) in _str(s)


def has_prefix(prefix: Any, s: Any) -> bool:
    return _str(s).startswith(_str(prefix))


def has_suffix(suffix: Any, s: Any) -> bool:
    return _str(s).endswith(_str(suffix))


def random_string(alphabet: str) -> Callable[[Any], str]:
    def rand(count: Any) -> str:
        n = _int(count)
        if n < 0 or n > MAX_STRING:
            raise GoError(f"a random string of {n} characters is out of range (0 to {MAX_STRING})")
        return "".join(secrets.choice(alphabet) for _ in range(n))

    return rand


def strslice(v: Any) -> list[str]:
    if v is None or v is MISSING:
        return []
    if isinstance(v, LIST_TYPES):
        return [strval(x) for x in v if x is not None]
    return [strval(v)]


def join(sep: Any, v: Any) -> str:
    return _bounded(_str(sep).join(strslice(v)))


def split_list(sep: Any, s: Any) -> list[str]:
    separator, text = _str(sep), _str(s)
    return list(text) if separator == "" else text.split(separator)


# -- defaults and flow


def default(d: Any, *given: Any) -> Any:
    return d if not given or empty(given[0]) else given[0]


def coalesce(*values: Any) -> Any:
    return next((v for v in values if not empty(v)), None)


def all_(*values: Any) -> bool:
    return not any(empty(v) for v in values)


def any_(*values: Any) -> bool:
    return not all(empty(v) for v in values)


def ternary(vt: Any, vf: Any, v: Any) -> Any:
    if type(v) is not bool:
        raise GoError(f"wrong type for value; expected bool; got {type_name(v)}")
    return vt if v else vf


def fail(msg: Any) -> str:
    raise GoError(_str(msg))
