"""Evaluates the HCL2 AST (agent.jobspec.hclexpr) in a scope: `var.*`, `local.*`, iterators, functions.

    evaluate(node, scope)        # -> a plain value, or raises EvalError with a message

A reference whose root is not `var`, `local` or an iterator in scope is a runtime value (`NOMAD_ALLOC_ID`,
`attr.kernel.name`, `meta.x`, `node.unique.name`, `env["X"]`): an interpolation or a bare expression that
is only such a reference is kept verbatim as `${...}` for the client, as Nomad's jobspec2 does; used
inside an evaluated expression (`${upper(attr.x)}`) it is an error.

Errors: `StaticError` (unknown variable, local or function; these are not caught by `try`/`can`, as in
HCL), `BudgetError` (too much work), or plain `EvalError`. Python's recursion and arithmetic errors are
turned into `EvalError` at every function call and at `evaluate`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from agent.jobspec.hclast import (
    Binary,
    Call,
    Conditional,
    ForExpr,
    GetAttr,
    Index,
    Interpolation,
    Literal,
    Node,
    ObjectCons,
    Parens,
    Splat,
    SplatItem,
    Template,
    TemplateFor,
    TemplateIf,
    TupleCons,
    Unary,
    Variable,
    is_traversal,
    root_name,
)
from agent.jobspec.hclfuncs import FUNCTIONS, REFUSED
from agent.jobspec.hclvalues import (
    Context,
    EvalError,
    check_size,
    convert,
    equal,
    format_number,
    kind,
    number,
    to_bool,
    to_num,
    to_str,
    type_from_ast,
)

__all__ = ["BudgetError", "EvalError", "Scope", "StaticError", "evaluate", "is_runtime"]


class StaticError(EvalError):
    """A reference to something that does not exist: never caught by try() or can()."""


class BudgetError(EvalError):
    """Too much work or too deep: never caught by try() or can()."""


class RuntimeReference(EvalError):
    """A runtime value (attr.x) used inside an evaluated expression."""

    def __init__(self, text: str) -> None:
        super().__init__(
            f'"{text}" is not a variable, local or iterator: runtime values can only be interpolated alone'
            f' ("${{{text}}}"), not evaluated by HCL'
        )
        self.text = text


@dataclass(frozen=True)
class Scope:
    ctx: Context = field(default_factory=Context)
    variables: Mapping[str, object] | None = None  # None: `var.*` cannot be used here
    local: Callable[[str], object] | None = None  # resolves `local.<name>`; None: no locals here
    local_names: Collection[str] = ()
    iterators: Mapping[str, object] = field(default_factory=dict)
    splat_item: object = None

    def bind(self, names: Mapping[str, object]) -> Scope:
        return replace(self, iterators={**self.iterators, **names})

    def knows(self, name: str) -> bool:
        return name in self.iterators or name in ("var", "local")


@dataclass(frozen=True)
class _Namespace:
    name: str  # "var" or "local"


_SPECIAL = ("can", "try", "convert")
_MAX_EVAL_DEPTH = 200


def is_runtime(node: Node, scope: Scope) -> bool:
    """A reference to a runtime value only (`attr.kernel.name`), to be kept verbatim."""
    name = root_name(node)
    return is_traversal(node) and name is not None and not scope.knows(name)


def evaluate(node: Node, scope: Scope) -> object:
    """The value of an expression (a bare runtime reference becomes its `${...}` text)."""
    try:
        return _Evaluator(scope).top(node)
    except RecursionError:
        raise BudgetError("expression nested too deeply") from None
    except (OverflowError, ZeroDivisionError, ValueError, TypeError, MemoryError) as e:
        raise EvalError(f"cannot evaluate the expression: {e}") from None


class _Evaluator:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.depth = 0

    def top(self, node: Node) -> object:
        if isinstance(node, Interpolation):
            return self.interpolation(node, self.scope)
        value = self.eval(node, self.scope)
        return value

    def eval(self, node: Node, scope: Scope) -> object:
        scope.ctx.budget.tick()
        self.depth += 1
        try:
            if self.depth > _MAX_EVAL_DEPTH:
                raise BudgetError("expression nested too deeply")
            value = self.dispatch(node, scope)
            if isinstance(value, _Namespace):
                raise StaticError(f'"{value.name}" is not a value by itself; use {value.name}.<name>')
            return value
        finally:
            self.depth -= 1

    def dispatch(self, node: Node, scope: Scope) -> object:  # noqa: PLR0911, PLR0912
        if isinstance(node, Literal):
            return node.value
        if isinstance(node, Variable | GetAttr | Index):
            return self.traversal(node, scope)
        if isinstance(node, Parens):
            return self.eval(node.inner, scope)
        if isinstance(node, Template):
            return self.template(node, scope)
        if isinstance(node, Interpolation):
            return self.interpolation(node, scope)
        if isinstance(node, Binary):
            return self.binary(node, scope)
        if isinstance(node, Unary):
            if node.op == "!":
                return not to_bool(self.eval(node.operand, scope), "operand of !")
            return number(-to_num(self.eval(node.operand, scope), "operand of -"))
        if isinstance(node, Conditional):
            cond = to_bool(self.eval(node.condition, scope), "condition of ? :")
            return self.eval(node.true if cond else node.false, scope)
        if isinstance(node, TupleCons):
            items = [self.eval(item, scope) for item in node.items]
            check_size(items, scope.ctx.budget)
            return items
        if isinstance(node, ObjectCons):
            return self.object_cons(node, scope)
        if isinstance(node, Call):
            return self.call(node, scope)
        if isinstance(node, ForExpr):
            return self.for_expr(node, scope)
        if isinstance(node, Splat):
            return self.splat(node, scope)
        if isinstance(node, SplatItem):
            return scope.splat_item
        raise EvalError(f"cannot evaluate {type(node).__name__}")

    # --- references

    def traversal(self, node: Node, scope: Scope) -> object:
        if isinstance(node, Variable):
            if node.name in scope.iterators:
                return scope.iterators[node.name]
            if node.name in ("var", "local"):
                return _Namespace(node.name)
            raise RuntimeReference(_text(node))
        assert isinstance(node, GetAttr | Index)
        if is_runtime(node, scope):
            raise RuntimeReference(_text(node))
        target = self.dispatch(node.target, scope) if _is_namespace_ref(node.target) else None
        if target is None:
            target = self.eval(node.target, scope)
        if isinstance(node, GetAttr):
            return self.get(target, node.name, scope, attr=True)
        key = self.eval(node.key, scope)
        return self.get(target, key, scope, attr=False)

    def get(self, target: object, key: object, scope: Scope, *, attr: bool) -> object:
        if isinstance(target, _Namespace):
            return self.namespace(target.name, to_str(key, "name"), scope)
        if target is None:
            raise EvalError("cannot index or get an attribute of a null value")
        if isinstance(target, dict):
            if key is None or isinstance(key, list | dict):
                raise EvalError(f"a map key must be a string, not {_a_kind(key)}")
            name = to_str(key, "key")
            if name not in target:
                what = f'no attribute "{name}"' if attr else f'no key "{name}"'
                near = difflib.get_close_matches(name, [str(k) for k in target], n=1)
                hint = f'; did you mean "{near[0]}"?' if near else ""
                raise EvalError(f"the map has {what}{hint}")
            return target[name]
        if isinstance(target, list):
            if attr:
                raise EvalError(f'a list has no attribute "{key}"; use an index or a splat ([*].{key})')
            n = to_num(key, "index")
            if not isinstance(n, int) or not 0 <= n < len(target):
                raise EvalError(f"index {format_number(n)} is out of range for a list of {len(target)}")
            return target[n]
        raise EvalError(f"cannot index {_a_kind(target)}")

    def namespace(self, space: str, name: str, scope: Scope) -> object:
        if space == "var":
            if scope.variables is None:
                raise StaticError(f"variables cannot be used here (var.{name})")
            if name not in scope.variables:
                raise StaticError(_unknown("variable", f"var.{name}", [f"var.{n}" for n in scope.variables]))
            return scope.variables[name]
        if scope.local is None:
            raise StaticError(f"locals cannot be used here (local.{name})")
        if name not in scope.local_names:
            raise StaticError(_unknown("local", f"local.{name}", [f"local.{n}" for n in scope.local_names]))
        return scope.local(name)

    # --- templates

    def interpolation(self, node: Interpolation, scope: Scope) -> object:
        if is_runtime(node.expr, scope):
            return "${" + node.source + "}"
        try:
            return self.eval(node.expr, scope)
        except RuntimeReference as e:
            raise StaticError(
                f"${{{node.source}}} uses {e.text}, a runtime value that is only known on the client: it can "
                f'only be interpolated alone ("${{{e.text}}}"), not evaluated by HCL'
            ) from None

    def template(self, node: Template, scope: Scope) -> object:
        if len(node.parts) == 1 and isinstance(node.parts[0], Interpolation):
            return self.interpolation(node.parts[0], scope)
        out: list[str] = []
        self.parts(node.parts, scope, out)
        text = "".join(out)
        check_size(text, scope.ctx.budget)
        return text

    def parts(self, parts: tuple[Node, ...], scope: Scope, out: list[str]) -> None:
        for part in parts:
            scope.ctx.budget.tick()
            if isinstance(part, Literal):
                out.append(str(part.value))
            elif isinstance(part, Interpolation):
                value = self.interpolation(part, scope)
                if value is None:
                    raise EvalError(f"${{{part.source}}} is null and cannot be part of a string")
                if isinstance(value, list | dict):
                    raise EvalError(f"${{{part.source}}} is {_a_kind(value)} and cannot be part of a string")
                out.append(to_str(value))
            elif isinstance(part, TemplateIf):
                cond = to_bool(self.eval(part.condition, scope), "condition of %{ if }")
                self.parts(part.then if cond else part.otherwise, scope, out)
            elif isinstance(part, TemplateFor):
                for key, value in self.iterate(self.eval(part.collection, scope), "%{ for }"):
                    names = {part.value_var: value}
                    if part.key_var:
                        names[part.key_var] = key
                    self.parts(part.body, scope.bind(names), out)
                    if sum(len(s) for s in out) > (1 << 20):
                        raise EvalError("the string is too large (over 1 MiB)")
            else:
                out.append(to_str(self.eval(part, scope)))

    # --- operators

    def binary(self, node: Binary, scope: Scope) -> object:  # noqa: PLR0911, PLR0912 - one per operator
        op = node.op
        if op in ("&&", "||"):
            left = to_bool(self.eval(node.left, scope), f"left operand of {op}")
            if left == (op == "||"):
                return left
            return to_bool(self.eval(node.right, scope), f"right operand of {op}")
        a = self.eval(node.left, scope)
        b = self.eval(node.right, scope)
        if op == "==":
            return equal(a, b)
        if op == "!=":
            return not equal(a, b)
        x = to_num(a, f"left operand of {op}")
        y = to_num(b, f"right operand of {op}")
        if op == "+":
            return number(x + y)
        if op == "-":
            return number(x - y)
        if op == "*":
            if isinstance(x, int) and isinstance(y, int) and x.bit_length() + y.bit_length() > 1100:
                raise EvalError("number too large")
            return number(x * y)
        if op == "/":
            if y == 0:
                raise EvalError("division by zero")
            if isinstance(x, int) and isinstance(y, int) and x % y == 0:
                return number(x // y)
            return number(x / y)
        if op == "%":
            if y == 0:
                raise EvalError("modulo by zero")
            if isinstance(x, int) and isinstance(y, int):
                r = abs(x) % abs(y)
                return -r if x < 0 else r
            return number(math.fmod(x, y))
        comparisons = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}
        return comparisons[op]

    # --- constructors

    def object_cons(self, node: ObjectCons, scope: Scope) -> object:
        out: dict[str, object] = {}
        for key_node, value_node in node.items:
            key = self.eval(key_node, scope)
            if key is None or isinstance(key, list | dict):
                raise EvalError(f"an object key must be a string, not {_a_kind(key)}")
            name = to_str(key)
            if name in out:
                raise EvalError(f'the key "{name}" is set twice')
            out[name] = self.eval(value_node, scope)
        check_size(out, scope.ctx.budget)
        return out

    def iterate(self, collection: object, what: str) -> list[tuple[object, object]]:
        if isinstance(collection, list):
            return list(enumerate(collection))
        if isinstance(collection, dict):
            return [(k, collection[k]) for k in sorted(collection)]
        raise EvalError(f"{what} needs a list, set or map to iterate over, not {_a_kind(collection)}")

    def for_expr(self, node: ForExpr, scope: Scope) -> object:
        pairs = self.iterate(self.eval(node.collection, scope), "a for expression")
        items: list[object] = []
        mapping: dict[str, object] = {}
        for key, value in pairs:
            names = {node.value_var: value}
            if node.key_var:
                names[node.key_var] = key
            inner = scope.bind(names)
            if node.condition is not None and not to_bool(
                self.eval(node.condition, inner), "condition of a for expression"
            ):
                continue
            if node.key is None:
                items.append(self.eval(node.value, inner))
                continue
            k = self.eval(node.key, inner)
            if k is None or isinstance(k, list | dict):
                raise EvalError(f"a for expression's key must be a string, not {_a_kind(k)}")
            name = to_str(k)
            v = self.eval(node.value, inner)
            if node.group:
                group = mapping.setdefault(name, [])
                assert isinstance(group, list)
                group.append(v)
            elif name in mapping:
                raise EvalError(
                    f'the for expression gives the key "{name}" twice (add "..." to group values)'
                )
            else:
                mapping[name] = v
        result: object = items if node.key is None else mapping
        check_size(result, scope.ctx.budget)
        return result

    def splat(self, node: Splat, scope: Scope) -> object:
        source = self.eval(node.source, scope)
        if source is None:
            return []
        items = source if isinstance(source, list) else [source]  # a single value splats as a list of one
        return [self.eval(node.each, replace(scope, splat_item=item)) for item in items]

    # --- functions

    def call(self, node: Call, scope: Scope) -> object:
        name = node.name
        if name in _SPECIAL:
            return self.special(node, scope)
        if name in REFUSED:
            raise StaticError(f"{name}(): {REFUSED[name]}")
        if name not in FUNCTIONS:
            raise StaticError(_unknown("function", name, [*FUNCTIONS, *_SPECIAL]))
        fn, lo, hi = FUNCTIONS[name]
        args = [self.eval(arg, scope) for arg in node.args]
        if node.expand_final:
            if not args or not isinstance(args[-1], list):
                raise EvalError(f'{name}(): the argument before "..." must be a list')
            args = [*args[:-1], *args[-1]]
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
            raise EvalError(f"{name}() takes {want} argument{'' if want == '1' else 's'}, not {len(args)}")
        try:
            result = fn(scope.ctx, args)
        except EvalError as e:
            message = str(e)
            raise type(e)(message if message.startswith(name) else f"{name}(): {message}") from None
        except RecursionError:
            raise BudgetError(f"{name}(): the value is nested too deeply") from None
        except (OverflowError, ZeroDivisionError, ValueError, TypeError, MemoryError) as e:
            raise EvalError(f"{name}(): {e}") from None
        check_size(result, scope.ctx.budget)
        return result

    def special(self, node: Call, scope: Scope) -> object:
        name, args = node.name, node.args
        if node.expand_final:
            raise EvalError(f'{name}() does not take "..."')
        if name == "can":
            if len(args) != 1:
                raise EvalError("can() takes 1 argument")
            try:
                self.eval(args[0], scope)
            except (StaticError, BudgetError, RuntimeReference):
                raise
            except EvalError:
                return False
            return True
        if name == "try":
            if not args:
                raise EvalError("try() takes at least 1 argument")
            errors: list[str] = []
            for arg in args:
                try:
                    return self.eval(arg, scope)
                except (StaticError, BudgetError, RuntimeReference):
                    raise
                except EvalError as e:
                    errors.append(str(e))
            raise EvalError("try(): no argument could be evaluated: " + "; ".join(errors))
        if len(args) != 2:
            raise EvalError("convert() takes 2 arguments: a value and a type")
        return convert(self.eval(args[0], scope), type_from_ast(args[1]))


def _is_namespace_ref(node: Node) -> bool:
    return isinstance(node, Variable) and node.name in ("var", "local")


def _a_kind(v: object) -> str:
    k = kind(v)
    return "null" if k == "null" else ("an " if k[0] in "aeiou" else "a ") + k


def _unknown(what: str, name: str, known: Collection[str], suffix: str = "") -> str:
    near = difflib.get_close_matches(name, list(known), n=1)
    hint = f'; did you mean "{near[0]}{suffix}"?' if near else ""
    return f'unknown {what} "{name}{suffix}"{hint}'


def _text(node: Node) -> str:
    if isinstance(node, Variable):
        return node.name
    if isinstance(node, GetAttr):
        return f"{_text(node.target)}.{node.name}"
    if isinstance(node, Index) and isinstance(node.key, Literal):
        key = node.key.value
        return f"{_text(node.target)}[{key if isinstance(key, int) else chr(34) + str(key) + chr(34)}]"
    if isinstance(node, Index):
        return f"{_text(node.target)}[...]"
    return "..."
