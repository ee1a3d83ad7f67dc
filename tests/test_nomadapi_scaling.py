"""A group's `scaling` block as Nomad keeps it (issue 52): checked at parse with Nomad's texts, shown
in the job's TaskGroups[].Scaling, served by `/v1/scaling/policies` and `/v1/scaling/policy/:id`
(the calls python-nomad's `scaling` makes) with an ID that outlives an agent restart, and bounding
`nomad job scale`. On the real Core and loop with a fake node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.jobspec import JobspecError, parse_jobspec
from agent.structs.jobcodec import decode_job, encode_job
from tests.agent_lab import run_job
from tests.fakes import FakeNode
from tests.test_routes_ops import Api, start_api

SCALED = """
job "web" {
  group "g" {
    count = 2
    scaling {
      min = 1
      max = 3
      policy {
        cooldown = "1m"
        check "cpu" {
          source = "prometheus"
          strategy "target-value" { target = 80 }
        }
      }
    }
    task "srv" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""
STUB_KEYS = {"ID", "Enabled", "Type", "Target", "CreateIndex", "ModifyIndex"}  # api.ScalingPolicyListStub


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, api = start_api(FakeNode(tmp_path))
    yield api
    core.stop()


def _refused(hcl: str) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as exc:
        parse_jobspec(hcl, source="t", fmt="hcl")
    return list(exc.value.problems)


def test_the_policy_is_listed_read_and_shown_in_the_job(api: Api) -> None:
    assert api.request("GET", "/v1/scaling/policies") == []  # python-nomad's test_scaling_list: no policy
    run_job(api.request, SCALED)
    (stub,) = api.request("GET", "/v1/scaling/policies")
    assert set(stub) == STUB_KEYS
    assert (stub["Type"], stub["Enabled"]) == ("horizontal", True)
    assert stub["Target"] == {"Namespace": "default", "Job": "web", "Group": "g"}
    policy = api.request("GET", f"/v1/scaling/policy/{stub['ID']}")
    assert (policy["ID"], policy["Min"], policy["Max"]) == (stub["ID"], 1, 3)
    check = {"cpu": {"source": "prometheus", "strategy": [{"target-value": {"target": 80}}]}}
    assert policy["Policy"] == {"cooldown": "1m", "check": [check]}
    assert api.request("GET", "/v1/job/web")["TaskGroups"][0]["Scaling"] == policy
    # Scaling.ListPolicies' filters: the job's ID, an ID prefix, a type prefix
    assert api.request("GET", "/v1/scaling/policies?job=web") == [stub]
    assert api.request("GET", "/v1/scaling/policies?job=other") == []
    assert api.request("GET", f"/v1/scaling/policies?prefix={stub['ID'][:4]}") == [stub]
    assert api.request("GET", "/v1/scaling/policies?type=vertical") == []
    assert api.call("GET", "/v1/scaling/policy/example") == (404, "policy not found\n")


def test_the_policy_id_is_the_same_after_an_agent_restart_and_a_new_version(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    run_job(api.request, SCALED)
    (before,) = api.request("GET", "/v1/scaling/policies")
    core.stop()
    core, api = start_api(node, restore=True)
    try:
        (after,) = api.request("GET", "/v1/scaling/policies")
        assert after["ID"] == before["ID"]
        api.request("POST", "/v1/job/web/scale", {"Count": 3, "Target": {"Group": "g"}})
        assert [p["ID"] for p in api.request("GET", "/v1/scaling/policies")] == [before["ID"]]
    finally:
        core.stop()


def test_scale_keeps_the_count_within_the_policy_as_nomad(api: Api) -> None:
    run_job(api.request, SCALED)

    def scale(count: int) -> tuple[int, object]:
        return api.call("POST", "/v1/job/web/scale", {"Count": count, "Target": {"Group": "g"}})

    assert scale(4) == (400, "group count was greater than scaling policy maximum: 4 > 3\n")
    assert scale(0) == (400, "group count was less than scaling policy minimum: 0 < 1\n")
    assert api.request("GET", "/v1/job/web")["TaskGroups"][0]["Count"] == 2  # neither was written
    status, out = scale(3)
    assert status == 200, out
    assert api.request("GET", "/v1/job/web")["TaskGroups"][0]["Count"] == 3


@pytest.mark.parametrize(
    ("bounds", "path", "reason"),
    [
        (
            "min = 3\n max = 4",
            "min",
            "task group count must not be less than minimum count in scaling policy",
        ),
        (
            "min = 1\n max = 1",
            "max",
            "task group count must not be greater than maximum count in scaling policy",
        ),
        ("min = 3\n max = 1", "max", "maximum count must not be less than minimum count"),
        ("min = 1", "max", "maximum count must be specified and non-negative"),
        ("min = -1\n max = 3", "min", "minimum count must be specified and non-negative"),
    ],
)
def test_bounds_nomad_refuses_are_refused_with_its_text(bounds: str, path: str, reason: str) -> None:
    problems = _refused(SCALED.replace("min = 1\n      max = 3", bounds))
    assert (f"job.web.group.g.scaling.{path}", f"Scaling policy invalid: {reason}") in problems


def test_a_system_job_or_another_type_is_refused() -> None:
    system = _refused(SCALED.replace('job "web" {', 'job "web" {\n  type = "system"'))
    assert (
        "job.web.group.g.scaling",
        "Task groups with job type system do not support scaling blocks",
    ) in system
    vertical = _refused(SCALED.replace("max = 3", 'max = 3\n type = "vertical_cpu"'))
    assert (
        "job.web.group.g.scaling.type",
        'task group scaling policy had invalid type: "vertical_cpu"',
    ) in vertical


def test_min_defaults_to_the_count_and_the_block_survives_the_jobs_canonical_form() -> None:
    job = parse_jobspec(SCALED.replace("min = 1\n", ""), source="t", fmt="hcl").job
    scaling = job.groups[0].scaling
    assert scaling is not None and (scaling.min, scaling.max, scaling.enabled) == (2, 3, True)
    assert decode_job(json.loads(json.dumps(encode_job(job)))) == job  # what restore rebuilds
