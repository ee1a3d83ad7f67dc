"""The lexer of Go's text/template: text, actions between delimiters (with the `{{- ` and ` -}}`
trim markers), comments, and the tokens inside an action."""

from __future__ import annotations

from typing import Any, NamedTuple

from agent.gotemplate.errors import Locator

TEXT = "text"
LDELIM = "left delim"
RDELIM = "right delim"
SPACE = "space"
STRING = "string"
CHAR = "character constant"
NUMBER = "number"
BOOL = "bool"
NIL = "nil"
DOT = "dot"
FIELD = "field"
VAR = "variable"
IDENT = "identifier"
KEYWORD = "keyword"
PIPE = "pipe"
LPAREN = "left paren"
RPAREN = "right paren"
DECLARE = "declare"
ASSIGN = "assign"
PUNCT = "character"
EOF = "EOF"

KEYWORDS = frozenset(
    {"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"}
)
SPACES = " \t\r\n"
_SIMPLE_ESCAPES = {
    "a": 7,
    "b": 8,
    "f": 12,
    "n": 10,
    "r": 13,
    "t": 9,
    "v": 11,
    "\\": 92,
}
_HEX = "0123456789abcdefABCDEF"


class Token(NamedTuple):
    kind: str
    val: Any
    pos: int


def _is_alnum(ch: str) -> bool:
    return ch == "_" or ch.isalnum()


def _unescape(body: str, quote: str, pos: int, loc: Locator) -> bytes:
    """Decode Go escapes in the body of a "..." string or a '...' character constant."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogatepass")
            i += 1
            continue
        esc = body[i + 1] if i + 1 < n else ""
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
            i += 2
        elif esc == quote:
            out.append(ord(quote))
            i += 2
        elif esc in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[esc]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or any(c not in _HEX for c in digits):
                raise loc.syntax(pos, f"invalid escape \\{esc} in {quote}{body}{quote}")
            value = int(digits, 16)
            if esc == "x":
                out.append(value)
            else:
                if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
                    raise loc.syntax(pos, f"invalid Unicode code point in escape \\{esc}{digits}")
                out += chr(value).encode("utf-8")
            i += 2 + width
        elif esc in "01234567" and esc:
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(c not in "01234567" for c in digits) or int(digits, 8) > 255:
                raise loc.syntax(pos, f"invalid octal escape in {quote}{body}{quote}")
            out.append(int(digits, 8))
            i += 4
        else:
            raise loc.syntax(pos, f"unknown escape sequence \\{esc} in {quote}{body}{quote}")
    return bytes(out)


class Lexer:
    """Splits a template into tokens. Raises TemplateSyntaxError on a lexical error."""

    def __init__(self, text: str, loc: Locator, left: str = "{{", right: str = "}}") -> None:
        self.text = text
        self.loc = loc
        self.left = left or "{{"
        self.right = right or "}}"
        self.toks: list[Token] = []

    def tokens(self) -> list[Token]:
        text, left = self.text, self.left
        pos, trim_next = 0, False
        while True:
            start = text.find(left, pos)
            end = len(text) if start < 0 else start
            chunk_pos = pos
            chunk = text[pos:end]
            if trim_next:
                stripped = chunk.lstrip(SPACES)
                chunk_pos += len(chunk) - len(stripped)
                chunk = stripped
            if start < 0:
                if chunk:
                    self.toks.append(Token(TEXT, chunk, chunk_pos))
                break
            after = start + len(left)
            trim_left = self._left_trim(after)
            if trim_left:
                chunk = chunk.rstrip(SPACES)
            if chunk:
                self.toks.append(Token(TEXT, chunk, chunk_pos))
            inner = after + 2 if trim_left else after
            if text.startswith("/*", inner):
                pos, trim_next = self._comment(start, inner)
            else:
                self.toks.append(Token(LDELIM, left, start))
                pos, trim_next = self._action(inner, start)
        self.toks.append(Token(EOF, "", len(text)))
        return self.toks

    def _left_trim(self, at: int) -> bool:
        t = self.text
        return at + 1 < len(t) and t[at] == "-" and t[at + 1] in SPACES

    def _right_delim_at(self, at: int) -> tuple[int, bool] | None:
        """(position after the right delimiter, trim?) when a right delimiter starts at `at`."""
        t = self.text
        if t.startswith(self.right, at):
            return at + len(self.right), False
        if at + 1 < len(t) and t[at] in SPACES and t[at + 1] == "-" and t.startswith(self.right, at + 2):
            return at + 2 + len(self.right), True
        return None

    def _comment(self, start: int, inner: int) -> tuple[int, bool]:
        close = self.text.find("*/", inner + 2)
        if close < 0:
            raise self.loc.syntax(start, "unclosed comment")
        hit = self._right_delim_at(close + 2)
        if hit is None:
            raise self.loc.syntax(start, "comment ends before closing delimiter")
        return hit

    def _action(self, pos: int, start: int) -> tuple[int, bool]:  # noqa: PLR0912, PLR0915 - one branch per token kind
        text, toks, loc = self.text, self.toks, self.loc
        n = len(text)
        depth = 0
        while True:
            if pos >= n:
                raise loc.syntax(start, "unclosed action")
            ch = text[pos]
            if ch in SPACES:
                end = pos
                while end < n and text[end] in SPACES:
                    end += 1
                hit = self._right_delim_at(end - 1)
                if hit is not None and hit[1]:
                    if end - pos > 1:
                        toks.append(Token(SPACE, " ", pos))
                    return self._close(depth, end - 1, hit)
                toks.append(Token(SPACE, " ", pos))
                pos = end
                continue
            hit = self._right_delim_at(pos) if text.startswith(self.right, pos) else None
            if hit is not None:
                return self._close(depth, pos, hit)
            nxt = text[pos + 1] if pos + 1 < n else ""
            if ch == '"':
                pos = self._quoted(pos)
            elif ch == "`":
                close = text.find("`", pos + 1)
                if close < 0:
                    raise loc.syntax(pos, "unterminated raw quoted string")
                toks.append(Token(STRING, text[pos + 1 : close], pos))
                pos = close + 1
            elif ch == "'":
                pos = self._char(pos)
            elif (
                ch.isdigit()
                or (ch in "+-" and (nxt.isdigit() or nxt == "."))
                or (ch == "." and nxt.isdigit())
            ):
                pos = self._number(pos)
            elif ch == "$":
                end = pos + 1
                while end < n and _is_alnum(text[end]):
                    end += 1
                toks.append(Token(VAR, text[pos:end], pos))
                pos = end
            elif ch == ".":
                end = pos + 1
                while end < n and _is_alnum(text[end]):
                    end += 1
                if end == pos + 1:
                    toks.append(Token(DOT, ".", pos))
                else:
                    toks.append(Token(FIELD, text[pos + 1 : end], pos))
                pos = end
            elif _is_alnum(ch):
                end = pos + 1
                while end < n and _is_alnum(text[end]):
                    end += 1
                word = text[pos:end]
                if word in KEYWORDS:
                    toks.append(Token(KEYWORD, word, pos))
                elif word in ("true", "false"):
                    toks.append(Token(BOOL, word == "true", pos))
                elif word == "nil":
                    toks.append(Token(NIL, None, pos))
                else:
                    toks.append(Token(IDENT, word, pos))
                pos = end
            elif ch == ":" and nxt == "=":
                toks.append(Token(DECLARE, ":=", pos))
                pos += 2
            elif ch == ":":
                raise loc.syntax(pos, "expected :=")
            elif ch in "|=(),":
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                    if depth < 0:
                        raise loc.syntax(pos, "unexpected right paren")
                kind = {"|": PIPE, "=": ASSIGN, "(": LPAREN, ")": RPAREN, ",": PUNCT}[ch]
                toks.append(Token(kind, ch, pos))
                pos += 1
            elif ch.isascii() and ch.isprintable():
                toks.append(Token(PUNCT, ch, pos))
                pos += 1
            else:
                raise loc.syntax(pos, f"unrecognized character in action: U+{ord(ch):04X}")

    def _close(self, depth: int, pos: int, hit: tuple[int, bool]) -> tuple[int, bool]:
        if depth > 0:
            raise self.loc.syntax(pos, "unclosed left paren")
        self.toks.append(Token(RDELIM, self.right, pos))
        return hit

    def _quoted(self, pos: int) -> int:
        text, n = self.text, len(self.text)
        i = pos + 1
        while True:
            if i >= n or text[i] == "\n":
                raise self.loc.syntax(pos, "unterminated quoted string")
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == '"':
                break
            i += 1
        raw = _unescape(text[pos + 1 : i], '"', pos, self.loc)
        self.toks.append(Token(STRING, raw.decode("utf-8", "replace"), pos))
        return i + 1

    def _char(self, pos: int) -> int:
        text, n = self.text, len(self.text)
        i = pos + 1
        while True:
            if i >= n or text[i] == "\n":
                raise self.loc.syntax(pos, "unterminated character constant")
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == "'":
                break
            i += 1
        body = text[pos + 1 : i]
        raw = _unescape(body, "'", pos, self.loc)
        if body.startswith("\\x") or (body.startswith("\\") and body[1:2] in "01234567" and body[1:2]):
            value = raw[0] if len(raw) == 1 else -1
        else:
            chars = raw.decode("utf-8", "replace")
            value = ord(chars) if len(chars) == 1 else -1
        if value < 0:
            raise self.loc.syntax(pos, f"malformed character constant: '{body}'")
        self.toks.append(Token(CHAR, value, pos))
        return i + 1

    def _number(self, pos: int) -> int:
        text, n = self.text, len(self.text)
        i = pos
        if text[i] in "+-":
            i += 1
        digits = "0123456789_"
        if text.startswith("0", i) and i + 1 < n and text[i + 1] in "xXoObB":
            digits = {"x": "0123456789abcdefABCDEF_", "o": "01234567_", "b": "01_"}[text[i + 1].lower()]
            i += 2
        while i < n and text[i] in digits:
            i += 1
        if i < n and text[i] == ".":
            i += 1
            while i < n and text[i] in digits:
                i += 1
        exp = "eE" if len(digits) == 11 else ("pP" if len(digits) == 23 else "")
        if exp and i < n and text[i] in exp:
            i += 1
            if i < n and text[i] in "+-":
                i += 1
            while i < n and text[i] in "0123456789_":
                i += 1
        if i < n and text[i] == "i":
            i += 1
        if i < n and _is_alnum(text[i]):
            end = i + 1
            raise self.loc.syntax(pos, f"bad number syntax: {text[pos:end]!r}")
        self.toks.append(Token(NUMBER, text[pos:i], pos))
        return i
