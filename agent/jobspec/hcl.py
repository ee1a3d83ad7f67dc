"""Nomad's HCL2 jobspec text -> the builder's plain body, through python-hcl2 (8.x).

What python-hcl2 8.x hands back, and what is done with it here:
- blocks are lists of dicts marked `"__is_block__": True`; each label nests one dict level with the label
  as key: `job "x" { group "g" {} }` -> `{"job": [{'"x"': {"group": [{'"g"': {...}}], ...}}]}`. They
  become `Block(labels, body)`;
- string literals keep their quotes and escapes (`'"a\\"b"'`); labels and quoted object keys keep quotes
  too. Quotes are removed and escapes resolved here, and HCL's template escapes `$${` / `%%{` become
  `${` / `%{`. `${...}` inside a string is kept verbatim for runtime interpolation (`${NOMAD_ALLOC_ID}`),
  except HCL variables and function calls;
- heredocs come back verbatim inside quotes (`'"<<EOT\nline\nEOT"'`, real newlines); asked to convert
  them, python-hcl2 drops the final newline that HCL keeps, so they are read here: every line keeps its
  newline, `<<-` removes the common indentation, no backslash escapes;
- an expression that is not a literal (`var.x`, `5 * 2`, `file("x")`) arrives as an unquoted `"${...}"`
  string, indistinguishable from a string only by the missing quotes: it becomes `Invalid`;
- a repeated attribute is silently kept last by python-hcl2, so duplicates are found on the parse tree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import lark.exceptions
from hcl2.api import parses, serialize
from hcl2.utils import SerializationOptions, process_escape_sequences

from agent.jobspec.tree import Block, Body, Invalid, Report, join

log = logging.getLogger(__name__)

_OPTIONS = SerializationOptions(
    with_comments=False,
    explicit_blocks=True,
    preserve_heredocs=True,
    strip_string_quotes=False,
    preserve_scientific_notation=False,
)
_IS_BLOCK = "__is_block__"
_HEREDOC = re.compile(
    r'^"<<(?P<trim>-?)(?P<marker>[A-Za-z][A-Za-z0-9._-]*)\n(?P<body>.*?)[ \t]*(?P=marker)"$', re.S
)
_META_KEYS = frozenset({_IS_BLOCK, "__comments__", "__inline_comments__", "__start_line__", "__end_line__"})
_TOKEN_NAMES = {
    "$END": "end of input",
    "RBRACE": '"}"',
    "LBRACE": '"{"',
    "RSQB": '"]"',
    "LSQB": '"["',
    "DBLQUOTE": "'\"'",
    "EQ": '"="',
    "COMMA": '","',
    "NAME": "a name",
    "NL_OR_COMMENT": "a new line",
}


def parse_hcl(text: str, report: Report, variables: Mapping[str, object] | None = None) -> Body | None:
    """The jobspec's top-level body, or None with the syntax problems recorded in `report`.
    `variables`: input variables given from outside (see agent.jobspec.parse_jobspec)."""
    text = text.replace("\r\n", "\n")
    try:
        tree = parses(text)
    except lark.exceptions.UnexpectedInput as e:
        report.error("", _syntax_reason(e))
        return None
    except (lark.exceptions.LarkError, RuntimeError, ValueError) as e:
        report.error("", f"HCL syntax error: {e}")
        return None
    _find_duplicates(tree.body, "", report)  # reported; the value written last is read on
    try:
        raw = serialize(tree, serialization_options=_OPTIONS)
    except (RuntimeError, ValueError) as e:
        report.error("", f"HCL syntax error: {e}")
        return None
    log.debug("python-hcl2 parsed %d top-level keys", len(raw))
    return _body(raw)


def _syntax_reason(e: lark.exceptions.UnexpectedInput) -> str:
    where = f"HCL syntax error at line {e.line}, column {e.column}"
    if isinstance(e, lark.exceptions.UnexpectedToken):
        got = _TOKEN_NAMES.get(e.token.type, repr(str(e.token)))
        expected = sorted(_TOKEN_NAMES.get(t, t) for t in e.expected if not t.startswith("__"))
        if len(expected) <= 4:
            return f"{where}: unexpected {got}; expected {' or '.join(expected)}"
        return f"{where}: unexpected {got}"
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return f"{where}: unexpected character {e.char!r}"
    return f"{where}: unexpected end of input"


# --- duplicates, on python-hcl2's rule tree ------------------------------------------------------------


def _find_duplicates(body: Any, path: str, report: Report) -> None:
    from hcl2.rules.base import AttributeRule, BlockRule

    attributes: set[str] = set()
    block_types: set[str] = set()
    for child in body.children:
        if isinstance(child, AttributeRule):
            name = str(child.identifier.serialize())
            if name in attributes or name in block_types:
                report.error(join(path, name), "set more than once")
            attributes.add(name)
            _find_duplicate_keys(child.expression, join(path, name), report)
        elif isinstance(child, BlockRule):
            names = [_label(str(label.serialize())) for label in child.labels]
            if names[0] in attributes:
                report.error(join(path, names[0]), "set more than once (as an attribute and a block)")
            block_types.add(names[0])
            _find_duplicates(child.body, ".".join([path, *names]) if path else ".".join(names), report)


def _find_duplicate_keys(node: Any, path: str, report: Report) -> None:
    from hcl2.rules.abstract import LarkRule
    from hcl2.rules.containers import ObjectRule

    if isinstance(node, ObjectRule):
        seen: set[str] = set()
        for elem in node.elements:
            key = _label(str(elem.key.serialize()))
            if key in seen:
                report.error(join(path, key), "set more than once")
            seen.add(key)
            _find_duplicate_keys(elem.expression, join(path, key), report)
        return
    for child in getattr(node, "children", ()):
        if isinstance(child, LarkRule):
            _find_duplicate_keys(child, path, report)


# --- python-hcl2's dicts -> plain bodies -------------------------------------------------------------


def _body(raw: dict[str, Any]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in raw.items():
        if key in _META_KEYS:
            continue
        blocks = _as_blocks(value)
        out[_label(key)] = blocks if blocks is not None else _value(value)
    return out


def _as_blocks(value: Any) -> list[Block] | None:
    if not isinstance(value, list) or not value:
        return None
    blocks = []
    for item in value:
        block = _as_block(item, ())
        if block is None:
            return None
        blocks.append(block)
    return blocks


def _as_block(item: Any, labels: tuple[str, ...]) -> Block | None:
    if not isinstance(item, dict):
        return None
    if item.get(_IS_BLOCK) is True:
        return Block(labels, _body(item))
    if len(item) == 1:
        ((key, inner),) = item.items()
        return _as_block(inner, (*labels, _label(key)))
    return None


def _value(value: Any) -> object:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {_label(k): _value(v) for k, v in value.items() if k not in _META_KEYS}
    if value is None or isinstance(value, bool | int | float):
        return value
    return Invalid(f"unsupported HCL value {value!r}")


def _text(value: str) -> str | Invalid:
    heredoc = _HEREDOC.match(value)
    if heredoc is not None:
        return _heredoc(heredoc)
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        return _string(value[1:-1])
    return Invalid(f"HCL expressions are not supported by fieldlab-agent: {value}; write a literal value")


def _label(key: str) -> str:
    if len(key) >= 2 and key.startswith('"') and key.endswith('"'):
        text = _string(key[1:-1])
        return text if isinstance(text, str) else key[1:-1]
    return key


def _heredoc(m: re.Match[str]) -> str | Invalid:
    lines = m.group("body").splitlines(keepends=True)
    if m.group("trim"):
        indents = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
        cut = min(indents, default=0)
        lines = [line[cut:] if line.strip() else line.lstrip(" \t") for line in lines]
    return _template("".join(lines))


def _string(source: str) -> str | Invalid:
    """A quoted string's value: escapes resolved, template escapes undone, interpolations checked."""
    text: str = process_escape_sequences(source)
    return _template(text)


def _template(text: str) -> str | Invalid:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith(("$${", "%%{"), i):
            out.append(text[i + 1 : i + 3])
            i += 3
        elif text.startswith("%{", i):
            return Invalid("HCL template directives (%{ ... }) are not supported by fieldlab-agent")
        elif text.startswith("${", i):
            end = _closing_brace(text, i + 2)
            inner = text[i + 2 : end].strip()
            if inner.startswith(("var.", "local.")):
                return Invalid(f"HCL variables are not supported by fieldlab-agent: ${{{inner}}}")
            if "(" in inner:
                return Invalid(f"HCL functions are not supported by fieldlab-agent: ${{{inner}}}")
            out.append(text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1
