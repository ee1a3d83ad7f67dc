"""HCL2 values, types and the functions of Nomad's jobspec2 (Terraform's standard library subset).

Values are plain Python data: str, int/float (HCL numbers; whole floats become ints), bool, None (null),
list (HCL lists, tuples and sets; sets are de-duplicated and sorted), dict (maps and objects). Every
failure is an `EvalError` with a message; results are bounded (`MAX_VALUE_SIZE`, `Budget`).

`FUNCTIONS` maps a name to (implementation, min args, max args or None); `can`, `try` and `convert` take
unevaluated arguments and live in the evaluator (agent.jobspec.hcleval). `REFUSED` names the functions
recognised but refused, with the reason.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import hashlib
import io
import ipaddress
import json
import math
import re
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent import goregex
from agent.jobspec.hclexpr import Call, Literal, Node, ObjectCons, Parens, TupleCons, Variable

MAX_VALUE_SIZE = 1 << 20  # about a MiB: strings count their length, other values 8 per item
MAX_STEPS = 1_000_000  # evaluation steps over one jobspec
MAX_RANGE = 1024  # as cty's range()
MAX_FILE = 1 << 20
MAX_INT_BITS = 1024
MAX_WIDTH = 100_000  # format() widths and precisions


class EvalError(Exception):
    """An expression cannot be evaluated; `str(e)` is the message."""


@dataclass
class Budget:
    steps: int = 0
    max_steps: int = MAX_STEPS

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.max_steps:
            raise EvalError("the jobspec's expressions are too costly to evaluate")


@dataclass
class Context:
    """What functions may touch: the jobspec's directory (for file()) and the step budget.

    On the CLI the jobspec's files are read from `base_dir` and each one read is kept in `read`, so
    that the CLI can send them with the jobspec (Nomad's CLI evaluates file() on its side too); the
    agent then reads only from that `bundle`, never from its own disk."""

    base_dir: Path | None = None
    budget: Budget = field(default_factory=Budget)
    bundle: Mapping[str, str] | None = None  # path as written -> text, sent with the jobspec
    read: dict[str, str] = field(default_factory=dict)  # what file() read from base_dir


# --- values --------------------------------------------------------------------------------------------


def is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def number(v: float) -> int | float:
    """An HCL number: whole values as int, bounded."""
    if isinstance(v, int):
        if v.bit_length() > MAX_INT_BITS:
            raise EvalError("number too large")
        return v
    if math.isnan(v) or math.isinf(v):
        raise EvalError("arithmetic result is not a finite number")
    if v.is_integer() and abs(v) < 2**63:
        return int(v)
    return v


def kind(v: object) -> str:  # noqa: PLR0911 - one return per kind
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if is_number(v):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def format_number(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    text = format(decimal.Decimal(repr(v)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def to_str(v: object, what: str = "value") -> str:
    """HCL's conversion to string (used by templates and string parameters)."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_number(v):
        assert isinstance(v, int | float)
        return format_number(v)
    if v is None:
        raise EvalError(f"the {what} is null; a string is required")
    raise EvalError(f"the {what} is a {kind(v)}; a string is required")


def to_num(v: object, what: str = "value") -> int | float:
    if is_number(v):
        assert isinstance(v, int | float)
        return v
    if isinstance(v, str):
        text = v.strip()
        if re.fullmatch(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?", text) and len(text) < 400:
            if re.fullmatch(r"[+-]?[0-9]+", text):
                return number(int(text))
            return number(float(text))
        raise EvalError(f"the {what} {v!r} is not a number")
    raise EvalError(f"the {what} is {_a(kind(v))}; a number is required")


def to_int(v: object, what: str = "value") -> int:
    n = to_num(v, what)
    if not isinstance(n, int):
        raise EvalError(f"the {what} {format_number(n)} is not a whole number")
    return n


def to_bool(v: object, what: str = "value") -> bool:
    if isinstance(v, bool):
        return v
    if v in ("true", "false"):
        return v == "true"
    raise EvalError(f"the {what} is {_a(kind(v))}; a bool is required")


def to_list(v: object, what: str = "value") -> list[object]:
    if isinstance(v, list):
        return v
    raise EvalError(f"the {what} is {_a(kind(v))}; a list is required")


def to_map(v: object, what: str = "value") -> dict[str, object]:
    if isinstance(v, dict):
        return v
    raise EvalError(f"the {what} is {_a(kind(v))}; a map is required")


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word if word != "null" else "null"


def equal(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    return a == b


def check_size(v: object, budget: Budget | None = None) -> None:
    total = 0
    stack = [v]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        else:
            total += 8
            if isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
                total += sum(len(k) for k in item)
        if total > MAX_VALUE_SIZE:
            raise EvalError("the value is too large (over 1 MiB)")
    if budget is not None:
        budget.tick(1 + total // 64)


def _distinct(items: list[object]) -> list[object]:
    out: list[object] = []
    for item in items:
        if not any(equal(item, seen) for seen in out):
            out.append(item)
    return out


def _set(items: list[object]) -> list[object]:
    """A set: distinct items, sorted when they are all strings or all numbers (as cty orders them)."""
    out = _distinct(items)
    if all(isinstance(x, str) for x in out):
        return sorted(out, key=str)
    if all(is_number(x) for x in out):
        return sorted(out, key=to_num)
    return out


# --- types ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Type:
    kind: str  # string number bool any list set map object tuple
    elem: Type | None = None
    attrs: tuple[tuple[str, Type, bool], ...] = ()  # object: (name, type, optional)
    items: tuple[Type, ...] = ()

    def __str__(self) -> str:
        if self.kind in ("list", "set", "map"):
            return f"{self.kind}({self.elem})"
        if self.kind == "object":
            inner = ", ".join(f"{n} = {f'optional({t})' if o else t}" for n, t, o in self.attrs)
            return f"object({{{inner}}})"
        if self.kind == "tuple":
            return f"tuple([{', '.join(str(t) for t in self.items)}])"
        return self.kind


ANY = Type("any")
_PRIMITIVES = {"string": Type("string"), "number": Type("number"), "bool": Type("bool"), "any": ANY}


def type_from_ast(node: Node) -> Type:
    """A type constraint (`list(object({a = string}))`) from its expression."""
    if isinstance(node, Parens):
        return type_from_ast(node.inner)
    if isinstance(node, Variable) and node.name in _PRIMITIVES:
        return _PRIMITIVES[node.name]
    if isinstance(node, Call) and len(node.args) == 1 and not node.expand_final:
        (arg,) = node.args
        if node.name in ("list", "set", "map"):
            return Type(node.name, elem=type_from_ast(arg))
        if node.name == "object" and isinstance(arg, ObjectCons):
            attrs = []
            for key, value in arg.items:
                if not isinstance(key, Literal) or not isinstance(key.value, str):
                    raise EvalError("object type attribute names must be names")
                optional = isinstance(value, Call) and value.name == "optional"
                inner = value
                if isinstance(value, Call) and optional:
                    if len(value.args) not in (1, 2):
                        raise EvalError("optional() takes a type (and a default)")
                    inner = value.args[0]
                attrs.append((key.value, type_from_ast(inner), optional))
            return Type("object", attrs=tuple(attrs))
        if node.name == "tuple" and isinstance(arg, TupleCons):
            return Type("tuple", items=tuple(type_from_ast(t) for t in arg.items))
    raise EvalError(
        "invalid type: use string, number, bool, any, list(T), set(T), map(T), object({...}) or tuple([...])"
    )


def convert(v: object, t: Type, what: str = "value") -> object:  # noqa: PLR0911, PLR0912 - one per type
    """HCL's conversion of a value to a type constraint (null converts to any type)."""
    if v is None or t.kind == "any":
        return v
    if t.kind == "string":
        if isinstance(v, list | dict):
            raise EvalError(f"the {what} is {_a(kind(v))}; a string is required")
        return to_str(v, what)
    if t.kind == "number":
        return to_num(v, what)
    if t.kind == "bool":
        return to_bool(v, what)
    assert t.elem is not None or t.kind in ("object", "tuple")
    if t.kind in ("list", "set"):
        if not isinstance(v, list):
            raise EvalError(f"the {what} is {_a(kind(v))}; a {t.kind} is required")
        assert t.elem is not None
        items = [convert(x, t.elem, f"{what}[{i}]") for i, x in enumerate(v)]
        return _set(items) if t.kind == "set" else items
    if t.kind == "map":
        if not isinstance(v, dict):
            raise EvalError(f"the {what} is {_a(kind(v))}; a map is required")
        assert t.elem is not None
        return {k: convert(x, t.elem, f'{what}["{k}"]') for k, x in v.items()}
    if t.kind == "object":
        if not isinstance(v, dict):
            raise EvalError(f"the {what} is {_a(kind(v))}; an object is required")
        out: dict[str, object] = {}
        for name, at, optional in t.attrs:
            if name not in v:
                if not optional:
                    raise EvalError(f'the {what} lacks the attribute "{name}"')
                out[name] = None
                continue
            out[name] = convert(v[name], at, f"{what}.{name}")
        return out
    if not isinstance(v, list) or len(v) != len(t.items):
        raise EvalError(f"the {what} must be a list of {len(t.items)} items")
    return [convert(x, it, f"{what}[{i}]") for i, (x, it) in enumerate(zip(v, t.items, strict=True))]


# --- the functions -------------------------------------------------------------------------------------

Fn = Callable[[Context, list[object]], object]
FUNCTIONS: dict[str, tuple[Fn, int, int | None]] = {}
REFUSED: dict[str, str] = {
    "list": "list() was removed from HCL; use tolist([...]) or a list [...]",
    "map": "map() was removed from HCL; use tomap({...}) or an object {...}",
    "rsadecrypt": "not supported by fieldlab-agent",
    "fileset": "not supported by fieldlab-agent",
    "filebase64": "not supported by fieldlab-agent",
    "templatefile": "not supported by fieldlab-agent",
    # Nomad's CLI evaluates these on the user's machine; here the jobspec is evaluated on the agent,
    # whose home and working dir are not the user's: refused rather than answered wrong
    "pathexpand": "not supported by fieldlab-agent: the agent, not your shell, evaluates the jobspec"
    " (write the path out, or pass it with -var)",
    "abspath": "not supported by fieldlab-agent: the agent, not your shell, evaluates the jobspec"
    " (write the path out, or pass it with -var)",
}
DESCRIPTIONS: dict[str, str] = {}


def _fn(name: str, lo: int, hi: int | None, doc: str) -> Callable[[Fn], Fn]:
    def register(f: Fn) -> Fn:
        FUNCTIONS[name] = (f, lo, hi)
        DESCRIPTIONS[name] = doc
        return f

    return register


def _s(args: list[object], i: int) -> str:
    return to_str(args[i], f"argument {i + 1}")


def _n(args: list[object], i: int) -> int | float:
    return to_num(args[i], f"argument {i + 1}")


def _i(args: list[object], i: int) -> int:
    return to_int(args[i], f"argument {i + 1}")


def _l(args: list[object], i: int) -> list[object]:
    return to_list(args[i], f"argument {i + 1}")


def _m(args: list[object], i: int) -> dict[str, object]:
    return to_map(args[i], f"argument {i + 1}")


# strings


@_fn("chomp", 1, 1, "removes newline characters at the end of a string")
def _chomp(ctx: Context, a: list[object]) -> object:
    return re.sub(r"(?:\r\n|\r|\n)+\Z", "", _s(a, 0))


@_fn("format", 1, None, "formats values by a printf-style spec (%s %d %f %q %v %t %x %e %g %%)")
def _format(ctx: Context, a: list[object]) -> object:
    return go_format(_s(a, 0), a[1:])


@_fn("formatlist", 1, None, "format() over lists in parallel, giving a list")
def _formatlist(ctx: Context, a: list[object]) -> object:
    spec = _s(a, 0)
    lengths = {len(x) for x in a[1:] if isinstance(x, list)}
    if len(lengths) > 1:
        raise EvalError("formatlist's list arguments must all have the same length")
    if not lengths:
        return [go_format(spec, a[1:])]
    (n,) = lengths
    ctx.budget.tick(n)
    return [go_format(spec, [x[i] if isinstance(x, list) else x for x in a[1:]]) for i in range(n)]


@_fn("indent", 2, 2, "adds spaces at the start of every line but the first")
def _indent(ctx: Context, a: list[object]) -> object:
    n, text = _i(a, 0), _s(a, 1)
    if n < 0 or n * (text.count("\n") + 1) > MAX_VALUE_SIZE:
        raise EvalError("indent: the result would be too large")
    return text.replace("\n", "\n" + " " * n)


@_fn("join", 2, None, "joins the strings of lists with a separator")
def _join(ctx: Context, a: list[object]) -> object:
    sep = _s(a, 0)
    items = [item for i in range(1, len(a)) for item in _l(a, i)]
    if len(sep) * len(items) > MAX_VALUE_SIZE:
        raise EvalError("join: the result would be too large")
    return sep.join(to_str(x, "list item") for x in items)


@_fn("lower", 1, 1, "converts letters to lower case")
def _lower(ctx: Context, a: list[object]) -> object:
    return _s(a, 0).lower()


@_fn("upper", 1, 1, "converts letters to upper case")
def _upper(ctx: Context, a: list[object]) -> object:
    return _s(a, 0).upper()


@_fn("replace", 3, 3, "replaces a substring (or a /regex/, with $1 references) by another")
def _replace(ctx: Context, a: list[object]) -> object:
    text, sub, repl = _s(a, 0), _s(a, 1), _s(a, 2)
    if len(sub) > 1 and sub.startswith("/") and sub.endswith("/"):
        return _replace_all("replace", _regex(sub[1:-1]), text, repl)
    count = len(text) + 1 if sub == "" else text.count(sub)
    if len(text) + count * (len(repl) - len(sub)) > MAX_VALUE_SIZE:
        raise EvalError("replace: the result would be too large")
    return text.replace(sub, repl)


# Regular expressions are Go's (RE2: linear in the input, no backreferences or lookarounds), as cty's
# regex, regexall, regex_replace and replace(s, "/re/", r) run them in Nomad: agent.goregex.


def _regex(pattern: str) -> goregex.Regexp:
    try:
        return goregex.compile(pattern)
    except goregex.GoRegexError as e:
        raise EvalError(str(e)) from None


def _replace_all(fn: str, pattern: goregex.Regexp, text: str, repl: str) -> str:
    """Go's ReplaceAllString: $1, ${1}, $name, ${name} and $$ in repl."""
    try:
        return pattern.replace_all(text, repl, max_size=MAX_VALUE_SIZE)
    except goregex.ResultTooLarge:
        raise EvalError(f"{fn}: the result would be too large") from None


def _result_kind(pattern: goregex.Regexp) -> str:
    """What regex() gives for a pattern (cty): the match ("string"), its groups in order ("tuple") or
    its named groups ("object"); named and unnamed groups cannot be mixed."""
    names = pattern.names[1:]
    if not names:
        return "string"
    named = sum(1 for name in names if name)
    if named and named != len(names):
        raise EvalError(
            f"invalid regexp pattern {pattern.pattern!r}: cannot mix named and unnamed capture groups"
        )
    return "object" if named else "tuple"


def _match_value(pattern: goregex.Regexp, kind: str, groups: list[str | None]) -> object:
    """A group that took no part in the match is null, as in cty."""
    if kind == "string":
        return groups[0]
    if kind == "tuple":
        return groups[1:]
    return {name: value for name, value in zip(pattern.names[1:], groups[1:], strict=True)}


@_fn("regex", 2, 2, "the first match of a regular expression: the match, its groups or named groups")
def _regex_fn(ctx: Context, a: list[object]) -> object:
    pattern = _regex(_s(a, 0))
    kind = _result_kind(pattern)
    groups = pattern.find_submatch(_s(a, 1))
    if groups is None:
        raise EvalError("regex: the pattern did not match any part of the given string")
    return _match_value(pattern, kind, groups)


@_fn("regexall", 2, 2, "every match of a regular expression, as regex() gives them")
def _regexall(ctx: Context, a: list[object]) -> object:
    pattern = _regex(_s(a, 0))
    kind = _result_kind(pattern)
    return [_match_value(pattern, kind, groups) for groups in pattern.find_all_submatch(_s(a, 1))]


@_fn("regex_replace", 3, 3, "replaces every match of a regular expression (with $1 references)")
def _regex_replace(ctx: Context, a: list[object]) -> object:
    pattern, text, repl = _regex(_s(a, 1)), _s(a, 0), _s(a, 2)
    return _replace_all("regex_replace", pattern, text, repl)


@_fn("strlen", 1, 1, "the number of characters of a string")
def _strlen(ctx: Context, a: list[object]) -> object:
    return len(_s(a, 0))


@_fn("split", 2, 2, "splits a string at each separator")
def _split(ctx: Context, a: list[object]) -> object:
    sep, text = _s(a, 0), _s(a, 1)
    return list(text) if sep == "" else text.split(sep)


@_fn("strrev", 1, 1, "reverses a string")
def _strrev(ctx: Context, a: list[object]) -> object:
    return _s(a, 0)[::-1]


@_fn("substr", 3, 3, "a substring by offset (negative: from the end) and length (-1: to the end)")
def _substr(ctx: Context, a: list[object]) -> object:
    text, offset, length = _s(a, 0), _i(a, 1), _i(a, 2)
    if offset < 0:
        offset = max(len(text) + offset, 0)
    if offset > len(text):
        raise EvalError("substr: the offset is beyond the end of the string")
    if length < 0:
        return text[offset:]
    return text[offset : offset + length]


@_fn("title", 1, 1, "capitalises the first letter of each word")
def _title(ctx: Context, a: list[object]) -> object:
    return re.sub(r"(?:^|(?<=[^\w']))(\w)", lambda m: m.group(1).upper(), _s(a, 0))


@_fn("trim", 2, 2, "removes the given characters from both ends")
def _trim(ctx: Context, a: list[object]) -> object:
    return _s(a, 0).strip(_s(a, 1))


@_fn("trimprefix", 2, 2, "removes a prefix")
def _trimprefix(ctx: Context, a: list[object]) -> object:
    return _s(a, 0).removeprefix(_s(a, 1))


@_fn("trimsuffix", 2, 2, "removes a suffix")
def _trimsuffix(ctx: Context, a: list[object]) -> object:
    return _s(a, 0).removesuffix(_s(a, 1))


@_fn("trimspace", 1, 1, "removes white space at both ends")
def _trimspace(ctx: Context, a: list[object]) -> object:
    return _s(a, 0).strip()


# collections


@_fn("alltrue", 1, 1, "true when every item of a list is true (or the list is empty)")
def _alltrue(ctx: Context, a: list[object]) -> object:
    return all(to_bool(x, "list item") for x in _l(a, 0))


@_fn("anytrue", 1, 1, "true when any item of a list is true")
def _anytrue(ctx: Context, a: list[object]) -> object:
    return any(to_bool(x, "list item") for x in _l(a, 0))


@_fn("chunklist", 2, 2, "splits a list into lists of at most n items")
def _chunklist(ctx: Context, a: list[object]) -> object:
    items, size = _l(a, 0), _i(a, 1)
    if size < 0:
        raise EvalError("chunklist: the size must not be negative")
    if size == 0:
        return [items]
    return [items[i : i + size] for i in range(0, len(items), size)]


@_fn("coalesce", 1, None, "the first argument that is neither null nor an empty string")
def _coalesce(ctx: Context, a: list[object]) -> object:
    for x in a:
        if x is not None and x != "":
            return x
    raise EvalError("coalesce: no non-null, non-empty argument")


@_fn("coalescelist", 1, None, "the first argument that is a non-empty list")
def _coalescelist(ctx: Context, a: list[object]) -> object:
    for i in range(len(a)):
        if _l(a, i):
            return a[i]
    raise EvalError("coalescelist: no non-empty list")


@_fn("compact", 1, 1, "a list without its null and empty string items")
def _compact(ctx: Context, a: list[object]) -> object:
    return [x for x in _l(a, 0) if x is not None and x != ""]


@_fn("concat", 1, None, "joins lists into one")
def _concat(ctx: Context, a: list[object]) -> object:
    return [x for i in range(len(a)) for x in _l(a, i)]


@_fn("contains", 2, 2, "whether a list holds a value")
def _contains(ctx: Context, a: list[object]) -> object:
    return any(equal(x, a[1]) for x in _l(a, 0))


@_fn("distinct", 1, 1, "a list without its duplicates, in order")
def _distinct_fn(ctx: Context, a: list[object]) -> object:
    items = _l(a, 0)
    ctx.budget.tick(len(items) * len(items) // 16)
    return _distinct(items)


@_fn("element", 2, 2, "a list item by index, wrapping around")
def _element(ctx: Context, a: list[object]) -> object:
    items, i = _l(a, 0), _i(a, 1)
    if not items:
        raise EvalError("element: the list is empty")
    if i < 0:
        raise EvalError("element: the index must not be negative")
    return items[i % len(items)]


@_fn("flatten", 1, 1, "replaces nested lists by their items")
def _flatten(ctx: Context, a: list[object]) -> object:
    out: list[object] = []

    def walk(items: list[object]) -> None:
        for x in items:
            ctx.budget.tick()
            if isinstance(x, list):
                walk(x)
            else:
                out.append(x)

    walk(_l(a, 0))
    return out


@_fn("index", 2, 2, "the index of a value in a list")
def _index(ctx: Context, a: list[object]) -> object:
    for i, x in enumerate(_l(a, 0)):
        if equal(x, a[1]):
            return i
    raise EvalError("index: the item is not in the list")


@_fn("keys", 1, 1, "a map's keys, sorted")
def _keys(ctx: Context, a: list[object]) -> object:
    return sorted(_m(a, 0))


@_fn("length", 1, 1, "the length of a string, list or map")
def _length(ctx: Context, a: list[object]) -> object:
    v = a[0]
    if isinstance(v, str | list | dict):
        return len(v)
    raise EvalError(f"length: the argument is {_a(kind(v))}; a string, list or map is required")


@_fn("lookup", 2, 3, "a map's value by key, or a default")
def _lookup(ctx: Context, a: list[object]) -> object:
    m, key = _m(a, 0), _s(a, 1)
    if key in m:
        return m[key]
    if len(a) == 3:
        return a[2]
    raise EvalError(f'lookup: no key "{key}" in the map and no default')


@_fn("merge", 0, None, "merges maps; later keys win")
def _merge(ctx: Context, a: list[object]) -> object:
    out: dict[str, object] = {}
    for i, x in enumerate(a):
        if x is not None:
            out.update(_m(a, i))
    return out


@_fn("range", 1, 3, "a list of numbers: range(limit), range(start, limit), range(start, limit, step)")
def _range(ctx: Context, a: list[object]) -> object:
    nums = [_n(a, i) for i in range(len(a))]
    start: int | float = 0 if len(nums) == 1 else nums[0]
    limit = nums[0] if len(nums) == 1 else nums[1]
    step: int | float = 1
    if len(nums) == 3:
        step = nums[2]
    elif start > limit:
        step = -1
    if step == 0:
        raise EvalError("range: the step must not be zero")
    if (step > 0 and start > limit) or (step < 0 and start < limit):
        raise EvalError("range: the step goes away from the limit")
    count = math.ceil((limit - start) / step)
    if count > MAX_RANGE:
        raise EvalError(f"range: more than {MAX_RANGE} values")
    return [number(start + i * step) for i in range(count)]


@_fn("reverse", 1, 1, "a list in reverse order")
def _reverse(ctx: Context, a: list[object]) -> object:
    return _l(a, 0)[::-1]


def _sets(ctx: Context, a: list[object]) -> list[list[object]]:
    sets = [_set(_l(a, i)) for i in range(len(a))]
    ctx.budget.tick(sum(len(s) for s in sets) ** 2 // 16)
    return sets


@_fn("setintersection", 1, None, "the items in every set")
def _setintersection(ctx: Context, a: list[object]) -> object:
    first, *rest = _sets(ctx, a)
    return _set([x for x in first if all(any(equal(x, y) for y in s) for s in rest)])


@_fn("setproduct", 1, None, "every combination of one item of each set")
def _setproduct(ctx: Context, a: list[object]) -> object:
    sets = [_l(a, i) for i in range(len(a))]
    total = math.prod(len(s) for s in sets)
    if total * len(sets) * 8 > MAX_VALUE_SIZE:
        raise EvalError("setproduct: the result would be too large")
    out: list[list[object]] = [[]]
    for s in sets:
        out = [[*prefix, x] for prefix in out for x in s]
    return list(out)


@_fn("setsubtract", 2, 2, "the items of the first set not in the second")
def _setsubtract(ctx: Context, a: list[object]) -> object:
    first, second = _sets(ctx, a)
    return [x for x in first if not any(equal(x, y) for y in second)]


@_fn("setunion", 1, None, "the items in any set")
def _setunion(ctx: Context, a: list[object]) -> object:
    return _set([x for s in _sets(ctx, a) for x in s])


@_fn("slice", 3, 3, "list items from a start index up to (not including) an end index")
def _slice(ctx: Context, a: list[object]) -> object:
    items, start, end = _l(a, 0), _i(a, 1), _i(a, 2)
    if not 0 <= start <= end <= len(items):
        raise EvalError(f"slice: indexes {start}..{end} are out of range for a list of {len(items)}")
    return items[start:end]


@_fn("sort", 1, 1, "a list of strings in lexicographic order")
def _sort(ctx: Context, a: list[object]) -> object:
    return sorted(to_str(x, "list item") for x in _l(a, 0))


@_fn("sum", 1, 1, "the sum of a list of numbers")
def _sum(ctx: Context, a: list[object]) -> object:
    items = _l(a, 0)
    if not items:
        raise EvalError("sum: the list is empty")
    return number(sum(to_num(x, "list item") for x in items))


@_fn("transpose", 1, 1, "swaps the keys and values of a map of lists of strings")
def _transpose(ctx: Context, a: list[object]) -> object:
    out: dict[str, list[object]] = {}
    for key, values in sorted(_m(a, 0).items()):
        for v in to_list(values, f'value of "{key}"'):
            out.setdefault(to_str(v, "list item"), []).append(key)
    return {k: sorted(v, key=str) for k, v in out.items()}


@_fn("values", 1, 1, "a map's values, by sorted key")
def _values(ctx: Context, a: list[object]) -> object:
    m = _m(a, 0)
    return [m[k] for k in sorted(m)]


@_fn("zipmap", 2, 2, "a map from a list of keys and a list of values")
def _zipmap(ctx: Context, a: list[object]) -> object:
    keys, values = _l(a, 0), _l(a, 1)
    if len(keys) != len(values):
        raise EvalError("zipmap: the lists have different lengths")
    return {to_str(k, "key"): v for k, v in zip(keys, values, strict=True)}


# encoding


@_fn("base64decode", 1, 1, "decodes Base64 into a UTF-8 string")
def _base64decode(ctx: Context, a: list[object]) -> object:
    try:
        return base64.b64decode(_s(a, 0), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as e:
        raise EvalError(f"base64decode: {e}") from None


@_fn("base64encode", 1, 1, "encodes a string's UTF-8 bytes as Base64")
def _base64encode(ctx: Context, a: list[object]) -> object:
    return base64.b64encode(_s(a, 0).encode("utf-8")).decode("ascii")


@_fn("csvdecode", 1, 1, "CSV with a header row -> a list of maps")
def _csvdecode(ctx: Context, a: list[object]) -> object:
    try:
        rows = list(csv.reader(io.StringIO(_s(a, 0)), strict=True))
    except csv.Error as e:
        raise EvalError(f"csvdecode: {e}") from None
    if not rows:
        raise EvalError("csvdecode: missing the header row")
    header, *body = rows
    out: list[object] = []
    for n, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise EvalError(f"csvdecode: row {n} has {len(row)} fields, the header {len(header)}")
        out.append(dict(zip(header, row, strict=True)))
    return out


def _json_value(v: object) -> object:
    if isinstance(v, float):
        return number(v)
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    return v


@_fn("jsondecode", 1, 1, "parses JSON")
def _jsondecode(ctx: Context, a: list[object]) -> object:
    try:
        return _json_value(json.loads(_s(a, 0)))
    except (ValueError, RecursionError) as e:
        raise EvalError(f"jsondecode: {e}") from None


def json_encode(v: object) -> str:
    text = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        text = text.replace(c, esc)
    return text.replace("\u2029", "\\u2029")


@_fn("jsonencode", 1, 1, "encodes a value as compact JSON (keys sorted; <, >, & escaped)")
def _jsonencode(ctx: Context, a: list[object]) -> object:
    return json_encode(a[0])


@_fn("urlencode", 1, 1, "escapes a string for a URL query")
def _urlencode(ctx: Context, a: list[object]) -> object:
    return urllib.parse.quote_plus(_s(a, 0), safe="-_.~")


@_fn("yamldecode", 1, 1, "parses YAML (one document)")
def _yamldecode(ctx: Context, a: list[object]) -> object:
    yaml = _yaml()
    text = _s(a, 0)
    try:
        return _json_value(_plain_yaml(yaml.safe_load(text)))
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        raise EvalError(f"yamldecode: {' '.join(str(e).split())}") from None


def _plain_yaml(v: object) -> object:
    if isinstance(v, list):
        return [_plain_yaml(x) for x in v]
    if isinstance(v, dict):
        return {to_str(k, "YAML key"): _plain_yaml(x) for k, x in v.items()}
    if v is None or isinstance(v, str | bool | int | float):
        return v
    return str(v)  # timestamps and the like


@_fn("yamlencode", 1, 1, "encodes a value as YAML")
def _yamlencode(ctx: Context, a: list[object]) -> object:
    yaml = _yaml()
    return str(yaml.safe_dump(a[0], sort_keys=True, default_flow_style=False, allow_unicode=True))


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is not part of the agent's base install
        raise EvalError("YAML functions need PyYAML, which is not installed") from None
    return yaml


# numbers


@_fn("abs", 1, 1, "the absolute value")
def _abs(ctx: Context, a: list[object]) -> object:
    return number(abs(_n(a, 0)))


@_fn("ceil", 1, 1, "the closest whole number greater than or equal")
def _ceil(ctx: Context, a: list[object]) -> object:
    return number(math.ceil(_n(a, 0)))


@_fn("floor", 1, 1, "the closest whole number less than or equal")
def _floor(ctx: Context, a: list[object]) -> object:
    return number(math.floor(_n(a, 0)))


@_fn("log", 2, 2, "the logarithm of a number in a base")
def _log(ctx: Context, a: list[object]) -> object:
    try:
        return number(math.log(_n(a, 0), _n(a, 1)))
    except (ValueError, ZeroDivisionError) as e:
        raise EvalError(f"log: {e}") from None


@_fn("max", 1, None, "the greatest number")
def _max(ctx: Context, a: list[object]) -> object:
    return max(_n(a, i) for i in range(len(a)))


@_fn("min", 1, None, "the smallest number")
def _min(ctx: Context, a: list[object]) -> object:
    return min(_n(a, i) for i in range(len(a)))


@_fn("parseint", 2, 2, "parses a string as a whole number in a base (2 to 62)")
def _parseint(ctx: Context, a: list[object]) -> object:
    text, base = _s(a, 0), _i(a, 1)
    if not 2 <= base <= 62:
        raise EvalError("parseint: the base must be between 2 and 62")
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if base <= 36:
        digits = digits[:36]
        body = text.lower()
    else:
        body = text
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-") if body[:1] in "+-" else body
    if not body or len(body) > 400 or any(c not in digits[:base] for c in body):
        raise EvalError(f"parseint: {text!r} is not a base {base} number")
    value = 0
    for c in body:
        value = value * base + digits.index(c)
    return number(sign * value)


@_fn("pow", 2, 2, "a number raised to a power")
def _pow(ctx: Context, a: list[object]) -> object:
    base, exp = _n(a, 0), _n(a, 1)
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        if base not in (0, 1, -1) and exp * max(abs(base), 2).bit_length() > MAX_INT_BITS:
            raise EvalError("pow: the result is too large")
        return number(base**exp)
    try:
        return number(math.pow(base, exp))
    except (ValueError, OverflowError, ZeroDivisionError) as e:
        raise EvalError(f"pow: {e}") from None


@_fn("signum", 1, 1, "-1, 0 or 1 by the sign of a number")
def _signum(ctx: Context, a: list[object]) -> object:
    n = _n(a, 0)
    return (n > 0) - (n < 0)


# types (can, try and convert are in the evaluator)


@_fn("tobool", 1, 1, "converts to a bool")
def _tobool(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("bool"))


@_fn("tolist", 1, 1, "converts to a list")
def _tolist(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("list", elem=ANY))


@_fn("tomap", 1, 1, "converts to a map")
def _tomap(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("map", elem=ANY))


@_fn("tonumber", 1, 1, "converts to a number")
def _tonumber(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("number"))


@_fn("toset", 1, 1, "converts to a set (distinct items)")
def _toset(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("set", elem=ANY))


@_fn("tostring", 1, 1, "converts to a string")
def _tostring(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("string"))


# uuid, time, crypto


@_fn("uuidv4", 0, 0, "a random UUID (a new one each time the jobspec is parsed)")
def _uuidv4(ctx: Context, a: list[object]) -> object:
    return str(uuid.uuid4())


_UUID_NAMESPACES = {
    "dns": uuid.NAMESPACE_DNS,
    "url": uuid.NAMESPACE_URL,
    "oid": uuid.NAMESPACE_OID,
    "x500": uuid.NAMESPACE_X500,
}


@_fn("uuidv5", 2, 2, 'a name-based UUID in a namespace ("dns", "url", "oid", "x500" or a UUID)')
def _uuidv5(ctx: Context, a: list[object]) -> object:
    ns_text, name = _s(a, 0), _s(a, 1)
    try:
        ns = _UUID_NAMESPACES.get(ns_text) or uuid.UUID(ns_text)
    except ValueError:
        raise EvalError(f"uuidv5: {ns_text!r} is not a namespace or a UUID") from None
    return str(uuid.uuid5(ns, name))


@_fn("timestamp", 0, 0, "the current UTC time in RFC 3339")
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


@_fn("formatdate", 2, 2, 'formats a timestamp by a spec like "DD MMM YYYY hh:mm ZZZ"')
def _formatdate(ctx: Context, a: list[object]) -> object:
    spec, t = _s(a, 0), _parse_time(_s(a, 1))
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


@_fn("timeadd", 2, 2, 'adds a duration like "1h30m" or "-10s" to a timestamp')
def _timeadd(ctx: Context, a: list[object]) -> object:
    t, text = _parse_time(_s(a, 0)), _s(a, 1)
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
        return hashlib.new(name, _s(a, 0).encode("utf-8")).hexdigest()

    return f


for _name in ("md5", "sha1", "sha256", "sha512"):
    _fn(_name, 1, 1, f"the {_name.upper()} digest of a string, in hex")(_hash(_name))


@_fn("bcrypt", 1, 2, "a bcrypt hash of a string (cost 10 by default); needs the bcrypt package")
def _bcrypt(ctx: Context, a: list[object]) -> object:
    try:
        import bcrypt
    except ImportError:
        raise EvalError("bcrypt is not supported: the bcrypt package is not installed") from None
    cost = _i(a, 1) if len(a) > 1 else 10
    if not 4 <= cost <= 12:
        raise EvalError("bcrypt: the cost must be between 4 and 12")
    hashed: bytes = bcrypt.hashpw(_s(a, 0).encode("utf-8"), bcrypt.gensalt(cost, prefix=b"2a"))
    return hashed.decode("ascii")


# networks


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as e:
        raise EvalError(f"invalid CIDR prefix {text!r}: {e}") from None


@_fn("cidrhost", 2, 2, "the IP address of host number n in a CIDR prefix")
def _cidrhost(ctx: Context, a: list[object]) -> object:
    net, n = _network(_s(a, 0)), _i(a, 1)
    if not -net.num_addresses <= n < net.num_addresses:
        raise EvalError(f"cidrhost: prefix {net} has no host number {n}")
    return str(net[n])


@_fn("cidrnetmask", 1, 1, "the netmask of an IPv4 CIDR prefix")
def _cidrnetmask(ctx: Context, a: list[object]) -> object:
    net = _network(_s(a, 0))
    if net.version != 4:
        raise EvalError("cidrnetmask: only IPv4 prefixes have a netmask")
    return str(net.netmask)


@_fn("cidrsubnet", 3, 3, "subnet number n of a prefix extended by newbits")
def _cidrsubnet(ctx: Context, a: list[object]) -> object:
    net, bits, n = _network(_s(a, 0)), _i(a, 1), _i(a, 2)
    new_prefix = net.prefixlen + bits
    if bits < 0 or new_prefix > net.max_prefixlen or not 0 <= n < 2**bits:
        raise EvalError(f"cidrsubnet: no subnet {n} with {bits} more bits in {net}")
    size = 2 ** (net.max_prefixlen - new_prefix)
    base = int(net.network_address) + n * size
    return f"{ipaddress.ip_address(base) if net.version == 4 else ipaddress.IPv6Address(base)}/{new_prefix}"


@_fn("cidrsubnets", 1, None, "consecutive subnets of a prefix, one per newbits argument")
def _cidrsubnets(ctx: Context, a: list[object]) -> object:
    net = _network(_s(a, 0))
    out: list[object] = []
    at = int(net.network_address)
    for i in range(1, len(a)):
        bits = _i(a, i)
        prefix = net.prefixlen + bits
        if bits < 1 or prefix > net.max_prefixlen:
            raise EvalError(f"cidrsubnets: {bits} more bits do not fit in {net}")
        size = 2 ** (net.max_prefixlen - prefix)
        at = -(-at // size) * size  # aligned to its own size
        if at + size > int(net.network_address) + net.num_addresses:
            raise EvalError(f"cidrsubnets: not enough room in {net}")
        addr = ipaddress.ip_address(at) if net.version == 4 else ipaddress.IPv6Address(at)
        out.append(f"{addr}/{prefix}")
        at += size
    return out


# files


@_fn("file", 1, 1, "the text of a file, relative to the jobspec's directory (not over the API)")
def _file(ctx: Context, a: list[object]) -> object:
    text = _s(a, 0)
    if ctx.bundle is not None and ctx.base_dir is None:
        if text not in ctx.bundle:
            raise EvalError(f"file: {text!r} was not sent with the jobspec (the CLI sends what file() reads)")
        return ctx.bundle[text]
    content = _read_file(_file_path(ctx, text))
    ctx.read[text] = content
    return content


def _read_file(path: Path) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as e:
        raise EvalError(f"file: cannot read {str(path)!r}: {e.strerror or e}") from None
    if len(data) > MAX_FILE:
        raise EvalError(f"file: {str(path)!r} is larger than 1 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise EvalError(f"file: {str(path)!r} is not UTF-8 text") from None


def _go_clean(path: str) -> str:
    """Go's filepath.Clean (Unix): one slash between elements, no `.`, `..` resolved lexically."""
    if not path:
        return "."
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    out = "/".join(parts)
    return "/" + out if rooted else out or "."


@_fn("basename", 1, 1, "the last element of a path (Go's filepath.Base)")
def _basename(ctx: Context, a: list[object]) -> object:
    path = _s(a, 0).rstrip("/")
    if not path:
        return "/" if _s(a, 0) else "."
    return path.rsplit("/", 1)[-1]


@_fn("dirname", 1, 1, "all but the last element of a path (Go's filepath.Dir)")
def _dirname(ctx: Context, a: list[object]) -> object:
    path = _s(a, 0)
    return _go_clean(path[: path.rfind("/") + 1])


@_fn("fileexists", 1, 1, "whether a file exists, relative to the jobspec's directory")
def _fileexists(ctx: Context, a: list[object]) -> object:
    text = _s(a, 0)
    if ctx.bundle is not None and ctx.base_dir is None:
        return text in ctx.bundle
    path = _file_path(ctx, text)
    try:
        found = path.is_file()
    except OSError:
        return False
    if found:  # sent along, so that the agent sees the same answer
        ctx.read[text] = _read_file(path)
    return found


def _file_path(ctx: Context, text: str) -> Path:
    if ctx.base_dir is None:
        raise EvalError(
            "file functions are not available here: the jobspec was not read from a file "
            "(jobspecs given over the API have no directory)"
        )
    if "\0" in text:
        raise EvalError("file: the path contains a NUL character")
    return ctx.base_dir / text


# --- Go's format verbs ---------------------------------------------------------------------------------

_VERB = re.compile(r"%([-+# 0]*)(?:\[(\d+)\])?(\d+)?(?:\.(\d*))?(?:\[(\d+)\])?([a-zA-Z%])|%")


def go_format(spec: str, args: list[object]) -> str:
    out: list[str] = []
    pos = 0
    argi = 0
    for m in _VERB.finditer(spec):
        out.append(spec[pos : m.start()])
        pos = m.end()
        flags, index1, width, precision, index2, verb = m.groups()
        if verb is None:
            raise EvalError(
                f"format: a lone % at offset {m.start()} in {spec!r} (write %% for a percent sign)"
            )
        if verb == "%":
            out.append("%")
            continue
        index = index1 or index2
        if index is not None:
            argi = int(index) - 1
        if not 0 <= argi < len(args):
            raise EvalError(f"format: not enough arguments for {m.group()!r}")
        value = args[argi]
        argi += 1
        if (width and int(width) > MAX_WIDTH) or (precision and int(precision) > MAX_WIDTH):
            raise EvalError("format: width or precision too large")
        out.append(_format_one(value, flags, width, precision, verb))
    out.append(spec[pos:])
    if argi < len(args) and not any(m.group(2) or m.group(5) for m in _VERB.finditer(spec)):
        raise EvalError(f"format: too many arguments ({len(args)}) for the spec")
    return "".join(out)


def _format_one(value: object, flags: str, width: str | None, precision: str | None, verb: str) -> str:
    align = "<" if "-" in flags else ">"
    zero = "0" in flags and "-" not in flags
    prec = f".{precision or 0}" if precision is not None else ""
    if verb in "vsq":
        if verb == "v" and ("#" in flags or isinstance(value, list | dict)):
            text = json_encode(value)
        elif verb == "v" and value is None:
            text = "null"
        else:
            text = to_str(value, "format argument")
        if verb == "q":
            text = json.dumps(text, ensure_ascii=False)
        if prec:
            text = text[: int(precision or 0)]
        return format(text, f"{align}{width or ''}")
    if verb == "t":
        text = "true" if to_bool(value, "format argument") else "false"
        return format(text, f"{align}{width or ''}")
    n = to_num(value, "format argument")
    sign = "+" if "+" in flags else (" " if " " in flags else "")
    fill = "0=" if zero and width else align
    if verb in "dboxX":
        if not isinstance(n, int):
            raise EvalError(f"format: %{verb} needs a whole number, not {format_number(n)}")
        alt = "#" if "#" in flags and verb != "d" else ""
        return format(n, f"{fill}{sign}{alt}{width or ''}{'' if verb == 'd' else verb}")
    if verb in "eEfFgG":
        if verb in "gG" and not prec:
            text = format_number(n) if verb == "g" else format_number(n).upper()
            return format(text, f"{align}{width or ''}")
        return format(float(n), f"{fill}{sign}{width or ''}{prec or '.6'}{verb}")
    raise EvalError(f"format: unsupported verb %{verb}")
