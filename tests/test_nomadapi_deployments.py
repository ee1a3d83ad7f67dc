"""Deployments as Nomad's servers make them for one node (issue 51/52): one per version of a service
job, its allocs' health by task states (`update`'s min_healthy_time, healthy_deadline,
progress_deadline), successful or failed as Nomad's deployment watcher decides, the verbs python-nomad
calls (fail, pause/resume, promote, allocation-health) with Nomad's answers and refusals, the job's
Stable and `/stable`; kept across an agent restart. On the real Core and loop with a fake node."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.api.server import ApiServer
from agent.command.config import Config, TLSConfig
from agent.jobspec import JobspecError, parse_jobspec
from agent.nomadapi.jobjson import parsed_job_json
from tests.agent_lab import run_job
from tests.fakes import FakeNode
from tests.pki import TestCA
from tests.test_routes_ops import CRASHY, OPERATOR, TWO_TASKS, Api, _exits, start_api

WAIT = 5.0  # seconds for a deployment to reach a status its deadlines make due within 1 s


def service(update: str = "", *, count: int = 2, meta: str = "v0") -> str:
    return f"""
job "web" {{
  meta {{ rev = "{meta}" }}
  group "g" {{
    count = {count}
    {update}
    task "srv" {{
      driver = "exec"
      config {{ command = "/bin/sleep" }}
    }}
  }}
}}
"""


EXAMPLE = """
job "example" {
  meta { rev = "v0" }
  group "cache" {
    task "redis" {
      driver = "docker"
      config { image = "fieldlab/busybox:latest" }
    }
  }
}
"""
FAST = 'update {\n min_healthy_time = "200ms"\n healthy_deadline = "3s"\n progress_deadline = "4s"\n }'
SLOW = 'update {\n min_healthy_time = "30s"\n healthy_deadline = "1m"\n progress_deadline = "2m"\n }'


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, api = start_api(FakeNode(tmp_path))
    yield api
    core.stop()


def until(api: Api, deployment_id: str, done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while not done(d := api.request("GET", f"/v1/deployment/{deployment_id}")):
        assert time.monotonic() < deadline, (
            f"{what}: {d['Status']} {d['StatusDescription']} {d['TaskGroups']}"
        )
        time.sleep(0.05)
    return dict(d)


def only(api: Api) -> dict[str, Any]:
    (d,) = api.request("GET", "/v1/deployments")
    return d  # type: ignore[no-any-return]


def test_a_service_jobs_version_is_deployed_and_succeeds_once_its_allocs_are_healthy(api: Api) -> None:
    placed = run_job(api.request, service(FAST))
    d = only(api)
    assert (d["JobID"], d["JobVersion"], d["Status"], d["StatusDescription"]) == (
        "web",
        0,
        "running",
        "Deployment is running",
    )
    assert d["TaskGroups"]["g"]["DesiredTotal"] == 2 and d["TaskGroups"]["g"]["PlacedAllocs"] == 2
    done = until(api, d["ID"], lambda x: x["Status"] != "running", "successful")
    assert (done["Status"], done["StatusDescription"]) == ("successful", "Deployment completed successfully")
    assert (done["TaskGroups"]["g"]["HealthyAllocs"], done["TaskGroups"]["g"]["UnhealthyAllocs"]) == (2, 0)
    for alloc_id in placed:
        alloc = api.request("GET", f"/v1/allocation/{alloc_id}")
        assert alloc["DeploymentID"] == d["ID"] and alloc["DeploymentStatus"]["Healthy"] is True
    assert api.request("GET", "/v1/job/web")["Stable"] is True  # its version's deployment succeeded
    # the reads python-nomad makes: the job's, the prefix list, the deployment's allocs
    assert api.request("GET", "/v1/job/web/deployment")["ID"] == d["ID"]
    assert [x["ID"] for x in api.request("GET", "/v1/job/web/deployments")] == [d["ID"]]
    assert [x["ID"] for x in api.request("GET", f"/v1/deployments?prefix={d['ID'][:4]}")] == [d["ID"]]
    listed = api.request("GET", f"/v1/deployment/allocations/{d['ID']}")
    assert sorted(a["ID"] for a in listed) == sorted(placed) and {a["JobID"] for a in listed} == {"web"}
    assert api.call("GET", "/v1/deployment/00000000-0000-0000-0000-000000000000")[0] == 404
    assert api.request("GET", "/v1/deployment/allocations/00000000-0000-0000-0000-000000000000") == []
    assert api.request("GET", "/v1/job/nope/deployments") == []  # no 404: Nomad's Job.Deployments
    assert api.request("GET", "/v1/job/nope/deployment") is None


def test_a_new_version_cancels_the_running_one_and_the_same_job_again_makes_none(api: Api) -> None:
    run_job(api.request, service(SLOW))
    first = only(api)
    run_job(api.request, service(SLOW, meta="v1"))
    newest, older = api.request("GET", "/v1/job/web/deployments")  # newest first
    assert older["ID"] == first["ID"]
    assert (older["Status"], older["StatusDescription"]) == (
        "cancelled",
        "Cancelled due to newer version of job",
    )
    assert (newest["JobVersion"], newest["Status"]) == (1, "running")
    run_job(api.request, service(SLOW, meta="v1"))  # no new version: no deployment
    assert len(api.request("GET", "/v1/deployments")) == 2
    assert api.request("GET", "/v1/job/web")["Stable"] is False


def test_a_batch_job_and_max_parallel_0_make_none_and_a_batch_update_block_is_refused(api: Api) -> None:
    run_job(api.request, TWO_TASKS)  # batch
    run_job(api.request, service("update {\n max_parallel = 0\n }"))
    assert api.request("GET", "/v1/deployments") == []
    assert api.request("GET", "/v1/job/web/deployment") is None
    with pytest.raises(JobspecError) as exc:
        parse_jobspec(
            TWO_TASKS.replace('type = "batch"', 'type = "batch"\n update {}'), source="t", fmt="hcl"
        )
    assert ("job.pair.update", 'Job type "batch" does not allow update block') in exc.value.problems


def test_an_alloc_that_fails_before_it_is_healthy_fails_the_deployment(api: Api) -> None:
    (alloc,) = run_job(api.request, CRASHY)  # a service job, restart attempts 0: an exit fails it
    d = only(api)
    _exits(api, alloc, 1)
    failed = until(api, d["ID"], lambda x: x["Status"] != "running", "failed")
    assert (failed["Status"], failed["StatusDescription"]) == (
        "failed",
        "Failed due to unhealthy allocations",
    )
    assert failed["TaskGroups"]["g"]["UnhealthyAllocs"] == 1
    assert api.request("GET", f"/v1/allocation/{alloc}")["DeploymentStatus"]["Healthy"] is False


def test_the_progress_deadline_fails_a_deployment_whose_allocs_are_not_healthy_by_it(api: Api) -> None:
    manual = (
        'update {\n health_check = "manual"\n min_healthy_time = "0s"\n healthy_deadline = "100ms"\n'
        ' progress_deadline = "300ms"\n }'
    )
    run_job(api.request, service(manual, count=1))
    d = until(api, only(api)["ID"], lambda x: x["Status"] != "running", "progress deadline")
    assert (d["Status"], d["StatusDescription"]) == ("failed", "Failed due to progress deadline")
    assert d["TaskGroups"]["g"]["HealthyAllocs"] == 0  # "manual": only the operator's word counts


def test_the_verbs_python_nomad_calls_answer_as_nomad(api: Api) -> None:
    placed = run_job(api.request, service(SLOW))
    d = only(api)
    url = f"/v1/deployment/{{}}/{d['ID']}"
    body = {"DeploymentID": d["ID"]}
    # pause and resume a running deployment; promote with no canaries promotes each group
    assert api.request("POST", url.format("pause"), {**body, "Pause": True})["EvalID"] == ""
    assert api.request("GET", f"/v1/deployment/{d['ID']}")["Status"] == "paused"
    resumed = api.request("POST", url.format("pause"), {**body, "Pause": False})
    assert resumed["EvalID"] and api.request("GET", f"/v1/deployment/{d['ID']}")["Status"] == "running"
    api.request("POST", url.format("promote"), {**body, "All": True})
    assert api.request("GET", f"/v1/deployment/{d['ID']}")["TaskGroups"]["g"]["Promoted"] is True
    # the operator's word on health: an alloc of another deployment (or none) is refused
    unknown = {**body, "HealthyAllocationIDs": ["nope"]}
    assert api.call("POST", url.format("allocation-health"), unknown) == (
        500,
        f'alloc "nope" is not part of deployment "{d["ID"]}"',
    )
    assert api.call("POST", url.format("allocation-health"), body) == (
        500,
        "must specify at least one healthy/unhealthy allocation ID",
    )
    api.request("POST", url.format("allocation-health"), {**body, "HealthyAllocationIDs": placed[:1]})
    assert api.request("GET", f"/v1/allocation/{placed[0]}")["DeploymentStatus"]["Healthy"] is True
    # the body must name the deployment of the path (Nomad's HTTP agent)
    assert api.call("POST", url.format("pause"), {"Pause": True}) == (400, "DeploymentID must be specified\n")
    assert api.call("POST", url.format("pause"), {"DeploymentID": "x"}) == (
        400,
        "Deployment ID does not match\n",
    )
    # fail, then python-nomad's test_deployment: every verb on a terminal deployment, Nomad's text
    failed = api.request("POST", url.format("fail"), body)
    assert failed["EvalID"] and failed["DeploymentModifyIndex"] > 0
    d = api.request("GET", f"/v1/deployment/{d['ID']}")
    assert (d["Status"], d["StatusDescription"]) == ("failed", "Deployment marked as failed")
    refusals: list[tuple[str, dict[str, Any], str]] = [
        ("fail", {}, "can't fail terminal deployment"),
        ("pause", {"Pause": False}, "can't resume terminal deployment"),
        ("pause", {"Pause": True}, "can't pause terminal deployment"),
        ("promote", {"All": True}, "can't promote terminal deployment"),
        (
            "allocation-health",
            # python-nomad's spelling: Go matches a field without regard to case
            {"HealthyAllocationIDs": [], "UnHealthyAllocationIDs": [d["ID"]]},
            "can't set health of allocations for a terminal deployment",
        ),
    ]
    for verb, extra, text in refusals:
        assert api.call("POST", url.format(verb), {**body, **extra}) == (500, text), verb
    assert api.call("POST", "/v1/deployment/fail/nope", {}) == (500, "deployment not found")


def test_an_unhealthy_word_fails_the_deployment(api: Api) -> None:
    placed = run_job(api.request, service(SLOW, count=1))
    d = only(api)
    api.request(
        "POST",
        f"/v1/deployment/allocation-health/{d['ID']}",
        {"DeploymentID": d["ID"], "UnhealthyAllocationIDs": placed},
    )
    d = api.request("GET", f"/v1/deployment/{d['ID']}")
    assert (d["Status"], d["StatusDescription"], d["TaskGroups"]["g"]["UnhealthyAllocs"]) == (
        "failed",
        "Failed due to unhealthy allocations",
        1,
    )


def test_stable_marks_a_version_as_nomad(api: Api) -> None:
    run_job(api.request, service(SLOW))
    run_job(api.request, service(SLOW, meta="v1"))
    assert api.request("POST", "/v1/job/web/stable", {"JobID": "web", "JobVersion": 0, "Stable": True})[
        "Index"
    ]
    stable = {v["Version"]: v["Stable"] for v in api.request("GET", "/v1/job/web/versions")["Versions"]}
    assert stable == {1: False, 0: True}
    api.request("POST", "/v1/job/web/stable", {"JobID": "web", "JobVersion": 1, "Stable": True})
    assert api.request("GET", "/v1/job/web")["Stable"] is True
    missing = {"JobID": "web", "JobVersion": 7, "Stable": True}
    assert api.call("POST", "/v1/job/web/stable", missing) == (
        500,
        'job "web" in namespace "default" at version 7 not found',
    )
    assert api.call("POST", "/v1/job/web/stable", {"JobVersion": 0}) == (400, "JobID must be specified\n")
    assert api.call("POST", "/v1/job/web/stable", {"JobID": "x"}) == (400, "Job ID does not match\n")


def test_deployments_outlive_an_agent_restart_and_go_with_a_purge(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    run_job(api.request, service(SLOW))
    before = only(api)
    api.request("POST", f"/v1/deployment/fail/{before['ID']}", {"DeploymentID": before["ID"]})
    core.stop()
    core, api = start_api(node, restore=True)
    try:
        after = only(api)
        assert (after["ID"], after["Status"], after["CreateIndex"]) == (
            before["ID"],
            "failed",
            before["CreateIndex"],
        )
        api.request("DELETE", "/v1/job/web?purge=true")
        assert api.request("GET", "/v1/deployments") == []
    finally:
        core.stop()


def test_the_update_block_is_read_over_the_jobs_and_shown_as_nomad() -> None:
    job_level = 'update {\n max_parallel = 2\n min_healthy_time = "5s"\n }'
    text = service('update {\n healthy_deadline = "1m"\n }').replace(
        'job "web" {', 'job "web" {\n ' + job_level
    )
    job = parse_jobspec(text, source="t", fmt="hcl").job
    u = job.groups[0].update
    assert u is not None
    assert (u.max_parallel, u.min_healthy_time, u.healthy_deadline, u.progress_deadline) == (
        2,
        5.0,
        60.0,
        600.0,
    )
    shown = parsed_job_json(job)["TaskGroups"][0]["Update"]
    assert (shown["MaxParallel"], shown["MinHealthyTime"], shown["HealthyDeadline"]) == (
        2,
        5 * 10**9,
        60 * 10**9,
    )
    assert (
        parse_jobspec(
            f'{{"Job": {__import__("json").dumps(parsed_job_json(job))}}}', source="rt", fmt="json"
        ).job
        == job
    )
    with pytest.raises(JobspecError) as exc:
        parse_jobspec(service('update {\n min_healthy_time = "10m"\n }'), source="t", fmt="hcl")
    assert (
        "job.web.group.g.update.min_healthy_time",
        "Minimum healthy time must be less than healthy deadline: 10m > 5m",
    ) in exc.value.problems


def test_a_jobs_deployments_are_kept_for_the_versions_it_keeps(api: Api) -> None:
    """Nomad's servers collect terminal deployments; here one goes when its job version is no longer
    among the job's tracked versions (6), so a job updated all day keeps a bounded list."""
    for i in range(8):
        run_job(api.request, service(SLOW, count=1, meta=f"v{i}"))
    versions = [d["JobVersion"] for d in api.request("GET", "/v1/job/web/deployments")]
    assert versions == [7, 6, 5, 4, 3, 2]
    by_version = {d["JobVersion"]: d["ID"] for d in api.request("GET", "/v1/deployments")}
    for a in api.request("GET", "/v1/job/web/allocations"):  # an alloc of a dropped one names none
        alloc = api.request("GET", f"/v1/allocation/{a['ID']}")
        assert alloc["DeploymentID"] == by_version.get(a["JobVersion"], ""), a["JobVersion"]


def test_python_nomads_deployment_calls_replayed_through_its_client(api: Api, tmp_path: Path) -> None:
    """python-nomad's test_deployment.py, test_deployments.py and test_job.py's deployment, revert
    and stable tests, through python-nomad itself over mTLS (its bodies, its spellings, its error
    handling): the example job registered, the deployment failed, every verb then refused with
    Nomad's text as the suite compares it."""
    nomad = pytest.importorskip("nomad", reason="python-nomad is a lab extra (pip install -e .[lab])")
    ca = TestCA(tmp_path)
    srv, op = ca.issue("client1.agent.fieldlab", server=True), ca.issue(OPERATOR, server=False)
    tls = TLSConfig(srv.cert, srv.key, ca.ca_file)
    cfg = Config(node_name="client1", data_dir=tmp_path / "data", bind_address="127.0.0.1", port=0, tls=tls)
    server = ApiServer(cfg, {}, api.table, [])
    server.start()
    try:
        n = nomad.Nomad(
            host="127.0.0.1",
            port=server.port,
            secure=True,
            verify=str(ca.ca_file),
            cert=(str(op.cert), str(op.key)),
            timeout=10,
        )
        n.job.register_job("example", {"Job": parsed_job_json(parse_jobspec(EXAMPLE, source="t").job)})
        d = n.deployments.get_deployments()[0]
        assert n.deployment.get_deployment(d["ID"])["ID"] == d["ID"]
        assert n.deployment.get_deployment_allocations(d["ID"])[0]["JobID"] == "example"
        n.deployment.fail_deployment(d["ID"])
        refused: dict[str, Callable[[], Any]] = {
            "can't resume terminal deployment": lambda: n.deployment.pause_deployment(d["ID"], False),
            "can't promote terminal deployment": lambda: n.deployment.promote_deployment_groups(d["ID"]),
            "can't set health of allocations for a terminal deployment": lambda: (
                n.deployment.deployment_allocation_health(d["ID"], unhealthy_allocations=[d["ID"]])
            ),
        }
        for text, call in refused.items():
            with pytest.raises(nomad.api.exceptions.BaseNomadException) as exc:
                call()
            assert exc.value.nomad_resp.text == text
        assert len(n.deployments) == 1 and d["ID"] in n.deployments and "nope" not in n.deployments
        assert n.job.get_deployments("example")[0]["JobID"] == n.job.get_deployment("example")["JobID"]
        n.job.register_job(
            "example", {"Job": parsed_job_json(parse_jobspec(EXAMPLE.replace("v0", "v1"), source="t").job)}
        )
        current = n.job.get_deployment("example")["JobVersion"]
        n.job.revert_job("example", current - 1, current)
        n.job.stable_job("example", n.job.get_deployment("example")["JobVersion"], True)
        assert n.job.get_job("example")["Stable"] is True
    finally:
        server.stop(5)


REVERTING = """
job "rev" {
  meta { rev = "REV" }
  group "g" {
    update {
      auto_revert      = true
      min_healthy_time = "100ms"
      healthy_deadline = "2s"
      progress_deadline = "3s"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "docker"
      config { image = "x" }
    }
  }
}
"""


def test_auto_revert_rolls_a_failed_deployment_back_to_the_newest_stable_version(api: Api) -> None:
    run_job(api.request, REVERTING.replace("REV", "v0"))
    first = until(api, only(api)["ID"], lambda x: x["Status"] != "running", "v0 successful")
    assert first["Status"] == "successful" and first["TaskGroups"]["g"]["AutoRevert"] is True
    (alloc,) = run_job(api.request, REVERTING.replace("REV", "v1"))
    second = api.request("GET", "/v1/job/rev/deployment")
    assert second["JobVersion"] == 1
    _exits(api, alloc, 1)  # v1's alloc fails before it is healthy
    failed = until(api, second["ID"], lambda x: x["Status"] != "running", "v1 failed")
    assert (
        failed["StatusDescription"] == "Failed due to unhealthy allocations - rolling back to job version 0"
    )
    deadline = time.monotonic() + WAIT
    while (job := api.request("GET", "/v1/job/rev"))["Version"] != 2:
        assert time.monotonic() < deadline, f"no rollback: version {job['Version']}"
        time.sleep(0.05)
    assert job["Meta"] == {"rev": "v0"}  # version 0's spec, registered again as version 2
    assert api.request("GET", "/v1/job/rev/deployment")["JobVersion"] == 2


def test_auto_revert_without_a_stable_version_says_so(api: Api) -> None:
    run_job(api.request, REVERTING.replace("REV", "v0"))
    d = only(api)
    out = api.request("POST", f"/v1/deployment/fail/{d['ID']}", {"DeploymentID": d["ID"]})
    assert out["RevertedJobVersion"] is None
    d = api.request("GET", f"/v1/deployment/{d['ID']}")
    assert d["StatusDescription"] == "Deployment marked as failed - no stable job version to auto revert to"
