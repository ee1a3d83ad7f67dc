"""Nomad's HCL2 jobspec text -> the builder's plain body, evaluated as Nomad's jobspec2 evaluates it: input
variables, locals, expressions, functions, templates and dynamic blocks.

The text is parsed by agent.jobspec.hclsyntax (bodies of attributes and blocks, each attribute's value an
agent.jobspec.hclexpr expression); this module evaluates it (agent.jobspec.hcleval):

- `variable`, `variables` and `locals` blocks are read first (agent.jobspec.hclvars); their problems stop
  the parse (the job is not read), as in Nomad;
- every other block becomes `Block(labels, body)`, the blocks of one type a list in the body (by their
  first appearance, as the attributes); `dynamic "x"` blocks become `x` blocks, after the static ones;
- an attribute's value is evaluated; a list or an object written out (`[...]`, `{...}`) item by item, so
  that a problem has its own path. A failure becomes `Invalid` at that attribute: the builder reports it
  once at its path;
- syntax errors and names set twice are found by the parser (agent.jobspec.hclsyntax).

References whose root is not `var`, `local` or an iterator (`${NOMAD_ALLOC_ID}`, `${attr.kernel.name}`,
`${meta.x}`, a bare `attr.kernel.name`) are runtime values, kept verbatim for the client.

HCL's JSON syntax is read by agent.jobspec.hcljson into the same SyntaxBody, then evaluated here
(`evaluate_body`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from agent.jobspec.hclast import (
    GetAttr,
    Index,
    Interpolation,
    Literal,
    Node,
    ObjectCons,
    Template,
    TupleCons,
    Variable,
    is_traversal,
)
from agent.jobspec.hcleval import Scope, evaluate
from agent.jobspec.hclsyntax import Attribute, SyntaxBlock, SyntaxBody, parse_body
from agent.jobspec.hclvalues import Context, EvalError
from agent.jobspec.hclvalues import kind as kind_of
from agent.jobspec.hclvars import VariableDecl, declare, resolve_locals, resolve_variables
from agent.jobspec.tree import Block, Body, Invalid, Report

__all__ = ["evaluate_body", "parse_hcl"]

log = logging.getLogger(__name__)

_Item = Attribute | SyntaxBlock


def parse_hcl(
    text: str,
    report: Report,
    variables: Mapping[str, object] | None = None,
    *,
    base_dir: Path | None = None,
    files: Mapping[str, str] | None = None,
    read: dict[str, str] | None = None,
) -> Body | None:
    """The jobspec's top-level body, evaluated, or None with the problems recorded in `report`.
    `variables`: input variables given from outside (see agent.jobspec.parse_jobspec); `base_dir`: the
    jobspec file's directory, for `file()` (None over the API: `file()` is refused)."""
    syntax = parse_body(text, report)
    if syntax is None:
        return None
    log.debug("HCL parsed %d top-level items", len(syntax.items))
    return evaluate_body(syntax, report, variables, base_dir=base_dir, files=files, read=read)


def evaluate_body(
    syntax: SyntaxBody,
    report: Report,
    variables: Mapping[str, object] | None = None,
    *,
    base_dir: Path | None = None,
    files: Mapping[str, str] | None = None,
    read: dict[str, str] | None = None,
) -> Body | None:
    """A parsed top-level body (native or JSON syntax), evaluated; None with the problems recorded.
    `files`: the files sent with the jobspec (what file() reads over the API); `read` receives what
    file() read from `base_dir`."""
    ctx = Context(base_dir=base_dir, bundle=files, read=read if read is not None else {})
    try:
        return _Adapter(report, ctx).top(syntax, variables or {})
    except RecursionError:
        report.error("", "the jobspec is nested too deeply")
    except Exception as e:  # a bug here must not become a 500 or a crashed CLI: reported, and logged
        log.exception("HCL evaluation failed")
        report.error("", f"the jobspec could not be evaluated: {type(e).__name__}: {e}")
    return None


def _grouped(body: SyntaxBody) -> dict[str, list[_Item]]:
    """The body's items by name, names in the order of their first appearance."""
    out: dict[str, list[_Item]] = {}
    for item in body.items:
        out.setdefault(item.type if isinstance(item, SyntaxBlock) else item.name, []).append(item)
    return out


def _blocks_of(items: list[_Item] | None) -> list[SyntaxBlock] | None:
    """The blocks when every item is one, else None."""
    if not items or not all(isinstance(i, SyntaxBlock) for i in items):
        return None
    return [i for i in items if isinstance(i, SyntaxBlock)]


def _attribute_of(items: list[_Item]) -> Attribute | None:
    """The last attribute of the name (a name set twice is reported by the parser), or None."""
    attributes = [i for i in items if isinstance(i, Attribute)]
    return attributes[-1] if attributes else None


def _traversal_text(node: Node) -> str:
    if isinstance(node, Variable):
        return node.name
    if isinstance(node, GetAttr):
        return f"{_traversal_text(node.target)}.{node.name}"
    if isinstance(node, Index) and isinstance(node.key, Literal):
        key = node.key.value
        return (
            f"{_traversal_text(node.target)}[{key if isinstance(key, int) else chr(34) + str(key) + chr(34)}]"
        )
    return "..."


class _Adapter:
    def __init__(self, report: Report, ctx: Context) -> None:
        self.report = report
        self.ctx = ctx

    def top(self, syntax: SyntaxBody, given: Mapping[str, object]) -> Body | None:
        before = len(self.report.problems)
        decls: list[VariableDecl] = []
        definitions: dict[str, Node] = {}
        seen: set[str] = set()
        grouped = _grouped(syntax)
        for key, items in grouped.items():
            if key == "variable":
                decls.extend(self.variables(items, seen))
            elif key == "variables":
                decls.extend(self.variables_block(items, seen))
            elif key == "locals":
                self.locals(items, definitions)
        if len(self.report.problems) != before:
            return None
        values = resolve_variables(decls, given, self.report, self.ctx)
        if values is None:
            return None
        local_values = resolve_locals(definitions, values, self.report, self.ctx)
        if local_values is None:
            return None
        scope = Scope(self.ctx, values, local_values.__getitem__, frozenset(local_values))
        rest = {k: v for k, v in grouped.items() if k not in ("variable", "variables", "locals")}
        return self.body(rest, scope)

    # --- variables and locals

    def variables(self, items: list[_Item], seen: set[str]) -> list[VariableDecl]:
        blocks = _blocks_of(items)
        if blocks is None:
            self.report.error("variable", 'expected variable "name" { ... } blocks')
            return []
        decls = []
        for block in blocks:
            if len(block.labels) != 1:
                self.report.error("variable", 'a variable block takes one label: variable "name" { ... }')
                continue
            (name,) = block.labels
            if name in seen:
                self.report.error(f"variable.{name}", "declared more than once")
                continue
            seen.add(name)
            attributes = self.attributes(block.body, f"variable.{name}", blocks_ok=("validation",))
            validations = []
            for i, validation in enumerate(block.body.blocks("validation")):
                vpath = f"variable.{name}.validation[{i}]"
                if validation.labels:
                    self.report.error(vpath, "a validation block takes no labels")
                validations.append(self.attributes(validation.body, vpath))
            if attributes is None or any(v is None for v in validations):
                continue
            decl = declare(name, attributes, [v for v in validations if v is not None], self.report, self.ctx)
            if decl is not None:
                decls.append(decl)
        return decls

    def variables_block(self, items: list[_Item], seen: set[str]) -> list[VariableDecl]:
        """Nomad's `variables { name = default ... }` shorthand."""
        decls = []
        blocks = _blocks_of(items)
        for block in blocks or []:
            if block.labels:
                self.report.error("variables", "a variables block takes no labels")
            attributes = self.attributes(block.body, "variables")
            for name, node in (attributes or {}).items():
                if name in seen:
                    self.report.error(f"variable.{name}", "declared more than once")
                    continue
                seen.add(name)
                decl = declare(name, {"default": node}, [], self.report, self.ctx)
                if decl is not None:
                    decls.append(decl)
        if blocks is None:
            self.report.error("variables", "expected a variables { name = default } block")
        return decls

    def locals(self, items: list[_Item], definitions: dict[str, Node]) -> None:
        blocks = _blocks_of(items)
        if blocks is None:
            self.report.error("locals", "expected locals { name = value } blocks")
            return
        for block in blocks:
            if block.labels:
                self.report.error("locals", "a locals block takes no labels")
            for name, node in (self.attributes(block.body, "locals") or {}).items():
                if name in definitions:
                    self.report.error(f"locals.{name}", "defined more than once")
                definitions[name] = node

    def attributes(
        self, body: SyntaxBody, path: str, blocks_ok: tuple[str, ...] = ()
    ) -> dict[str, Node] | None:
        out: dict[str, Node] = {}
        ok = True
        for item in body.items:
            if isinstance(item, SyntaxBlock):
                if item.type not in blocks_ok:
                    self.report.error(f"{path}.{item.type}", "a block is not expected here")
                    ok = False
                continue
            out[item.name] = item.expr
        return out if ok else None

    # --- the job

    def body(self, grouped: Mapping[str, list[_Item]], scope: Scope) -> dict[str, object]:
        out: dict[str, object] = {}
        for name, items in grouped.items():
            blocks = _blocks_of(items)
            if blocks is None:
                attribute = _attribute_of(items)
                if attribute is not None:
                    out[name] = self.value(attribute.expr, scope)
            elif name == "dynamic":
                for block in blocks:
                    self.dynamic(block, scope, out)
            else:
                built = [Block(b.labels, self.body(_grouped(b.body), scope)) for b in blocks]
                _add_blocks(out, name, built)
        return out

    def value(self, node: Node, scope: Scope) -> object:  # noqa: PLR0911
        """The value, or Invalid; an object's or a list's items one by one, so a problem has its own path."""
        if isinstance(node, Literal):
            return node.value
        expr = node.expr if isinstance(node, Interpolation) else node
        if isinstance(expr, TupleCons):
            return [self.value(item, scope) for item in expr.items]
        if isinstance(expr, ObjectCons):
            out: dict[str, object] = {}
            for key, item in expr.items:
                name = key.value if isinstance(key, Literal) else self.value(key, scope)
                if isinstance(name, Invalid):
                    return name
                if not isinstance(name, str | int | float) or isinstance(name, bool):
                    return Invalid(f"an object key must be a string, not {kind_of(name)}")
                out[str(name)] = self.value(item, scope)
            return out
        if not isinstance(node, Interpolation | Template) and is_traversal(node):
            node = Interpolation(node, _traversal_text(node))  # a runtime reference is kept as ${...}
        try:
            return evaluate(node, scope)
        except EvalError as e:
            return Invalid(str(e))

    def dynamic(self, block: SyntaxBlock, scope: Scope, out: dict[str, object]) -> None:
        if len(block.labels) != 1:
            out["dynamic"] = Invalid(
                'a dynamic block takes one label, the type of its blocks: dynamic "env" {...}'
            )
            return
        (kind,) = block.labels
        try:
            blocks = self.expand(kind, block.body, scope)
        except EvalError as e:
            out[kind] = Invalid(f'dynamic "{kind}": {e}')
            return
        _add_blocks(out, kind, blocks)

    def expand(self, kind: str, body: SyntaxBody, scope: Scope) -> list[Block]:
        fields = ("for_each", "iterator", "labels", "content")
        grouped = _grouped(body)
        for key in grouped:
            if key not in fields:
                raise EvalError(f'"{key}" is not a dynamic block field ({", ".join(fields)})')
        contents = _blocks_of(grouped.get("content"))
        if contents is None or len(contents) != 1 or contents[0].labels:
            raise EvalError("needs exactly one content { ... } block, without labels")
        content = _grouped(contents[0].body)
        attributes = body.attributes()
        if "for_each" not in attributes:
            raise EvalError("for_each is required")
        iterator = kind
        if "iterator" in attributes:
            node = attributes["iterator"].expr
            expr = node.expr if isinstance(node, Interpolation) else node
            if not isinstance(expr, Variable):
                raise EvalError("iterator must be a name: iterator = item")
            iterator = expr.name
        collection = evaluate(attributes["for_each"].expr, scope)
        labels_node = attributes["labels"].expr if "labels" in attributes else None
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
