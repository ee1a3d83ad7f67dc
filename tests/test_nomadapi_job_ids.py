"""A child job's ID holds a slash (`<parent>/dispatch-<unix>-<hex>`, `<parent>/periodic-<unix>`), and
Nomad's clients put it in the URL as it is (python-nomad does not escape it): Nomad's
JobSpecificRequest takes everything before a route's suffix as the job ID. Found by
`make python-nomad-suite` (its cleanup's DELETE /v1/job/<parent>/dispatch-... answered 404)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
