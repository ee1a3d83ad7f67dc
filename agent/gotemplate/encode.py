"""Serialisation helpers as consul-template has them: toJSON / toJSONPretty (Go's encoding/json:
sorted keys, HTML-safe escapes, Go's float form), toUnescapedJSON*, toYAML, parseJSON (numbers
become float64, as Go decodes them), parseYAML."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
from typing import Any

from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import LIST_TYPES, MISSING, json_float, type_name
from agent.gotemplate.gotime import go_format

_JSON_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_HTML_ESC = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _json_str(s: str, html: bool) -> str:
    out = ['"']
    for ch in s:
        if ch in _JSON_ESC:
            out.append(_JSON_ESC[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif ch in _HTML_ESC and (html or ch in "\u2028\u2029"):
            out.append(_HTML_ESC[ch])
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json_key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if type(k) is int:
        return str(k)
    raise GoError(f"json: unsupported type: map key of type {type_name(k)}")


def to_json_text(v: Any, html: bool = True, indent: str = "", level: int = 0) -> str:  # noqa: PLR0911
    """encoding/json's Marshal (indent="") or MarshalIndent(v, "", indent)."""
    if v is None or v is MISSING:
        return "null"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        if math.isnan(v) or math.isinf(v):
            raise GoError(f"json: unsupported value: {v}")
        return json_float(v)
    if isinstance(v, str):
        return _json_str(v, html)
    if isinstance(v, dict):
        items = sorted(((_json_key(k), x) for k, x in v.items()), key=lambda kv: kv[0])
        parts = [
            f"{_json_str(k, html)}:{' ' if indent else ''}{to_json_text(x, html, indent, level + 1)}"
            for k, x in items
        ]
        return _wrap("{", "}", parts, indent, level)
    if isinstance(v, LIST_TYPES):
        return _wrap("[", "]", [to_json_text(x, html, indent, level + 1) for x in v], indent, level)
    if isinstance(v, dt.datetime):  # time.Time marshals as RFC 3339 with nanoseconds
        return _json_str(go_format(v, "2006-01-02T15:04:05.999999999Z07:00"), html)
    marshal = getattr(v, "go_json", None)  # a Go type's own form: a struct's fields in order, or a value
    if callable(marshal):
        value = marshal()
        if not isinstance(value, list):
            return to_json_text(value, html, indent, level)
        sep = " " if indent else ""
        parts = [f"{_json_str(k, html)}:{sep}{to_json_text(x, html, indent, level + 1)}" for k, x in value]
        return _wrap("{", "}", parts, indent, level)
    raise GoError(f"json: unsupported type: {type_name(v)}")


def _wrap(open_: str, close: str, parts: list[str], indent: str, level: int) -> str:
    if not parts:
        return open_ + close
    if not indent:
        return open_ + ",".join(parts) + close
    inner = "\n" + indent * (level + 1)
    return open_ + inner + ("," + inner).join(parts) + "\n" + indent * level + close


def to_json(v: Any) -> str:
    return to_json_text(v)


def to_json_pretty(v: Any) -> str:
    return to_json_text(v, indent="  ")


def to_unescaped_json(v: Any) -> str:
    return to_json_text(v, html=False)


def to_unescaped_json_pretty(v: Any) -> str:
    return to_json_text(v, html=False, indent="  ")


def _yaml() -> Any:
    """PyYAML, imported on first use: the agent's base install may lack it."""
    try:
        import yaml
    except ImportError:
        raise GoError("YAML support needs PyYAML, which is not installed") from None
    return yaml


@functools.cache
def _dumper() -> Any:
    yaml = _yaml()

    class Dumper(yaml.SafeDumper):  # type: ignore[misc, name-defined]
        """Go's yaml quotes with double quotes where PyYAML would use single ones."""

        def choose_scalar_style(self) -> Any:
            style = super().choose_scalar_style()
            return '"' if style == "'" else style

    return Dumper


def _plain(v: Any) -> Any:
    if v is MISSING:
        return None
    if isinstance(v, dict):
        return {_json_key(k): _plain(x) for k, x in v.items()}
    if isinstance(v, LIST_TYPES):
        return [_plain(x) for x in v]
    if type(v) is float and v.is_integer() and abs(v) < 1e21:
        return int(v)
    if v is None or isinstance(v, bool | int | float | str):
        return v
    raise GoError(f"yaml: unsupported type: {type_name(v)}")


def to_yaml(v: Any) -> str:
    yaml = _yaml()
    text: str = yaml.dump(
        _plain(v), Dumper=_dumper(), default_flow_style=False, sort_keys=True, allow_unicode=True
    )
    return text.removesuffix("\n").removesuffix("\n...")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"cannot unmarshal number {text} into Go value of type float64")
    return value


def _bad_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def parse_json(s: Any) -> Any:
    if not isinstance(s, str):
        raise GoError(f"parseJSON: wrong type for value; expected string; got {type_name(s)}")
    if s == "":
        return {}
    try:
        return json.loads(s, parse_int=_finite, parse_float=_finite, parse_constant=_bad_constant)
    except ValueError as exc:
        raise GoError(f"parseJSON: {exc}") from None


def parse_yaml(s: Any) -> Any:
    if not isinstance(s, str):
        raise GoError(f"parseYAML: wrong type for value; expected string; got {type_name(s)}")
    if s == "":
        return {}
    yaml = _yaml()
    try:
        return yaml.safe_load(s)
    except yaml.YAMLError as exc:
        raise GoError(f"parseYAML: {exc}") from None
