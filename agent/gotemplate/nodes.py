"""The parse tree of a template, as Go's text/template/parse builds it. `pos` is the character
offset of the node in the template text."""

from __future__ import annotations

from typing import Any


class Node:
    __slots__ = ("pos",)

    def __init__(self, pos: int) -> None:
        self.pos = pos


class ListNode(Node):
    __slots__ = ("nodes",)

    def __init__(self, pos: int, nodes: list[Node] | None = None) -> None:
        super().__init__(pos)
        self.nodes: list[Node] = nodes if nodes is not None else []


class TextNode(Node):
    __slots__ = ("text",)

    def __init__(self, pos: int, text: str) -> None:
        super().__init__(pos)
        self.text = text


class CommandNode(Node):
    __slots__ = ("args",)

    def __init__(self, pos: int, args: list[Node]) -> None:
        super().__init__(pos)
        self.args = args


class PipeNode(Node):
    """`$x := a | b c`: the declared (or assigned) variables and the commands."""

    __slots__ = ("cmds", "decl", "is_assign")

    def __init__(self, pos: int, decl: list[str], is_assign: bool, cmds: list[CommandNode]) -> None:
        super().__init__(pos)
        self.decl = decl
        self.is_assign = is_assign
        self.cmds = cmds


class ActionNode(Node):
    __slots__ = ("pipe",)

    def __init__(self, pos: int, pipe: PipeNode) -> None:
        super().__init__(pos)
        self.pipe = pipe


class IdentifierNode(Node):
    """A function name."""

    __slots__ = ("name",)

    def __init__(self, pos: int, name: str) -> None:
        super().__init__(pos)
        self.name = name


class VariableNode(Node):
    """`$x.A.B`: a variable and the fields after it."""

    __slots__ = ("fields", "name")

    def __init__(self, pos: int, name: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(pos)
        self.name = name
        self.fields = fields


class FieldNode(Node):
    """`.A.B`: fields of dot."""

    __slots__ = ("fields",)

    def __init__(self, pos: int, fields: tuple[str, ...]) -> None:
        super().__init__(pos)
        self.fields = fields


class ChainNode(Node):
    """`(pipe).A.B` or `ident.A`: fields of a term's value."""

    __slots__ = ("fields", "node")

    def __init__(self, pos: int, node: Node, fields: tuple[str, ...]) -> None:
        super().__init__(pos)
        self.node = node
        self.fields = fields


class DotNode(Node):
    __slots__ = ()


class NilNode(Node):
    __slots__ = ()


class ConstNode(Node):
    """A bool, number, string or character constant."""

    __slots__ = ("text", "value")

    def __init__(self, pos: int, value: Any, text: str) -> None:
        super().__init__(pos)
        self.value = value
        self.text = text


class BranchNode(Node):
    __slots__ = ("body", "else_body", "pipe")

    def __init__(self, pos: int, pipe: PipeNode, body: ListNode, else_body: ListNode | None) -> None:
        super().__init__(pos)
        self.pipe = pipe
        self.body = body
        self.else_body = else_body


class IfNode(BranchNode):
    __slots__ = ()


class WithNode(BranchNode):
    __slots__ = ()


class RangeNode(BranchNode):
    __slots__ = ()


class BreakNode(Node):
    __slots__ = ()


class ContinueNode(Node):
    __slots__ = ()


class TemplateNode(Node):
    """`{{template "name" pipe}}`."""

    __slots__ = ("name", "pipe")

    def __init__(self, pos: int, name: str, pipe: PipeNode | None) -> None:
        super().__init__(pos)
        self.name = name
        self.pipe = pipe


def is_empty(tree: ListNode) -> bool:
    """Go's IsEmptyTree: only whitespace text."""
    return all(isinstance(n, TextNode) and not n.text.strip() for n in tree.nodes)
