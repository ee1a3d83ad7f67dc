"""Encoding, number and type functions (can, try and convert are the evaluator's)."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import urllib.parse
from typing import Any

from agent.jobspec.hclfuncs.registry import arg_int, arg_num, arg_str, function
from agent.jobspec.hclvalues import ANY, MAX_INT_BITS, Context, EvalError, Type, convert, number, to_str

# encoding


@function("base64decode", 1, 1, "decodes Base64 into a UTF-8 string")
def _base64decode(ctx: Context, a: list[object]) -> object:
    try:
        return base64.b64decode(arg_str(a, 0), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as e:
        raise EvalError(f"base64decode: {e}") from None


@function("base64encode", 1, 1, "encodes a string's UTF-8 bytes as Base64")
def _base64encode(ctx: Context, a: list[object]) -> object:
    return base64.b64encode(arg_str(a, 0).encode("utf-8")).decode("ascii")


@function("csvdecode", 1, 1, "CSV with a header row -> a list of maps")
def _csvdecode(ctx: Context, a: list[object]) -> object:
    try:
        rows = list(csv.reader(io.StringIO(arg_str(a, 0)), strict=True))
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


@function("jsondecode", 1, 1, "parses JSON")
def _jsondecode(ctx: Context, a: list[object]) -> object:
    try:
        return _json_value(json.loads(arg_str(a, 0)))
    except (ValueError, RecursionError) as e:
        raise EvalError(f"jsondecode: {e}") from None


def json_encode(v: object) -> str:
    text = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        text = text.replace(c, esc)
    return text.replace("\u2029", "\\u2029")


@function("jsonencode", 1, 1, "encodes a value as compact JSON (keys sorted; <, >, & escaped)")
def _jsonencode(ctx: Context, a: list[object]) -> object:
    return json_encode(a[0])


@function("urlencode", 1, 1, "escapes a string for a URL query")
def _urlencode(ctx: Context, a: list[object]) -> object:
    return urllib.parse.quote_plus(arg_str(a, 0), safe="-_.~")


@function("yamldecode", 1, 1, "parses YAML (one document)")
def _yamldecode(ctx: Context, a: list[object]) -> object:
    yaml = _yaml()
    text = arg_str(a, 0)
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


@function("yamlencode", 1, 1, "encodes a value as YAML")
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


@function("abs", 1, 1, "the absolute value")
def _abs(ctx: Context, a: list[object]) -> object:
    return number(abs(arg_num(a, 0)))


@function("ceil", 1, 1, "the closest whole number greater than or equal")
def _ceil(ctx: Context, a: list[object]) -> object:
    return number(math.ceil(arg_num(a, 0)))


@function("floor", 1, 1, "the closest whole number less than or equal")
def _floor(ctx: Context, a: list[object]) -> object:
    return number(math.floor(arg_num(a, 0)))


@function("log", 2, 2, "the logarithm of a number in a base")
def _log(ctx: Context, a: list[object]) -> object:
    try:
        return number(math.log(arg_num(a, 0), arg_num(a, 1)))
    except (ValueError, ZeroDivisionError) as e:
        raise EvalError(f"log: {e}") from None


@function("max", 1, None, "the greatest number")
def _max(ctx: Context, a: list[object]) -> object:
    return max(arg_num(a, i) for i in range(len(a)))


@function("min", 1, None, "the smallest number")
def _min(ctx: Context, a: list[object]) -> object:
    return min(arg_num(a, i) for i in range(len(a)))


@function("parseint", 2, 2, "parses a string as a whole number in a base (2 to 62)")
def _parseint(ctx: Context, a: list[object]) -> object:
    text, base = arg_str(a, 0), arg_int(a, 1)
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


@function("pow", 2, 2, "a number raised to a power")
def _pow(ctx: Context, a: list[object]) -> object:
    base, exp = arg_num(a, 0), arg_num(a, 1)
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        if base not in (0, 1, -1) and exp * max(abs(base), 2).bit_length() > MAX_INT_BITS:
            raise EvalError("pow: the result is too large")
        return number(base**exp)
    try:
        return number(math.pow(base, exp))
    except (ValueError, OverflowError, ZeroDivisionError) as e:
        raise EvalError(f"pow: {e}") from None


@function("signum", 1, 1, "-1, 0 or 1 by the sign of a number")
def _signum(ctx: Context, a: list[object]) -> object:
    n = arg_num(a, 0)
    return (n > 0) - (n < 0)


# types (can, try and convert are in the evaluator)


@function("tobool", 1, 1, "converts to a bool")
def _tobool(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("bool"))


@function("tolist", 1, 1, "converts to a list")
def _tolist(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("list", elem=ANY))


@function("tomap", 1, 1, "converts to a map")
def _tomap(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("map", elem=ANY))


@function("tonumber", 1, 1, "converts to a number")
def _tonumber(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("number"))


@function("toset", 1, 1, "converts to a set (distinct items)")
def _toset(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("set", elem=ANY))


@function("tostring", 1, 1, "converts to a string")
def _tostring(ctx: Context, a: list[object]) -> object:
    return convert(a[0], Type("string"))
