"""Job types on one node (issue 52): a namespace other than "default" refused at parse. On the real
Core and loop with a fake node."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.jobspec import JobspecError, parse_jobspec
from tests.fakes import FakeNode
from tests.test_routes_ops import ONE_TASK, Api, start_api

WAIT = 5.0  # seconds for an alloc's task to start

# scripts/python_nomad_suite.py's BATCH_HCL: upstream's example_batch_parameterized.json as HCL
BATCH_HCL = """
job "example-batch" {
  type = "batch"
  parameterized {
    payload       = "optional"
    meta_required = ["time"]
  }
  group "example-task-group" {
    task "example-task" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:latest"
        command = "sleep"
        args    = ["${NOMAD_META_time}"]
      }
      dispatch_payload { file = "in/payload.txt" }
      resources {
        cpu    = 100
        memory = 200
      }
    }
  }
}
"""


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def _register(api: Api, hcl: str, path: str = "/v1/jobs") -> tuple[int, Any]:
    job = api.request("POST", "/v1/jobs/parse", {"JobHCL": hcl, "Canonicalize": True})
    return api.call("POST", path, {"Job": job})


def _quoted(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")


def _started(api: Api, job_id: str) -> Any:
    """The job's one alloc once its tasks started (its AllocRunner)."""

    def running() -> list[Any]:
        found = [r for r in api.core.runners.values() if r.job.id == job_id]
        return found if found and all(tr.running() for r in found for tr in r.tasks.values()) else []

    deadline = time.monotonic() + WAIT
    while not (found := api.core.call(running)):
        assert time.monotonic() < deadline, f"no running alloc of {job_id}"
        time.sleep(0.02)
    return found[0]


# -- namespace -------------------------------------------------------------------------------------


def test_a_namespace_other_than_default_is_refused_at_parse_hcl_and_json(api: Api) -> None:
    hcl = ONE_TASK.replace('job "web" {', 'job "web" {\n  namespace = "prod"')
    status, text = api.call("POST", "/v1/jobs/parse", {"JobHCL": hcl})
    assert status == 400 and "job.web.namespace" in text and '"prod"' in text, text
    job = {"ID": "web", "Namespace": "prod", "TaskGroups": []}
    with pytest.raises(JobspecError) as exc:
        parse_jobspec(json.dumps({"Job": job}), source="t", fmt="json")
    assert ("job.web.namespace", exc.value.problems[0][1]) == exc.value.problems[0]
    assert '"prod" not found' in exc.value.problems[0][1]
    ok = ONE_TASK.replace('job "web" {', 'job "web" {\n  namespace = "default"')
    assert api.call("POST", "/v1/jobs/parse", {"JobHCL": ok})[0] == 200
