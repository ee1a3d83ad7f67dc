"""Job types on one node (issue 52): a namespace other than "default" refused at parse, a parameterized
job placing nothing until `POST /v1/job/:id/dispatch` (python-nomad's dispatch tests replayed), its
child a job as any with the payload in its task's local/, and `POST
/v1/job/:id/evaluate`. On the real Core and loop with a fake node."""

from __future__ import annotations

import base64
import json
import re
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


# -- parameterized and dispatch ------------------------------------------------------------------


def test_a_parameterized_job_places_nothing_and_shows_running(api: Api) -> None:
    status, out = _register(api, BATCH_HCL)
    assert status == 200, out
    assert [r for r in api.core.runners.values() if r.job.id == "example-batch"] == []
    assert api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations") == []
    job = api.request("GET", "/v1/job/example-batch")
    assert job["Status"] == "running"
    assert job["ParameterizedJob"] == {"Payload": "optional", "MetaRequired": ["time"], "MetaOptional": None}
    assert job["TaskGroups"][0]["Tasks"][0]["DispatchPayload"] == {"File": "in/payload.txt"}
    (stub,) = api.request("GET", "/v1/jobs")
    assert (stub["ParameterizedJob"], stub["Status"]) == (True, "running")
    assert api.call("POST", "/v1/job/example-batch/evaluate") == (500, "can't evaluate parameterized job\n")


def test_python_nomads_dispatch_job_replayed(api: Api) -> None:
    """python-nomad's test_dispatch_job: register the parsed job (register_job posts {"Job": ...} to
    /v1/job/<id>), dispatch_job(meta={"time": "500"}, id_prefix_template="run1"), "example-batch" in
    job (GET /v1/job/example-batch)."""
    status, out = _register(api, BATCH_HCL, "/v1/job/example-batch")
    assert status == 200, out
    body = {"Meta": {"time": "500"}, "Payload": None, "idempotency_token": None, "IdPrefixTemplate": "run1"}
    status, out = api.call("POST", "/v1/job/example-batch/dispatch", body)
    assert status == 200, out
    child_id = out["DispatchedJobID"]
    assert re.fullmatch(r"example-batch/dispatch-run1-\d{10}-[0-9a-f]{8}", child_id), child_id
    assert abs(int(child_id.split("-")[-2]) - time.time()) < 60
    assert out["EvalID"] and out["JobCreateIndex"] == out["Index"] > 0
    assert api.call("GET", "/v1/job/example-batch")[0] == 200
    child = api.request("GET", f"/v1/job/{_quoted(child_id)}")
    assert (child["ParentID"], child["Dispatched"], child["Meta"]) == ("example-batch", True, {"time": "500"})
    runner = _started(api, child_id)
    ctx = [c for c in api.node.docker.starts if c.alloc_id == runner.id][-1]
    assert ctx.env["NOMAD_META_time"] == "500"
    placed = api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")
    assert [a["ID"] for a in placed] == [runner.id]
    assert sorted(j["ID"] for j in api.request("GET", "/v1/jobs")) == ["example-batch", child_id]
    # the child is a job as any: stopped and purged by its ID
    assert api.call("DELETE", f"/v1/job/{_quoted(child_id)}?purge=true")[0] == 200
    assert api.call("GET", f"/v1/job/{_quoted(child_id)}")[0] == 404
    assert api.call("GET", "/v1/job/example-batch")[0] == 200


def test_python_nomads_dispatch_idempotency_replayed_as_nomad_answers_it(api: Api) -> None:
    """python-nomad's test_dispatch_job_idempotency registers example-batch's JSON under another ID:
    Nomad's agent refuses that (as here); and it sends its token as a body key "idempotency_token"
    that Go's decoder does not read (nor this agent). The token Nomad reads (`?idempotency_token=`)
    answers the child it made before."""
    status, text = _register(api, BATCH_HCL, "/v1/job/example-batch-idempotent")
    assert (status, text) == (400, "Job ID does not match name\n")
    assert _register(api, BATCH_HCL)[0] == 200
    token = "737ae8cd-f237-43a5-8fad-0e6a3f94ad55"
    target = f"/v1/job/example-batch/dispatch?idempotency_token={token}"
    first = api.request("POST", target, {"Meta": {"time": "500"}, "IdPrefixTemplate": "run1"})
    again = api.request("POST", target, {"Meta": {"time": "500"}, "IdPrefixTemplate": "run2"})
    assert again["DispatchedJobID"] == first["DispatchedJobID"] and again["EvalID"] == ""
    body = {"Meta": {"time": "500"}, "idempotency_token": token, "IdPrefixTemplate": "run2"}
    other = api.request("POST", "/v1/job/example-batch/dispatch", body)
    assert other["DispatchedJobID"] not in (first["DispatchedJobID"], "")
    assert (
        api.request("GET", f"/v1/job/{_quoted(first['DispatchedJobID'])}")["DispatchIdempotencyToken"]
        == token
    )


@pytest.mark.parametrize(
    ("spec", "body", "why"),
    [
        ("", {}, "Dispatch did not provide required meta keys: [time]"),
        ("", {"Meta": {"time": "1", "x": "2", "a": "3"}}, "unpermitted metadata keys: [a x]"),
        ('payload = "required"', {"Meta": {"time": "1"}}, "Payload is not provided but required"),
        (
            'payload = "forbidden"',
            {"Meta": {"time": "1"}, "Payload": "aGk="},
            "Payload provided but forbidden",
        ),
        ("", {"Meta": {"time": "1"}, "Payload": base64.b64encode(b"x" * 16385).decode()}, "16385 > 16384"),
        ("", {"Meta": {"time": "1"}, "Priority": 101}, "priority must be between [1, 100]"),
    ],
)
def test_a_dispatch_nomad_refuses_is_refused_with_its_text(api: Api, spec: str, body: Any, why: str) -> None:
    hcl = BATCH_HCL.replace('payload       = "optional"', spec)
    assert _register(api, hcl)[0] == 200
    status, text = api.call("POST", "/v1/job/example-batch/dispatch", body)
    assert status == 500 and why in text, text
    assert [j["ID"] for j in api.request("GET", "/v1/jobs")] == ["example-batch"]


def test_a_dispatch_of_a_job_that_is_not_parameterized_or_bad_input(api: Api) -> None:
    assert _register(api, ONE_TASK)[0] == 200
    status, text = api.call("POST", "/v1/job/web/dispatch", {})
    assert (status, text) == (500, 'Specified job "web" is not a parameterized job\n')
    assert api.call("POST", "/v1/job/nope/dispatch", {}) == (500, "parameterized job not found\n")
    assert api.call("POST", "/v1/job/web/dispatch", {"JobID": "other"}) == (400, "Job ID does not match\n")
    status, text = api.call("POST", "/v1/job/web/dispatch", {"Payload": "not base64!"})
    assert status == 400 and "Payload" in text


def test_the_payload_is_written_to_the_tasks_dispatch_payload_file(api: Api) -> None:
    assert _register(api, BATCH_HCL)[0] == 200
    body = {"Meta": {"time": "5"}, "Payload": base64.b64encode(b"hello payload").decode()}
    out = api.request("POST", "/v1/job/example-batch/dispatch", body)
    runner = _started(api, out["DispatchedJobID"])
    written = runner.tasks["example-task"].task_dir / "local" / "in" / "payload.txt"
    assert written.read_bytes() == b"hello payload"
    child = api.request("GET", f"/v1/job/{_quoted(out['DispatchedJobID'])}")
    assert base64.b64decode(child["Payload"]) == b"hello payload"
    status, raw = api.call("POST", "/v1/job/example-batch/dispatch/payload", b"raw \x00 bytes")
    assert status == 500 and "required meta keys: [time]" in raw  # this form gives no meta
    no_meta = BATCH_HCL.replace('meta_required = ["time"]', 'meta_optional = ["time"]')
    assert (
        api.call(
            "POST",
            "/v1/job/example-batch",
            {"Job": api.request("POST", "/v1/jobs/parse", {"JobHCL": no_meta})},
        )[0]
        == 200
    )
    out = api.request("POST", "/v1/job/example-batch/dispatch/payload", b"raw \x00 bytes")
    runner = _started(api, out["DispatchedJobID"])
    written = runner.tasks["example-task"].task_dir / "local" / "in" / "payload.txt"
    assert written.read_bytes() == b"raw \x00 bytes"


def test_a_dispatched_jobs_optional_meta_keys_not_given_are_empty_in_the_task_env(api: Api) -> None:
    """nomad-3720 (PR #4403): each meta_optional key starts empty in a dispatched job's task env (as
    written and upper-cased), the dispatch's meta over it; `${NOMAD_META_opt}` then reads ""."""
    from agent.decide.taskdecisions import plan_optional_meta_defaults
    from agent.fieldbugs.bugs import Bugs

    hcl = BATCH_HCL.replace(
        'meta_required = ["time"]', 'meta_required = ["time"]\n    meta_optional = ["opt"]'
    )
    assert _register(api, hcl)[0] == 200
    out = api.request("POST", "/v1/job/example-batch/dispatch", {"Meta": {"time": "5"}})
    task = _started(api, out["DispatchedJobID"]).tasks["example-task"]
    env = api.core.call(task.env)
    assert (env["NOMAD_META_opt"], env["NOMAD_META_OPT"], env["NOMAD_META_time"]) == ("", "", "5")
    given = {"Meta": {"time": "5", "opt": "x"}}
    task = _started(api, api.request("POST", "/v1/job/example-batch/dispatch", given)["DispatchedJobID"])
    assert api.core.call(task.tasks["example-task"].env)["NOMAD_META_opt"] == "x"
    assert plan_optional_meta_defaults() is True
    assert plan_optional_meta_defaults(Bugs(dispatch_optional_meta_unset=True)) is False


def test_a_dispatched_jobs_workload_identity_names_the_parent_job(api: Api) -> None:
    """nomad-13748 (PR #13748, `sub` by PR #23902): a child's token names its parent, as Nomad's
    Job.GetIDforWorkloadIdentity; the `identity-claims-child-job-id` fault names the child."""
    from agent.fieldbugs.bugs import Bugs
    from agent.identity.claims import workload_job_id

    hcl = BATCH_HCL.replace("dispatch_payload {", "identity { file = true }\n      dispatch_payload {")
    assert _register(api, hcl)[0] == 200
    child = api.request("POST", "/v1/job/example-batch/dispatch", {"Meta": {"time": "5"}})["DispatchedJobID"]
    task = _started(api, child).tasks["example-task"]
    token = (task.task_dir / "secrets" / "nomad_token").read_text()
    body = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert claims["nomad_job_id"] == "example-batch"
    assert claims["sub"].split(":")[2:5] == ["example-batch", "example-task-group", "example-task"]
    assert workload_job_id(child, "example-batch") == "example-batch"
    assert workload_job_id("web", "") == "web"
    assert workload_job_id(child, "example-batch", Bugs(identity_claims_child_job_id=True)) == child


@pytest.mark.parametrize("file", ["../secrets/x", "../../alloc/x", "/etc/passwd", "a/../../x"])
def test_a_dispatch_payload_file_outside_local_is_refused_at_parse(api: Api, file: str) -> None:
    hcl = BATCH_HCL.replace('file = "in/payload.txt"', f'file = "{file}"')
    status, text = api.call("POST", "/v1/jobs/parse", {"JobHCL": hcl})
    assert status == 400 and "dispatch_payload.file" in text, text


def test_a_parameterized_service_job_is_refused(api: Api) -> None:
    status, text = api.call("POST", "/v1/jobs/parse", {"JobHCL": BATCH_HCL.replace('"batch"', '"service"')})
    assert status == 400 and 'can only be used with "batch" or "sysbatch"' in text, text


# -- evaluate ------------------------------------------------------------------------------------


def test_python_nomads_evaluate_job_replayed(api: Api) -> None:
    """python-nomad's evaluate_job posts no body; api.Jobs.EvaluateWithOpts sends JobID and EvalOptions."""
    assert _register(api, ONE_TASK)[0] == 200
    runner = _started(api, "web")
    out = api.request("POST", "/v1/job/web/evaluate")
    ev = api.request("GET", f"/v1/evaluation/{out['EvalID']}")
    assert (ev["JobID"], ev["TriggeredBy"], ev["Type"]) == ("web", "job-register", "service")
    assert out["EvalCreateIndex"] == ev["CreateIndex"] and out["JobModifyIndex"] > 0
    assert out["EvalID"] in [e["ID"] for e in api.request("GET", "/v1/job/web/evaluations")]
    assert api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations") == []
    assert [r.id for r in api.core.runners.values()] == [runner.id]  # all run: nothing placed
    opts = {"JobID": "web", "EvalOptions": {"ForceReschedule": False}}
    assert api.request("PUT", "/v1/job/web/evaluate", opts)["EvalID"] != out["EvalID"]
    assert api.call("POST", "/v1/job/web/evaluate", {**opts, "JobID": "x"}) == (
        400,
        "JobID not same as job name\n",
    )
    status, text = api.call(
        "POST", "/v1/job/web/evaluate", {"JobID": "web", "EvalOptions": {"ForceReschedule": True}}
    )
    assert status == 400 and "ForceReschedule" in text
    assert api.call("POST", "/v1/job/nope/evaluate") == (500, "job not found\n")


# e2e/suites/test_nomad_conformance.py's job (its scaling block left out: not this test's subject)
CONFORMANCE = """
job "conformance" {
  meta { owner = "fieldlab" }
  group "web" {
    task "main" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:latest"
        command = "sh"
      }
      template {
        data        = "owner={{ env \\"NOMAD_META_owner\\" }}\\n"
        destination = "local/owner.txt"
      }
      kill_timeout = "2s"
    }
  }
}
"""


def test_the_conformance_suites_dispatch_replayed(api: Api) -> None:
    """e2e/suites/test_nomad_conformance.py's test_dispatch_a_parameterized_job through python-nomad's calls:
    the parsed service job turned into a parameterized batch job, registered, dispatched, purged."""
    job = api.request("POST", "/v1/jobs/parse", {"JobHCL": CONFORMANCE, "Canonicalize": True})
    batch = {
        **job,
        "ID": "conformance-batch",
        "Name": "conformance-batch",
        "Type": "batch",
        # a batch job takes no update block (Nomad's TaskGroup.Validate); the parse gave the service's
        "TaskGroups": [{**g, "Update": None} for g in job["TaskGroups"]],
        "ParameterizedJob": {"MetaRequired": ["owner"]},
    }
    assert api.call("POST", "/v1/job/conformance-batch", {"Job": batch})[0] == 200
    body = {"Meta": {"owner": "me"}, "Payload": None, "idempotency_token": None, "IdPrefixTemplate": None}
    out = api.request("POST", "/v1/job/conformance-batch/dispatch", body)
    assert out["DispatchedJobID"].startswith("conformance-batch/dispatch-")
    child = api.request("GET", f"/v1/job/{_quoted(out['DispatchedJobID'])}")
    assert child["Meta"] == {"owner": "me"} and child["Type"] == "batch"
    assert api.call("DELETE", "/v1/job/conformance-batch?purge=true")[0] == 200
    assert api.call("GET", "/v1/job/conformance-batch")[0] == 404
