"""HCL's native syntax, the structural layer: a body of attributes and blocks (hashicorp/hcl's hclsyntax).

    body = parse_body(text, report)      # a SyntaxBody, or None with the syntax error recorded

A body is a sequence of items, each on its own line:

- an attribute, `name = expression`, ended by a new line (or by the `}` closing a one-line block, or the
  end of the text). Expressions are parsed by agent.jobspec.hclexpr straight from the text
  (`parse_expression_at`, where new lines end the expression outside brackets); the common constant
  values (a string without escapes or `${`, a whole number, true/false/null) are read by one regular
  expression without it;
- a block, `type label... { body }`, labels quoted strings (without `${...}`) or names; a one-line block
  `port "http" { static = 80 }` holds its attribute on the line of its braces.

Comments (`#`, `//`, `/* */`) go anywhere spaces go. Heredocs (`<<EOT`, `<<-EOT`) are expressions: their
closing marker is alone on its line, maybe indented and followed by spaces or tabs.

The scanner is a handful of compiled regular expressions matched at the current position (`_SPACE`
skips spaces and comments, `_NAME`, `_LABEL` and `_CONSTANT` read tokens whole); `tokens()` lists the
structural tokens for tests and tools.

Problems: a syntax error stops the parse and is one problem, "HCL syntax error at line L, column C:
unexpected X; expected Y", at the path "". An attribute set twice, an attribute and a block of the same
name, and an object key written twice in an attribute's object are problems "set more than once" at their
path (`job.example.group.web.count`); the parse goes on and the later value wins. Blocks nest at most
MAX_DEPTH levels (a syntax error beyond); expressions have hclexpr's own bound. Nothing raises but
HCLSyntaxError inside, caught here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.jobspec.hclast import Interpolation, Literal, Node, ObjectCons, ParseError, Template, TupleCons
from agent.jobspec.hclexpr import parse_expression_at, parse_template
from agent.jobspec.tree import Report, join

__all__ = [
    "MAX_DEPTH",
    "Attribute",
    "HCLSyntaxError",
    "SyntaxBlock",
    "SyntaxBody",
    "Token",
    "line_of",
    "parse_body",
    "tokens",
]

MAX_DEPTH = 64  # nesting of blocks (the jobspec's Limits.max_depth)

_SPACE = re.compile(r"(?:[ \t]+|#[^\n]*|//[^\n]*|/\*.*?\*/)*", re.S)  # within a line
_SPACE_NL = re.compile(r"(?:[ \t\n]+|#[^\n]*|//[^\n]*|/\*.*?\*/)*", re.S)  # across lines
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_LABEL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_PLAIN_LABEL = re.compile(r'"([^"\\\n$%]*)"')
# a constant value alone on its line: "text" (no escape, no ${ or %{), a whole number, true, false, null
_CONSTANT = re.compile(
    r'(?:"([^"\\\n$%]*)"|(-?[0-9]{1,300})(?![0-9.eE])|(true|false|null)(?![A-Za-z0-9_-]))'
    r"[ \t]*(?=[\n}#]|//|\Z)"
)
_KEYWORDS: dict[str, object] = {"true": True, "false": False, "null": None}


class HCLSyntaxError(Exception):
    """The text is not HCL; `str(e)` is the problem as reported."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(f"HCL syntax error at line {line}, column {column}: {message}")
        self.line = line
        self.column = column
        self.message = message


@dataclass(frozen=True, slots=True)
class Attribute:
    name: str
    expr: Node  # a Literal, a Template (a string with ${...}, a heredoc), else Interpolation(expr, source)
    pos: int  # of its name in the (CRLF-normalised) text; line_of(text, pos) for its line


@dataclass(frozen=True, slots=True)
class SyntaxBlock:
    type: str
    labels: tuple[str, ...]
    body: SyntaxBody
    pos: int


@dataclass(frozen=True, slots=True)
class SyntaxBody:
    items: tuple[Attribute | SyntaxBlock, ...]

    def attributes(self) -> dict[str, Attribute]:
        """The attributes by name (the last one of a name written twice)."""
        return {item.name: item for item in self.items if isinstance(item, Attribute)}

    def blocks(self, kind: str | None = None) -> list[SyntaxBlock]:
        return [i for i in self.items if isinstance(i, SyntaxBlock) and (kind is None or i.type == kind)]


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "name", "label", "=", "{", "}", "newline", "expression"
    text: str  # the token's source
    pos: int


def parse_body(text: str, report: Report) -> SyntaxBody | None:
    """The text's top-level body, or None with the syntax error recorded at ""."""
    parser = _Parser(_normalise(text), report)
    try:
        return parser.body("", 0, None)
    except HCLSyntaxError as e:
        report.error("", str(e))
    except RecursionError:  # not expected (depths are bounded): a problem all the same
        report.error("", "HCL syntax error: the text is nested too deeply")
    return None


def tokens(text: str) -> list[Token]:
    """The structural tokens of a body's text (an attribute's value is one "expression" token); raises
    HCLSyntaxError."""
    out: list[Token] = []
    _Parser(_normalise(text), Report(), out).body("", 0, None)
    return out


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n") if "\r" in text else text


def _describe(text: str, pos: int) -> str:  # noqa: PLR0911 - one return per kind
    """What stands at `pos`, for "unexpected ...": a token's kind or text."""
    if pos >= len(text):
        return "end of input"
    c = text[pos]
    if c == "\n":
        return "new line"
    m = _NAME.match(text, pos)
    if m is not None:
        return f'"{m.group()[:30]}"'
    if c == '"':
        return "a quoted string"
    if text.startswith("<<", pos):
        return "a heredoc"
    if c.isprintable() and c not in "'\\":
        return f'"{c}"'
    return f"character {c!r}"


class _Parser:
    def __init__(self, text: str, report: Report, out: list[Token] | None = None) -> None:
        self.text = text
        self.report = report
        self.out = out  # tokens, when listing them

    def error(self, pos: int, message: str) -> HCLSyntaxError:
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return HCLSyntaxError(line, column, message)

    def unexpected(self, pos: int, expected: str) -> HCLSyntaxError:
        return self.error(pos, f"unexpected {_describe(self.text, pos)}; expected {expected}")

    def token(self, kind: str, start: int, end: int) -> None:
        if self.out is not None:
            self.out.append(Token(kind, self.text[start:end], start))

    def skip(self, pos: int, *, newlines: bool) -> int:
        m = (_SPACE_NL if newlines else _SPACE).match(self.text, pos)
        end = pos if m is None else m.end()  # never None: the pattern matches the empty string
        if self.text.startswith("/*", end):
            raise self.error(end, "unterminated comment (/* without */)")
        if self.out is not None and newlines and "\n" in self.text[pos:end]:
            self.token("newline", pos, end)
        return end

    # --- bodies

    def body(self, path: str, depth: int, opening: int | None) -> SyntaxBody:
        """Items up to the end of the text (`opening` None) or the `}` closing the `{` at `opening`;
        `self.pos` ends after that `}`."""
        text = self.text
        items: list[Attribute | SyntaxBlock] = []
        attributes: set[str] = set()
        block_types: set[str] = set()
        pos = 0 if opening is None else opening + 1
        while True:
            pos = self.skip(pos, newlines=True)
            if pos >= len(text):
                if opening is not None:
                    raise self.unexpected(pos, '"}"')
                self.pos = pos
                return SyntaxBody(tuple(items))
            if text[pos] == "}":
                if opening is None:
                    raise self.unexpected(pos, "an attribute or a block")
                self.token("}", pos, pos + 1)
                self.pos = pos + 1
                return SyntaxBody(tuple(items))
            m = _NAME.match(text, pos)
            if m is None:
                expected = "an attribute or a block" + ("" if opening is None else ' or "}"')
                raise self.unexpected(pos, expected)
            name = m.group()
            start = pos
            self.token("name", pos, m.end())
            pos = self.skip(m.end(), newlines=False)
            if text.startswith("=", pos) and not text.startswith("==", pos):
                self.token("=", pos, pos + 1)
                attribute, pos = self.attribute(name, pos + 1, start, join(path, name))
                if name in attributes or name in block_types:
                    self.report.error(join(path, name), "set more than once")
                attributes.add(name)
                items.append(attribute)
            else:
                block = self.block(name, pos, start, path, depth)
                if name in attributes:
                    self.report.error(join(path, name), "set more than once (as an attribute and a block)")
                block_types.add(name)
                items.append(block)
                pos = self.pos
            pos = self.end_of_item(pos)

    def end_of_item(self, pos: int) -> int:
        """After an attribute or a block: a new line, the end of the text, or a closing `}` (kept)."""
        pos = self.skip(pos, newlines=False)
        if pos >= len(self.text) or self.text[pos] == "}":
            return pos
        if self.text[pos] == "\n":
            return pos
        raise self.unexpected(pos, "a new line")

    def attribute(self, name: str, pos: int, start: int, path: str) -> tuple[Attribute, int]:
        text = self.text
        pos = self.skip(pos, newlines=False)
        m = _CONSTANT.match(text, pos)
        if m is not None:
            string, number, keyword = m.groups()
            value: object = string if string is not None else int(number) if number is not None else None
            if keyword is not None:
                value = _KEYWORDS[keyword]
            end = m.end()
            while text[end - 1] in " \t":
                end -= 1
            self.token("expression", pos, end)
            return Attribute(name, Literal(value), start), end
        if pos >= len(text) or text[pos] == "\n":
            raise self.unexpected(pos, "an expression")
        try:
            node, end = parse_expression_at(text, pos)
        except ParseError as e:
            where = e.pos if e.pos is not None else pos
            reason = e.reason
            if reason.startswith("unexpected character") or reason.startswith("expected an expression"):
                reason = f"unexpected {_describe(text, where)}; expected an expression"
            elif reason.startswith("expected"):
                reason = f"unexpected {_describe(text, where)}; {reason}"
            raise self.error(where, reason) from None
        self.token("expression", pos, end)
        if not isinstance(node, Literal | Template):
            node = Interpolation(node, text[pos:end])
        _duplicate_keys(node, path, self.report)
        return Attribute(name, node, start), end

    def block(self, kind: str, pos: int, start: int, path: str, depth: int) -> SyntaxBlock:
        text = self.text
        labels: list[str] = []
        while True:
            if text.startswith("{", pos):
                break
            if text.startswith('"', pos):
                label, end = self.label(pos)
                labels.append(label)
                self.token("label", pos, end)
                pos = self.skip(end, newlines=False)
                continue
            m = _NAME.match(text, pos)
            if m is None:
                expected = '"{" or a block label' if labels else '"=" or a block'
                raise self.unexpected(pos, expected)
            labels.append(m.group())
            self.token("label", pos, m.end())
            pos = self.skip(m.end(), newlines=False)
        if depth >= MAX_DEPTH:
            raise self.error(pos, f"blocks nested more than {MAX_DEPTH} levels deep")
        self.token("{", pos, pos + 1)
        bpath = ".".join([path, kind, *labels]) if path else ".".join([kind, *labels])
        body = self.body(bpath, depth + 1, pos)
        return SyntaxBlock(kind, tuple(labels), body, start)

    def label(self, pos: int) -> tuple[str, int]:
        m = _PLAIN_LABEL.match(self.text, pos)
        if m is not None:
            return m.group(1), m.end()
        m = _LABEL.match(self.text, pos)
        if m is None:
            raise self.error(pos, "unterminated block label (a quoted string ends on its line)")
        try:
            template = parse_template(m.group())
        except ParseError as e:
            raise self.error(pos + (e.pos or 0), e.reason) from None
        if not all(isinstance(part, Literal) for part in template.parts):
            raise self.error(pos, "a block label cannot hold ${...} or %{...} (write $${ for a literal ${)")
        return "".join(str(part.value) for part in template.parts if isinstance(part, Literal)), m.end()


def _duplicate_keys(node: Node, path: str, report: Report) -> None:
    """An object constructor's constant keys written twice, at any depth of the value."""
    stack: list[tuple[Node, str]] = [(node, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, Interpolation):
            stack.append((item.expr, where))
        elif isinstance(item, TupleCons):
            stack.extend((value, where) for value in item.items)
        elif isinstance(item, ObjectCons):
            seen: set[str] = set()
            for key, value in item.items:
                name = key.value if isinstance(key, Literal) and isinstance(key.value, str) else None
                if name is not None:
                    if name in seen:
                        report.error(join(where, name), "set more than once")
                    seen.add(name)
                stack.append((value, join(where, name) if name is not None else where))


def line_of(text: str, pos: int) -> int:
    return _normalise(text).count("\n", 0, pos) + 1
