"""Go text/template's predefined functions: not len index slice print printf println eq ne lt le
gt ge html js urlquery call (`and` and `or` short-circuit, so the evaluator runs them)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from agent.gotemplate.gofmt import MISSING, sprint, sprintln, type_name
from agent.gotemplate.printf import sprintf


class GoError(ValueError):
    """A function's error, reported as `error calling NAME: <message>`."""


def truth(v: Any) -> bool:
    """Go's isTrue: false, 0, nil and empty strings, slices and maps are false."""
    if v is None or v is MISSING:
        return False
    t = type(v)
    if t is bool:
        return v  # type: ignore[no-any-return]
    if t is int or t is float:
        return v != 0  # type: ignore[no-any-return]
    if isinstance(v, str | dict | bytes | bytearray | list | tuple | range):
        return len(v) > 0 if not isinstance(v, range) else bool(v)
    return True


def _int_arg(x: Any, what: str) -> int:
    if type(x) is not int:
        raise GoError(f"cannot index {what} with type {type_name(x)}")
    return int(x)


def go_len(item: Any) -> int:
    if isinstance(item, str):
        return len(item.encode("utf-8"))
    if isinstance(item, dict | list | tuple | range | bytes | bytearray):
        return len(item)
    if item is None or item is MISSING:
        raise GoError("len of nil pointer")
    raise GoError(f"len of type {type_name(item)}")


def index(item: Any, *indexes: Any) -> Any:
    v = item
    for x in indexes:
        if v is None or v is MISSING:
            raise GoError("index of untyped nil")
        if isinstance(v, dict):
            if x is None or x is MISSING:
                raise GoError("value is nil; should be string")
            try:
                v = v.get(x)
            except TypeError:
                raise GoError(f"value has type {type_name(x)}; should be string") from None
        elif isinstance(v, str | bytes | bytearray | list | tuple | range):
            i = _int_arg(x, "slice/array")
            seq = v.encode("utf-8") if isinstance(v, str) else v
            if not 0 <= i < len(seq):
                raise GoError(f"index out of range: {i}")
            v = seq[i]
        else:
            raise GoError(f"can't index item of type {type_name(v)}")
    return v


def go_slice(item: Any, *indexes: Any) -> Any:
    if item is None or item is MISSING:
        raise GoError("slice of untyped nil")
    if len(indexes) > 3:
        raise GoError(f"too many slice indexes: {len(indexes)}")
    is_str = isinstance(item, str)
    if is_str and len(indexes) == 3:
        raise GoError("cannot 3-index slice a string")
    if not isinstance(item, str | list | tuple | range | bytes | bytearray):
        raise GoError(f"can't slice item of type {type_name(item)}")
    seq = item.encode("utf-8") if isinstance(item, str) else item
    cap = len(seq)
    idx = [_int_arg(x, "slice") for x in indexes]
    for i in idx:
        if not 0 <= i <= cap:
            raise GoError(f"index out of range: {i}")
    lo = idx[0] if idx else 0
    hi = idx[1] if len(idx) > 1 else cap
    if lo > hi:
        raise GoError(f"invalid slice index: {lo} > {hi}")
    if len(idx) == 3 and hi > idx[2]:
        raise GoError(f"invalid slice index: {hi} > {idx[2]}")
    out = seq[lo:hi]
    if is_str:
        assert isinstance(out, bytes)
        return out.decode("utf-8", "replace")
    return list(out) if isinstance(out, tuple) else out


def _kind(v: Any) -> str:
    if v is None or v is MISSING:
        return "nil"
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if isinstance(v, str):
        return "string"
    return "other"


def eq(arg1: Any, *args: Any) -> bool:
    if not args:
        raise GoError("missing argument for comparison")
    k1 = _kind(arg1)
    for arg in args:
        k2 = _kind(arg)
        if k1 != k2:
            if k1 != "nil" and k2 != "nil":
                raise GoError("incompatible types for comparison")
            continue
        if k1 == "nil":
            return True
        if k1 == "other":
            if isinstance(arg1, dict | list | tuple | range) or isinstance(arg, dict | list | tuple | range):
                raise GoError(f"non-comparable type {type_name(arg1)}")
            if type(arg1) is not type(arg):
                raise GoError("incompatible types for comparison")
        if arg1 == arg:
            return True
    return False


def ne(arg1: Any, arg2: Any) -> bool:
    return not eq(arg1, arg2)


def lt(arg1: Any, arg2: Any) -> bool:
    k1, k2 = _kind(arg1), _kind(arg2)
    if k1 in ("nil", "bool", "other") or k2 in ("nil", "bool", "other"):
        raise GoError("invalid type for comparison")
    if k1 != k2:
        raise GoError("incompatible types for comparison")
    return arg1 < arg2  # type: ignore[no-any-return]


def le(arg1: Any, arg2: Any) -> bool:
    return lt(arg1, arg2) or eq(arg1, arg2)


def gt(arg1: Any, arg2: Any) -> bool:
    return not le(arg1, arg2)


def ge(arg1: Any, arg2: Any) -> bool:
    return not lt(arg1, arg2)


def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return sprint(args)


_HTML = {'"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;", "\0": "\ufffd"}
_JS = {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026", "=": "\\u003D"}


def html(*args: Any) -> str:
    s = _eval_args(args)
    return "".join(_HTML.get(c, c) for c in s)


def js(*args: Any) -> str:
    out = []
    for c in _eval_args(args):
        if c in _JS:
            out.append(_JS[c])
        elif c < " " or (ord(c) >= 0x80 and not c.isprintable()):
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(_eval_args(args), safe="")


def call(fn: Any, *args: Any) -> Any:
    if fn is None or fn is MISSING:
        raise GoError("call of nil")
    if not callable(fn):
        raise GoError(f"non-function of type {type_name(fn)}")
    return fn(*args)


def go_not(arg: Any) -> bool:
    return not truth(arg)


def go_print(*args: Any) -> str:
    return sprint(args)


def go_printf(fmt: str, *args: Any) -> str:
    if not isinstance(fmt, str):
        raise GoError(f"wrong type for value; expected string; got {type_name(fmt)}")
    return sprintf(fmt, args)


def go_println(*args: Any) -> str:
    return sprintln(args)


BUILTINS: dict[str, Callable[..., Any]] = {
    "call": call,
    "eq": eq,
    "ge": ge,
    "gt": gt,
    "html": html,
    "index": index,
    "js": js,
    "le": le,
    "len": go_len,
    "lt": lt,
    "ne": ne,
    "not": go_not,
    "print": go_print,
    "printf": go_printf,
    "println": go_println,
    "slice": go_slice,
    "urlquery": urlquery,
}
BUILTIN_NAMES = frozenset({*BUILTINS, "and", "or"})


class _ExecuteTemplate:
    """consul-template's `executeTemplate NAME [DATA]`: the evaluator runs it, since it needs the
    template's own definitions."""

    __name__ = "executeTemplate"

    def __call__(self, *args: Any) -> Any:
        raise GoError("executeTemplate runs only inside a template")


EXECUTE_TEMPLATE = _ExecuteTemplate()
