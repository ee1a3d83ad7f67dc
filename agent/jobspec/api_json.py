"""JSON jobspecs -> the builder's plain body.

Two JSON forms are read:
- Nomad's API JSON, as `nomad job run -output` or `nomad job inspect` write it and POST /v1/jobs takes it:
  `{"Job": {"ID": ..., "TaskGroups": [{"Name": ..., "Networks": [{"Mode": "bridge", "DynamicPorts":
  [{"Label": "www", "To": 8001}]}], "Tasks": [...]}]}}` (the envelope may be left out). Names are mapped
  onto HCL's so that paths and warnings read the same for both forms; durations are nanoseconds;
  Go writes every unset field as its zero value, so zero values of unimplemented fields are not warned
  about;
- HCL's JSON syntax with HCL's names: `{"job": {"example": {"group": {"web": {...}}}}}`, passed on as is
  (the builder reads labelled blocks from objects keyed by label).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from agent.jobspec.fields import IMPLEMENTED, UNIMPLEMENTED
from agent.jobspec.tree import Block, Body, Invalid, Report, join

_Conv = Callable[[object, str], object]

# API names whose HCL name is not their snake_case spelling.
_RENAMES = {
    "Actions": "action",
    "Affinities": "affinity",
    "Artifacts": "artifact",
    "CSIPluginConfig": "csi_plugin",
    "Constraints": "constraint",
    "Devices": "device",
    "DiskMB": "disk",
    "Envvars": "env",
    "Identities": "identity",
    "LeftDelim": "left_delimiter",
    "LogConfig": "logs",
    "MBits": "mbits",
    "MemoryMaxMB": "memory_max",
    "Networks": "network",
    "ParameterizedJob": "parameterized",
    "ReschedulePolicy": "reschedule",
    "RestartPolicy": "restart",
    "RightDelim": "right_delimiter",
    "ScalingPolicies": "scaling",
    "SecretsMB": "secrets",
    "Spreads": "spread",
    "TaskName": "task",
    "VolumeMounts": "volume_mount",
    "Volumes": "volume",
}
# API defaults that mean "not set" for fields the agent does not implement.
_UNSET_DEFAULTS = {
    ("address_mode", "auto"),
    ("host_network", "default"),
    ("on_update", "require_healthy"),
    ("uid", -1),
    ("gid", -1),
}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def parse_json(text: str, report: Report) -> Body | None:
    """The jobspec's top-level body, or None with the problems recorded in `report`."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        report.error("", f"JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}")
        return None
    except _DuplicateKeyError as e:
        report.error("", f"JSON syntax error: the key {e.key!r} appears twice in one object")
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
            name = _hcl_name(key)
            if name in UNIMPLEMENTED["request"]:
                if not _unset(name, value):
                    report.warn(key)
            else:
                report.error(key, "not a field of Nomad's job registration request")
        job = data["Job"]
    elif "ID" in data or "TaskGroups" in data:
        job = data
    else:
        report.error(
            "", 'expected Nomad\'s API JSON {"Job": {"ID": ...}} or HCL JSON {"job": {"<id>": {...}}}'
        )
        return None
    return {"job": _Api(report).job(job)}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _hcl_name(key: str) -> str:
    return _RENAMES.get(key) or _CAMEL.sub("_", key).lower()


def _unset(name: str, value: object) -> bool:
    if value is None or value is False or value in ("", 0, [], {}):
        return True
    return isinstance(value, str | int) and (name, value) in _UNSET_DEFAULTS


def _same(value: object, _path: str) -> object:
    return value


def _text(value: object, _path: str) -> object:
    """An optional string: Go writes "" for unset."""
    return None if value == "" else value


def _nanoseconds(value: object, _path: str) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value}ns"
    return Invalid(
        f"expected a whole number of nanoseconds, as Nomad's API JSON writes durations, not {value!r}"
    )


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
        body = self._fields(
            raw,
            path,
            "job",
            {"Type": ("type", _same), "Meta": ("meta", _same), "TaskGroups": ("group", self._groups)},
            skip,
        )
        return [Block((job_id,), body)]

    def _fields(
        self,
        raw: Mapping[str, object],
        path: str,
        context: str,
        table: Mapping[str, tuple[str, _Conv]],
        skip: set[str] | None = None,
    ) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in raw.items():
            if skip and key in skip:
                continue
            if key in table:
                name, convert = table[key]
                if value is not None:
                    out[name] = convert(value, join(path, name))
                continue
            name = _hcl_name(key)
            if name in UNIMPLEMENTED[context]:
                if not _unset(name, value):
                    out[name] = value
            elif key in IMPLEMENTED[context]:
                out[key] = value  # HCL's own name, as it is
            else:
                out[key] = value  # not a Nomad field: the builder rejects it under the name it was given
        return out

    def _labelled(
        self, value: object, path: str, context: str, table: Mapping[str, tuple[str, _Conv]]
    ) -> object:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            return Invalid("expected a list of objects")
        blocks = []
        for i, item in enumerate(value):
            name = item.get("Name")
            if not isinstance(name, str) or not name:
                return Invalid(f'item {i}: "Name" is required, a string')
            blocks.append(Block((name,), self._fields(item, f"{path}.{name}", context, table, {"Name"})))
        return blocks

    def _unlabelled(
        self, value: object, path: str, context: str, table: Mapping[str, tuple[str, _Conv]], *, many: bool
    ) -> object:
        items = value if many else [value]
        if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
            return Invalid("expected a list of objects" if many else "expected an object")
        return [
            Block((), self._fields(item, f"{path}[{i}]" if many else path, context, table))
            for i, item in enumerate(items)
        ]

    def _groups(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Count": ("count", _same),
            "Networks": ("network", self._networks),
            "RestartPolicy": ("restart", self._restart),
            "Tasks": ("task", self._tasks),
            "Services": ("service", self._services),
        }
        return self._labelled(value, path, "group", table)

    def _networks(self, value: object, path: str) -> object:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            return Invalid("expected a list of objects")
        blocks = []
        for net in value:
            body = self._fields(
                net, path, "network", {"Mode": ("mode", _text)}, {"DynamicPorts", "ReservedPorts"}
            )
            ports: list[Block] = []
            for key, reserved in (("ReservedPorts", True), ("DynamicPorts", False)):
                converted = self._ports(net.get(key), join(path, "port"), reserved=reserved)
                if isinstance(converted, Invalid):
                    body["port"] = converted
                    break
                else:
                    ports.extend(converted)
            if ports and "port" not in body:
                body["port"] = ports
            blocks.append(Block((), body))
        return blocks

    def _ports(self, value: object, path: str, *, reserved: bool) -> list[Block] | Invalid:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            return Invalid("expected a list of objects")
        blocks = []
        for item in value:
            label = item.get("Label")
            if not isinstance(label, str) or not label:
                return Invalid('"Label" is required, a string')
            ppath = f"{path}.{label}"
            table: dict[str, tuple[str, _Conv]] = {"To": ("to", _same)}
            if reserved:
                table["Value"] = ("static", _same)
            elif item.get("Value") not in (None, 0):
                self.report.warn(f"{ppath}.Value", "a dynamic port's value is assigned by the agent; ignored")
            body = self._fields(item, ppath, "port", table, {"Label", "Value"} - set(table))
            if body.get("to") == 0:  # Go's zero value: not set
                del body["to"]
            blocks.append(Block((label,), body))
        return blocks

    def _restart(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Attempts": ("attempts", _same),
            "Interval": ("interval", _nanoseconds),
            "Delay": ("delay", _nanoseconds),
            "Mode": ("mode", _text),
        }
        return self._unlabelled(value, path, "restart", table, many=False)

    def _tasks(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Driver": ("driver", _same),
            "Config": ("config", _same),
            "Env": ("env", _same),
            "Resources": ("resources", self._resources),
            "KillTimeout": ("kill_timeout", _nanoseconds),
            "KillSignal": ("kill_signal", _text),
            "Templates": ("template", self._templates),
            "Services": ("service", self._services),
            "User": ("user", _text),
            "Vault": ("vault", self._vault),
        }
        return self._labelled(value, path, "task", table)

    def _vault(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Policies": ("policies", _same),
            "Role": ("role", _text),
            "ChangeMode": ("change_mode", _text),
            "ChangeSignal": ("change_signal", _text),
            "Env": ("env", _same),
            "DisableFile": ("disable_file", _same),
        }
        return self._unlabelled(value, path, "vault", table, many=False)

    def _resources(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {"CPU": ("cpu", _same), "MemoryMB": ("memory", _same)}
        return self._unlabelled(value, path, "resources", table, many=False)

    def _templates(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "EmbeddedTmpl": ("data", _text),
            "SourcePath": ("source", _text),
            "DestPath": ("destination", _same),
            "Perms": ("perms", _text),
            "ChangeMode": ("change_mode", _text),
            "ChangeSignal": ("change_signal", _text),
            "ChangeScript": ("change_script", self._change_script),
            "Splay": ("splay", _nanoseconds),
            "Wait": ("wait", self._wait),
            "ErrMissingKey": ("error_on_missing_key", _same),
        }
        return self._unlabelled(value, path, "template", table, many=True)

    def _change_script(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Command": ("command", _same),
            "Args": ("args", _same),
            "Timeout": ("timeout", _nanoseconds),
            "FailOnError": ("fail_on_error", _same),
        }
        return self._unlabelled(value, path, "change_script", table, many=False)

    def _wait(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {"Min": ("min", _nanoseconds), "Max": ("max", _nanoseconds)}
        return self._unlabelled(value, path, "wait", table, many=False)

    def _services(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Name": ("name", _text),
            "PortLabel": ("port", _text),
            "Tags": ("tags", _same),
            "Provider": ("provider", _text),
            "Checks": ("check", self._checks),
        }
        return self._unlabelled(value, path, "service", table, many=True)

    def _checks(self, value: object, path: str) -> object:
        table: dict[str, tuple[str, _Conv]] = {
            "Name": ("name", _text),
            "Type": ("type", _same),
            "Path": ("path", _text),
            "Interval": ("interval", _nanoseconds),
            "Timeout": ("timeout", _nanoseconds),
            "PortLabel": ("port", _text),
            "Command": ("command", _text),
            "Args": ("args", _same),
        }
        return self._unlabelled(value, path, "check", table, many=True)
