"""api.JobDiff (agent.nomadapi.jobdiff) on plain api.Job dicts: what `nomad job history -p` prints."""

from __future__ import annotations

import copy
from typing import Any

from agent.nomadapi.jobdiff import job_diff

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
    assert (d["Type"], d["ID"], d["Objects"], d["TaskGroups"]) == ("None", "j", None, None)


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
