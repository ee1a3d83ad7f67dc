"""Go's regexp for the jobspec's HCL functions and the template functions: RE2 syntax and semantics, in
time linear in the input.

Nomad runs `regex`, `regexall`, `regex_replace` and `replace(s, "/re/", r)` (cty's standard library)
and consul-template's `regexMatch` / `regexReplaceAll` on Go's regexp package. Python's `re`
backtracks: `(a|a)*b` against 28 a's and a c took 44 s there, holding the GIL. Here every pattern runs
on RE2 itself (the google-re2 package: Google's C++ library, whose design Go's package follows), with
what Go does differently from RE2's C++ API made up here:

- Go refuses `\\C` (any byte) and group names that are not ASCII letters, digits or `_`;
- Go allows one name on several groups, and `$name` expands the first of them that took part;
- successive matches (FindAll, ReplaceAll): an empty match right after the previous match is skipped,
  and a search restarts one character (not one byte) past an empty match, so that no match starts
  inside a UTF-8 sequence (RE2 started at a byte offset reports `\\B` there);
- replacement templates are Go's Expand: `$1`, `${1}`, `$name`, `${name}`, `$$`;
- errors read as Go's: error parsing regexp: missing closing ): `(a`.

Compiled patterns are cached (the last CACHE_SIZE of up to CACHE_PATTERN_CHARS characters); each one's
RE2 object (program and DFA caches) is bounded by MAX_MEM, past which a pattern is "expression too large"
at compile time and the DFA falls back to RE2's NFA (still linear) at match time.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

MAX_MEM = 4 << 20  # RE2's memory budget per compiled pattern (its default is 8 MiB)
CACHE_SIZE = 32
CACHE_PATTERN_CHARS = 4096
MAX_SHOWN = 200  # characters of a pattern an error message quotes

Spans = list[tuple[int, int]]  # byte offsets of the match and of each group, (-1, -1): did not take part

# RE2's error codes (re2/regexp.cc) under the names Go's regexp/syntax gives them.
_GO_CODES = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}


class GoRegexError(ValueError):
    """An invalid pattern; `str(e)` is Go's message (`error parsing regexp: <code>: `<expr>``), with the
    whole pattern added when the offending part is not all of it."""

    def __init__(self, code: str, expr: str, pattern: str) -> None:
        self.code, self.expr, self.pattern = code, expr, pattern
        message = f"error parsing regexp: {code}: `{_shorten(expr)}`"
        if expr != pattern:
            message += f" in `{_shorten(pattern)}`"
        super().__init__(message)


class ResultTooLarge(ValueError):
    """A replacement would build a string over the caller's `max_size`."""


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


@functools.cache
def _engine() -> Any:
    """RE2's binding, loaded on first use (a 1.5 MB extension the agent's other paths never need)."""
    from re2 import _re2  # type: ignore[import-untyped]

    return _re2


def compile(pattern: str) -> Regexp:
    """The compiled pattern, from the cache when it was compiled lately; GoRegexError when invalid."""
    if len(pattern) <= CACHE_PATTERN_CHARS:
        return _cached(pattern)
    return Regexp(pattern)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _cached(pattern: str) -> Regexp:
    return Regexp(pattern)


class Regexp:
    """One compiled pattern; its methods take and return str, as Go's *String methods."""

    __slots__ = ("_by_name", "_re", "names", "num_subexp", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        try:
            encoded = pattern.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: shown escaped
            shown = pattern.encode("utf-8", "backslashreplace").decode("utf-8")
            raise GoRegexError("invalid UTF-8", shown, shown) from None
        names = _group_names(pattern)
        engine = _engine()
        options = engine.RE2.Options()
        options.log_errors = False  # else RE2 writes each refused pattern to stderr
        options.max_mem = MAX_MEM
        options.longest_match = False  # leftmost-first, as Go (Longest() is not offered)
        self._re = engine.RE2(encoded, options)
        if not self._re.ok():
            message = self._re.error().decode("utf-8", "replace")
            code, _, expr = message.partition(": ")
            raise GoRegexError(_GO_CODES.get(code, code), expr, pattern)
        self.num_subexp: int = self._re.NumberOfCapturingGroups()
        if len(names) != self.num_subexp:  # not expected: then RE2's own table (first group of a name)
            names = [""] * self.num_subexp
            for name, index in self._re.NamedCapturingGroups():
                names[index - 1] = name.decode("utf-8")
        self.names: tuple[str, ...] = ("", *names)  # as Go's SubexpNames: [0] is the whole match
        self._by_name: dict[str, list[int]] = {}
        for index, name in enumerate(self.names):
            if name:
                self._by_name.setdefault(name, []).append(index)

    def __repr__(self) -> str:
        return f"goregex.compile({self.pattern!r})"

    # -- matching, on the UTF-8 bytes of the text

    def _matches(self, text: bytes, n: int = -1) -> Iterator[Spans]:
        """Go's successive matches (at most n when n >= 0): an empty match that starts where the previous
        match ended is skipped, and the search goes on one character past an empty match."""
        match = self._re.Match
        unanchored = _engine().RE2.Anchor.UNANCHORED
        end = len(text)
        pos, prev_end, found = 0, -1, 0
        while pos <= end and (n < 0 or found < n):
            spans: Spans = match(unanchored, text, pos, end)
            start, stop = spans[0]
            if start < 0:
                return
            if start < end and 0x80 <= text[start] < 0xC0:
                # Only an empty match starts inside a character (\B between two bytes of é): Go never
                # looks there, and no match starts between pos and it.
                pos = _next_char(text, start)
                continue
            accept = True
            if stop == pos:  # empty, at pos
                accept = start != prev_end
                pos = _next_char(text, pos) if pos < end else end + 1
            else:
                pos = stop
            prev_end = stop
            if accept:
                found += 1
                yield spans

    def match(self, s: str) -> bool:
        """MatchString: whether the pattern matches somewhere in s."""
        return next(self._matches(_encode(s), 1), None) is not None

    def find(self, s: str) -> str | None:
        """FindString, None when there is no match (Go answers "" for both)."""
        text = _encode(s)
        spans = next(self._matches(text, 1), None)
        return None if spans is None else _decode(text, *spans[0])

    def find_all(self, s: str, n: int = -1) -> list[str]:
        """FindAllString: the successive matches, at most n when n >= 0."""
        text = _encode(s)
        return [_decode(text, *spans[0]) for spans in self._matches(text, n)]

    def find_submatch(self, s: str) -> list[str | None] | None:
        """FindStringSubmatch: the first match and its groups (None for a group that took no part)."""
        text = _encode(s)
        spans = next(self._matches(text, 1), None)
        return None if spans is None else _groups(text, spans)

    def find_all_submatch(self, s: str, n: int = -1) -> list[list[str | None]]:
        """FindAllStringSubmatch, with None for a group that took no part."""
        text = _encode(s)
        return [_groups(text, spans) for spans in self._matches(text, n)]

    def replace_all(self, s: str, template: str, *, max_size: int | None = None) -> str:
        """ReplaceAllString: every match replaced by the template expanded as Go's Expand ($1, ${1},
        $name, ${name}, $$). ResultTooLarge when the result would pass max_size characters."""
        pieces = _parse_template(template)
        text = _encode(s)
        out: list[str] = []
        size, last = 0, 0
        for spans in self._matches(text):
            out.append(_decode(text, last, spans[0][0]))
            size += len(out[-1])
            for piece in pieces:
                value = self._expand_piece(piece, text, spans)
                out.append(value)
                size += len(value)
            if max_size is not None and size > max_size:
                raise ResultTooLarge(f"the result would be over {max_size} characters")
            last = spans[0][1]
        out.append(_decode(text, last, len(text)))
        if max_size is not None and size + len(out[-1]) > max_size:
            raise ResultTooLarge(f"the result would be over {max_size} characters")
        return "".join(out)

    def _expand_piece(self, piece: str | int, text: bytes, spans: Spans) -> str:
        if isinstance(piece, _Name):  # the first group of that name that took part
            for index in self._by_name.get(piece, ()):
                if spans[index][0] >= 0:
                    return _decode(text, *spans[index])
            return ""
        if isinstance(piece, str):
            return piece
        if piece <= self.num_subexp and spans[piece][0] >= 0:
            return _decode(text, *spans[piece])
        return ""


# -- helpers


def _encode(s: str) -> bytes:
    # A lone surrogate (a JSON "\ud800") passes through as the bytes Python would give it; RE2 matches
    # no character there, as Go's regexp matches none but U+FFFD on invalid UTF-8.
    return s.encode("utf-8", "surrogatepass")


def _decode(text: bytes, start: int, stop: int) -> str:
    return text[start:stop].decode("utf-8", "surrogatepass")


def _next_char(text: bytes, pos: int) -> int:
    pos += 1
    while pos < len(text) and 0x80 <= text[pos] < 0xC0:
        pos += 1
    return pos


def _groups(text: bytes, spans: Spans) -> list[str | None]:
    return [None if start < 0 else _decode(text, start, stop) for start, stop in spans]


class _Name(str):
    """A group name in a replacement template (a plain str there is literal text)."""

    __slots__ = ()


@functools.lru_cache(maxsize=CACHE_SIZE)
def _parse_template(template: str) -> tuple[str | int, ...]:
    """Go's Expand template as pieces: literal text (str), a group number (int) or a group name (_Name).

    `$$` is a `$`; `$` then a run of letters, digits and `_` (or that run in braces) refers to a group,
    by number when the run is at most nine ASCII digits with no leading zero, else by name; any other
    `$` is text, and so is what follows it."""
    pieces: list[str | int] = []
    literal: list[str] = []
    i, n = 0, len(template)
    while i < n:
        dollar = template.find("$", i)
        if dollar < 0:
            literal.append(template[i:])
            break
        literal.append(template[i:dollar])
        i = dollar + 1
        if i < n and template[i] == "$":
            literal.append("$")
            i += 1
            continue
        brace = i < n and template[i] == "{"
        begin = end = i + brace
        while end < n and (template[end].isalpha() or template[end].isdecimal() or template[end] == "_"):
            end += 1
        name = template[begin:end]
        if not name or (brace and (end >= n or template[end] != "}")):
            literal.append("$")
            continue
        i = end + brace
        if literal:
            pieces.append("".join(literal))
            literal = []
        number = name.isascii() and name.isdigit() and len(name) <= 9 and (name == "0" or name[0] != "0")
        pieces.append(int(name) if number else _Name(name))
    if literal:
        pieces.append("".join(literal))
    return tuple(pieces)


def _group_names(pattern: str) -> list[str]:
    """The name of each capturing group in order ("" when unnamed), read off the pattern; raises what Go
    refuses and RE2 accepts: `\\C`, and names other than ASCII letters, digits and `_`. A pattern RE2
    refuses may read wrong here: RE2's error is the one reported."""
    names: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if pattern.startswith("\\Q", i):
                close = pattern.find("\\E", i + 2)
                i = n if close < 0 else close + 2
                continue
            if pattern.startswith("\\C", i):
                raise GoRegexError("invalid escape sequence", "\\C", pattern)
            i += 2
        elif c == "[":
            i = _skip_class(pattern, i)
        elif c == "(":
            if pattern.startswith("(?P<", i) or (
                pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i)
            ):
                begin = i + (4 if pattern[i + 2] == "P" else 3)
                close = pattern.find(">", begin)
                if close >= 0:
                    name = pattern[begin:close]
                    if not name or not all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name):
                        raise GoRegexError("invalid named capture", pattern[i : close + 1], pattern)
                    names.append(name)
                i = begin
            else:
                if not pattern.startswith("(?", i):
                    names.append("")
                i += 1
        else:
            i += 1
    return names


def _skip_class(pattern: str, i: int) -> int:
    """The index past the character class that starts at pattern[i] ("[")."""
    n = len(pattern)
    i += 1
    if i < n and pattern[i] == "^":
        i += 1
    first = True
    while i < n and (pattern[i] != "]" or first):
        first = False
        if pattern.startswith("[:", i):
            close = pattern.find(":]", i + 2)
            if close >= 0:
                i = close + 2
                continue
        if pattern[i] == "\\":
            if pattern.startswith("\\C", i):
                raise GoRegexError("invalid escape sequence", "\\C", pattern)
            i += 2
        else:
            i += 1
    return i + 1
