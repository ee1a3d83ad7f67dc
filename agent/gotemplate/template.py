"""The public face: `parse` a template once, `execute` it many times, and list the functions it
calls (`function_calls`) so a caller can refuse some before running anything."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, NamedTuple

from agent.gotemplate.builtins import BUILTIN_NAMES
from agent.gotemplate.errors import Locator, TemplateError, TemplateSyntaxError
from agent.gotemplate.execute import Executor
from agent.gotemplate.nodes import (
    ActionNode,
    BranchNode,
    ChainNode,
    CommandNode,
    ConstNode,
    IdentifierNode,
    ListNode,
    Node,
    PipeNode,
    TemplateNode,
)
from agent.gotemplate.parser import parse_trees

DEFAULT_MAX_STEPS = 1_000_000


class Template:
    """A parsed template: the main tree plus every `define`d or `block` template by name."""

    def __init__(self, name: str, root: ListNode, trees: dict[str, ListNode], loc: Locator) -> None:
        self.name = name
        self.root = root
        self.trees = trees
        self._loc = loc

    def defined_templates(self) -> list[str]:
        return sorted(self.trees)

    def execute(
        self,
        data: Any = None,
        funcs: Mapping[str, Callable[..., Any]] | None = None,
        write: Callable[[str], Any] | None = None,
        missing_key_error: bool = False,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> str:
        """Render with `data` as dot. Raises TemplateExecError; exceptions from `write` pass through."""
        trees = dict(self.trees)
        trees.setdefault(self.name, self.root)
        ex = Executor(self._loc, trees, funcs, write, missing_key_error, max_steps)
        return ex.run(self.root, data)


def parse(
    text: str,
    name: str = "template",
    left_delim: str = "{{",
    right_delim: str = "}}",
    funcs: Collection[str] | None = None,
) -> Template:
    """Parse Go text/template source. With `funcs`, a function name outside it and Go's builtins is
    a syntax error (as Go checks at parse time); without, any identifier parses."""
    loc = Locator(name, text)
    try:
        root, trees = parse_trees(text, loc, left_delim, right_delim, funcs, BUILTIN_NAMES)
    except TemplateError:
        raise
    except RecursionError:
        raise loc.syntax(0, "template nesting too deep for the parser's stack") from None
    except Exception as exc:
        raise TemplateSyntaxError(name, 1, 1, f"internal error: {type(exc).__name__}: {exc}") from exc
    return Template(name, root, trees, loc)


class Call(NamedTuple):
    """A function used in a template: its constant string arguments (None where not constant),
    the value piped into it included as the last argument, and its 1-based position."""

    name: str
    args: tuple[str | None, ...]
    line: int
    col: int


def _const_str(node: Node) -> str | None:
    if isinstance(node, ConstNode) and isinstance(node.value, str):
        return node.value
    return None


def _piped(prev: CommandNode) -> str | None:
    return _const_str(prev.args[0]) if len(prev.args) == 1 else None


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, ListNode):
        yield from node.nodes
    elif isinstance(node, ActionNode):
        yield node.pipe
    elif isinstance(node, BranchNode):
        yield node.pipe
        yield node.body
        if node.else_body is not None:
            yield node.else_body
    elif isinstance(node, TemplateNode) and node.pipe is not None:
        yield node.pipe
    elif isinstance(node, ChainNode):
        yield node.node


def _calls(node: Node, loc: Locator, out: list[Call]) -> None:
    if isinstance(node, PipeNode):
        for i, cmd in enumerate(node.cmds):
            head, rest = cmd.args[0], cmd.args[1:]
            if isinstance(head, IdentifierNode):
                args = tuple(_const_str(a) for a in rest)
                if i > 0:
                    args += (_piped(node.cmds[i - 1]),)
                out.append(Call(head.name, args, *loc.line_col(head.pos)))
            else:
                _calls(head, loc, out)
            for arg in rest:
                _calls(arg, loc, out)
        return
    if isinstance(node, IdentifierNode):
        out.append(Call(node.name, (), *loc.line_col(node.pos)))
        return
    for child in _children(node):
        _calls(child, loc, out)


def function_calls(tpl: Template) -> list[Call]:
    """Every function identifier used in the template and its defined templates, in text order."""
    out: list[Call] = []
    _calls(tpl.root, tpl._loc, out)
    for tree in tpl.trees.values():
        _calls(tree, tpl._loc, out)
    return sorted(set(out), key=lambda c: (c.line, c.col, c.name))
