"""api.JobDiff (agent.nomadapi.jobdiff) on plain api.Job dicts: what `nomad job history -p` prints."""

from __future__ import annotations

import copy
from typing import Any

from agent.nomadapi.jobdiff import (
    FORCES_CREATE,
    FORCES_DESTROY,
    FORCES_DESTRUCTIVE,
    FORCES_IN_PLACE,
    annotate,
    job_diff,
)

OLD: dict[str, Any] = {
    "ID": "j",
    "Version": 0,
    "Datacenters": ["dc1"],
    "Meta": {"owner": "a"},
    "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": "client1", "Operand": "="}],
    "TaskGroups": [
        {
            "Name": "g",
            "Count": 1,
            "Tasks": [
                {
                    "Name": "t",
                    "Driver": "exec",
                    "Config": {"command": "/bin/sleep", "args": ["60"]},
                    "Env": {"A": "1"},
                    "Resources": {"CPU": 100, "MemoryMB": 64},
                }
            ],
        }
    ],
}


def _by_name(items: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {i["Name"]: i for i in items or []}


def test_the_same_job_is_no_diff_and_server_fields_are_not_compared() -> None:
    new = copy.deepcopy(OLD)
    new["Version"] = 1
    d = job_diff(OLD, new)
    assert (d["Type"], d["ID"], d["Objects"]) == ("None", "j", None)
    (group,) = d["TaskGroups"]  # every group and task is listed, the unchanged as None (as Nomad's)
    assert (group["Name"], group["Type"], [(t["Name"], t["Type"]) for t in group["Tasks"]]) == (
        "g",
        "None",
        [("t", "None")],
    )


def test_edits_additions_and_deletions_are_where_nomad_puts_them() -> None:
    new = copy.deepcopy(OLD)
    new["Datacenters"] = ["dc1", "dc2"]
    new["Meta"]["owner"] = "b"
    new["Constraints"] = []
    task = new["TaskGroups"][0]["Tasks"][0]
    task["Resources"]["CPU"] = 200
    task["Env"]["B"] = "2"
    new["TaskGroups"].append({"Name": "h", "Count": 2, "Tasks": [{"Name": "u", "Driver": "exec"}]})
    d = job_diff(OLD, new)
    assert d["Type"] == "Edited"
    assert [(f["Name"], f["Type"], f["Old"], f["New"]) for f in d["Fields"]] == [
        ("Meta[owner]", "Edited", "a", "b")
    ]
    objects = {(o["Name"], o["Type"]) for o in d["Objects"]}
    assert objects == {("Datacenters", "Edited"), ("Constraint", "Deleted")}
    (dcs,) = [o for o in d["Objects"] if o["Name"] == "Datacenters"]
    assert [(f["Type"], f["New"]) for f in dcs["Fields"]] == [("Added", "dc2")]
    groups = _by_name(d["TaskGroups"])
    assert groups["h"]["Type"] == "Added" and _by_name(groups["h"]["Tasks"])["u"]["Type"] == "Added"
    (t,) = groups["g"]["Tasks"]
    fields = {f["Name"]: f["Type"] for f in t["Fields"]}
    assert fields["Env[B]"] == "Added" and fields["Env[A]"] == "None" and fields["Driver"] == "None"
    (res,) = t["Objects"]
    assert (res["Name"], res["Type"]) == ("Resources", "Edited")
    assert {f["Name"]: f["Type"] for f in res["Fields"]} == {"CPU": "Edited", "MemoryMB": "None"}


def _task_diff(fields: list[str], objects: list[tuple[str, list[str]]] | None = None) -> dict[str, Any]:
    return {
        "Type": "Edited",
        "Name": "t",
        "Fields": [{"Type": "Edited", "Name": f, "Old": "1", "New": "2"} for f in fields],
        "Objects": [
            {"Type": "Edited", "Name": name, "Fields": [{"Type": "Edited", "Name": f} for f in fs]}
            for name, fs in objects or []
        ],
    }


def _annotated(
    task: dict[str, Any], group_type: str = "Edited", count: tuple[str, str] = ("1", "1")
) -> dict[str, Any]:
    diff = {
        "TaskGroups": [
            {
                "Type": group_type,
                "Name": "g",
                "Fields": [{"Type": "Edited", "Name": "Count", "Old": count[0], "New": count[1]}],
                "Tasks": [task],
            }
        ]
    }
    return annotate(diff, {"g": {"Place": 1, "DestructiveUpdate": 2, "Ignore": 0}})["TaskGroups"][0]


def test_a_plans_diff_is_annotated_as_nomads_scheduler_annotates_it() -> None:
    group = _annotated(_task_diff(["Env[MODE]"]), count=("1", "2"))
    assert group["Updates"] == {"create": 1, "create/destroy update": 2}
    assert group["Fields"][0]["Annotations"] == [FORCES_CREATE]
    assert group["Tasks"][0]["Annotations"] == [FORCES_DESTRUCTIVE]
    assert _annotated(_task_diff([]), count=("3", "2"))["Fields"][0]["Annotations"] == [FORCES_DESTROY]
    assert "Annotations" not in _annotated(_task_diff([]))["Fields"][0], "an unchanged count says nothing"
    in_place = [
        _task_diff(["KillTimeout"]),
        _task_diff([], [("Service", ["Name"]), ("Constraint", ["RTarget"])]),
        _task_diff([], [("LogConfig", ["MaxFiles"])]),
    ]
    for task in in_place:
        assert _annotated(task)["Tasks"][0]["Annotations"] == [FORCES_IN_PLACE], task
    for task in (_task_diff([], [("LogConfig", ["Disabled"])]), _task_diff([], [("Config", ["image"])])):
        assert _annotated(task)["Tasks"][0]["Annotations"] == [FORCES_DESTRUCTIVE], task
    added = {**_task_diff([]), "Type": "Added"}
    assert _annotated(added, group_type="Added")["Tasks"][0]["Annotations"] == [FORCES_CREATE]
    assert _annotated({**_task_diff([]), "Type": "None"})["Tasks"][0]["Annotations"] is None
