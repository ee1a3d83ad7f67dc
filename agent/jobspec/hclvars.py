"""HCL2 input variables and locals, as Nomad's jobspec2 reads them; the CLI's `-var` and `-var-file`.

    decl = declare(name, attributes, validations, report)       # a `variable "name" {...}` block
    values = resolve_variables(decls, given, report, ctx)       # None when any problem was recorded
    local_values = resolve_locals(definitions, values, report, ctx)

Given values: a string is read by the variable's type as Nomad does (`string` and `any` keep it; other
types parse it as an HCL expression: `-var count=3`, `-var 'tags=["a","b"]'`); other values are taken
as they are; then the value is converted to the type as HCL converts (number "5" -> 5). Problems with
the given values name the variable (`variable "x": no value given; ...`); problems in a declaration or a
failed validation are at the variable's path (`variable.x`). Types and conversion are in
agent.jobspec.hclvalues (`Type`, `convert`), shared with the `convert()` function.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.jobspec.errors import JobspecError
from agent.jobspec.hclast import Interpolation, Node, ParseError, Template
from agent.jobspec.hcleval import Scope, StaticError, evaluate
from agent.jobspec.hclexpr import parse_expression
from agent.jobspec.hclsyntax import SyntaxBlock, parse_body
from agent.jobspec.hclvalues import ANY, Context, EvalError, Type, convert, number, type_from_ast
from agent.jobspec.tree import Report

__all__ = [
    "NO_DEFAULT",
    "VariableDecl",
    "declare",
    "parse_var_args",
    "parse_var_file",
    "resolve_locals",
    "resolve_variables",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_VARIABLE_KEYS = ("type", "default", "description", "sensitive", "nullable", "validation")
NO_DEFAULT: object = object()


@dataclass(frozen=True)
class Validation:
    condition: Node
    error_message: Node


@dataclass(frozen=True)
class VariableDecl:
    name: str
    type: Type
    default: object  # NO_DEFAULT when there is none
    validations: tuple[Validation, ...] = ()
    typed: bool = False  # a `type` was given


def declare(  # noqa: PLR0912 - one check per field
    name: str,
    attributes: Mapping[str, Node],
    validations: Iterable[Mapping[str, Node]],
    report: Report,
    ctx: Context,
) -> VariableDecl | None:
    """A variable block's declaration, or None with its problems recorded at `variable.<name>`."""
    path = f"variable.{name}"
    before = len(report.problems)
    if not _NAME.match(name):
        report.error(path, f'"{name}" is not a valid variable name')
    for key in attributes:
        if key not in _VARIABLE_KEYS:
            near = difflib.get_close_matches(key, _VARIABLE_KEYS, n=1)
            hint = f' (did you mean "{near[0]}"?)' if near else ""
            report.error(f"{path}.{key}", f"not a variable block field{hint}")
    typ, typed = ANY, "type" in attributes
    if typed:
        try:
            typ = _type(attributes["type"])
        except EvalError as e:
            report.error(f"{path}.type", str(e))
    default: object = NO_DEFAULT
    if "default" in attributes:
        try:
            default = convert(evaluate(attributes["default"], Scope(ctx)), typ, "default")
        except EvalError as e:
            report.error(f"{path}.default", str(e))
    for key in ("description", "sensitive", "nullable"):
        if key in attributes:
            try:
                value = evaluate(attributes[key], Scope(ctx))
                convert(value, Type("string" if key == "description" else "bool"), key)
            except EvalError as e:
                report.error(f"{path}.{key}", str(e))
    checks = []
    for i, block in enumerate(validations):
        vpath = f"{path}.validation[{i}]"
        for key in block:
            if key not in ("condition", "error_message"):
                report.error(f"{vpath}.{key}", "not a validation block field (condition, error_message)")
        missing = [key for key in ("condition", "error_message") if key not in block]
        for key in missing:
            report.error(f"{vpath}.{key}", "required")
        if not missing:
            checks.append(Validation(block["condition"], block["error_message"]))
    if len(report.problems) != before:
        return None
    return VariableDecl(name, typ, default, tuple(checks), typed)


def _type(node: Node) -> Type:
    if isinstance(node, Interpolation):
        return type_from_ast(node.expr)
    if isinstance(node, Template):
        raise EvalError('a type is written without quotes: type = string, not type = "string"')
    return type_from_ast(node)


def resolve_variables(  # noqa: PLR0912
    decls: Iterable[VariableDecl], given: Mapping[str, object], report: Report, ctx: Context
) -> dict[str, object] | None:
    """Every variable's value, or None when any is missing, invalid or fails its validation."""
    before = len(report.problems)
    declared = {d.name: d for d in decls}
    for name in given:
        if name not in declared:
            near = difflib.get_close_matches(str(name), list(declared), n=1)
            hint = f'; did you mean "{near[0]}"?' if near else ""
            report.error(
                "",
                f'variable "{name}": a value was given but the jobspec declares no variable "{name}"{hint}',
            )
    values: dict[str, object] = {}
    for name, decl in declared.items():
        if name in given:
            try:
                values[name] = _given(given[name], decl, ctx)
            except EvalError as e:
                report.error("", f'variable "{name}": invalid value: {e}')
        elif decl.default is not NO_DEFAULT:
            values[name] = decl.default
        else:
            report.error("", f'variable "{name}": no value given; set it with -var {name}=... or a default')
    if len(report.problems) != before:
        return None
    scope = Scope(ctx, variables=values)
    for name, decl in declared.items():
        for check in decl.validations:
            try:
                ok = evaluate(check.condition, scope)
                if not isinstance(ok, bool):
                    raise EvalError(f"the validation condition must be a bool, not {ok!r}")
            except EvalError as e:
                report.error(f"variable.{name}.validation", str(e))
                continue
            if not ok:
                try:
                    message = evaluate(check.error_message, scope)
                except EvalError as e:
                    message = f"the validation failed (and its error_message cannot be evaluated: {e})"
                report.error(f"variable.{name}", str(message))
    return values if len(report.problems) == before else None


def _given(value: object, decl: VariableDecl, ctx: Context) -> object:
    if isinstance(value, str) and decl.type.kind not in ("string", "any"):
        try:
            node = parse_expression(value)
        except ParseError as e:
            raise EvalError(f"{value!r} is not a {decl.type} value ({e})") from None
        value = evaluate(node, Scope(ctx))
    return convert(_plain(value), decl.type)


def _plain(value: object) -> object:
    """Outside data (API JSON, var files) as HCL values."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return number(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    raise EvalError(f"unsupported value {value!r}")


class _Failed(StaticError):
    """A local that depends on a local whose problem is already recorded."""


def resolve_locals(
    definitions: Mapping[str, Node], variables: Mapping[str, object], report: Report, ctx: Context
) -> dict[str, object] | None:
    """Every local's value (locals may use each other in any order), or None with the problems recorded
    at `locals.<name>` (a cycle once, naming its locals)."""
    values: dict[str, object] = {}
    failed: set[str] = set()
    stack: list[str] = []

    def get(name: str) -> object:
        if name in values:
            return values[name]
        if name in failed:
            raise _Failed(name)
        if name in stack:
            cycle = [*stack[stack.index(name) :], name]
            raise StaticError(
                "locals refer to each other in a cycle: " + " -> ".join(f"local.{n}" for n in cycle)
            )
        stack.append(name)
        try:
            value = evaluate(definitions[name], scope)
        except _Failed:
            failed.add(name)
            raise
        except EvalError as e:
            failed.add(name)
            report.error(f"locals.{name}", str(e))
            raise _Failed(name) from None
        finally:
            stack.pop()
        values[name] = value
        return value

    scope = Scope(ctx, variables=variables, local=get, local_names=frozenset(definitions))
    for name in definitions:
        with contextlib.suppress(EvalError):
            get(name)
    return None if failed else values


# --- the CLI's -var and -var-file -------------------------------------------------------------------------


def parse_var_args(args: Iterable[str]) -> dict[str, str]:
    """`-var name=value` arguments (a later one wins); raises JobspecError naming each bad argument."""
    out: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for arg in args:
        name, sep, value = arg.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            problems.append(("", f"-var {arg!r}: expected name=value"))
            continue
        out[name] = value
    if problems:
        raise JobspecError("-var", problems)
    return out


def parse_var_file(text: str, source: str) -> dict[str, object]:
    """A `-var-file`: HCL `name = value` attributes or a JSON object; raises JobspecError."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise JobspecError(source, [("", f"JSON syntax error: {e}")]) from None
        if not isinstance(data, dict):
            raise JobspecError(source, [("", "a JSON variables file is an object of name: value")])
        try:
            return {str(k): _plain(v) for k, v in data.items()}
        except (EvalError, RecursionError) as e:
            raise JobspecError(source, [("", str(e))]) from None
    report = Report()
    nodes = read_attributes(text, report)
    out: dict[str, object] = {}
    ctx = Context()
    for name, node in (nodes or {}).items():
        try:
            out[name] = evaluate(node, Scope(ctx))
        except EvalError as e:
            report.error(name, str(e))
    if report.problems:
        raise JobspecError(source, report.problems)
    return out


def read_attributes(text: str, report: Report) -> dict[str, Node] | None:
    """A variables file's `name = value` attributes, parsed (not evaluated); blocks are problems."""
    syntax = parse_body(text, report)
    if syntax is None:
        return None
    out: dict[str, Node] = {}
    for item in syntax.items:
        if isinstance(item, SyntaxBlock):
            report.error(item.type, "a variables file holds name = value attributes, not blocks")
        else:
            out[item.name] = item.expr
    return out
