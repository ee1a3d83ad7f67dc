"""UUIDs, time and hashes."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid

from agent.jobspec.hclfuncs.registry import Fn, arg_int, arg_str, function
from agent.jobspec.hclvalues import Context, EvalError

# uuid, time, crypto


@function("uuidv4", 0, 0, "a random UUID (a new one each time the jobspec is parsed)")
def _uuidv4(ctx: Context, a: list[object]) -> object:
    return str(uuid.uuid4())


_UUID_NAMESPACES = {
    "dns": uuid.NAMESPACE_DNS,
    "url": uuid.NAMESPACE_URL,
    "oid": uuid.NAMESPACE_OID,
    "x500": uuid.NAMESPACE_X500,
}


@function("uuidv5", 2, 2, 'a name-based UUID in a namespace ("dns", "url", "oid", "x500" or a UUID)')
def _uuidv5(ctx: Context, a: list[object]) -> object:
    ns_text, name = arg_str(a, 0), arg_str(a, 1)
    try:
        ns = _UUID_NAMESPACES.get(ns_text) or uuid.UUID(ns_text)
    except ValueError:
        raise EvalError(f"uuidv5: {ns_text!r} is not a namespace or a UUID") from None
    return str(uuid.uuid5(ns, name))


@function("timestamp", 0, 0, "the current UTC time in RFC 3339")
def _timestamp(ctx: Context, a: list[object]) -> object:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> dt.datetime:
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:\d\d)", text)
    if m is None:
        raise EvalError(f'{text!r} is not an RFC 3339 timestamp like "2017-11-22T00:00:00Z"')
    try:
        return dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}{m.group(3).replace('Z', '+00:00')}")
    except ValueError as e:
        raise EvalError(f"invalid timestamp {text!r}: {e}") from None


def _format_time(t: dt.datetime) -> str:
    text = t.isoformat()
    if t.microsecond == 0:
        text = t.replace(microsecond=0).isoformat()
    return text.replace("+00:00", "Z")


_DATE_TOKENS = re.compile(
    r"'(?:[^']|'')*'|YYYY|YY|MMMM|MMM|MM|M|DD|D|EEEE|EEE|hh|h|HH|H|AA|aa|mm|m|ss|s|ZZZZZ|ZZZZ|ZZZ|Z"
)


@function("formatdate", 2, 2, 'formats a timestamp by a spec like "DD MMM YYYY hh:mm ZZZ"')
def _formatdate(ctx: Context, a: list[object]) -> object:
    spec, t = arg_str(a, 0), _parse_time(arg_str(a, 1))
    offset = t.utcoffset() or dt.timedelta()
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hh, mm = divmod(abs(minutes), 60)

    def token(m: re.Match[str]) -> str:
        tok = m.group()
        if tok.startswith("'"):
            return tok[1:-1].replace("''", "'")
        table = {
            "YYYY": f"{t.year:04d}",
            "YY": f"{t.year % 100:02d}",
            "MMMM": t.strftime("%B"),
            "MMM": t.strftime("%b"),
            "MM": f"{t.month:02d}",
            "M": str(t.month),
            "DD": f"{t.day:02d}",
            "D": str(t.day),
            "EEEE": t.strftime("%A"),
            "EEE": t.strftime("%a"),
            "hh": f"{t.hour:02d}",
            "h": str(t.hour),
            "HH": f"{(t.hour % 12) or 12:02d}",
            "H": str((t.hour % 12) or 12),
            "AA": "AM" if t.hour < 12 else "PM",
            "aa": "am" if t.hour < 12 else "pm",
            "mm": f"{t.minute:02d}",
            "m": str(t.minute),
            "ss": f"{t.second:02d}",
            "s": str(t.second),
            "ZZZZZ": f"{sign}{hh:02d}:{mm:02d}",
            "ZZZZ": f"{sign}{hh:02d}{mm:02d}",
            "ZZZ": "UTC" if minutes == 0 else f"{sign}{hh:02d}{mm:02d}",
            "Z": "Z" if minutes == 0 else f"{sign}{hh:02d}:{mm:02d}",
        }
        return table[tok]

    return _DATE_TOKENS.sub(token, spec)


_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


@function("timeadd", 2, 2, 'adds a duration like "1h30m" or "-10s" to a timestamp')
def _timeadd(ctx: Context, a: list[object]) -> object:
    t, text = _parse_time(arg_str(a, 0)), arg_str(a, 1)
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-") if text[:1] in "+-" else text
    if not body or _DURATION_PART.sub("", body) != "" or len(body) > 100:
        raise EvalError(f'timeadd: invalid duration {text!r} (like "1h30m" or "-10s")')
    seconds = sign * sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(body))
    try:
        return _format_time(t + dt.timedelta(seconds=seconds))
    except OverflowError:
        raise EvalError("timeadd: the result is out of range") from None


def _hash(name: str) -> Fn:
    def f(ctx: Context, a: list[object]) -> object:
        return hashlib.new(name, arg_str(a, 0).encode("utf-8")).hexdigest()

    return f


for _name in ("md5", "sha1", "sha256", "sha512"):
    function(_name, 1, 1, f"the {_name.upper()} digest of a string, in hex")(_hash(_name))


@function("bcrypt", 1, 2, "a bcrypt hash of a string (cost 10 by default); needs the bcrypt package")
def _bcrypt(ctx: Context, a: list[object]) -> object:
    try:
        import bcrypt
    except ImportError:
        raise EvalError("bcrypt is not supported: the bcrypt package is not installed") from None
    cost = arg_int(a, 1) if len(a) > 1 else 10
    if not 4 <= cost <= 12:
        raise EvalError("bcrypt: the cost must be between 4 and 12")
    hashed: bytes = bcrypt.hashpw(arg_str(a, 0).encode("utf-8"), bcrypt.gensalt(cost, prefix=b"2a"))
    return hashed.decode("ascii")
