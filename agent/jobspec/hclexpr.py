"""HCL2 expressions and string templates -> a small AST (hashicorp/hcl's hclsyntax spec).

    parse_expression('upper(var.x) == "A" ? 1 : 2')
    parse_expression_at(text, pos)                            # an attribute's value inside a whole file
    parse_template('"a ${var.x} %{ if var.b }b%{ endif }"')   # a quoted string, quotes included
    parse_template("line ${x}\\n", heredoc=True)              # a heredoc's body: no backslash escapes

`parse_expression_at` is what agent.jobspec.hclsyntax uses for attribute values: it reads from a position
of the whole text, newlines end the expression outside brackets (as HCL's), and it answers where the
expression's last token ends. Heredocs (`<<EOT`, `<<-EOT`) are read inside expressions; a quoted form
(`"<<EOT\\n...\\nEOT"`) is read too. Strip markers (`~`) are applied while parsing. Every failure is a
`ParseError` with a message (and, from the parser, the position and the bare reason); nesting and source
size are bounded.
"""

from __future__ import annotations

import math
import re

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
    ParseError,
    Splat,
    SplatItem,
    Strip,
    Template,
    TupleCons,
    Unary,
    Variable,
    apply_strips,
    nest,
)

MAX_DEPTH = 64  # nesting of expressions, templates and brackets (about two units a level)
MAX_SOURCE = 1 << 20
MAX_NUMBER_DIGITS = 400


# --- entry points -----------------------------------------------------------------------------------------


def parse_expression(text: str) -> Node:
    p = _Parser(text)
    node = p.expression()
    p.skip_space()
    if not p.at_end():
        raise p.error("unexpected text after the expression")
    return node


def parse_expression_at(text: str, pos: int) -> tuple[Node, int]:
    """The expression starting at `pos` of a whole HCL text, ended by a new line outside brackets,
    parentheses, braces and interpolations: (node, the end of its last token). Raises ParseError, whose
    `pos` is an offset in `text`."""
    p = _Parser(text, pos=pos, newlines=True)
    node = p.expression()
    end = p.pos
    if p.gap is not None and p.gap[1] == end:
        end = p.gap[0]  # the spaces and comments skipped after the last token are not the expression's
    return node, end


def parse_template(text: str, *, heredoc: bool = False) -> Template:
    """A quoted string's source (with its quotes) or, with `heredoc`, a heredoc's body."""
    p = _Parser(text)
    if heredoc:
        node: Node = p.template_body(quoted=False)
    else:
        if not p.peek('"'):
            raise p.error("expected a quoted string")
        node = p.quoted()
    if not p.at_end():
        raise p.error("unexpected text after the string")
    return node if isinstance(node, Template) else Template((node,))


def trim_heredoc(body: str) -> str:
    """`<<-` heredocs: the common leading indentation of the non-blank lines is removed."""
    lines = body.splitlines(keepends=True)
    indents = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return "".join(line[cut:] if line.strip() else line.lstrip(" \t") for line in lines)


# --- the parser ---------------------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_HEREDOC_OPEN = re.compile(r'(")?<<(-?)([A-Za-z][A-Za-z0-9._-]*)[ \t]*\r?\n')
_DIGITS = re.compile(r"[0-9]+")
_SPACE = re.compile(r"(?:[ \t\r\n]+|#[^\n]*|//[^\n]*|/\*.*?\*/)*", re.S)
_SPACE_IN_LINE = re.compile(r"(?:[ \t\r]+|#[^\n]*|//[^\n]*|/\*.*?\*/)*", re.S)
_KEYWORD_LITERALS: dict[str, object] = {"true": True, "false": False, "null": None}
_BINARY_LEVELS: tuple[tuple[str, ...], ...] = (
    ("||",),
    ("&&",),
    ("==", "!="),
    ("<=", ">=", "<", ">"),
    ("+", "-"),
    ("*", "/", "%"),
)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


class _Parser:
    def __init__(self, text: str, *, pos: int = 0, newlines: bool = False) -> None:
        if not newlines and len(text) > MAX_SOURCE:  # a whole file (newlines) is bounded by its reader
            raise ParseError("expression text too large")
        self.text = text
        self.pos = pos
        self.depth = 0
        self.newlines = newlines  # new lines end the expression outside brackets
        self.brackets = 0
        self.gap: tuple[int, int] | None = None  # the last spaces and comments skipped

    # --- scanning helpers

    def error(self, message: str) -> ParseError:
        line = self.text.count("\n", 0, self.pos) + 1
        column = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        near = self.text[self.pos : self.pos + 20]
        where = f"at line {line}, column {column}" if "\n" in self.text else f"at column {column}"
        return ParseError(
            f"{message} {where}" + (f" (near {near!r})" if near else ""), pos=self.pos, reason=message
        )

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def skip_space(self) -> None:
        start = self.pos
        space = _SPACE_IN_LINE if self.newlines and not self.brackets else _SPACE
        m = space.match(self.text, start)
        end = start if m is None else m.end()  # never None: the pattern matches the empty string
        if end != start:
            self.pos = end
            self.gap = (start, end)
        if self.text.startswith("/*", end):
            raise self.error("unterminated comment")

    def accept(self, s: str) -> bool:
        self.skip_space()
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, what: str = "") -> None:
        if not self.accept(s):
            raise self.error(f'expected "{s}"' + (f" {what}" if what else ""))

    def ident(self) -> str | None:
        self.skip_space()
        m = _IDENT.match(self.text, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group()

    def need_ident(self, what: str) -> str:
        name = self.ident()
        if name is None:
            raise self.error(f"expected {what}")
        return name

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error("expression nested too deeply")

    # --- expressions

    def expression(self) -> Node:
        self.enter()
        try:
            cond = self.binary(0)
            if self.accept("?"):
                true = self.expression()
                self.expect(":", "in a conditional (a ? b : c)")
                false = self.expression()
                return Conditional(cond, true, false)
            return cond
        finally:
            self.depth -= 1

    def binary(self, level: int) -> Node:
        if level == len(_BINARY_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while True:
            op = self.operator(_BINARY_LEVELS[level])
            if op is None:
                return left
            left = Binary(op, left, self.binary(level + 1))

    def operator(self, ops: tuple[str, ...]) -> str | None:
        self.skip_space()
        for op in ops:
            if self.peek(op):
                after = self.text[self.pos + len(op) : self.pos + len(op) + 1]
                if op in ("<", ">") and after == "=":
                    continue  # "<=" / ">=" come first in their level
                self.pos += len(op)
                return op
        return None

    def unary(self) -> Node:
        self.skip_space()
        for op in ("-", "!"):
            if self.peek(op) and not self.peek("!="):
                self.pos += 1
                self.enter()
                try:
                    return Unary(op, self.unary())
                finally:
                    self.depth -= 1
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while True:
            self.skip_space()
            if self.peek("[*]"):
                self.pos += 3
                return Splat(node, self.splat_steps(full=True))
            if self.peek(".*"):
                self.pos += 2
                return Splat(node, self.splat_steps(full=False))
            step = self.traversal_step(node)
            if step is None:
                return node
            node = step

    def traversal_step(self, node: Node, *, attrs_only: bool = False) -> Node | None:
        save = self.pos
        self.skip_space()
        if self.peek(".") and not self.peek("..."):
            self.pos += 1
            m = _DIGITS.match(self.text, self.pos)
            if m is not None and not attrs_only:
                self.pos = m.end()
                return Index(node, Literal(int(m.group())))
            name = _IDENT.match(self.text, self.pos)
            if name is None:
                raise self.error('expected an attribute name after "."')
            self.pos = name.end()
            return GetAttr(node, name.group())
        if self.peek("[") and not self.peek("[*]") and not attrs_only:
            self.pos += 1
            self.enter()
            self.brackets += 1
            try:
                key = self.expression()
                self.expect("]", "closing an index")
            finally:
                self.depth -= 1
                self.brackets -= 1
            return Index(node, key)
        self.pos = save
        return None

    def splat_steps(self, *, full: bool) -> Node:
        each: Node = SplatItem()
        while True:
            step = self.traversal_step(each, attrs_only=not full)
            if step is None:
                return each
            each = step

    def primary(self) -> Node:  # noqa: PLR0911 - one return per term kind
        self.skip_space()
        if self.at_end():
            raise self.error("expected an expression, found the end of the text")
        c = self.text[self.pos]
        m = _NUMBER.match(self.text, self.pos)
        if m is not None:
            return self.number(m)
        heredoc = _HEREDOC_OPEN.match(self.text, self.pos)
        if heredoc is not None:
            return self.heredoc(heredoc)
        if c == '"':
            return self.quoted()
        if c == "(":
            self.pos += 1
            self.enter()
            self.brackets += 1
            try:
                inner = self.expression()
                self.expect(")", "closing a parenthesis")
            finally:
                self.depth -= 1
                self.brackets -= 1
            return Parens(inner)
        if c == "[":
            return self.tuple_or_for()
        if c == "{":
            return self.object_or_for()
        name = self.ident()
        if name is None:
            raise self.error(f"unexpected character {c!r}")
        if name in _KEYWORD_LITERALS:
            return Literal(_KEYWORD_LITERALS[name])
        save = self.pos
        self.skip_space()
        if self.peek("::"):
            raise self.error(f'provider functions ("{name}::...") are not supported')
        if self.peek("("):
            self.pos += 1
            return self.call(name)
        self.pos = save
        return Variable(name)

    def number(self, m: re.Match[str]) -> Node:
        self.pos = m.end()
        text = m.group()
        if len(text) > MAX_NUMBER_DIGITS:
            raise self.error("number literal too long")
        if m.group(1) is None and m.group(2) is None:
            return Literal(int(text))
        value = float(text)
        if math.isnan(value) or math.isinf(value):
            raise self.error("number literal out of range")
        return Literal(int(value) if value.is_integer() and abs(value) < 2**63 else value)

    def call(self, name: str) -> Node:
        args: list[Node] = []
        expand = False
        self.enter()
        self.brackets += 1
        try:
            while not self.accept(")"):
                if args and not expand:
                    self.expect(",", f"between the arguments of {name}()")
                    if self.accept(")"):
                        break
                if expand:
                    raise self.error('"..." may only follow the last argument')
                args.append(self.expression())
                if self.accept("..."):
                    expand = True
        finally:
            self.depth -= 1
            self.brackets -= 1
        return Call(name, tuple(args), expand)

    def tuple_or_for(self) -> Node:
        self.pos += 1
        self.enter()
        self.brackets += 1
        try:
            if self.for_intro_ahead():
                return self.for_expr(object_=False)
            items: list[Node] = []
            while not self.accept("]"):
                if items:
                    self.expect(",", "between the items of a list")
                    if self.accept("]"):
                        break
                items.append(self.expression())
            return TupleCons(tuple(items))
        finally:
            self.depth -= 1
            self.brackets -= 1

    def object_or_for(self) -> Node:
        self.pos += 1
        self.enter()
        self.brackets += 1
        try:
            if self.for_intro_ahead():
                return self.for_expr(object_=True)
            items: list[tuple[Node, Node]] = []
            while not self.accept("}"):
                if items:
                    self.accept(",")
                    if self.accept("}"):
                        break
                key = self.expression()
                if isinstance(key, Variable):
                    key = Literal(key.name)  # a bare name is the key itself; `(name)` is evaluated
                elif isinstance(key, Parens):
                    key = key.inner
                self.skip_space()
                if (self.peek("=") and not self.peek("==")) or self.peek(":"):
                    self.pos += 1
                else:
                    raise self.error('expected "=" or ":" after an object key')
                items.append((key, self.expression()))
            return ObjectCons(tuple(items))
        finally:
            self.depth -= 1
            self.brackets -= 1

    def for_intro_ahead(self) -> bool:
        save = self.pos
        try:
            if self.ident() != "for":
                return False
            self.skip_space()
            return _IDENT.match(self.text, self.pos) is not None
        finally:
            self.pos = save

    def for_vars(self) -> tuple[str | None, str]:
        first = self.need_ident("a variable name")
        if self.accept(","):
            return first, self.need_ident("a variable name")
        return None, first

    def for_expr(self, *, object_: bool) -> Node:
        self.ident()  # "for"
        key_var, value_var = self.for_vars()
        if self.ident() != "in":
            raise self.error('expected "in" in a for expression')
        collection = self.expression()
        self.expect(":", "in a for expression")
        key: Node | None = None
        value = self.expression()
        group = False
        if object_:
            self.expect("=>", "in an object for expression ({for k, v in m : key => value})")
            key, value = value, self.expression()
            group = self.accept("...")
        condition: Node | None = None
        save = self.pos
        if self.ident() == "if":
            condition = self.expression()
        else:
            self.pos = save
        self.expect("}" if object_ else "]", "closing a for expression")
        return ForExpr(key_var, value_var, collection, key, value, condition, group)

    def heredoc(self, m: re.Match[str]) -> Node:
        quoted, trim, marker = m.group(1), m.group(2), m.group(3)
        closing = re.compile(r"(?m)^[ \t]*" + re.escape(marker) + ('"' if quoted else r"[ \t]*$"))
        end = closing.search(self.text, m.end())
        if end is None:
            raise self.error(f"unterminated heredoc (no closing {marker} line)")
        body = self.text[m.end() : end.start()]
        self.pos = end.end()
        if trim:
            body = trim_heredoc(body)
        inner = _Parser(body)
        inner.depth = self.depth
        try:
            return inner.template_body(quoted=False)
        except ParseError as e:  # where it is in this text: exact without <<-, the body's start with it
            pos = m.end() + e.pos if e.pos is not None and not trim else m.end()
            saved, self.pos = self.pos, pos
            error = self.error(e.reason)
            self.pos = saved
            raise error from None

    def quoted(self) -> Node:
        self.pos += 1  # the opening quote
        template = self.template_body(quoted=True)
        if all(isinstance(part, Literal) for part in template.parts):  # a plain string: `m["k"]` is a key
            return Literal("".join(str(part.value) for part in template.parts if isinstance(part, Literal)))
        return template

    # --- templates

    def template_body(self, *, quoted: bool) -> Template:
        self.enter()
        try:
            flat = self.template_parts(quoted=quoted)
        finally:
            self.depth -= 1
        apply_strips(flat)
        parts, end = nest(flat, 0, ())
        if end != len(flat):
            raise ParseError(f"unexpected %{{ {flat[end].kind} }} in a template")
        return Template(tuple(parts))

    def template_parts(self, *, quoted: bool) -> list[Strip]:
        text = self.text
        flat: list[Strip] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                flat.append(Strip("text", text="".join(buf)))
                buf.clear()

        while True:
            if self.pos >= len(text):
                if quoted:
                    raise self.error("unterminated string")
                break
            c = text[self.pos]
            if quoted and c == '"':
                self.pos += 1
                break
            if quoted and c == "\n":
                raise self.error("a quoted string cannot span lines (use a heredoc)")
            if text.startswith(("$${", "%%{"), self.pos):
                buf.append(text[self.pos + 1 : self.pos + 3])
                self.pos += 3
            elif text.startswith("${", self.pos):
                flush()
                flat.append(self.interpolation())
            elif text.startswith("%{", self.pos):
                flush()
                flat.append(self.directive())
            elif quoted and c == "\\":
                buf.append(self.escape())
            else:
                buf.append(c)
                self.pos += 1
        flush()
        return flat

    def escape(self) -> str:
        text = self.text
        nxt = text[self.pos + 1 : self.pos + 2]
        if nxt in _ESCAPES:
            self.pos += 2
            return _ESCAPES[nxt]
        if nxt in ("u", "U"):
            size = 4 if nxt == "u" else 8
            digits = text[self.pos + 2 : self.pos + 2 + size]
            if len(digits) == size and all(d in "0123456789abcdefABCDEF" for d in digits):
                code = int(digits, 16)
                if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                    self.pos += 2 + size
                    return chr(code)
            raise self.error(f"invalid unicode escape \\{nxt}{digits}")
        raise self.error(f"invalid escape sequence \\{nxt}")

    def strip_open(self, opener: str) -> bool:
        self.pos += len(opener)
        if self.peek("~"):
            self.pos += 1
            return True
        return False

    def strip_close(self, what: str) -> bool:
        self.skip_space()
        strip = False
        if self.peek("~"):
            self.pos += 1
            strip = True
        if not self.peek("}"):
            raise self.error(f'expected "}}" closing {what}')
        self.pos += 1
        return strip

    def interpolation(self) -> Strip:
        self.brackets += 1
        try:
            left = self.strip_open("${")
            self.skip_space()
            start = self.pos
            expr = self.expression()
            source = self.text[start : self.pos].strip()
            right = self.strip_close("an interpolation")
        finally:
            self.brackets -= 1
        return Strip("interp", Interpolation(expr, source), left, right)

    def directive(self) -> Strip:
        self.brackets += 1
        try:
            return self.directive_inner()
        finally:
            self.brackets -= 1

    def directive_inner(self) -> Strip:
        left = self.strip_open("%{")
        keyword = self.ident()
        if keyword == "if":
            cond = self.expression()
            return Strip("if", cond, left, self.strip_close("%{ if }"))
        if keyword == "for":
            key_var, value_var = self.for_vars()
            if self.ident() != "in":
                raise self.error('expected "in" in %{ for }')
            coll = self.expression()
            right = self.strip_close("%{ for }")
            return Strip("for", coll, left, right, key_var=key_var, value_var=value_var)
        if keyword in ("else", "endif", "endfor"):
            return Strip(keyword, None, left, self.strip_close(f"%{{ {keyword} }}"))
        raise self.error("expected if, else, endif, for or endfor after %{")
