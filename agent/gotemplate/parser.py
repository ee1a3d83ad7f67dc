"""The parser of Go's text/template: builds the tree of the main template and of every
`define`d / `block` template, checking variables, function names and `break`/`continue` as Go does
at parse time."""

from __future__ import annotations

import re
from collections.abc import Collection

from agent.gotemplate.errors import Locator, TemplateSyntaxError
from agent.gotemplate.lexer import (
    ASSIGN,
    BOOL,
    CHAR,
    DECLARE,
    DOT,
    EOF,
    FIELD,
    IDENT,
    KEYWORD,
    LDELIM,
    LPAREN,
    NIL,
    NUMBER,
    PIPE,
    PUNCT,
    RDELIM,
    RPAREN,
    SPACE,
    STRING,
    TEXT,
    VAR,
    Lexer,
    Token,
)
from agent.gotemplate.nodes import (
    ActionNode,
    BranchNode,
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
    is_empty,
)

MAX_DEPTH = 100
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_OPERAND_START = frozenset({BOOL, CHAR, DOT, FIELD, IDENT, NUMBER, NIL, STRING, VAR, LPAREN})
_OCTAL = re.compile(r"0[0-7_]+")
_BRANCHES: dict[str, type[BranchNode]] = {"if": IfNode, "with": WithNode, "range": RangeNode}


class _End(Node):
    __slots__ = ()


class _Else(Node):
    """`{{else}}`, or `{{else if ...`/`{{else with ...` when `chain` names the keyword."""

    __slots__ = ("chain",)

    def __init__(self, pos: int, chain: str) -> None:
        super().__init__(pos)
        self.chain = chain


def describe(tok: Token) -> str:
    if tok.kind == EOF:
        return "EOF"
    if tok.kind == KEYWORD:
        return f"<{tok.val}>"
    if tok.kind == STRING:
        return f'"{tok.val}"'
    if tok.kind in (LDELIM, RDELIM, PUNCT):
        return f'"{tok.val}"'
    return f"{tok.kind} {tok.val!r}" if tok.kind in (IDENT, NUMBER, FIELD, VAR) else tok.kind


def parse_number(text: str) -> int | float | None:  # noqa: PLR0911 - Go's number rules, case by case
    """Go's number constant rules; None when the text is no number."""
    if text.endswith("i"):
        return None
    body = text.lstrip("+-")
    neg = text.startswith("-")
    hexa = body[:2] in ("0x", "0X")
    floaty = any(c in body for c in ".pP") if hexa else any(c in body for c in ".eE")
    if not floaty:
        value: int | None = None
        if _OCTAL.fullmatch(body) and "__" not in body and not body.endswith("_"):
            try:
                value = int(body[1:].lstrip("_"), 8)
            except ValueError:
                value = None
        if value is None:
            try:
                value = int(body, 0)
            except ValueError:
                try:
                    value = int(body, 10)
                except ValueError:
                    return None
        return -value if neg else value
    try:
        if hexa:
            if "__" in body or body.endswith("_"):
                return None
            f = float.fromhex(body.replace("_", ""))
        else:
            f = float(body)
    except (ValueError, OverflowError):
        return None
    if f in (float("inf"), float("-inf")):
        return None
    return -f if neg else f


class Parser:
    def __init__(
        self,
        text: str,
        loc: Locator,
        left: str,
        right: str,
        funcs: Collection[str] | None,
        builtins: Collection[str],
    ) -> None:
        self.loc = loc
        self.toks = Lexer(text, loc, left, right).tokens()
        self.i = 0
        self.vars: list[str] = ["$"]
        self.range_depth = 0
        self.depth = 0
        self.funcs = funcs
        self.builtins = builtins
        self.trees: dict[str, ListNode] = {}

    # -- token stream

    def next(self) -> Token:
        tok = self.toks[self.i]
        if tok.kind != EOF:
            self.i += 1
        return tok

    def peek(self) -> Token:
        return self.toks[self.i]

    def skip_spaces(self) -> None:
        while self.toks[self.i].kind == SPACE:
            self.i += 1

    def next_non_space(self) -> Token:
        self.skip_spaces()
        return self.next()

    def peek_non_space(self) -> Token:
        self.skip_spaces()
        return self.toks[self.i]

    def error(self, pos: int, reason: str) -> TemplateSyntaxError:
        return self.loc.syntax(pos, reason)

    def unexpected(self, tok: Token, context: str) -> TemplateSyntaxError:
        return self.error(tok.pos, f"unexpected {describe(tok)} in {context}")

    def expect(self, kind: str, context: str) -> Token:
        tok = self.next_non_space()
        if tok.kind != kind:
            raise self.unexpected(tok, context)
        return tok

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(
                pos, f"nesting too deep: more than {MAX_DEPTH} levels of actions and parentheses"
            )

    # -- structure

    def parse(self) -> ListNode:
        root = ListNode(0)
        while self.peek().kind != EOF:
            if self.peek().kind == LDELIM:
                save = self.i
                self.next()
                tok = self.next_non_space()
                if tok.kind == KEYWORD and tok.val == "define":
                    self.parse_define(tok)
                    continue
                self.i = save
            node = self.text_or_action()
            if isinstance(node, _End | _Else):
                raise self.error(
                    node.pos, f"unexpected {{{{{'end' if isinstance(node, _End) else 'else'}}}}}"
                )
            root.nodes.append(node)
        return root

    def add_tree(self, name: str, tree: ListNode, pos: int) -> None:
        old = self.trees.get(name)
        if old is None or is_empty(old):
            self.trees[name] = tree
        elif not is_empty(tree):
            raise self.error(pos, f'template: multiple definition of template "{name}"')

    def item_list(self, context: str) -> tuple[ListNode, Node]:
        out = ListNode(self.peek().pos)
        while True:
            if self.peek().kind == EOF:
                raise self.error(self.peek().pos, f"unexpected EOF in {context}")
            node = self.text_or_action()
            if isinstance(node, _End | _Else):
                return out, node
            out.nodes.append(node)

    def text_or_action(self) -> Node:
        tok = self.next()
        if tok.kind == TEXT:
            return TextNode(tok.pos, tok.val)
        if tok.kind == LDELIM:
            return self.action()
        raise self.unexpected(tok, "input")

    def action(self) -> Node:  # noqa: PLR0911 - one return per keyword
        tok = self.next_non_space()
        if tok.kind == KEYWORD:
            word = tok.val
            if word in _BRANCHES:
                return self.parse_control(word, tok.pos)
            if word == "end":
                self.expect(RDELIM, "end")
                return _End(tok.pos)
            if word == "else":
                nxt = self.peek_non_space()
                if nxt.kind == KEYWORD and nxt.val in ("if", "with"):
                    return _Else(tok.pos, nxt.val)
                self.expect(RDELIM, "else")
                return _Else(tok.pos, "")
            if word in ("break", "continue"):
                self.expect(RDELIM, f"{{{{{word}}}}}")
                if self.range_depth == 0:
                    raise self.error(tok.pos, f"{{{{{word}}}}} outside {{{{range}}}}")
                return BreakNode(tok.pos) if word == "break" else ContinueNode(tok.pos)
            if word == "template":
                return self.parse_template(tok)
            if word == "block":
                return self.parse_block(tok)
            raise self.unexpected(tok, "command")
        self.i -= 1
        return ActionNode(tok.pos, self.pipeline("command", RDELIM))

    def parse_control(self, kind: str, pos: int) -> Node:
        self.enter(pos)
        mark = len(self.vars)
        pipe = self.pipeline(kind, RDELIM)
        if kind == "range":
            self.range_depth += 1
        body, marker = self.item_list(kind)
        if kind == "range":
            self.range_depth -= 1
        else_body = None
        if isinstance(marker, _Else):
            if marker.chain:
                if marker.chain != kind or kind == "range":
                    raise self.error(marker.pos, f"unexpected {{{{else {marker.chain}}}}} in {kind}")
                kw = self.next_non_space()
                else_body = ListNode(kw.pos, [self.parse_control(kind, kw.pos)])
            else:
                else_body, end = self.item_list(kind)
                if not isinstance(end, _End):
                    raise self.error(end.pos, "expected end; found {{else}}")
        del self.vars[mark:]
        self.depth -= 1
        return _BRANCHES[kind](pos, pipe, body, else_body)

    def template_name(self, context: str) -> Token:
        tok = self.next_non_space()
        if tok.kind != STRING:
            raise self.unexpected(tok, context)
        return tok

    def parse_template(self, kw: Token) -> Node:
        name = self.template_name("template clause")
        pipe = None
        if self.peek_non_space().kind != RDELIM:
            pipe = self.pipeline("template clause", RDELIM)
        else:
            self.next_non_space()
        return TemplateNode(kw.pos, name.val, pipe)

    def _sub_tree(self, context: str) -> ListNode:
        saved = (self.vars, self.range_depth)
        self.vars, self.range_depth = ["$"], 0
        body, end = self.item_list(context)
        if not isinstance(end, _End):
            raise self.error(end.pos, f"unexpected {{{{else}}}} in {context}")
        self.vars, self.range_depth = saved
        return body

    def parse_block(self, kw: Token) -> Node:
        self.enter(kw.pos)
        name = self.template_name("block clause")
        pipe = self.pipeline("block clause", RDELIM)
        self.add_tree(name.val, self._sub_tree("block clause"), kw.pos)
        self.depth -= 1
        return TemplateNode(kw.pos, name.val, pipe)

    def parse_define(self, kw: Token) -> None:
        name = self.template_name("define clause")
        self.expect(RDELIM, "define clause")
        self.add_tree(name.val, self._sub_tree("define clause"), kw.pos)

    # -- pipelines

    def pipeline(self, context: str, end: str) -> PipeNode:
        pos = self.peek_non_space().pos
        decl: list[str] = []
        is_assign = False
        while self.peek_non_space().kind == VAR:
            save = self.i
            var = self.next()
            nxt = self.peek_non_space()
            if nxt.kind in (DECLARE, ASSIGN):
                self.next()
                is_assign = nxt.kind == ASSIGN
                if is_assign and var.val not in self.vars:
                    raise self.error(var.pos, f"undefined variable {var.val!r}")
                decl.append(var.val)
                self.vars.append(var.val)
                break
            if nxt.kind == PUNCT and nxt.val == ",":
                self.next()
                decl.append(var.val)
                self.vars.append(var.val)
                if context != "range" or len(decl) > 1:
                    raise self.error(nxt.pos, f"too many declarations in {context}")
                if self.peek_non_space().kind != VAR:
                    raise self.error(nxt.pos, "range can only initialize variables")
                continue
            if decl:
                raise self.unexpected(nxt, context)
            self.i = save
            break
        pipe = PipeNode(pos, decl, is_assign, [])
        while True:
            tok = self.next_non_space()
            if tok.kind == end:
                self.check_pipeline(pipe, context, tok)
                return pipe
            if tok.kind in _OPERAND_START:
                self.i -= 1
                pipe.cmds.append(self.command())
            else:
                raise self.unexpected(tok, context)

    def check_pipeline(self, pipe: PipeNode, context: str, tok: Token) -> None:
        if not pipe.cmds:
            raise self.error(tok.pos, f"missing value for {context}")
        for i, cmd in enumerate(pipe.cmds[1:]):
            first = cmd.args[0]
            if isinstance(first, ConstNode | DotNode | NilNode):
                raise self.error(first.pos, f"non executable command in pipeline stage {i + 2}")

    def command(self) -> CommandNode:
        cmd = CommandNode(self.peek_non_space().pos, [])
        while True:
            self.skip_spaces()
            op = self.operand()
            if op is not None:
                cmd.args.append(op)
            tok = self.next()
            if tok.kind == SPACE:
                continue
            if tok.kind in (RDELIM, RPAREN):
                self.i -= 1
            elif tok.kind != PIPE:
                raise self.unexpected(tok, "operand")
            break
        if not cmd.args:
            raise self.error(cmd.pos, "empty command")
        return cmd

    def operand(self) -> Node | None:
        node = self.term()
        if node is None or self.peek().kind != FIELD:
            return node
        fields: list[str] = []
        while self.peek().kind == FIELD:
            fields.append(self.next().val)
        if isinstance(node, FieldNode):
            return FieldNode(node.pos, node.fields + tuple(fields))
        if isinstance(node, VariableNode):
            return VariableNode(node.pos, node.name, node.fields + tuple(fields))
        if isinstance(node, ConstNode | NilNode | DotNode):
            raise self.error(node.pos, "unexpected . after term")
        return ChainNode(node.pos, node, tuple(fields))

    def undefined(self, tok: Token) -> TemplateSyntaxError:
        if tok.val.startswith("sprig_"):
            return self.error(
                tok.pos,
                f'function "{tok.val}" not defined: the sprig function "{tok.val[6:]}" is not '
                "supported by this agent",
            )
        return self.error(tok.pos, f'function "{tok.val}" not defined')

    def term(self) -> Node | None:  # noqa: PLR0911 - one return per term kind
        tok = self.next()
        kind = tok.kind
        if kind == IDENT:
            if self.funcs is not None and tok.val not in self.funcs and tok.val not in self.builtins:
                raise self.undefined(tok)
            return IdentifierNode(tok.pos, tok.val)
        if kind == DOT:
            return DotNode(tok.pos)
        if kind == NIL:
            return NilNode(tok.pos)
        if kind == VAR:
            if tok.val not in self.vars:
                raise self.error(tok.pos, f'undefined variable "{tok.val}"')
            return VariableNode(tok.pos, tok.val)
        if kind == FIELD:
            return FieldNode(tok.pos, (tok.val,))
        if kind in (BOOL, CHAR, STRING):
            return ConstNode(tok.pos, tok.val, str(tok.val))
        if kind == NUMBER:
            value = parse_number(tok.val)
            if value is None:
                raise self.error(tok.pos, f"illegal number syntax: {tok.val!r}")
            if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
                raise self.error(tok.pos, f"number out of the int64 range: {tok.val}")
            return ConstNode(tok.pos, value, tok.val)
        if kind == LPAREN:
            self.enter(tok.pos)
            pipe = self.pipeline("parenthesized pipeline", RPAREN)
            self.depth -= 1
            return pipe
        self.i -= 1 if kind != EOF else 0
        return None


def parse_trees(
    text: str, loc: Locator, left: str, right: str, funcs: Collection[str] | None, builtins: Collection[str]
) -> tuple[ListNode, dict[str, ListNode]]:
    parser = Parser(text, loc, left, right, funcs, builtins)
    root = parser.parse()
    return root, parser.trees
