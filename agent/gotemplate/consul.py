"""consul-template's functions as Nomad offers them: the data-backed ones read through a
`DataSource` the caller implements (Vault, Consul KV and catalog, Nomad variables and services,
env, files, sockaddr), the rest are pure (with `scratch`, a per-run scratchpad, and
consul-template's `sprig_*` functions). `REFUSED_FUNCTIONS` names the ones this agent refuses: they
run a plugin program or write files."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any, Protocol

from agent.gotemplate import encode, helpers
from agent.gotemplate.builtins import EXECUTE_TEMPLATE, GoError
from agent.gotemplate.gofmt import LIST_TYPES, go_quote, type_name
from agent.gotemplate.gotime import RFC3339, go_format
from agent.gotemplate.nomad import NomadSource, nomad_functions
from agent.gotemplate.objects import SCRATCH
from agent.gotemplate.sprig_collections import sprig_functions
from agent.gotemplate.tomlenc import to_toml

REFUSED_FUNCTIONS = frozenset({"plugin", "writeToFile"})


class DataSource(NomadSource, Protocol):
    """What the data-backed template functions read. Any method may raise; the template reports it
    as `error calling <function>: <message>` at the calling action."""

    def secret(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """Vault read (no params) or write (params): {"LeaseID", "LeaseDuration", "Renewable",
        "Data", "Warnings"}."""
        ...

    def secrets(self, path: str) -> list[str]:
        """Vault LIST."""
        ...

    def key(self, path: str) -> str | None:
        """A Consul KV value; None when the key is missing."""
        ...

    def ls(self, prefix: str) -> list[dict[str, Any]]:
        """Top-level KeyPairs under a prefix: {"Path", "Key", "Value", "Exists", "CreateIndex",
        "ModifyIndex", "LockIndex", "Flags", "Session"}, Key relative to the prefix."""
        ...

    def tree(self, prefix: str) -> list[dict[str, Any]]:
        """Every KeyPair under a prefix, recursively."""
        ...

    def service(self, name: str, *filters: str) -> list[dict[str, Any]]:
        """Healthy instances of `[tag.]name[@dc][~near][|filter]`: HealthService dicts (Node,
        Address, ID, Name, Tags, Port, ServiceMeta, ...)."""
        ...

    def services(self) -> list[dict[str, Any]]:
        """The catalog's services: {"Name", "Tags"}."""
        ...

    def env(self, name: str) -> str | None:
        """An environment variable of the task; None when it is not set ("" is a variable set to
        the empty string). `env` renders None as "", `envOrDefault` uses its default only for None
        and `mustEnv` fails for None (and for "")."""
        ...

    def file(self, path: str) -> str:
        """The contents of a file."""
        ...

    def datacenters(self, ignore_inaccessible: bool) -> list[str]:
        """The names of the known Consul datacenters, sorted; with ignore_inaccessible (`datacenters
        true`), only those that answer and have a leader."""
        ...

    def node(self, name: str) -> dict[str, Any] | None:
        """A catalog node by `name[@datacenter]` as the template gave it ("" is the local agent's
        node), None when there is none:
        consul-template's CatalogNode, {"Node": {"ID", "Node", "Address", "Datacenter",
        "TaggedAddresses", "Meta"}, "Services": [{"ID", "Service", "Tags", "Meta", "Port",
        "Address"}, ...]}."""
        ...

    def nodes(self) -> list[dict[str, Any]]:
        """Every catalog node, sorted by name: {"ID", "Node", "Address", "Datacenter",
        "TaggedAddresses", "Meta"}."""
        ...

    def sockaddr(self, expr: str) -> str:
        """A go-sockaddr template (`GetPrivateIP`, `GetInterfaceIP "eth0"`, ...) evaluated on the
        client: the text between the braces, as the template gave it."""
        ...


def _path(fn: str, v: Any) -> str:
    if not isinstance(v, str):
        raise GoError(f"{fn}: wrong type for value; expected string; got {type_name(v)}")
    return v


def _pairs(fn: str, v: Any) -> list[dict[str, Any]]:
    if not isinstance(v, LIST_TYPES) or not all(isinstance(p, dict) for p in v):
        raise GoError(f"{fn}: expected a list of key pairs (from ls or tree), got {type_name(v)}")
    return list(v)


def by_key(pairs: Any) -> dict[str, dict[str, Any]]:
    """Group KeyPairs by their top-level directory; the top directory is cut from each Key."""
    out: dict[str, dict[str, Any]] = {}
    for pair in _pairs("byKey", pairs):
        top, _, rest = str(pair.get("Key", "")).partition("/")
        if not rest:
            continue
        out.setdefault(top, {})[rest] = {**pair, "Key": rest}
    return out


def by_tag(services: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    if not isinstance(services, LIST_TYPES):
        raise GoError(f"byTag: expected a list of services, got {type_name(services)}")
    for svc in services:
        if not isinstance(svc, dict):
            raise GoError(f"byTag: expected a service, got {type_name(svc)}")
        for tag in svc.get("Tags") or ():
            out.setdefault(tag, []).append(svc)
    return out


_META_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_ATOI = re.compile(r"[+-]?[0-9]+")


def by_meta(meta: Any, services: Any) -> dict[str, list[Any]]:
    """Group services by the values of ServiceMeta keys (`"env,shard|int"`): a key's group name is
    its values joined by "_", each with characters outside [a-zA-Z0-9_-] replaced by "_"; a
    missing or empty value is "<key>_UNKNOWN"; `|int` pads a number as %05d."""
    keys = _path("byMeta", meta).split(",")
    if not isinstance(services, LIST_TYPES):
        raise GoError(f"byMeta: expected a list of services, got {type_name(services)}")
    out: dict[str, list[Any]] = {}
    for svc in services:
        if not isinstance(svc, dict):
            raise GoError(f"byMeta: expected a service, got {type_name(svc)}")
        sm = svc.get("ServiceMeta") or {}
        parts = []
        for key in keys:
            real = key.removesuffix("|int")
            value = sm.get(real) if isinstance(sm, dict) else None
            if not isinstance(value, str) or value == "":
                value = _META_UNSAFE.sub("_", real) + "_UNKNOWN"
            if key.endswith("|int"):
                if not _ATOI.fullmatch(value) or not -(2**63) <= int(value) < 2**63:
                    raise GoError(f"byMeta: cannot parse {value} as number: strconv.Atoi: invalid syntax")
                value = f"{int(value):05d}"
            parts.append(_META_UNSAFE.sub("_", value))
        out.setdefault("_".join(parts), []).append(svc)
    return out


def _explode_into(m: dict[str, Any], key: str, value: Any, path: str) -> None:
    parts = key.split("/")
    for part in parts[:-1]:
        nested = m.setdefault(part, {})
        if not isinstance(nested, dict):
            raise GoError(
                f"not a map: {go_quote(path)}: {go_quote(part)} already has value {go_quote(str(nested))}"
            )
        m = nested
    if parts[-1]:
        m[parts[-1]] = value


def explode(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in _pairs("explode", pairs):
        key = str(pair.get("Key", ""))
        _explode_into(out, key, pair.get("Value", ""), key)
    return out


def explode_map(m: Any) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise GoError(f"explodeMap: expected a map, got {type_name(m)}")
    out: dict[str, Any] = {}
    for key, value in m.items():
        _explode_into(out, str(key), value, str(key))
    return out


def _timestamp(now: Callable[[], dt.datetime]) -> Callable[..., str]:
    def timestamp(*args: Any) -> str:
        t = now().astimezone(dt.UTC)
        if not args:
            return go_format(t, RFC3339)
        if len(args) > 1:
            raise GoError(f"timestamp: wrong number of arguments, expected 0 or 1, but got {len(args)}")
        layout = _path("timestamp", args[0])
        if layout == "unix":
            return str(int(t.timestamp()))
        return go_format(t, layout)

    return timestamp


def _data_functions(src: DataSource) -> dict[str, Callable[..., Any]]:
    def secret(path: Any, *data: Any) -> dict[str, Any]:
        params: dict[str, str] = {}
        for item in data:
            k, eq, v = _path("secret", item).partition("=")
            if not eq:
                raise GoError(f"secret: parameter {go_quote(item)} is not key=value")
            params[k] = v
        return src.secret(_path("secret", path), params)

    def secrets(path: Any) -> list[str]:
        return src.secrets(_path("secrets", path))

    def key(path: Any) -> str:
        value = src.key(_path("key", path))
        if value is None:
            raise GoError(f"key {go_quote(path)} not found")
        return value

    def key_or_default(path: Any, default: Any) -> Any:
        value = src.key(_path("keyOrDefault", path))
        return default if value is None else value

    def key_exists(path: Any) -> bool:
        return src.key(_path("keyExists", path)) is not None

    def ls(prefix: Any) -> list[dict[str, Any]]:
        return src.ls(_path("ls", prefix))

    def tree(prefix: Any) -> list[dict[str, Any]]:
        return src.tree(_path("tree", prefix))

    def safe_ls(prefix: Any) -> list[dict[str, Any]]:
        pairs = src.ls(_path("safeLs", prefix))
        if not pairs:
            raise GoError(f"safeLs: no keys under {go_quote(prefix)}: refusing to render")
        return pairs

    def safe_tree(prefix: Any) -> list[dict[str, Any]]:
        pairs = src.tree(_path("safeTree", prefix))
        if not pairs:
            raise GoError(f"safeTree: no keys under {go_quote(prefix)}: refusing to render")
        return pairs

    def service(name: Any, *filters: Any) -> list[dict[str, Any]]:
        return src.service(_path("service", name), *(_path("service", f) for f in filters))

    def services(*args: Any) -> list[dict[str, Any]]:
        if args:
            raise GoError("services: a datacenter query is not supported")
        return src.services()

    def env(name: Any) -> str:
        return src.env(_path("env", name)) or ""

    def must_env(name: Any) -> str:
        value = src.env(_path("mustEnv", name))
        if value is None:
            raise GoError(f"mustEnv: environment variable {go_quote(name)} is not set")
        if value == "":
            raise GoError(f"mustEnv: environment variable {go_quote(name)} is empty")
        return value

    def env_or_default(name: Any, default: Any) -> Any:
        value = src.env(_path("envOrDefault", name))
        return default if value is None else value

    def datacenters(*args: Any) -> list[str]:
        if len(args) > 1 or (args and type(args[0]) is not bool):
            raise GoError("datacenters: expected no argument or one boolean")
        return src.datacenters(bool(args and args[0]))

    def node(*args: Any) -> dict[str, Any] | None:
        if len(args) > 1:
            raise GoError(f"node: wrong number of arguments, expected 0 or 1, but got {len(args)}")
        return src.node(_path("node", args[0]) if args else "")

    def nodes(*args: Any) -> list[dict[str, Any]]:
        if args:
            raise GoError("nodes: a datacenter or near query is not supported")
        return src.nodes()

    def sockaddr(*args: Any) -> str:
        return src.sockaddr(" ".join(_path("sockaddr", a) for a in args))

    def file(path: Any) -> str:
        return src.file(_path("file", path))

    return {
        "datacenters": datacenters,
        "env": env,
        "envOrDefault": env_or_default,
        "mustEnv": must_env,
        "node": node,
        "nodes": nodes,
        "sockaddr": sockaddr,
        "file": file,
        "key": key,
        "keyExists": key_exists,
        "keyOrDefault": key_or_default,
        "ls": ls,
        "safeLs": safe_ls,
        "safeTree": safe_tree,
        "secret": secret,
        "secrets": secrets,
        "service": service,
        "services": services,
        "tree": tree,
    }


PURE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "add": helpers.add,
    "base64Decode": helpers.base64_decode,
    "base64Encode": helpers.base64_encode,
    "base64URLDecode": helpers.base64_url_decode,
    "base64URLEncode": helpers.base64_url_encode,
    "byKey": by_key,
    "byMeta": by_meta,
    "byTag": by_tag,
    "contains": helpers.contains,
    "containsAll": helpers.contains_all,
    "containsAny": helpers.contains_any,
    "containsNone": helpers.contains_none,
    "containsNotAll": helpers.contains_not_all,
    "divide": helpers.divide,
    "executeTemplate": EXECUTE_TEMPLATE,
    "explode": explode,
    "explodeMap": explode_map,
    "in": helpers.in_,
    "indent": helpers.indent,
    "join": helpers.join,
    "loop": helpers.loop,
    "maximum": helpers.maximum,
    "md5sum": helpers.md5sum,
    "minimum": helpers.minimum,
    "modulo": helpers.modulo,
    "multiply": helpers.multiply,
    "parseBool": helpers.parse_bool,
    "parseFloat": helpers.parse_float,
    "parseInt": helpers.parse_int,
    "parseJSON": encode.parse_json,
    "parseUint": helpers.parse_uint,
    "parseYAML": encode.parse_yaml,
    "regexMatch": helpers.regex_match,
    "regexReplaceAll": helpers.regex_replace_all,
    "replaceAll": helpers.replace_all,
    "sha256Hex": helpers.sha256_hex,
    "split": helpers.split,
    "subtract": helpers.subtract,
    "toJSON": encode.to_json,
    "toJSONPretty": encode.to_json_pretty,
    "scratch": SCRATCH,
    "toLower": helpers.to_lower,
    "toTOML": to_toml,
    "toTitle": helpers.to_title,
    "toUnescapedJSON": encode.to_unescaped_json,
    "toUnescapedJSONPretty": encode.to_unescaped_json_pretty,
    "toUpper": helpers.to_upper,
    "toYAML": encode.to_yaml,
    "trim": helpers.trim,
    "trimPrefix": helpers.trim_prefix,
    "trimSpace": helpers.trim_space,
    "trimSuffix": helpers.trim_suffix,
}


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def consul_functions(
    source: DataSource, now: Callable[[], dt.datetime] | None = None
) -> dict[str, Callable[..., Any]]:
    """Every consul-template function this agent supports, bound to `source`, with the Sprig
    subset as `sprig_<name>`. `now` (for tests) gives the time `timestamp`, `sprig_now` and
    `sprig_date` read."""
    clock = now or _utc_now
    funcs = dict(PURE_FUNCTIONS)
    funcs["timestamp"] = _timestamp(clock)
    funcs.update(sprig_functions(clock))
    funcs.update(_data_functions(source))
    funcs.update(nomad_functions(source))
    return funcs
