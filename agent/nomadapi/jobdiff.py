"""api.JobDiff between two versions of a job's api.Job JSON, as `GET /v1/job/:id/versions?diffs=true`
answers (nomad/structs/diff.go, contextual): Type None, Added, Deleted or Edited; a job's, a
group's and a task's primitive fields (and their maps, as `Meta[key]`) as FieldDiffs; task groups
and tasks matched by name, each listed (the unchanged ones as None); nested objects as ObjectDiffs
by their field name (a list of strings as `Datacenters`, a list of objects as a set, each element
Added or Deleted, named as Nomad names them: Constraint, Service, Template ...). Inside an edited
object every field is listed (the unchanged ones as None), as Nomad's contextual diff; an unchanged
object is left out. Pure: plain dicts in, plain dicts out. A plan's diff is annotated (`annotate`);
a version's is not. What is not Nomad's: `Config` flattened as Nomad's flatmap does (`args[0]`)
but nested objects in it too."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# the job fields Nomad's diff leaves out (server-set)
JOB_FILTER = frozenset(
    {
        "ID",
        "Status",
        "StatusDescription",
        "Version",
        "Stable",
        "CreateIndex",
        "ModifyIndex",
        "JobModifyIndex",
        "Update",
        "SubmitTime",
        "NomadTokenID",
        "VaultToken",
        "TaskGroups",
    }
)
_SINGULAR = {"Affinities": "Affinity", "Identities": "Identity", "Checks": "Check", "Services": "Service"}
NONE, ADDED, DELETED, EDITED = "None", "Added", "Deleted", "Edited"
# maps (user keys), flattened into their owner's fields as `Name[key]`; any other object is a struct
# of Nomad's, diffed as an ObjectDiff of its own
MAPS = frozenset({"Meta", "Env", "GetterOptions", "GetterHeaders", "CanaryMeta", "TaggedAddresses"})


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _primitive(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _is_map(name: str, v: Any) -> bool:
    return name in MAPS and (v is None or (isinstance(v, Mapping) and all(_primitive(x) for x in v.values())))


def _flat(obj: Mapping[str, Any] | None, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """The primitive fields, and maps of primitives as `Name[key]` (Nomad's flatmap, primitive only)."""
    out: dict[str, str] = {}
    for k, v in (obj or {}).items():
        if k in skip:
            continue
        if _primitive(v):
            out[k] = _text(v)
        elif _is_map(k, v) and v is not None:
            for mk, mv in v.items():
                out[f"{k}[{mk}]"] = _text(mv)
    return out


def _deep(value: Any, prefix: str, out: dict[str, str]) -> None:
    """Everything under a free-form map (a task's Config), as flatmap names it."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _deep(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _deep(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = _text(value)


def _fields(old: Mapping[str, str], new: Mapping[str, str]) -> list[dict[str, Any]]:
    out = []
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        kind = ADDED if o is None else DELETED if n is None else EDITED if o != n else NONE
        out.append({"Type": kind, "Name": name, "Old": o or "", "New": n or "", "Annotations": None})
    return out


def _kind(fields: list[dict[str, Any]], objects: list[dict[str, Any]]) -> str:
    return EDITED if any(x["Type"] != NONE for x in [*fields, *objects]) else NONE


def _object(name: str, old: Any, new: Any) -> list[dict[str, Any]]:
    """The ObjectDiffs of one non-primitive field (none when it did not change)."""
    if old == new:
        return []
    if name == "Config":
        o: dict[str, str] = {}
        n: dict[str, str] = {}
        _deep(old or {}, "", o)
        _deep(new or {}, "", n)
        return [_obj_diff(name, o, n, old is None, new is None)]
    if isinstance(old, list) or isinstance(new, list):
        items_old, items_new = list(old or []), list(new or [])
        if all(_primitive(x) for x in items_old + items_new):
            fields = [
                {"Type": DELETED, "Name": name, "Old": _text(x), "New": "", "Annotations": None}
                for x in items_old
                if x not in items_new
            ] + [
                {"Type": ADDED, "Name": name, "Old": "", "New": _text(x), "Annotations": None}
                for x in items_new
                if x not in items_old
            ]
            return [{"Type": EDITED, "Name": name, "Fields": fields, "Objects": None}] if fields else []
        return _set_diff(_SINGULAR.get(name, name[:-1] if name.endswith("s") else name), items_old, items_new)
    if isinstance(old, Mapping) or isinstance(new, Mapping):
        return [_nested(name, old, new)]
    return []


def _obj_diff(name: str, o: dict[str, str], n: dict[str, str], added: bool, deleted: bool) -> dict[str, Any]:
    fields = _fields(o, n)
    kind = ADDED if added else DELETED if deleted else _kind(fields, [])
    return {"Type": kind, "Name": name, "Fields": fields, "Objects": None}


def _nested(name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    fields = _fields(_flat(old), _flat(new))
    objects = _objects(old or {}, new or {}, frozenset())
    kind = ADDED if old is None else DELETED if new is None else _kind(fields, objects)
    return {"Type": kind, "Name": name, "Fields": fields, "Objects": objects or None}


def _set_diff(name: str, old: list[Any], new: list[Any]) -> list[dict[str, Any]]:
    def key(x: Any) -> str:
        return json.dumps(x, sort_keys=True, default=str)

    old_keys, new_keys = {key(x) for x in old}, {key(x) for x in new}
    gone = [_nested(name, x, None) for x in old if key(x) not in new_keys]
    came = [_nested(name, None, x) for x in new if key(x) not in old_keys]
    return gone + came


def _objects(old: Mapping[str, Any], new: Mapping[str, Any], skip: frozenset[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in sorted(set(old) | set(new)):
        if k in skip:
            continue
        o, n = old.get(k), new.get(k)
        if _primitive(o) and _primitive(n):
            continue
        if _is_map(k, o) and _is_map(k, n):
            continue  # a map is in the fields
        out.extend(_object(k, o, n))
    return out


def _keyed(
    old: list[Mapping[str, Any]] | None, new: list[Mapping[str, Any]] | None, diff: Any
) -> list[dict[str, Any]]:
    by_old = {str(x.get("Name")): x for x in old or []}
    by_new = {str(x.get("Name")): x for x in new or []}
    # every group and task, the unchanged as Type None (Nomad's taskGroupDiffs and taskDiffs)
    return [diff(name, by_old.get(name), by_new.get(name)) for name in sorted(set(by_old) | set(by_new))]


def _task(name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    fields = _fields(_flat(old), _flat(new))
    objects = _objects(old or {}, new or {}, frozenset())
    kind = ADDED if old is None else DELETED if new is None else _kind(fields, objects)
    return {"Type": kind, "Name": name, "Fields": fields, "Objects": objects or None, "Annotations": None}


def _group(name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    skip = frozenset({"Tasks"})
    fields = _fields(_flat(old, skip), _flat(new, skip))
    objects = _objects(old or {}, new or {}, skip)
    tasks = _keyed((old or {}).get("Tasks"), (new or {}).get("Tasks"), _task)
    kind = ADDED if old is None else DELETED if new is None else _kind(fields, objects + tasks)
    return {
        "Type": kind,
        "Name": name,
        "Fields": fields,
        "Objects": objects or None,
        "Tasks": tasks or None,
        "Updates": None,
    }


def job_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """api.JobDiff of `old` -> `new` (two api.Job of the same ID)."""
    fields = _fields(_flat(old, JOB_FILTER), _flat(new, JOB_FILTER))
    objects = _objects(old, new, JOB_FILTER)
    groups = _keyed(old.get("TaskGroups"), new.get("TaskGroups"), _group)
    return {
        "Type": _kind(fields, objects + groups),
        "ID": str(new.get("ID", "")),
        "Fields": fields,
        "Objects": objects or None,
        "TaskGroups": groups or None,
    }


# Nomad's scheduler/annotate.go: a plan's diff says what each change forces.
UPDATE_TYPES = (
    ("Ignore", "ignore"),
    ("Place", "create"),
    ("Migrate", "migrate"),
    ("Stop", "destroy"),
    ("Canary", "canary"),
    ("InPlaceUpdate", "in-place update"),
    ("DestructiveUpdate", "create/destroy update"),
)
FORCES_CREATE, FORCES_DESTROY = "forces create", "forces destroy"
FORCES_IN_PLACE, FORCES_DESTRUCTIVE = "forces in-place update", "forces create/destroy update"
_IN_PLACE_OBJECTS = frozenset({"Service", "Constraint", "Affinity", "Spread"})


def annotate(diff: dict[str, Any], desired: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """The plan's JobDiff annotated as Nomad's scheduler does: each group's `Updates` (its desired
    updates by update type), `forces create`/`forces destroy` on a changed Count, and each changed
    task's annotation (an added or removed task of an added or removed group forces its create or
    destroy; a change of anything but KillTimeout, services, constraints, affinities, spreads and
    log sizes forces a create/destroy update; else an in-place one). Changes `diff` and returns it."""
    for tg in diff.get("TaskGroups") or []:
        counts = desired.get(str(tg.get("Name")), {})
        updates = {name: counts[key] for key, name in UPDATE_TYPES if counts.get(key)}
        tg["Updates"] = updates or None
        for f in tg.get("Fields") or []:
            if f.get("Name") == "Count":
                old, new = int(f.get("Old") or 0), int(f.get("New") or 0)
                if old != new:
                    f["Annotations"] = [FORCES_CREATE if old < new else FORCES_DESTROY]
        for task in tg.get("Tasks") or []:
            note = _task_annotation(task, str(tg.get("Type")))
            task["Annotations"] = [note] if note else None
    return diff


def _task_annotation(task: Mapping[str, Any], group_type: str) -> str:
    kind = task.get("Type")
    if kind == NONE:
        return ""
    if group_type in (ADDED, DELETED) and kind in (ADDED, DELETED):
        return FORCES_CREATE if kind == ADDED else FORCES_DESTROY
    if any(f.get("Name") != "KillTimeout" for f in task.get("Fields") or []):
        return FORCES_DESTRUCTIVE
    for obj in task.get("Objects") or []:
        name = obj.get("Name")
        if name in _IN_PLACE_OBJECTS:
            continue
        if name == "LogConfig" and not any(f.get("Name") == "Disabled" for f in obj.get("Fields") or []):
            continue
        return FORCES_DESTRUCTIVE
    return FORCES_IN_PLACE
