"""Sprig's list, dict, math, encoding, digest and date functions, and `sprig_functions`: the table of
every supported Sprig function under consul-template's `sprig_` names (agent.gotemplate.sprig has
the string, conversion and default functions)."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import math
import string
import uuid
import zlib
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.gotemplate import encode, helpers, sprig
from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import LIST_TYPES, MISSING, sorted_items, type_name
from agent.gotemplate.gotime import go_format
from agent.gotemplate.objects import check_size, store
from agent.gotemplate.sprig import MAX_LIST, _int, _map, _str, deep_equal, empty, strval, to_float64, to_int64

# -- lists


def _seq(what: str, v: Any) -> list[Any] | tuple[Any, ...] | range:
    if isinstance(v, range) and len(v) > MAX_LIST:
        raise GoError(f"a list of {len(v)} integers is over the limit of {MAX_LIST}")
    if isinstance(v, LIST_TYPES):
        return v
    raise GoError(f"Cannot {what} type {type_name(v)}")


def list_(*items: Any) -> list[Any]:
    return check_size(list(items))


def first(v: Any) -> Any:
    seq = _seq("find first on", v)
    return seq[0] if len(seq) else None


def last(v: Any) -> Any:
    seq = _seq("find last on", v)
    return seq[-1] if len(seq) else None


def rest(v: Any) -> Any:
    seq = _seq("find rest on", v)
    return list(seq[1:]) if len(seq) else None


def initial(v: Any) -> Any:
    seq = _seq("find initial on", v)
    return list(seq[:-1]) if len(seq) else None


def append(v: Any, item: Any) -> list[Any]:
    return check_size([*_seq("push on", v), item])


def prepend(v: Any, item: Any) -> list[Any]:
    return check_size([item, *_seq("prepend on", v)])


def concat(*lists: Any) -> list[Any]:
    out: list[Any] = []
    for v in lists:
        if not isinstance(v, LIST_TYPES):
            raise GoError(f"Cannot concat type {type_name(v)} as list")
        out.extend(_seq("concat", v))
    return check_size(out)


def reverse(v: Any) -> list[Any]:
    return list(reversed(_seq("find reverse on", v)))


def _in(items: list[Any] | tuple[Any, ...] | range, needle: Any) -> bool:
    return any(deep_equal(x, needle) for x in items)


def uniq(v: Any) -> list[Any]:
    out: list[Any] = []
    for x in _seq("find uniq on", v):
        if not _in(out, x):
            out.append(x)
    return out


def without(v: Any, *omit: Any) -> list[Any]:
    return [x for x in _seq("find without on", v) if not _in(omit, x)]


def has(needle: Any, haystack: Any) -> bool:
    if haystack is None or haystack is MISSING:
        return False
    return _in(_seq("find has on", haystack), needle)


def compact(v: Any) -> list[Any]:
    return [x for x in _seq("compact on", v) if not empty(x)]


def sort_alpha(v: Any) -> list[str]:
    if isinstance(v, LIST_TYPES):
        return sorted(sprig.strslice(v), key=lambda s: s.encode("utf-8", "surrogatepass"))
    return [strval(v)]


def until_step(start: Any, stop: Any, step: Any) -> list[int]:
    lo, hi, by = _int(start), _int(stop), _int(step)
    if (hi < lo and by >= 0) or (hi >= lo and by <= 0):
        return []
    r = range(lo, hi, by)
    if len(r) > MAX_LIST:
        raise GoError(f"a list of {len(r)} integers is over the limit of {MAX_LIST}")
    return list(r)


def until(count: Any) -> list[int]:
    n = _int(count)
    return until_step(0, n, -1 if n < 0 else 1)


def seq(*params: Any) -> str:
    """Like bash's seq: `seq END` from 1, `seq START END`, `seq START STEP END`, ends included."""
    p = [_int(x) for x in params]
    if not p:
        return ""
    if len(p) == 1:
        start, end, step = 1, p[0], 1
        inc = -1 if end < start else 1
        step = inc
    elif len(p) == 2:
        start, end = p
        inc = step = -1 if end < start else 1
    elif len(p) == 3:
        start, step, end = p
        inc = -1 if end < start else 1
        if (inc < 0 and step > 0) or (inc > 0 and step < 0):
            return ""
    else:
        raise GoError(f"seq: wrong number of arguments, expected 1 to 3, but got {len(p)}")
    return " ".join(str(i) for i in until_step(start, end + inc, step))


# -- dicts


def dict_(*pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(0, len(pairs), 2):
        out[strval(pairs[i])] = pairs[i + 1] if i + 1 < len(pairs) else ""
    return check_size(out)


def get(d: Any, key: Any) -> Any:
    return _map(d).get(_str(key), "")


def set_(d: Any, key: Any, value: Any) -> dict[Any, Any]:
    m = _map(d)
    store(m, _str(key), value)
    return m


def unset(d: Any, key: Any) -> dict[Any, Any]:
    m = _map(d)
    m.pop(_str(key), None)
    return m


def has_key(d: Any, key: Any) -> bool:
    return _str(key) in _map(d)


def keys(*dicts: Any) -> list[Any]:
    """Every key of every dict (Go's order is random: here each dict's keys come sorted)."""
    return [k for d in dicts for k, _ in sorted_items(_map(d))]


def values(d: Any) -> list[Any]:
    """The values (Go's order is random: here by sorted key)."""
    return [v for _, v in sorted_items(_map(d))]


def pluck(key: Any, *dicts: Any) -> list[Any]:
    k = _str(key)
    return check_size([m[k] for m in map(_map, dicts) if k in m])


def pick(d: Any, *names: Any) -> dict[Any, Any]:
    m = _map(d)
    return {k: m[k] for k in map(_str, names) if k in m}


def omit(d: Any, *names: Any) -> dict[Any, Any]:
    drop = set(map(_str, names))
    return {k: v for k, v in _map(d).items() if k not in drop}


def _merge_into(dst: dict[Any, Any], src: dict[Any, Any], depth: int = 0) -> None:
    if depth > 100:
        raise GoError("merge: maps nested too deep")
    for k, v in src.items():
        if k not in dst:
            dst[k] = v
        elif isinstance(dst[k], dict) and isinstance(v, dict):
            _merge_into(dst[k], v, depth + 1)
        elif empty(dst[k]) and not empty(v):
            dst[k] = v


def merge(dst: Any, *srcs: Any) -> dict[Any, Any]:
    """A deep merge into dst (which it returns): dst's own values win; an empty one is filled."""
    out = _map(dst)
    for src in srcs:
        _merge_into(out, check_size(_map(src)))
    return check_size(out)


# -- math on int64 (spf13/cast conversions) and float64


def add(*values: Any) -> int:
    return helpers.wrap64(sum(to_int64(v) for v in values))


def add1(v: Any) -> int:
    return helpers.wrap64(to_int64(v) + 1)


def sub(a: Any, b: Any) -> int:
    return helpers.wrap64(to_int64(a) - to_int64(b))


def mul(a: Any, *values: Any) -> int:
    out = to_int64(a)
    for v in values:
        out = helpers.wrap64(out * to_int64(v))
    return out


def _divisor(b: Any) -> int:
    d = to_int64(b)
    if d == 0:
        raise GoError("runtime error: integer divide by zero")
    return d


def div(a: Any, b: Any) -> int:
    x, y = to_int64(a), _divisor(b)
    q = abs(x) // abs(y)
    return helpers.wrap64(q if (x < 0) == (y < 0) else -q)


def mod(a: Any, b: Any) -> int:
    x, y = to_int64(a), _divisor(b)
    r = abs(x) % abs(y)
    return -r if x < 0 else r


def max_(a: Any, *values: Any) -> int:
    return max([to_int64(a), *(to_int64(v) for v in values)])


def min_(a: Any, *values: Any) -> int:
    return min([to_int64(a), *(to_int64(v) for v in values)])


def floor(a: Any) -> float:
    f = to_float64(a)
    return float(math.floor(f)) if math.isfinite(f) else f


def ceil(a: Any) -> float:
    f = to_float64(a)
    return float(math.ceil(f)) if math.isfinite(f) else f


def round_(a: Any, places: Any, *round_on: Any) -> float:
    """Round to `places` decimals; a fraction at or above round_on (0.5) rounds up."""
    on = to_float64(round_on[0]) if round_on else 0.5
    val, pow10 = to_float64(a), math.pow(10, _int(places))
    digit = pow10 * val
    if not math.isfinite(digit):
        return digit / pow10 if math.isfinite(pow10) and pow10 else val
    frac = math.modf(digit)[0]
    return float(math.ceil(digit) if frac >= on else math.floor(digit)) / pow10


# -- encodings, digests, ids


def b64enc(s: Any) -> str:
    return base64.b64encode(strval(s).encode("utf-8", "surrogatepass")).decode("ascii")


def b64dec(s: Any) -> str:
    """The decoded text, or Go's error text ("illegal base64 data at input byte N")."""
    text = _str(s)
    try:
        return base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True).decode(
            "utf-8", "replace"
        )
    except (binascii.Error, ValueError):
        alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/\r\n")
        bad = next((i for i, ch in enumerate(text) if ch not in alphabet), None)
        pos = bad if bad is not None else len(text) // 4 * 4
        return f"illegal base64 data at input byte {pos}"


def to_json(v: Any) -> str:
    try:
        return encode.to_json(v)
    except GoError:
        return ""


def to_pretty_json(v: Any) -> str:
    try:
        return encode.to_json_pretty(v)
    except GoError:
        return ""


def to_raw_json(v: Any) -> str:
    try:
        return encode.to_unescaped_json(v)
    except GoError:
        return ""


def from_json(s: Any) -> Any:
    """The decoded document; "" when it is not JSON."""
    text = _str(s)
    if not text.strip():
        return ""
    try:
        return encode.parse_json(text)
    except GoError:
        return ""


def sha256sum(s: Any) -> str:
    return hashlib.sha256(_str(s).encode("utf-8", "surrogatepass")).hexdigest()


def sha1sum(s: Any) -> str:
    return hashlib.sha1(_str(s).encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def adler32sum(s: Any) -> str:
    return str(zlib.adler32(_str(s).encode("utf-8", "surrogatepass")))


def uuidv4() -> str:
    return str(uuid.uuid4())


# -- conversions


def to_string(v: Any) -> str:
    return strval(v)


def atoi(s: Any) -> int:
    text = _str(s)
    if not helpers._INT.fullmatch(text):
        return 0
    value = int(text)
    return value if helpers.INT64_MIN <= value <= helpers.INT64_MAX else 0


# -- dates


def _zone(name: str, local: dt.tzinfo | None) -> dt.tzinfo:
    if name == "Local":
        return local or dt.UTC
    if name in ("", "UTC"):
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return dt.UTC


def _date_functions(now: Callable[[], dt.datetime]) -> dict[str, Callable[..., Any]]:
    def as_time(date: Any) -> dt.datetime:
        if isinstance(date, dt.datetime):
            return date
        if type(date) is int:
            try:
                return dt.datetime.fromtimestamp(date, dt.UTC)
            except (OverflowError, OSError, ValueError):
                raise GoError(f"time {date} is out of range") from None
        return now()

    def date_in_zone(layout: Any, date: Any, zone: Any) -> str:
        t = as_time(date)
        return go_format(t.astimezone(_zone(_str(zone), now().tzinfo)), _str(layout))

    def date(layout: Any, date_: Any) -> str:
        return date_in_zone(layout, date_, "Local")

    def unix_epoch(date_: Any) -> str:
        if not isinstance(date_, dt.datetime):
            raise GoError(f"wrong type for value; expected time.Time; got {type_name(date_)}")
        return str(int(date_.timestamp()))

    def now_() -> dt.datetime:
        return now()

    return {"now": now_, "date": date, "dateInZone": date_in_zone, "unixEpoch": unix_epoch}


_PURE: dict[str, Callable[..., Any]] = {
    # strings
    "abbrev": sprig.abbrev,
    "camelcase": sprig.camelcase,
    "cat": sprig.cat,
    "contains": sprig.contains,
    "hasPrefix": sprig.has_prefix,
    "hasSuffix": sprig.has_suffix,
    "indent": sprig.indent,
    "initials": sprig.initials,
    "join": sprig.join,
    "kebabcase": sprig.kebabcase,
    "lower": lambda s: _str(s).lower(),
    "nindent": sprig.nindent,
    "nospace": sprig.nospace,
    "plural": sprig.plural,
    "quote": sprig.quote,
    "randAlpha": sprig.random_string(string.ascii_letters),
    "randAlphaNum": sprig.random_string(string.ascii_letters + string.digits),
    "randNumeric": sprig.random_string(string.digits),
    "repeat": sprig.repeat,
    "replace": sprig.replace,
    "snakecase": sprig.snakecase,
    "splitList": sprig.split_list,
    "squote": sprig.squote,
    "substr": sprig.substr,
    "title": sprig.title,
    "trim": lambda s: _str(s).strip(),
    "trimAll": lambda cutset, s: _str(s).strip(_str(cutset)),
    "trimPrefix": lambda prefix, s: _str(s).removeprefix(_str(prefix)),
    "trimSuffix": lambda suffix, s: _str(s).removesuffix(_str(suffix)),
    "trunc": sprig.trunc,
    "untitle": sprig.untitle,
    "upper": lambda s: _str(s).upper(),
    "wrap": sprig.wrap,
    # defaults and flow
    "all": sprig.all_,
    "any": sprig.any_,
    "coalesce": sprig.coalesce,
    "default": sprig.default,
    "empty": sprig.empty,
    "fail": sprig.fail,
    "ternary": sprig.ternary,
    # lists
    "append": append,
    "compact": compact,
    "concat": concat,
    "first": first,
    "has": has,
    "initial": initial,
    "last": last,
    "list": list_,
    "prepend": prepend,
    "push": append,
    "rest": rest,
    "reverse": reverse,
    "seq": seq,
    "sortAlpha": sort_alpha,
    "uniq": uniq,
    "until": until,
    "untilStep": until_step,
    "without": without,
    # dicts
    "dict": dict_,
    "get": get,
    "hasKey": has_key,
    "keys": keys,
    "merge": merge,
    "omit": omit,
    "pick": pick,
    "pluck": pluck,
    "set": set_,
    "unset": unset,
    "values": values,
    # math
    "add": add,
    "add1": add1,
    "ceil": ceil,
    "div": div,
    "floor": floor,
    "max": max_,
    "min": min_,
    "mod": mod,
    "mul": mul,
    "round": round_,
    "sub": sub,
    # encodings, digests, ids
    "adler32sum": adler32sum,
    "b64dec": b64dec,
    "b64enc": b64enc,
    "fromJson": from_json,
    "sha1sum": sha1sum,
    "sha256sum": sha256sum,
    "toJson": to_json,
    "toPrettyJson": to_pretty_json,
    "toRawJson": to_raw_json,
    "uuidv4": uuidv4,
    # conversions
    "atoi": atoi,
    "float64": sprig.to_float64,
    "int": sprig.to_int64,
    "int64": sprig.to_int64,
    "toString": to_string,
    "toStrings": sprig.strslice,
}


def sprig_functions(now: Callable[[], dt.datetime]) -> dict[str, Callable[..., Any]]:
    """Every supported Sprig function, named as consul-template names them (`sprig_<name>`)."""
    table = {**_PURE, **_date_functions(now)}
    return {f"sprig_{name}": fn for name, fn in table.items()}
