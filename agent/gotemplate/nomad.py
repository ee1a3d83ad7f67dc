"""consul-template's Nomad functions (template/nomad_funcs.go) and the types they give a template
(dependency/nomad_var_structs.go, nomad_service.go, nomad_services.go). The data comes through a
`NomadSource` the caller implements (the agent answers a render worker's calls from its own state,
agent.templates.nomadfuncs); what it answers is plain JSON, made into consul-template's types here:

- `nomadVar "path"`: NomadVarItems, a map of item name to NomadVarItem (`{{ .password }}` prints the
  value; `range $k, $v := ...` in key order) with the methods Keys, Values, Tuples (`.K`, `.V`),
  Metadata (NomadVarMeta), Parent (NomadVariable: Namespace, Path, CreateIndex, ModifyIndex,
  CreateTime, ModifyTime, Items) and ItemsMap; an item has Key, Value, String, Metadata, Parent.
  `nomadVar ""` is empty, without asking.
- `nomadVarExists "path"`: a bool (`""` is false, without asking).
- `nomadVarList ["prefix"]`, `nomadVarListSafe ["prefix"]`: NomadVarMeta list (prints as its Path;
  CreateTime and ModifyTime are nanoTime: String, Time); the safe one refuses an empty list.
- `nomadService "[tag.]name[@region]"` and `nomadService COUNT KEY "name"` (rendezvous choice of
  COUNT instances, keyed by KEY): NomadService maps {ID, Name, Node, Address, Port, Datacenter,
  Tags, JobID, AllocID}.
- `nomadServices ["@region"]`: {Name, Tags} maps, sorted by name.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import LIST_TYPES, fmt_v, go_quote, type_name
from agent.gotemplate.gotime import go_format
from agent.gotemplate.objects import GoObject, GoStruct

NANOS = 1_000_000_000


class NomadSource(Protocol):
    """What the Nomad functions read. Any method may raise; the template reports it as
    `error calling <function>: <message>` at the calling action."""

    def nomad_var(self, path: str) -> dict[str, Any]:
        """api.Variable of `path[@namespace[.region]]`: {"Namespace", "Path", "CreateIndex",
        "ModifyIndex", "CreateTime", "ModifyTime", "Items"}. Raises when the task may not read it,
        or when it does not exist (Nomad waits for it to exist)."""
        ...

    def nomad_var_exists(self, path: str) -> bool:
        """Whether the variable exists; raises when the task may not read it."""
        ...

    def nomad_var_list(self, prefix: str) -> list[dict[str, Any]]:
        """api.VariableMetadata of the variables under `prefix[@namespace[.region]]` that the task
        may read (the others are left out, without an error), sorted by path."""
        ...

    def nomad_service(self, query: str, count: int | None, key: str | None) -> list[dict[str, Any]]:
        """The instances of `[tag.]name[@region]`, COUNT of them chosen by rendezvous hashing on
        KEY when count is given: {"ID", "Name", "Node", "Address", "Port", "Datacenter", "Tags",
        "JobID", "AllocID"}."""
        ...

    def nomad_services(self, query: str) -> list[dict[str, Any]]:
        """Every service, `""` or `"@region"`: {"Name", "Tags"}, sorted by name."""
        ...


def _local(ns: int) -> dt.datetime:
    """time.Unix(0, ns) in the local zone, to the microsecond."""
    seconds, rest = divmod(ns, NANOS)
    utc = dt.datetime.fromtimestamp(seconds, tz=dt.UTC) + dt.timedelta(microseconds=rest // 1000)
    return utc.astimezone()


class NanoTime(int, GoObject):
    """consul-template's nanoTime: Nomad's int64 nanoseconds, with String (Go's time.Time.String in
    the local zone) and Time."""

    GO_TYPE = "dependency.nanoTime"
    GO_METHODS: ClassVar[dict[str, str]] = {"String": "string", "Time": "time"}

    def time(self) -> dt.datetime:
        return _local(int(self))

    def string(self) -> str:
        t = _local(int(self))
        fraction = f".{int(self) % NANOS:09d}".rstrip("0").rstrip(".")
        return go_format(t, "2006-01-02 15:04:05") + fraction + go_format(t, " -0700 MST")

    def __str__(self) -> str:
        return self.string()

    def go_json(self) -> int:
        return int(self)


class NomadVarMeta(GoStruct):
    GO_TYPE = "*dependency.NomadVarMeta"
    GO_FIELDS = ("Namespace", "Path", "CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime")
    GO_METHODS: ClassVar[dict[str, str]] = {"String": "string"}

    def string(self) -> str:
        return str(self.fields["Path"])

    def __str__(self) -> str:
        return self.string()


class NomadVariable(GoStruct):
    GO_TYPE = "*dependency.NomadVariable"
    GO_FIELDS = ("Namespace", "Path", "CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime", "Items")
    GO_METHODS: ClassVar[dict[str, str]] = {"Metadata": "metadata"}

    def metadata(self) -> NomadVarMeta:
        return NomadVarMeta(**{k: v for k, v in self.fields.items() if k != "Items"})


class NomadVarItem(GoStruct):
    """One item of a variable: prints as its value (String), marshals as its value."""

    GO_TYPE = "dependency.NomadVarItem"
    GO_FIELDS = ("Key", "Value")
    GO_METHODS: ClassVar[dict[str, str]] = {"String": "string", "Metadata": "metadata", "Parent": "parent"}

    def __init__(self, owner: NomadVariable | None = None, **fields: Any) -> None:
        super().__init__(**fields)
        self.owner = owner

    def string(self) -> str:
        return str(self.fields["Value"])

    def __str__(self) -> str:
        return self.string()

    def go_json(self) -> Any:  # MarshalJSON: the value, not the struct
        return self.fields["Value"]

    def metadata(self) -> NomadVarMeta | None:
        return self.owner.metadata() if self.owner is not None else None

    def parent(self) -> NomadVariable | None:
        return self.owner


class _KV(GoStruct):
    GO_TYPE = "struct { K string; V string }"
    GO_FIELDS = ("K", "V")


class NomadVarItems(dict[str, NomadVarItem], GoObject):
    """A variable's items: a map (its keys are fields: `.password`) whose methods come first, as a
    Go method set does."""

    GO_TYPE = "dependency.NomadVarItems"
    GO_METHODS: ClassVar[dict[str, str]] = {
        "Keys": "keys_",
        "Values": "values_",
        "Tuples": "tuples",
        "Metadata": "metadata",
        "Parent": "parent",
        "ItemsMap": "items_map",
    }

    def keys_(self) -> list[str]:
        return sorted(self)

    def values_(self) -> list[str]:
        return [self[k].string() for k in sorted(self)]

    def tuples(self) -> list[_KV]:
        return [_KV(K=k, V=self[k].string()) for k in sorted(self)]

    def metadata(self) -> NomadVarMeta | None:
        return next((item.metadata() for item in self.values()), None)

    def parent(self) -> NomadVariable | None:
        return next((item.owner for item in self.values()), None)

    def items_map(self) -> dict[str, Any] | None:
        return {k: item.string() for k, item in self.items()} or None


def _int(v: Any) -> int:
    return v if type(v) is int else 0


def _meta_fields(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "Namespace": str(raw.get("Namespace", "")),
        "Path": str(raw.get("Path", "")),
        "CreateIndex": _int(raw.get("CreateIndex")),
        "ModifyIndex": _int(raw.get("ModifyIndex")),
        "CreateTime": NanoTime(_int(raw.get("CreateTime"))),
        "ModifyTime": NanoTime(_int(raw.get("ModifyTime"))),
    }


def variable(raw: Any) -> NomadVariable:
    """consul-template's NewNomadVariable, of an api.Variable as JSON."""
    if not isinstance(raw, dict) or not isinstance(raw.get("Items"), dict):
        raise GoError(f"nomadVar: expected a variable, got {type_name(raw)}")
    var = NomadVariable(**_meta_fields(raw))
    var.fields["Items"] = NomadVarItems(
        {str(k): NomadVarItem(var, Key=str(k), Value=str(v)) for k, v in sorted(raw["Items"].items())}
    )
    return var


def var_meta(raw: Any) -> NomadVarMeta:
    if not isinstance(raw, dict):
        raise GoError(f"nomadVarList: expected variable metadata, got {type_name(raw)}")
    return NomadVarMeta(**_meta_fields(raw))


def _string(fn: str, v: Any) -> str:
    if not isinstance(v, str):
        raise GoError(f"{fn}: wrong type for value; expected string; got {type_name(v)}")
    return v


def _maps(fn: str, v: Any) -> list[dict[str, Any]]:
    if not isinstance(v, LIST_TYPES) or not all(isinstance(s, dict) for s in v):
        raise GoError(f"{fn}: expected a list of services, got {type_name(v)}")
    return list(v)


def nomad_functions(src: NomadSource) -> dict[str, Callable[..., Any]]:
    def nomad_var(path: Any) -> NomadVarItems:
        if not _string("nomadVar", path):
            return NomadVarItems()
        items: NomadVarItems = variable(src.nomad_var(path)).fields["Items"]
        return items

    def nomad_var_exists(path: Any) -> bool:
        return bool(_string("nomadVarExists", path)) and src.nomad_var_exists(path) is True

    def var_list(fn: str, empty_ok: bool) -> Callable[..., list[NomadVarMeta]]:
        def listing(*args: Any) -> list[NomadVarMeta]:
            if len(args) > 1:
                raise GoError(
                    'nomadVarList takes either a single "prefix" parameter or none for all available '
                    f"variables; got: {fmt_v(list(args))}"
                )
            prefix = _string(fn, args[0]) if args else ""
            found = src.nomad_var_list(prefix)
            metas = [var_meta(m) for m in (found if isinstance(found, list) else [])]
            if not metas and not empty_ok:
                raise GoError(f"{fn}: no variables under {go_quote(prefix)}: refusing to render")
            return metas

        return listing

    def nomad_service(*args: Any) -> list[dict[str, Any]]:
        if len(args) == 1:
            if not isinstance(args[0], str):
                raise GoError("expected string for <service> argument")
            return _maps("nomadService", src.nomad_service(args[0], None, None))
        if len(args) == 3:
            count, key, name = args
            if type(count) is not int:
                raise GoError("expected integer for <count> argument")
            if not isinstance(key, str):
                raise GoError("expected string for <key> argument")
            if not isinstance(name, str):
                raise GoError("expected string for <service> argument")
            return _maps("nomadService", src.nomad_service(name, count, key))
        raise GoError("expected arguments <service> or <count> <key> <service>")

    def nomad_services(*args: Any) -> list[dict[str, Any]]:
        query = "".join(_string("nomadServices", a) for a in args)
        return _maps("nomadServices", src.nomad_services(query))

    return {
        "nomadService": nomad_service,
        "nomadServices": nomad_services,
        "nomadVar": nomad_var,
        "nomadVarExists": nomad_var_exists,
        "nomadVarList": var_list("nomadVarList", True),
        "nomadVarListSafe": var_list("nomadVarListSafe", False),
    }
