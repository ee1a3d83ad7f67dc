"""Nomad's HCL2 jobspec text -> the builder's plain body, through python-hcl2 (8.x), evaluated as Nomad's
jobspec2 evaluates it: input variables, locals, expressions, functions, templates and dynamic blocks.

What python-hcl2 8.x hands back, and what is done with it here:
- blocks are lists of dicts marked `"__is_block__": True`; each label nests one dict level with the label
  as key: `job "x" { group "g" {} }` -> `{"job": [{'"x"': {"group": [{'"g"': {...}}], ...}}]}`. They
  become `Block(labels, body)`;
- string literals keep their quotes and escapes (`'"a\\"b"'`); object keys too (`'"k"'`), a bare key
  stays bare (`k`) and a parenthesised key is an expression (`"${(var.k)}"`). Strings are parsed as
  templates (agent.jobspec.hclexpr): escapes, `$${`/`%%{`, `${...}`, `%{ if }`/`%{ for }` with `~`;
  python-hcl2 re-spells directives (`%{for x in l}` -> `%{ for x in l }`) but keeps their meaning;
- heredocs come back verbatim inside quotes (`'"<<EOT\nline\nEOT"'`, real newlines), also inside
  expressions; every line keeps its newline, `<<-` removes the common indentation, no backslash escapes.
  python-hcl2 rejects a closing marker followed by spaces, which Nomad accepts: they are removed first;
- an expression that is not a literal (`var.x`, `5 * 2`, `[for x in l : x]`) arrives as an unquoted
  `"${...}"` string holding its source (re-spelled: `1e3` -> `1000.0`): it is parsed and evaluated
  (agent.jobspec.hcleval). A failure becomes `Invalid` at that attribute: the builder reports it once at
  its path;
- `variable`, `variables` and `locals` blocks are read first (agent.jobspec.hclvars); their problems stop
  the parse (the job is not read), as in Nomad. `dynamic "x"` blocks become `x` blocks, after the static
  ones;
- a repeated attribute is silently kept last by python-hcl2, so duplicates are found on the parse tree.

References whose root is not `var`, `local` or an iterator (`${NOMAD_ALLOC_ID}`, `${attr.kernel.name}`,
`${meta.x}`) are runtime values, kept verbatim for the client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lark.exceptions
from hcl2.api import parses, serialize
from hcl2.utils import SerializationOptions, process_escape_sequences

from agent.jobspec.hcleval import Scope, evaluate
from agent.jobspec.hclexpr import (
    Interpolation,
    Literal,
    Node,
    ObjectCons,
    ParseError,
    TupleCons,
    Variable,
    parse_expression,
    parse_template,
    trim_heredoc,
)
from agent.jobspec.hclfuncs import Context, EvalError
from agent.jobspec.hclfuncs import kind as kind_of
from agent.jobspec.hclvars import VariableDecl, declare, resolve_locals, resolve_variables
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


def parse_hcl(
    text: str,
    report: Report,
    variables: Mapping[str, object] | None = None,
    *,
    base_dir: Path | None = None,
) -> Body | None:
    """The jobspec's top-level body, evaluated, or None with the problems recorded in `report`.
    `variables`: input variables given from outside (see agent.jobspec.parse_jobspec); `base_dir`: the
    jobspec file's directory, for `file()` (None over the API: `file()` is refused)."""
    raw = _parse(text, report)
    if raw is None:
        return None
    log.debug("python-hcl2 parsed %d top-level keys", len(raw))
    try:
        return _Adapter(report, Context(base_dir=base_dir)).top(raw, variables or {})
    except RecursionError:
        report.error("", "the jobspec is nested too deeply")
    except Exception as e:  # a bug here must not become a 500 or a crashed CLI: reported, and logged
        log.exception("HCL evaluation failed")
        report.error("", f"the jobspec could not be evaluated: {type(e).__name__}: {e}")
    return None


def read_attributes(text: str, report: Report) -> dict[str, Node] | None:
    """A variables file's `name = value` attributes, parsed (not evaluated); blocks are problems."""
    raw = _parse(text, report)
    if raw is None:
        return None
    out: dict[str, Node] = {}
    for key, value in raw.items():
        if key in _META_KEYS:
            continue
        if _raw_blocks(value) is not None:
            report.error(_label(key), "a variables file holds name = value attributes, not blocks")
            continue
        try:
            out[_label(key)] = _node(value)
        except ParseError as e:
            report.error(_label(key), f"cannot read the expression: {e}")
    return out


def _parse(text: str, report: Report) -> dict[str, Any] | None:
    text = _fix_heredoc_markers(text.replace("\r\n", "\n"))
    try:
        tree = parses(text)
    except lark.exceptions.UnexpectedInput as e:
        report.error("", _syntax_reason(e))
        return None
    except (lark.exceptions.LarkError, RuntimeError, ValueError, RecursionError) as e:
        report.error("", f"HCL syntax error: {e}")
        return None
    _find_duplicates(tree.body, "", report)  # reported; the value written last is read on
    try:
        raw: dict[str, Any] = serialize(tree, serialization_options=_OPTIONS)
    except (RuntimeError, ValueError, RecursionError) as e:
        report.error("", f"HCL syntax error: {e}")
        return None
    return raw


_HEREDOC_OPENER = re.compile(r"<<-?([A-Za-z][A-Za-z0-9._-]*)[ \t]*$")


def _fix_heredoc_markers(text: str) -> str:
    """Removes spaces and tabs after a heredoc's closing marker (python-hcl2 rejects them, Nomad not)."""
    if "<<" not in text:
        return text
    lines = text.split("\n")
    marker: str | None = None
    for i, line in enumerate(lines):
        if marker is None:
            m = _HEREDOC_OPENER.search(line)
            if m is not None:
                marker = m.group(1)
        elif line.strip(" \t") == marker:
            lines[i] = line.rstrip(" \t")
            marker = None
    return "\n".join(lines)


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


# --- python-hcl2's dicts -> expressions -> plain bodies ---------------------------------------------------


def _raw_blocks(value: Any) -> list[tuple[tuple[str, ...], dict[str, Any]]] | None:
    """(labels, raw body) of each block when `value` is a list of blocks, else None."""
    if not isinstance(value, list) or not value:
        return None
    blocks = []
    for item in value:
        block = _raw_block(item, ())
        if block is None:
            return None
        blocks.append(block)
    return blocks


def _raw_block(item: Any, labels: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    if not isinstance(item, dict):
        return None
    if item.get(_IS_BLOCK) is True:
        return labels, item
    if len(item) == 1:
        ((key, inner),) = item.items()
        return _raw_block(inner, (*labels, _label(key)))
    return None


def _node(value: Any) -> Node:  # noqa: PLR0911 - one return per python-hcl2 value kind
    """python-hcl2's value -> an expression; raises ParseError."""
    if isinstance(value, str):
        heredoc = _HEREDOC.match(value)
        if heredoc is not None:
            body = heredoc.group("body")
            if heredoc.group("trim"):
                body = trim_heredoc(body)
            return parse_template(body, heredoc=True)
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            if not any(c in value for c in "\\$%"):
                return Literal(value[1:-1])
            return parse_template(value)
        source = value[2:-1].strip() if value.startswith("${") and value.endswith("}") else value.strip()
        return Interpolation(parse_expression(source), source)  # a bare name comes back without ${}
    if isinstance(value, list):
        return TupleCons(tuple(_node(v) for v in value))
    if isinstance(value, dict):
        return ObjectCons(tuple((_key(k), _node(v)) for k, v in value.items() if k not in _META_KEYS))
    if value is None or isinstance(value, bool | int | float):
        return Literal(value)
    raise ParseError(f"unsupported HCL value {value!r}")


def _key(key: str) -> Node:
    if key.startswith('"') or key.startswith("${"):
        return _node(key)
    return Literal(key)


class _Adapter:
    def __init__(self, report: Report, ctx: Context) -> None:
        self.report = report
        self.ctx = ctx

    def top(self, raw: dict[str, Any], given: Mapping[str, object]) -> Body | None:
        before = len(self.report.problems)
        decls: list[VariableDecl] = []
        definitions: dict[str, Node] = {}
        seen: set[str] = set()
        for key, value in raw.items():
            if key == "variable":
                decls.extend(self.variables(value, seen))
            elif key == "variables":
                decls.extend(self.variables_block(value, seen))
            elif key == "locals":
                self.locals(value, definitions)
        if len(self.report.problems) != before:
            return None
        values = resolve_variables(decls, given, self.report, self.ctx)
        if values is None:
            return None
        local_values = resolve_locals(definitions, values, self.report, self.ctx)
        if local_values is None:
            return None
        scope = Scope(self.ctx, values, local_values.__getitem__, frozenset(local_values))
        rest = {k: v for k, v in raw.items() if k not in ("variable", "variables", "locals")}
        return self.body(rest, scope)

    # --- variables and locals

    def variables(self, value: Any, seen: set[str]) -> list[VariableDecl]:
        blocks = _raw_blocks(value)
        if blocks is None:
            self.report.error("variable", 'expected variable "name" { ... } blocks')
            return []
        decls = []
        for labels, body in blocks:
            if len(labels) != 1:
                self.report.error("variable", 'a variable block takes one label: variable "name" { ... }')
                continue
            (name,) = labels
            if name in seen:
                self.report.error(f"variable.{name}", "declared more than once")
                continue
            seen.add(name)
            attributes = self.attributes(body, f"variable.{name}", blocks_ok=("validation",))
            validations = []
            for i, (vlabels, vbody) in enumerate(_raw_blocks(body.get("validation")) or []):
                vpath = f"variable.{name}.validation[{i}]"
                if vlabels:
                    self.report.error(vpath, "a validation block takes no labels")
                validations.append(self.attributes(vbody, vpath))
            if attributes is None or any(v is None for v in validations):
                continue
            decl = declare(name, attributes, [v for v in validations if v is not None], self.report, self.ctx)
            if decl is not None:
                decls.append(decl)
        return decls

    def variables_block(self, value: Any, seen: set[str]) -> list[VariableDecl]:
        """Nomad's `variables { name = default ... }` shorthand."""
        decls = []
        for labels, body in _raw_blocks(value) or []:
            if labels:
                self.report.error("variables", "a variables block takes no labels")
            attributes = self.attributes(body, "variables")
            for name, node in (attributes or {}).items():
                if name in seen:
                    self.report.error(f"variable.{name}", "declared more than once")
                    continue
                seen.add(name)
                decl = declare(name, {"default": node}, [], self.report, self.ctx)
                if decl is not None:
                    decls.append(decl)
        if _raw_blocks(value) is None:
            self.report.error("variables", "expected a variables { name = default } block")
        return decls

    def locals(self, value: Any, definitions: dict[str, Node]) -> None:
        blocks = _raw_blocks(value)
        if blocks is None:
            self.report.error("locals", "expected locals { name = value } blocks")
            return
        for labels, body in blocks:
            if labels:
                self.report.error("locals", "a locals block takes no labels")
            for name, node in (self.attributes(body, "locals") or {}).items():
                if name in definitions:
                    self.report.error(f"locals.{name}", "defined more than once")
                definitions[name] = node

    def attributes(
        self, body: dict[str, Any], path: str, blocks_ok: tuple[str, ...] = ()
    ) -> dict[str, Node] | None:
        out: dict[str, Node] = {}
        ok = True
        for key, value in body.items():
            if key in _META_KEYS or key in blocks_ok:
                continue
            name = _label(key)
            if _raw_blocks(value) is not None:
                self.report.error(join(path, name), "a block is not expected here")
                ok = False
                continue
            try:
                out[name] = _node(value)
            except ParseError as e:
                self.report.error(join(path, name), f"cannot read the expression: {e}")
                ok = False
        return out if ok else None

    # --- the job

    def body(self, raw: dict[str, Any], scope: Scope) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in raw.items():
            if key in _META_KEYS:
                continue
            name = _label(key)
            blocks = _raw_blocks(value)
            if blocks is None:
                out[name] = self.value(value, scope)
            elif name == "dynamic":
                for labels, body in blocks:
                    self.dynamic(labels, body, scope, out)
            else:
                built = [Block(labels, self.body(body, scope)) for labels, body in blocks]
                _add_blocks(out, name, built)
        return out

    def value(self, value: Any, scope: Scope) -> object:  # noqa: PLR0911
        """The value, or Invalid; an object's or a list's items one by one, so a problem has its own path."""
        if isinstance(value, list) and _raw_blocks(value) is None:
            return [self.value(item, scope) for item in value]
        if isinstance(value, dict) and value.get(_IS_BLOCK) is not True:
            out: dict[str, object] = {}
            for key, item in value.items():
                if key in _META_KEYS:
                    continue
                name = self.value(key, scope) if key.startswith(('"', "${")) else key
                if isinstance(name, Invalid):
                    return name
                if not isinstance(name, str | int | float) or isinstance(name, bool):
                    return Invalid(f"an object key must be a string, not {kind_of(name)}")
                out[str(name)] = self.value(item, scope)
            return out
        try:
            node = _node(value)
        except ParseError as e:
            return Invalid(f"cannot read the expression: {e}")
        if isinstance(node, Literal):
            return node.value
        try:
            return evaluate(node, scope)
        except EvalError as e:
            return Invalid(str(e))

    def dynamic(
        self, labels: tuple[str, ...], raw: dict[str, Any], scope: Scope, out: dict[str, object]
    ) -> None:
        if len(labels) != 1:
            out["dynamic"] = Invalid(
                'a dynamic block takes one label, the type of its blocks: dynamic "env" {...}'
            )
            return
        (kind,) = labels
        try:
            blocks = self.expand(kind, raw, scope)
        except EvalError as e:
            out[kind] = Invalid(f'dynamic "{kind}": {e}')
            return
        _add_blocks(out, kind, blocks)

    def expand(self, kind: str, raw: dict[str, Any], scope: Scope) -> list[Block]:  # noqa: PLR0912
        fields = ("for_each", "iterator", "labels", "content")
        for key in raw:
            if key not in _META_KEYS and key not in fields:
                raise EvalError(f'"{key}" is not a dynamic block field ({", ".join(fields)})')
        contents = _raw_blocks(raw.get("content"))
        if contents is None or len(contents) != 1 or contents[0][0]:
            raise EvalError("needs exactly one content { ... } block, without labels")
        content = contents[0][1]
        if "for_each" not in raw:
            raise EvalError("for_each is required")
        iterator = kind
        try:
            if "iterator" in raw:
                node = _node(raw["iterator"])
                expr = node.expr if isinstance(node, Interpolation) else node
                if not isinstance(expr, Variable):
                    raise EvalError("iterator must be a name: iterator = item")
                iterator = expr.name
            collection = evaluate(_node(raw["for_each"]), scope)
            labels_node = _node(raw["labels"]) if "labels" in raw else None
        except ParseError as e:
            raise EvalError(f"cannot read the expression: {e}") from None
        if isinstance(collection, list):
            pairs: list[tuple[object, object]] = list(enumerate(collection))
        elif isinstance(collection, dict):
            pairs = [(k, collection[k]) for k in sorted(collection)]
        else:
            raise EvalError(f"for_each must be a list, set or map, not {kind_of(collection)}")
        blocks = []
        for item_key, item in pairs:
            inner = scope.bind({iterator: {"key": item_key, "value": item}})
            labels: tuple[str, ...] = ()
            if labels_node is not None:
                values = evaluate(labels_node, inner)
                if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                    raise EvalError("labels must be a list of strings")
                labels = tuple(str(v) for v in values)
            blocks.append(Block(labels, self.body(content, inner)))
        return blocks


def _add_blocks(out: dict[str, object], name: str, blocks: list[Block]) -> None:
    existing = out.get(name)
    if isinstance(existing, list):
        existing.extend(blocks)
    elif not isinstance(existing, Invalid):
        out[name] = blocks


def _label(key: str) -> str:
    if len(key) >= 2 and key.startswith('"') and key.endswith('"'):
        try:
            text: str = process_escape_sequences(key[1:-1])
        except (ValueError, UnicodeError):
            return key[1:-1]
        return text.replace("$${", "${").replace("%%{", "%{")
    return key
