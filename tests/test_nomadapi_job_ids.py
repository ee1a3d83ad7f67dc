"""A child job's ID holds a slash (`<parent>/dispatch-<unix>-<hex>`, `<parent>/periodic-<unix>`), and
Nomad's clients put it in the URL as it is (python-nomad does not escape it): Nomad's
JobSpecificRequest takes everything before a route's suffix as the job ID. Found by
`make python-nomad-suite` (its cleanup's DELETE /v1/job/<parent>/dispatch-... answered 404)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.jobspec import JobspecError, parse_jobspec
from tests.fakes import FakeNode
from tests.test_nomadapi_dispatch import BATCH_HCL, _register
from tests.test_routes_ops import Api, start_api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def test_a_child_job_is_read_listed_and_purged_by_its_id_with_the_slash_unescaped(api: Api) -> None:
    status, _ = _register(api, BATCH_HCL, "/v1/job/example-batch")
    assert status == 200
    child = api.request("POST", "/v1/job/example-batch/dispatch", {"Meta": {"time": "5"}})["DispatchedJobID"]
    assert child.startswith("example-batch/dispatch-")
    assert api.request("GET", f"/v1/job/{child}")["ID"] == child
    assert api.request("GET", f"/v1/job/{child}/summary")["JobID"] == child
    assert [a["JobID"] for a in api.request("GET", f"/v1/job/{child}/allocations")] == [child]
    assert api.request("GET", f"/v1/job/{child}/versions")["Versions"][0]["ID"] == child
    assert api.request("GET", "/v1/job/example-batch")["ID"] == "example-batch"  # the parent, as before
    status, _ = api.call("DELETE", f"/v1/job/{child}?purge=true")
    assert status == 200
    status, _ = api.call("GET", f"/v1/job/{child}")
    assert status == 404


@pytest.mark.parametrize(
    ("job_id", "taken"),
    [
        ("example-batch/dispatch-1796628382-c6d8177e", True),
        ("example-batch/dispatch-run1-1796628382-c6d8177e", True),  # with an IdPrefixTemplate
        ("nightly/periodic-1796628382", True),
        ("a/b", False),  # a slash only as Nomad's children have it
        ("a/dispatch-../x", False),
        ("../dispatch-1", False),
        ("a/periodic-1/periodic-2", False),
    ],
)
def test_a_child_jobs_id_parses_as_nomad_makes_it_and_no_other_slash_does(job_id: str, taken: bool) -> None:
    """A restore parses a child's stored source again when its canonical form is not this agent's
    (an upgrade, a downgrade): its ID must parse (it failed: "must be at most 128 letters, ...")."""
    text = json.dumps({"Job": {"ID": job_id, "Type": "batch", "TaskGroups": [_GROUP]}})
    if taken:
        assert parse_jobspec(text, source="<t>").job.id == job_id
    else:
        with pytest.raises(JobspecError) as info:
            parse_jobspec(text, source="<t>")
        assert "job ID" in str(info.value)


_GROUP = {
    "Name": "g",
    "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "fieldlab/busybox:latest"}}],
}


def test_a_child_job_whose_canonical_form_is_not_this_agents_is_restored_from_its_source(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    try:
        assert _register(api, BATCH_HCL, "/v1/job/example-batch")[0] == 200
        child = api.request("POST", "/v1/job/example-batch/dispatch", {"Meta": {"time": "5"}})[
            "DispatchedJobID"
        ]
    finally:
        core.stop()
    rec = dict(node.store.get("job", child) or {})
    node.store.put("job", child, {**rec, "canonical": {"model": "another agent's"}})
    core, api = start_api(node, restore=True)
    try:
        assert child in core.jobs
        assert api.request("GET", f"/v1/job/{child}")["ParentID"] == "example-batch"
    finally:
        core.stop()
