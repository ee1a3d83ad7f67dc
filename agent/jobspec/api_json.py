"""JSON jobspecs -> the builder's plain body.

Two JSON forms are read:
- Nomad's API JSON, as `nomad job run -output` or `nomad job inspect` write it and POST /v1/jobs takes it:
  `{"Job": {"ID": ..., "TaskGroups": [{"Name": ..., "Networks": [{"Mode": "bridge", "DynamicPorts":
  [{"Label": "www", "To": 8001}]}], "Tasks": [...]}]}}` (the envelope may be left out). Names are mapped
  onto HCL's (`fields.API_RENAMES`, else snake_case) so that paths and warnings read the same for both
  forms; durations are nanoseconds; Go writes every unset field as its zero value, so zero values of
  unimplemented fields are not warned about, and "" of an implemented one means unset. Fields the Nomad
  server sets (`fields.SERVER_SET`) are ignored with one warning per object;
- HCL's JSON syntax with HCL's names: `{"job": {"example": {"group": {"web": {...}}}}}`, passed on as is
  (the builder reads labelled blocks from objects keyed by label).

Nothing here raises on bad input: a value of the wrong shape becomes `Invalid` (reported by the builder at
its path), numbers JSON cannot hold exactly (5,000 digits, 1e400, NaN) too, and nesting deeper than
`limits.max_depth` is refused before anything is read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agent.jobspec.fieldclass import server_side_warning
from agent.jobspec.fields import API_ONLY, API_RENAMES, IMPLEMENTED, SERVER_SET, UNIMPLEMENTED
from agent.jobspec.limits import DEFAULT_LIMITS, Limits
from agent.jobspec.tree import NOT_IMPLEMENTED, Block, Body, Invalid, Report, depth, join

# How an implemented field holding blocks is read: (its context, "one" | "many" | "labelled" | "ports"
# | "map": an object of objects by label, as a group's Volumes).
_NESTED: Mapping[tuple[str, str], tuple[str, str]] = {
    ("job", "group"): ("group", "labelled"),
    ("group", "task"): ("task", "labelled"),
    ("group", "network"): ("network", "many"),
    ("group", "restart"): ("restart", "one"),
    ("task", "restart"): ("restart", "one"),
    ("group", "service"): ("service", "many"),
    ("network", "port"): ("port", "ports"),
    ("network", "dns"): ("dns", "one"),
    ("network", "cni"): ("cni", "one"),
    ("task", "resources"): ("resources", "one"),
    ("task", "template"): ("template", "many"),
    ("task", "service"): ("service", "many"),
    ("task", "vault"): ("vault", "one"),
    ("task", "logs"): ("logs", "one"),
    ("task", "lifecycle"): ("lifecycle", "one"),
    ("task", "volume_mount"): ("volume_mount", "many"),
    ("task", "artifact"): ("artifact", "many"),
    ("task", "identity"): ("identity", "many"),
    ("group", "volume"): ("volume", "map"),
    ("group", "ephemeral_disk"): ("ephemeral_disk", "one"),
    ("group", "consul"): ("consul", "one"),
    ("task", "consul"): ("consul", "one"),
    ("group", "scaling"): ("scaling", "one"),
    ("group", "update"): ("update", "one"),
    ("job", "update"): ("update", "one"),
    ("group", "reschedule"): ("reschedule", "one"),
    ("job", "reschedule"): ("reschedule", "one"),
    ("resources", "network"): ("network", "many"),
    ("template", "change_script"): ("change_script", "one"),
    ("template", "wait"): ("wait", "one"),
    ("service", "check"): ("check", "many"),
    ("service", "check_restart"): ("check_restart", "one"),
    ("check", "check_restart"): ("check_restart", "one"),
    ("job", "constraint"): ("constraint", "many"),
    ("group", "constraint"): ("constraint", "many"),
    ("task", "constraint"): ("constraint", "many"),
    ("job", "parameterized"): ("parameterized", "one"),
    ("task", "dispatch_payload"): ("dispatch_payload", "one"),
    ("job", "periodic"): ("periodic", "one"),
}
# Implemented durations: nanoseconds in the API JSON.
_DURATIONS: Mapping[str, frozenset[str]] = {
    "task": frozenset({"kill_timeout", "shutdown_delay"}),
    "group": frozenset({"shutdown_delay", "max_run_duration"}),
    "restart": frozenset({"interval", "delay"}),
    "template": frozenset({"splay"}),
    "wait": frozenset({"min", "max"}),
    "change_script": frozenset({"timeout"}),
    "check": frozenset({"interval", "timeout"}),
    "check_restart": frozenset({"grace"}),
    "identity": frozenset({"ttl"}),
    "update": frozenset({"stagger", "min_healthy_time", "healthy_deadline", "progress_deadline"}),
    "reschedule": frozenset({"interval", "delay", "max_delay"}),
}
# Server-set fields the agent derives again from the job itself, read back without a word: a group's
# scaling policy's ID, Target and indexes (agent.nomadapi.jobjson.scaling_policy), so that a job
# read with GET /v1/job/:id registers again as it was.
_DERIVED: Mapping[str, frozenset[str]] = {
    "scaling": frozenset({"ID", "Namespace", "Target", "CreateIndex", "ModifyIndex"})
}
# The field that names an object of a labelled list.
_LABEL_KEY = {"group": "Name", "task": "Name", "port": "Label"}
# API defaults that mean "not set" for fields the agent does not implement.
_UNSET_DEFAULTS = {
    ("address_mode", "auto"),
    ("host_network", "default"),
    ("on_update", "require_healthy"),
    ("uid", -1),
    ("gid", -1),
    # What Nomad's CLI and `job inspect` always send for a job: the defaults of a one-region,
    # one-namespace cluster, which is what this agent is.
    ("region", "global"),
    ("namespace", "default"),
    ("priority", 50),
    ("node_pool", "default"),
    ("spec_type", "cron"),  # a periodic job's (Nomad's PeriodicSpecCron)
}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_MAX_INT_DIGITS = 19  # int64


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def parse_json(text: str, report: Report, limits: Limits = DEFAULT_LIMITS) -> Body | None:
    """The jobspec's top-level body, or None with the problems recorded in `report`."""
    data = _load(text, report, limits)
    if data is None:
        return None
    if not isinstance(data, dict):
        report.error("", 'a JSON jobspec is an object: {"Job": {...}} or {"job": {"<id>": {...}}}')
        return None
    if "job" in data:
        return data
    if "Job" in data:
        for key, value in data.items():
            if key == "Job":
                continue
            name = hcl_name("request", key)
            if name in UNIMPLEMENTED["request"]:
                if not _unset(name, value):
                    report.warn(key, server_side_warning("request", name) or NOT_IMPLEMENTED)
            else:
                report.error(_short(key), "not a field of Nomad's job registration request")
        job = data["Job"]
    elif "ID" in data or "TaskGroups" in data:
        job = data
    else:
        report.error(
            "", 'expected Nomad\'s API JSON {"Job": {"ID": ...}} or HCL JSON {"job": {"<id>": {...}}}'
        )
        return None
    return {"job": _Api(report).job(job)}


def _load(text: str, report: Report, limits: Limits) -> object:
    """The decoded JSON, or None with the problem recorded."""
    too_deep = f"the jobspec is nested more than {limits.max_depth} levels"
    try:
        data = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except json.JSONDecodeError as e:
        report.error("", f"JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}")
        return None
    except _DuplicateKeyError as e:
        report.error("", f"JSON syntax error: the key {_short(e.key)!r} appears twice in one object")
        return None
    except RecursionError:
        report.error("", too_deep)
        return None
    except ValueError as e:  # anything else the decoder refuses
        report.error("", f"JSON syntax error: {_short(str(e))}")
        return None
    if depth(data, limits.max_depth) > limits.max_depth:
        report.error("", too_deep)
        return None
    return data


def hcl_name(context: str, key: str) -> str:
    """The HCL name of an API JSON field of a block (the context's key in the `fields` tables)."""
    renamed = API_RENAMES.get(context, {}).get(key)
    return renamed if renamed is not None else _CAMEL.sub("_", key).lower()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _int(text: str) -> int | Invalid:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text)} digits)"
        return Invalid(f"the number {shown} is out of range")
    return int(text)


def _float(text: str) -> float | Invalid:
    if len(text) > 400:
        return Invalid(f"the number {text[:20]}... ({len(text)} characters) is out of range")
    value = float(text)
    if not math.isfinite(value):
        return Invalid(f"the number {text} is out of range")
    return value


def _constant(text: str) -> Invalid:
    return Invalid(f"{text} is not a number JSON allows")


def _unset(name: str, value: object) -> bool:
    if value is None or value is False or value in ("", 0, [], {}):
        return True
    return isinstance(value, str | int) and (name, value) in _UNSET_DEFAULTS


def _nanoseconds(value: object) -> object:
    if isinstance(value, Invalid):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value}ns"
    return Invalid(
        f"expected a whole number of nanoseconds, as Nomad's API JSON writes durations, not {_show(value)}"
    )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} {text[:30]}..."


class _Api:
    def __init__(self, report: Report) -> None:
        self.report = report

    def job(self, raw: object) -> object:
        if not isinstance(raw, dict):
            return Invalid("expected a JSON object")
        job_id = raw.get("ID")
        if not isinstance(job_id, str) or not job_id:
            return Invalid('"ID" is required, a string')
        path = f"job.{job_id}"
        skip = {"ID"} | ({"Name"} if raw.get("Name") == job_id else set())
        return [Block((job_id,), self._fields(raw, path, "job", skip))]

    def _fields(
        self, raw: Mapping[str, object], path: str, context: str, skip: set[str]
    ) -> dict[str, object]:
        out: dict[str, object] = {}
        ignored: list[str] = []
        raw = _identity_listed(context, raw)
        for key, value in raw.items():
            if key in skip or self._server_set(context, key, value, path, ignored):
                continue
            if context == "constraint" and key not in API_RENAMES["constraint"]:
                out[key] = Invalid("not a field of Nomad's api.Constraint: LTarget, RTarget, Operand")
                continue  # the HCL shorthands (regexp = ...) are not the API's
            name = hcl_name(context, key)
            if name in IMPLEMENTED[context]:
                if value is None or value == "":  # Go's zero value of a string: not set
                    continue
                converted = self._value(context, key, name, value, join(path, name))
                before = out.get(name)
                if before is None:
                    out[name] = converted
                elif isinstance(before, list) and isinstance(converted, list):
                    out[name] = [*before, *converted]  # DynamicPorts and ReservedPorts
                else:
                    out[name] = Invalid(f"set twice (as {key!r} and under another name)")
            elif name in UNIMPLEMENTED[context]:
                if not _unset(name, value):
                    out[name] = value
            else:
                out[key] = value  # not a Nomad field: the builder rejects it under the name it was given
        if ignored:
            self.report.warn(
                path, f"set by the Nomad server, ignored by fieldlab-agent: {', '.join(sorted(ignored))}"
            )
        return out

    def _server_set(self, context: str, key: str, value: object, path: str, ignored: list[str]) -> bool:
        """Whether `key` is a field without an HCL name (server-set: added to `ignored`; API-only:
        warned about), that is not given on."""
        if key in SERVER_SET.get(context, ()):
            if not _unset(key, value):
                ignored.append(key)
            return True
        if key in API_ONLY.get(context, ()):
            if not _unset(key, value):
                self.report.warn(join(path, key))
            return True
        return False

    def _value(self, context: str, key: str, name: str, value: object, path: str) -> object:
        if name in _DURATIONS.get(context, ()):
            return _nanoseconds(value)
        nested = _NESTED.get((context, name))
        if nested is None:
            return value
        inner, shape = nested
        if shape in ("one", "map"):
            return self._one(value, path, inner) if shape == "one" else self._map(value, path, inner)
        if not isinstance(value, list):
            return Invalid(f"expected a list of objects, not {_kind(value)}")
        if shape == "ports":
            return self._ports(value, path, reserved=key != "DynamicPorts")
        return self._list(value, path, inner, labelled=shape == "labelled")

    def _map(self, value: object, path: str, context: str) -> object:
        """{label: object} (a group's Volumes: {alias: VolumeRequest}, its Name the alias again)."""
        if value is None:
            return []
        if not isinstance(value, dict):
            return Invalid(f"expected an object of objects by name, not {_kind(value)}")
        blocks: list[Block] = []
        for label, item in value.items():
            if not isinstance(item, dict):
                return Invalid(f"{label}: expected an object, not {_kind(item)}")
            blocks.append(Block((str(label),), self._fields(item, f"{path}.{label}", context, {"Name"})))
        return blocks

    def _one(self, value: object, path: str, context: str) -> object:
        if isinstance(value, list) and len(value) == 1:
            value = value[0]  # some writers give a single block as a list of one
        if not isinstance(value, dict):
            return Invalid(f"expected an object, not {_kind(value)}")
        return [Block((), self._fields(value, path, context, set(_DERIVED.get(context, ()))))]

    def _list(self, value: list[object], path: str, context: str, *, labelled: bool) -> object:
        blocks: list[Block] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                return Invalid(f"item {i}: expected an object, not {_kind(item)}")
            if not labelled:
                ipath = path if context == "network" else f"{path}[{i}]"  # the builder reads one network
                fields = self._fields(item, ipath, context, set())
                if context == "constraint" and "operator" not in fields:  # "Missing constraint operand"
                    fields["operator"] = Invalid('required: "Operand", the operator ("=", "regexp", ...)')
                blocks.append(Block((), fields))
                continue
            label_key = _LABEL_KEY[context]
            label = item.get(label_key)
            if not isinstance(label, str) or not label:
                return Invalid(f'item {i}: "{label_key}" is required, a string')
            blocks.append(Block((label,), self._fields(item, f"{path}.{label}", context, {label_key})))
        return blocks

    def _ports(self, value: list[object], path: str, *, reserved: bool) -> object:
        blocks: list[Block] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                return Invalid(f"item {i}: expected an object, not {_kind(item)}")
            label = item.get("Label")
            if not isinstance(label, str) or not label:
                return Invalid(f'item {i}: "Label" is required, a string')
            ppath = f"{path}.{label}"
            skip = {"Label"}
            if not reserved:
                skip.add("Value")
                if item.get("Value") not in (None, 0):
                    self.report.warn(
                        f"{ppath}.Value", "a dynamic port's value is assigned by the agent; ignored"
                    )
            body = self._fields(item, ppath, "port", skip)
            for key in ("to", "static"):
                if body.get(key) == 0 and not isinstance(body.get(key), bool):  # Go's zero value: not set
                    del body[key]
            blocks.append(Block((label,), body))
        return blocks


_KINDS: tuple[tuple[type, str], ...] = (
    (list, "a list"),
    (dict, "an object"),
    (str, "a string"),
    (type(None), "null"),
    (bool, "a bool"),
    (Invalid, "an invalid value"),
)


def _kind(value: object) -> str:
    return next((name for cls, name in _KINDS if isinstance(value, cls)), "a number")


def _short(text: str) -> str:
    return text if len(text) <= 64 else f"{text[:50]}... ({len(text)} characters)"


def _identity_listed(context: str, raw: Mapping[str, object]) -> Mapping[str, object]:
    """A task's default identity (`Identity`, one object) read as one more of its `Identities`."""
    if context == "task" and isinstance(raw.get("Identity"), dict):
        return {**raw, "Identity": [raw["Identity"]]}
    return raw
