"""The evaluator: walks a parsed template over Python data as Go's text/template does (dicts are
maps, lists and tuples are slices), within a step budget and a nesting bound."""

from __future__ import annotations

import inspect
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.gotemplate.builtins import BUILTINS, EXECUTE_TEMPLATE, truth
from agent.gotemplate.errors import Locator, TemplateError, TemplateExecError
from agent.gotemplate.gofmt import MISSING, fmt_v, go_quote, sorted_items, type_name
from agent.gotemplate.nodes import (
    ActionNode,
    BreakNode,
    ChainNode,
    CommandNode,
    ConstNode,
    ContinueNode,
    DotNode,
    FieldNode,
    IdentifierNode,
    IfNode,
    ListNode,
    NilNode,
    Node,
    PipeNode,
    RangeNode,
    TemplateNode,
    TextNode,
    VariableNode,
    WithNode,
)
from agent.gotemplate.objects import NO_FIELD, SCRATCH, GoObject, Scratch

NO_FINAL: Any = object()  # no value piped in from a previous command
FRAMES_PER_LEVEL = 6  # Python frames one level of nesting (control, paren, template call) may take
STACK_MARGIN = 120  # frames kept free for functions (JSON encoding, data sources) and error handling
MAX_TEMPLATE_DEPTH = 100_000  # Go's maxExecDepth
STR_STEP = 256  # a function result costs one step per this many characters


class _Break(BaseException):
    pass


class _Continue(BaseException):
    pass


class _WriteAbort(BaseException):
    def __init__(self, original: BaseException) -> None:
        super().__init__()
        self.original = original


def _stack_depth() -> int:
    depth = 0
    frame = sys._getframe(1)
    while frame is not None and depth < 100_000:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


def _size(value: Any) -> int:
    """What a lazily built `loop` range costs when a function or the printer walks it."""
    try:
        return len(value)
    except OverflowError:
        return sys.maxsize


def node_text(node: Node) -> str:  # noqa: PLR0911 - one form per node kind
    if isinstance(node, FieldNode):
        return "." + ".".join(node.fields)
    if isinstance(node, VariableNode):
        return node.name + "".join("." + f for f in node.fields)
    if isinstance(node, ConstNode):
        return go_quote(node.value) if isinstance(node.value, str) else node.text
    if isinstance(node, IdentifierNode):
        return node.name
    if isinstance(node, ChainNode):
        return node_text(node.node) + "".join("." + f for f in node.fields)
    if isinstance(node, DotNode):
        return "."
    if isinstance(node, NilNode):
        return "nil"
    return "(pipeline)"


class _Arity:
    __slots__ = ("max", "min")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.min, self.max = 0, -1
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.min = sum(1 for p in positional if p.default is p.empty)
        variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
        self.max = -1 if variadic else len(positional)


_ARITY: weakref.WeakKeyDictionary[Callable[..., Any], _Arity] = weakref.WeakKeyDictionary()


def arity(fn: Callable[..., Any]) -> _Arity:
    try:
        found = _ARITY.get(fn)
    except TypeError:  # not weak-referenceable: no cache
        return _Arity(fn)
    if found is None:
        found = _ARITY[fn] = _Arity(fn)
    return found


class Executor:
    def __init__(
        self,
        loc: Locator,
        trees: Mapping[str, ListNode],
        funcs: Mapping[str, Callable[..., Any]] | None,
        write: Callable[[str], Any] | None,
        missing_key_error: bool,
        max_steps: int,
    ) -> None:
        self.loc = loc
        self.trees = trees
        self.funcs: dict[str, Callable[..., Any]] = {**BUILTINS, **(funcs or {})}
        self.write = write
        self.capturing = 0
        self.missing_error = missing_key_error
        self.max_steps = max_steps
        self.steps = 0
        self.depth = 0
        self.tdepth = 0
        self.max_depth = 0
        self.vars: list[tuple[str, Any]] = []
        self.scratch: Scratch | None = None  # consul-template's scratchpad, one per run
        self.out: list[str] = []
        self.cur: Node = ListNode(0)

    # -- entry

    def run(self, root: ListNode, data: Any) -> str:
        free = sys.getrecursionlimit() - _stack_depth() - STACK_MARGIN
        self.max_depth = max(4, free // FRAMES_PER_LEVEL)
        dot = MISSING if data is None else data
        self.vars = [("$", dot)]
        original: BaseException | None = None
        try:
            self.walk(dot, root)
        except TemplateError:
            raise
        except _WriteAbort as abort:
            original = abort.original
        except (_Break, _Continue):
            raise self.fail(self.cur, "{{break}} or {{continue}} outside {{range}}") from None
        except RecursionError:
            raise self.fail(self.cur, "template nesting too deep for the interpreter's stack") from None
        except Exception as exc:
            raise self.fail(self.cur, f"internal error: {type(exc).__name__}: {exc}") from exc
        if original is not None:
            raise original
        return "".join(self.out)

    def fail(self, node: Node, reason: str) -> TemplateExecError:
        return self.loc.exec(node.pos, reason)

    def emit(self, s: str) -> None:
        self.out.append(s)
        if self.write is not None and not self.capturing:
            try:
                self.write(s)
            except BaseException as exc:
                raise _WriteAbort(exc) from None

    def tick(self, node: Node, cost: int = 1) -> None:
        self.steps += cost
        if self.steps > self.max_steps:
            raise self.fail(node, f"execution exceeded its budget of {self.max_steps} steps")

    def enter(self, node: Node) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise self.fail(node, f"nesting too deep: more than {self.max_depth} levels while executing")

    # -- statements

    def walk(self, dot: Any, node: Node) -> None:
        self.cur = node
        self.steps += 1
        if self.steps > self.max_steps:
            self.tick(node, 0)
        t = type(node)
        if t is TextNode:
            self.emit(node.text)  # type: ignore[attr-defined]
        elif t is ListNode:
            for child in node.nodes:  # type: ignore[attr-defined]
                self.walk(dot, child)
        elif t is ActionNode:
            pipe = node.pipe  # type: ignore[attr-defined]
            value = self.eval_pipeline(dot, pipe)
            if not pipe.decl:
                self.print_value(node, value)
        elif t is IfNode or t is WithNode:
            self.walk_if_with(dot, node, t is WithNode)  # type: ignore[arg-type]
        elif t is RangeNode:
            self.walk_range(dot, node)  # type: ignore[arg-type]
        elif t is TemplateNode:
            self.walk_template(dot, node)  # type: ignore[arg-type]
        elif t is BreakNode:
            raise _Break
        elif t is ContinueNode:
            raise _Continue
        else:
            raise self.fail(node, f"unknown node {t.__name__}")

    def print_value(self, node: Node, value: Any) -> None:
        if type(value) is range:
            self.tick(node, _size(value))
        if value is None or value is MISSING:
            self.emit("<no value>")
        elif callable(value) and not isinstance(value, dict | list | tuple | range | str):
            raise self.fail(node, f"can't print {node_text(node)} of type {type_name(value)}")
        else:
            self.emit(fmt_v(value))

    def walk_if_with(self, dot: Any, node: IfNode | WithNode, is_with: bool) -> None:
        self.enter(node)
        mark = len(self.vars)
        value = self.eval_pipeline(dot, node.pipe)
        if truth(value):
            self.walk(value if is_with else dot, node.body)
        elif node.else_body is not None:
            self.walk(dot, node.else_body)
        del self.vars[mark:]
        self.depth -= 1

    def _range_items(self, node: RangeNode, value: Any, nvars: int) -> Iterable[tuple[Any, Any]]:
        if isinstance(value, list | tuple | range | bytes | bytearray):
            return enumerate(value)
        if isinstance(value, dict):
            return sorted_items(value)
        if type(value) is int:
            if nvars > 1:
                raise self.fail(node, f"can't use {value} to iterate over more than one variable")
            return ((i, i) for i in range(value))
        if value is None or value is MISSING:
            return ()
        raise self.fail(node, f"range can't iterate over {fmt_v(value)}")

    def walk_range(self, dot: Any, node: RangeNode) -> None:
        self.enter(node)
        mark = len(self.vars)
        pipe = node.pipe
        value = NO_FINAL
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        decl = pipe.decl
        if not pipe.is_assign:
            self.vars.extend((name, value) for name in decl)
        ran = False
        depth = self.depth
        for key, elem in self._range_items(node, value, len(decl)):
            ran = True
            self.tick(node)
            if decl:
                if pipe.is_assign:
                    if len(decl) > 1:
                        self.set_var(node, decl[0], key)
                    self.set_var(node, decl[-1], elem)
                elif len(decl) > 1:
                    self.vars[mark] = (decl[0], key)
                    self.vars[mark + 1] = (decl[1], elem)
                else:
                    self.vars[mark] = (decl[0], elem)
            inner = len(self.vars)
            try:
                self.walk(elem, node.body)
            except _Continue:
                pass
            except _Break:
                self.depth = depth
                del self.vars[inner:]
                break
            self.depth = depth
            del self.vars[inner:]
        if not ran and node.else_body is not None:
            self.walk(dot, node.else_body)
        del self.vars[mark:]
        self.depth -= 1

    def call_template(self, node: Node, name: str, dot: Any) -> None:
        tree = self.trees.get(name)
        if tree is None:
            raise self.fail(node, f"no such template {go_quote(name)}")
        self.tdepth += 1
        if self.tdepth > MAX_TEMPLATE_DEPTH:
            raise self.fail(node, f"exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})")
        self.enter(node)
        saved = self.vars
        self.vars = [("$", dot)]
        self.walk(dot, tree)
        self.vars = saved
        self.depth -= 1
        self.tdepth -= 1

    def walk_template(self, dot: Any, node: TemplateNode) -> None:
        value = MISSING if node.pipe is None else self.eval_pipeline(dot, node.pipe)
        self.call_template(node, node.name, value)

    # -- variables

    def var_value(self, node: Node, name: str) -> Any:
        for i in range(len(self.vars) - 1, -1, -1):
            if self.vars[i][0] == name:
                return self.vars[i][1]
        raise self.fail(node, f"undefined variable: {name}")

    def set_var(self, node: Node, name: str, value: Any) -> None:
        for i in range(len(self.vars) - 1, -1, -1):
            if self.vars[i][0] == name:
                self.vars[i] = (name, value)
                return
        raise self.fail(node, f"undefined variable: {name}")

    # -- expressions

    def eval_pipeline(self, dot: Any, pipe: PipeNode) -> Any:
        value = NO_FINAL
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        for name in pipe.decl:
            if pipe.is_assign:
                self.set_var(pipe, name, value)
            else:
                self.vars.append((name, value))
        return value

    def not_a_function(self, args: list[Node], final: Any) -> None:
        if len(args) > 1 or final is not NO_FINAL:
            raise self.fail(args[0], f"can't give argument to non-function {node_text(args[0])}")

    def eval_command(self, dot: Any, cmd: CommandNode, final: Any) -> Any:  # noqa: PLR0911
        self.steps += 1
        first = cmd.args[0]
        t = type(first)
        if t is FieldNode:
            return self.eval_fields(dot, dot, first, first.fields, cmd.args, final)  # type: ignore[attr-defined]
        if t is IdentifierNode:
            return self.eval_function(dot, first, cmd.args, final)  # type: ignore[arg-type]
        if t is VariableNode:
            value = self.var_value(first, first.name)  # type: ignore[attr-defined]
            if not first.fields:  # type: ignore[attr-defined]
                self.not_a_function(cmd.args, final)
                return value
            return self.eval_fields(dot, value, first, first.fields, cmd.args, final)  # type: ignore[attr-defined]
        if t is ChainNode:
            value = self.eval_arg(dot, first.node)  # type: ignore[attr-defined]
            return self.eval_fields(dot, value, first, first.fields, cmd.args, final)  # type: ignore[attr-defined]
        self.not_a_function(cmd.args, final)
        if t is ConstNode:
            return first.value  # type: ignore[attr-defined]
        if t is PipeNode:
            return self.eval_paren(dot, first)  # type: ignore[arg-type]
        if t is DotNode:
            return dot
        raise self.fail(first, "nil is not a command")

    def eval_paren(self, dot: Any, pipe: PipeNode) -> Any:
        self.enter(pipe)
        value = self.eval_pipeline(dot, pipe)
        self.depth -= 1
        return value

    def eval_fields(
        self, dot: Any, receiver: Any, node: Node, fields: tuple[str, ...], args: list[Node], final: Any
    ) -> Any:
        """A field chain: map keys, or methods of a GoObject (the last one gets the command's
        arguments and the piped value, earlier ones none), as Go's evalFieldChain."""
        last = len(fields) - 1
        for i, name in enumerate(fields):
            if isinstance(receiver, GoObject):
                method = receiver.go_method(name)
                if method is not None:
                    margs, mfinal = (args, final) if i == last else (args[:1], NO_FINAL)
                    receiver = self.call(dot, node, name, method, margs, mfinal)
                    continue
            has_args = i == last and (len(args) > 1 or final is not NO_FINAL)
            receiver = self.eval_field(node, name, receiver, has_args)
        return receiver

    def eval_field(self, node: Node, name: str, receiver: Any, has_args: bool) -> Any:
        if receiver is MISSING:
            if self.missing_error:
                raise self.fail(node, f'nil data; no entry for key "{name}"')
            return MISSING
        if receiver is None:
            raise self.fail(node, f"nil pointer evaluating interface {{}}.{name}")
        if isinstance(receiver, dict):
            if has_args:
                raise self.fail(node, f"{name} is not a method but has arguments")
            try:
                return receiver[name]
            except KeyError:
                pass
            if self.missing_error:
                raise self.fail(node, f'map has no entry for key "{name}"') from None
            return MISSING
        if isinstance(receiver, GoObject) and (value := receiver.go_field(name)) is not NO_FIELD:
            if has_args:
                raise self.fail(node, f"{name} has arguments but cannot be invoked as function")
            return value
        raise self.fail(node, f"can't evaluate field {name} in type {type_name(receiver)}")

    def eval_arg(self, dot: Any, node: Node) -> Any:  # noqa: PLR0911 - one return per node kind
        t = type(node)
        if t is ConstNode:
            return node.value  # type: ignore[attr-defined]
        if t is DotNode:
            return dot
        if t is FieldNode:
            return self.eval_fields(dot, dot, node, node.fields, [node], NO_FINAL)  # type: ignore[attr-defined]
        if t is VariableNode:
            value = self.var_value(node, node.name)  # type: ignore[attr-defined]
            return self.eval_fields(dot, value, node, node.fields, [node], NO_FINAL)  # type: ignore[attr-defined]
        if t is PipeNode:
            return self.eval_paren(dot, node)  # type: ignore[arg-type]
        if t is IdentifierNode:
            return self.eval_function(dot, node, [node], NO_FINAL)  # type: ignore[arg-type]
        if t is ChainNode:
            value = self.eval_arg(dot, node.node)  # type: ignore[attr-defined]
            return self.eval_fields(dot, value, node, node.fields, [node], NO_FINAL)  # type: ignore[attr-defined]
        if t is NilNode:
            return None
        raise self.fail(node, f"can't handle {node_text(node)} as an argument")

    def eval_and_or(self, dot: Any, node: IdentifierNode, args: list[Node], final: Any) -> Any:
        n = len(args) - 1 + (final is not NO_FINAL)
        if n == 0:
            raise self.fail(node, f"wrong number of args for {node.name}: want at least 1 got 0")
        want = node.name == "or"
        value: Any = None
        for arg in args[1:]:
            value = self.eval_arg(dot, arg)
            if truth(value) == want:
                return value
        return final if final is not NO_FINAL else value

    def eval_function(self, dot: Any, node: IdentifierNode, args: list[Node], final: Any) -> Any:
        name = node.name
        fn = self.funcs.get(name)
        if fn is None:
            if name in ("and", "or"):
                return self.eval_and_or(dot, node, args, final)
            raise self.fail(node, f'function "{name}" not defined')
        return self.call(dot, node, name, fn, args, final)

    def call(
        self, dot: Any, node: Node, name: str, fn: Callable[..., Any], args: list[Node], final: Any
    ) -> Any:
        """Call a function or method with the command's arguments (args[0] is the callee)."""
        argv = [self.eval_arg(dot, a) for a in args[1:]]
        if final is not NO_FINAL:
            argv.append(final)
        argv = [None if a is MISSING else a for a in argv]
        for a in argv:
            if type(a) is range:
                self.tick(node, _size(a))
        if fn is EXECUTE_TEMPLATE:
            return self.execute_template(node, argv)
        self.check_arity(node, name, fn, len(argv))
        if fn is SCRATCH:
            if self.scratch is None:
                self.scratch = Scratch()
            return self.scratch
        try:
            result = fn(*argv)
        except TemplateError:
            raise
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            raise self.fail(node, f"error calling {name}: {reason}") from exc
        if isinstance(result, str | list | dict) and len(result) > STR_STEP:
            self.tick(node, len(result) // STR_STEP)
        return result

    def check_arity(self, node: Node, name: str, fn: Callable[..., Any], n: int) -> None:
        a = arity(fn)
        if a.max < 0 and n < a.min:
            raise self.fail(node, f"wrong number of args for {name}: want at least {a.min} got {n}")
        if a.max >= 0 and not a.min <= n <= a.max:
            want = str(a.max) if a.min == a.max else f"{a.min} to {a.max}"
            raise self.fail(node, f"wrong number of args for {name}: want {want} got {n}")

    def execute_template(self, node: Node, argv: list[Any]) -> str:
        if not 1 <= len(argv) <= 2 or not isinstance(argv[0], str):
            raise self.fail(node, "error calling executeTemplate: want a template name and at most one value")
        data = argv[1] if len(argv) == 2 and argv[1] is not None else MISSING
        saved_out = self.out
        self.out = []
        self.capturing += 1
        saved_depth = self.depth
        try:
            self.call_template(node, argv[0], data)
            return "".join(self.out)
        finally:
            self.out = saved_out
            self.capturing -= 1
            self.depth = saved_depth
