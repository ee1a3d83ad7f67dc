"""HCL's JSON syntax for jobspecs (`nomad job run job.json`): a JSON object read as an HCL body.

    if is_hcl_json(text):
        body = parse_hcl_json(text, report, variables, base_dir=path.parent)

    {"variable": {"image": {"default": "redis"}},
     "job": {"web": {"group": {"g": {"task": {"t": {"driver": "docker",
                                                    "config": {"image": "${var.image}"}}}}}}}}

What is a block is Nomad's jobspec schema (`_SCHEMA`, from agent.jobspec.fields and Nomad's jobspec
documentation): for each block type, which of its keys are blocks and how many labels each takes. A block
with labels is one object level per label (`"group": {"g": {...}}`); an array at any of those levels is
several blocks (`"service": [{...}, {...}]`, `"port": {"http": [{...}]}`). Every other key is an
attribute: strings are HCL templates (`"${var.image}"` evaluates, `"$${x}"` is a literal `${x}`), numbers,
booleans and null literals, arrays and objects lists and maps of those. `variable`'s `type` and a dynamic
block's `iterator` are expressions written as strings (`"type": "list(string)"`), as HCL's JSON syntax
reads them. A `"//"` key is a comment. The body is then evaluated as the native syntax's
(agent.jobspec.hcl.evaluate_body): variables, locals, functions and dynamic blocks alike.

Problems have paths (`job.web.group`); a top-level key that is not HCL's is one of them. JSON errors,
duplicate keys and nesting deeper than `limits.max_depth` are reported as for API JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from agent.jobspec.api_json import _load
from agent.jobspec.hcl import evaluate_body
from agent.jobspec.hclast import Interpolation, Literal, Node, ObjectCons, ParseError, TupleCons
from agent.jobspec.hclexpr import parse_expression, parse_template
from agent.jobspec.hclsyntax import Attribute, SyntaxBlock, SyntaxBody
from agent.jobspec.limits import DEFAULT_LIMITS, Limits
from agent.jobspec.tree import Body, Invalid, Report, join

__all__ = ["TOP_LEVEL", "is_hcl_json", "parse_hcl_json", "to_syntax"]

TOP_LEVEL = ("job", "variable", "variables", "locals")
_FIRST_KEY = re.compile(r'\A\ufeff?\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:')
_COMMENT = "//"

# block type -> {key that is a block in it: (the block's own type, its number of labels)}
_B = tuple[str, int]
_COMMON: dict[str, _B] = {
    "constraint": ("constraint", 0),
    "affinity": ("affinity", 0),
    "meta": ("meta", 0),
    "dynamic": ("dynamic", 1),
}
_SCHEMA: dict[str, dict[str, _B]] = {
    "": {
        "job": ("job", 1),
        "variable": ("variable", 1),
        "variables": ("variables", 0),
        "locals": ("locals", 0),
    },
    "variable": {"validation": ("validation", 0)},
    "job": {
        **_COMMON,
        "group": ("group", 1),
        "task": ("task", 1),
        "vault": ("vault", 0),
        "spread": ("spread", 0),
        "update": ("update", 0),
        "migrate": ("migrate", 0),
        "multiregion": ("multiregion", 0),
        "parameterized": ("parameterized", 0),
        "periodic": ("periodic", 0),
        "reschedule": ("reschedule", 0),
        "ui": ("ui", 0),
        "consul": ("consul", 0),
    },
    "group": {
        **_COMMON,
        "task": ("task", 1),
        "network": ("network", 0),
        "restart": ("restart", 0),
        "service": ("service", 0),
        "spread": ("spread", 0),
        "ephemeral_disk": ("ephemeral_disk", 0),
        "migrate": ("migrate", 0),
        "reschedule": ("reschedule", 0),
        "scaling": ("scaling", 0),
        "update": ("update", 0),
        "vault": ("vault", 0),
        "volume": ("volume", 1),
        "consul": ("consul", 0),
        "disconnect": ("disconnect", 0),
    },
    "task": {
        **_COMMON,
        "config": ("config", 0),
        "env": ("env", 0),
        "resources": ("resources", 0),
        "template": ("template", 0),
        "service": ("service", 0),
        "vault": ("vault", 0),
        "artifact": ("artifact", 0),
        "lifecycle": ("lifecycle", 0),
        "logs": ("logs", 0),
        "restart": ("restart", 0),
        "volume_mount": ("volume_mount", 0),
        "dispatch_payload": ("dispatch_payload", 0),
        "identity": ("identity", 0),
        "csi_plugin": ("csi_plugin", 0),
        "scaling": ("scaling", 1),
        "secret": ("secret", 1),
        "action": ("action", 1),
        "schedule": ("schedule", 0),
        "consul": ("consul", 0),
    },
    "network": {
        "port": ("port", 1),
        "reserved_ports": ("port", 1),
        "dns": ("dns", 0),
        "dynamic": ("dynamic", 1),
    },
    "resources": {"network": ("network", 0), "device": ("device", 1), "numa": ("numa", 0)},
    "device": {"constraint": ("constraint", 0), "affinity": ("affinity", 0)},
    "template": {"change_script": ("change_script", 0), "wait": ("wait", 0), "dynamic": ("dynamic", 1)},
    "service": {
        "check": ("check", 0),
        "check_restart": ("check_restart", 0),
        "connect": ("connect", 0),
        "meta": ("meta", 0),
        "canary_meta": ("canary_meta", 0),
        "tagged_addresses": ("tagged_addresses", 0),
        "identity": ("identity", 0),
        "dynamic": ("dynamic", 1),
    },
    "check": {"check_restart": ("check_restart", 0), "header": ("header", 0)},
    "artifact": {"options": ("options", 0), "headers": ("headers", 0)},
    "spread": {"target": ("target", 1)},
    "multiregion": {"strategy": ("strategy", 0), "region": ("region", 1)},
    "ui": {"link": ("link", 0)},
    "scaling": {"policy": ("policy", 0)},
}
# keys whose string is an expression (HCL's JSON syntax reads them so: a type, a name)
_EXPRESSION_KEYS: dict[str, frozenset[str]] = {
    "variable": frozenset({"type"}),
    "dynamic": frozenset({"iterator"}),
}


def is_hcl_json(text: str) -> bool:
    """Whether a JSON jobspec is in HCL's JSON syntax: its object's first key is one of HCL's top-level
    keys (job, variable, variables, locals, or a "//" comment); Nomad's API JSON starts with "Job",
    "ID", ... A pure look at the text's start: nothing is decoded."""
    m = _FIRST_KEY.match(text)
    return m is not None and (m.group(1) in TOP_LEVEL or m.group(1) == _COMMENT)


def parse_hcl_json(
    text: str,
    report: Report,
    variables: Mapping[str, object] | None = None,
    *,
    base_dir: Path | None = None,
    limits: Limits = DEFAULT_LIMITS,
    files: Mapping[str, str] | None = None,
    read: dict[str, str] | None = None,
) -> Body | None:
    """The jobspec's top-level body, evaluated, or None with the problems recorded in `report`."""
    data = _load(text, report, limits)
    if data is None:
        return None
    if not isinstance(data, dict):
        report.error("", 'an HCL JSON jobspec is an object: {"job": {"<id>": {...}}}')
        return None
    before = len(report.problems)
    syntax = to_syntax(data, report)
    if len(report.problems) != before:
        return None
    return evaluate_body(syntax, report, variables, base_dir=base_dir, files=files, read=read)


def to_syntax(data: Mapping[str, object], report: Report) -> SyntaxBody:
    """A decoded HCL JSON object -> the top-level body, as agent.jobspec.hclsyntax builds it from native
    syntax; problems are recorded (a key that is not HCL's at the top level is one)."""
    for key in data:
        if key not in TOP_LEVEL and key != _COMMENT:
            report.error(
                _short(key),
                "not part of an HCL jobspec (its top-level keys are job, variable, variables, locals)",
            )
    return _Converter(report).body(data, "", "")


class _Converter:
    def __init__(self, report: Report) -> None:
        self.report = report

    def body(self, obj: Mapping[str, object], context: str, path: str) -> SyntaxBody:
        schema = _SCHEMA.get(context, {})
        expression_keys = _EXPRESSION_KEYS.get(context, frozenset())
        items: list[Attribute | SyntaxBlock] = []
        for key, value in obj.items():
            if key == _COMMENT:
                continue
            if key in schema:
                kind, labels = schema[key]
                items.extend(self.blocks(key, kind, labels, value, join(path, key), ()))
                continue
            if context == "" and key not in TOP_LEVEL:
                continue  # reported by to_syntax
            node = self.expression(value, join(path, _short(key)), as_expression=key in expression_keys)
            if node is not None:
                items.append(Attribute(key, node, 0))
        return SyntaxBody(tuple(items))

    def blocks(
        self, key: str, kind: str, labels: int, value: object, path: str, got: tuple[str, ...]
    ) -> list[SyntaxBlock]:
        """The blocks written at `value`: one object level per label still to read, arrays anywhere."""
        if isinstance(value, list):
            out: list[SyntaxBlock] = []
            for one in value:
                out.extend(self.blocks(key, kind, labels, one, path, got))
            return out
        if isinstance(value, Invalid) or not isinstance(value, Mapping):
            shape = '{"<label>": {...}}' if labels else "an object (or an array of objects)"
            self.report.error(path, f"expected {key} blocks: {shape}")
            return []
        if labels:
            out = []
            for label, inner in value.items():
                if label == _COMMENT:
                    continue
                out.extend(
                    self.blocks(key, kind, labels - 1, inner, join(path, _short(label)), (*got, label))
                )
            return out
        if key == "dynamic" and got:  # its content is a block of the type its label names
            body = self.dynamic_body(value, got[0], path)
        else:
            body = self.body(value, kind, path)
        return [SyntaxBlock(key, got, body, 0)]

    def dynamic_body(self, obj: Mapping[str, object], kind: str, path: str) -> SyntaxBody:
        items: list[Attribute | SyntaxBlock] = []
        for key, value in obj.items():
            if key == _COMMENT:
                continue
            if key == "content":
                items.extend(self.blocks("content", kind, 0, value, join(path, key), ()))
                continue
            node = self.expression(value, join(path, key), as_expression=key == "iterator")
            if node is not None:
                items.append(Attribute(key, node, 0))
        return SyntaxBody(tuple(items))

    def expression(  # noqa: PLR0911 - one return per JSON value kind
        self, value: object, path: str, *, as_expression: bool = False
    ) -> Node | None:
        """A JSON value as an HCL expression; None with a problem recorded."""
        if isinstance(value, Invalid):
            self.report.error(path, value.reason)
            return None
        if isinstance(value, str):
            try:
                if as_expression:
                    return Interpolation(parse_expression(value), value)
                if "${" not in value and "%{" not in value:
                    return Literal(value)
                return parse_template(value, heredoc=True)  # JSON has decoded the escapes
            except ParseError as e:
                self.report.error(
                    path, f"cannot read the {'expression' if as_expression else 'template'}: {e}"
                )
                return None
        if isinstance(value, list):
            items = [self.expression(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return (
                None if any(i is None for i in items) else TupleCons(tuple(i for i in items if i is not None))
            )
        if isinstance(value, Mapping):
            pairs: list[tuple[Node, Node]] = []
            for key, item in value.items():
                node = self.expression(item, join(path, _short(str(key))))
                if node is None:
                    return None
                pairs.append((Literal(str(key)), node))
            return ObjectCons(tuple(pairs))
        return Literal(value)


def _short(text: str) -> str:
    return text if len(text) <= 64 else f"{text[:50]}... ({len(text)} characters)"
