"""The AST of HCL2 expressions and string templates (hashicorp/hcl's hclsyntax), as the parser
(agent.jobspec.hclexpr) builds it and the evaluator (agent.jobspec.hcleval) walks it; the parse error;
a template's parts nested once their strip markers are applied."""

from __future__ import annotations

from dataclasses import dataclass


class ParseError(Exception):
    """The expression text is not valid HCL; `str(e)` is the message, `reason` the same without where it
    is, `pos` the offset in the parsed text (None when unknown)."""

    def __init__(self, message: str, *, pos: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.pos = pos
        self.reason = message if reason is None else reason


# --- the AST --------------------------------------------------------------------------------------------


class Node:
    __slots__ = ()


@dataclass(frozen=True)
class Literal(Node):
    value: object


@dataclass(frozen=True)
class Variable(Node):
    """A root name: `var`, `local`, an iterator, or a runtime root (`attr`, `NOMAD_ALLOC_ID`)."""

    name: str


@dataclass(frozen=True)
class GetAttr(Node):
    target: Node
    name: str


@dataclass(frozen=True)
class Index(Node):
    target: Node
    key: Node


@dataclass(frozen=True)
class SplatItem(Node):
    """The current element inside a splat's `each`."""


@dataclass(frozen=True)
class Splat(Node):
    source: Node
    each: Node  # applied to every element (SplatItem stands for it)


@dataclass(frozen=True)
class Call(Node):
    name: str
    args: tuple[Node, ...]
    expand_final: bool = False


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Conditional(Node):
    condition: Node
    true: Node
    false: Node


@dataclass(frozen=True)
class TupleCons(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class ObjectCons(Node):
    items: tuple[tuple[Node, Node], ...]


@dataclass(frozen=True)
class ForExpr(Node):
    key_var: str | None
    value_var: str
    collection: Node
    key: Node | None  # None: a tuple `[for ...]`; set: an object `{for ... : k => v}`
    value: Node
    condition: Node | None
    group: bool = False


@dataclass(frozen=True)
class Parens(Node):
    inner: Node


@dataclass(frozen=True)
class Interpolation(Node):
    expr: Node
    source: str  # the expression's text, for `${...}` kept verbatim for run time


@dataclass(frozen=True)
class TemplateIf(Node):
    condition: Node
    then: tuple[Node, ...]
    otherwise: tuple[Node, ...]


@dataclass(frozen=True)
class TemplateFor(Node):
    key_var: str | None
    value_var: str
    collection: Node
    body: tuple[Node, ...]


@dataclass(frozen=True)
class Template(Node):
    parts: tuple[Node, ...]  # Literal(str), Interpolation, TemplateIf, TemplateFor


def is_traversal(node: Node) -> bool:
    """A root name followed only by `.attr` and constant `[key]` steps."""
    while True:
        if isinstance(node, Variable):
            return True
        if isinstance(node, GetAttr) or (isinstance(node, Index) and isinstance(node.key, Literal)):
            node = node.target
        else:
            return False


def root_name(node: Node) -> str | None:
    while isinstance(node, GetAttr | Index):
        node = node.target
    return node.name if isinstance(node, Variable) else None


@dataclass
class Strip:
    """A template part with its strip markers, before stripping is applied."""

    kind: str  # "text", "interp", "if", "else", "endif", "for", "endfor"
    node: Node | None = None
    left: bool = False
    right: bool = False
    key_var: str | None = None
    value_var: str = ""
    text: str = ""


def apply_strips(flat: list[Strip]) -> None:
    for i, part in enumerate(flat):
        if part.kind == "text":
            continue
        if part.left and i > 0 and flat[i - 1].kind == "text":
            flat[i - 1].text = flat[i - 1].text.rstrip(" \t\r\n")
        if part.right and i + 1 < len(flat) and flat[i + 1].kind == "text":
            flat[i + 1].text = flat[i + 1].text.lstrip(" \t\r\n")


def nest(flat: list[Strip], i: int, stop: tuple[str, ...]) -> tuple[list[Node], int]:
    """Template parts from flat[i:] up to one of the `stop` directives (returned index points at it)."""
    out: list[Node] = []
    while i < len(flat):
        part = flat[i]
        if part.kind in stop:
            return out, i
        if part.kind == "text":
            if part.text:
                out.append(Literal(part.text))
            i += 1
        elif part.kind == "interp":
            assert part.node is not None
            out.append(part.node)
            i += 1
        elif part.kind == "if":
            assert part.node is not None
            then, i = nest(flat, i + 1, ("else", "endif"))
            otherwise: list[Node] = []
            if i < len(flat) and flat[i].kind == "else":
                otherwise, i = nest(flat, i + 1, ("endif",))
            if i >= len(flat) or flat[i].kind != "endif":
                raise ParseError("%{ if } without a matching %{ endif }")
            out.append(TemplateIf(part.node, tuple(then), tuple(otherwise)))
            i += 1
        elif part.kind == "for":
            assert part.node is not None
            body, i = nest(flat, i + 1, ("endfor",))
            if i >= len(flat):
                raise ParseError("%{ for } without a matching %{ endfor }")
            out.append(TemplateFor(part.key_var, part.value_var, part.node, tuple(body)))
            i += 1
        else:
            raise ParseError(f"%{{ {part.kind} }} without a matching opening directive")
    if stop:
        raise ParseError(f"%{{ {'if' if 'endif' in stop else 'for'} }} without a matching %{{ {stop[-1]} }}")
    return out, i
