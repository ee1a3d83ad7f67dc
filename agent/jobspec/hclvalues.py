"""HCL2 values and types as the jobspec evaluator and Nomad's function table (agent.jobspec.hclfuncs) use
them: plain Python data (str, int/float, bool, None, list, dict); every failure an `EvalError`; results
bounded (`MAX_VALUE_SIZE`, `Budget`)."""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.jobspec.hclast import Call, Literal, Node, ObjectCons, Parens, TupleCons, Variable

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
    raise EvalError(f"the {what} is {a_word(kind(v))}; a number is required")


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
    raise EvalError(f"the {what} is {a_word(kind(v))}; a bool is required")


def to_list(v: object, what: str = "value") -> list[object]:
    if isinstance(v, list):
        return v
    raise EvalError(f"the {what} is {a_word(kind(v))}; a list is required")


def to_map(v: object, what: str = "value") -> dict[str, object]:
    if isinstance(v, dict):
        return v
    raise EvalError(f"the {what} is {a_word(kind(v))}; a map is required")


def a_word(word: str) -> str:
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


def distinct(items: list[object]) -> list[object]:
    out: list[object] = []
    for item in items:
        if not any(equal(item, seen) for seen in out):
            out.append(item)
    return out


def as_set(items: list[object]) -> list[object]:
    """A set: distinct items, sorted when they are all strings or all numbers (as cty orders them)."""
    out = distinct(items)
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
            raise EvalError(f"the {what} is {a_word(kind(v))}; a string is required")
        return to_str(v, what)
    if t.kind == "number":
        return to_num(v, what)
    if t.kind == "bool":
        return to_bool(v, what)
    assert t.elem is not None or t.kind in ("object", "tuple")
    if t.kind in ("list", "set"):
        if not isinstance(v, list):
            raise EvalError(f"the {what} is {a_word(kind(v))}; a {t.kind} is required")
        assert t.elem is not None
        items = [convert(x, t.elem, f"{what}[{i}]") for i, x in enumerate(v)]
        return as_set(items) if t.kind == "set" else items
    if t.kind == "map":
        if not isinstance(v, dict):
            raise EvalError(f"the {what} is {a_word(kind(v))}; a map is required")
        assert t.elem is not None
        return {k: convert(x, t.elem, f'{what}["{k}"]') for k, x in v.items()}
    if t.kind == "object":
        if not isinstance(v, dict):
            raise EvalError(f"the {what} is {a_word(kind(v))}; an object is required")
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
