"""consul-template's toTOML: a map encoded as BurntSushi/toml's Encoder writes it (keys sorted, plain
values before tables, tables indented two spaces per level below the top, a blank line before each
top-level table and each [[array of tables]] entry, nil values left out), surrounding space trimmed."""

from __future__ import annotations

import math
import re
from typing import Any

from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import LIST_TYPES, MISSING, _f_form, _shortest, fmt_v, type_name

INDENT = "  "
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESC = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _quote(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _ESC:
            out.append(_ESC[ch])
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _key_part(k: str) -> str:
    return k if _BARE.fullmatch(k) else _quote(k)


def _is_nil(v: Any) -> bool:
    return v is None or v is MISSING


def _is_table_array(v: Any) -> bool:
    if not isinstance(v, LIST_TYPES) or len(v) == 0:
        return False
    if any(_is_nil(e) for e in v):
        raise GoError("toml: cannot encode array with nil element")
    return all(isinstance(e, dict) for e in v)


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) or _is_table_array(v)


def _float(f: float) -> str:
    """strconv.FormatFloat(f, 'f', -1, 64), with ".0" added to a whole number."""
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if f == 0:
        return "-0.0" if math.copysign(1.0, f) < 0 else "0.0"
    ds, dp = _shortest(abs(f))
    text = ("-" if f < 0 else "") + _f_form(ds, dp)
    return text if "." in text else text + ".0"


def _element(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return _float(v)
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, LIST_TYPES):
        if any(_is_nil(e) for e in v):
            raise GoError("toml: cannot encode array with nil element")
        return "[" + ", ".join(_element(e) for e in v) + "]"
    if isinstance(v, dict):
        items = [(k, x) for k, x in _sorted(v) if not _is_nil(x)]
        return "{" + ", ".join(f"{_key_part(k)} = {_element(x)}" for k, x in items) + "}"
    raise GoError(f"toml: unsupported type: {type_name(v)}")


def _sorted(m: dict[Any, Any]) -> list[tuple[str, Any]]:
    return sorted(((k if isinstance(k, str) else fmt_v(k), v) for k, v in m.items()), key=lambda kv: kv[0])


class _Encoder:
    def __init__(self) -> None:
        self.out: list[str] = []

    def newline(self) -> None:
        if self.out:
            self.out.append("\n")

    def table_body(self, key: list[str], m: dict[Any, Any]) -> None:
        items = _sorted(m)
        direct = [(k, v) for k, v in items if not _is_table(v)]
        sub = [(k, v) for k, v in items if _is_table(v)]
        for k, v in direct + sub:
            if not _is_nil(v):
                self.encode([*key, k], v)

    def encode(self, key: list[str], v: Any) -> None:
        indent = INDENT * (len(key) - 1)
        name = ".".join(_key_part(k) for k in key)
        if isinstance(v, dict):
            if len(key) == 1:
                self.newline()
            self.out.append(f"{indent}[{name}]")
            self.newline()
            self.table_body(key, v)
        elif _is_table_array(v):
            for elem in v:
                self.newline()
                self.out.append(f"{indent}[[{name}]]")
                self.newline()
                self.table_body(key, elem)
        else:
            self.out.append(f"{indent}{_key_part(key[-1])} = {_element(v)}")
            self.newline()


def to_toml(m: Any) -> str:
    if not isinstance(m, dict):
        raise GoError(f"toTOML: wrong type for value; expected map[string]interface {{}}; got {type_name(m)}")
    enc = _Encoder()
    try:
        enc.table_body([], m)
    except GoError as exc:
        raise GoError(f"toTOML: {exc}") from None
    return "".join(enc.out).strip()
