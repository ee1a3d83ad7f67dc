"""A register's options as Nomad's JobRegisterRequest has them (`EnforceIndex` with `JobModifyIndex`:
`nomad job run -check-index`; `PreserveCounts`), and the verbs that use them: `job plan` (what a run
would do, its exit code, the index to run with) and `job history`, over real mTLS against an agent
on a fake node (tests/agent_api.py); the decisions and the plan's text as pure functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent import cli
from agent.cli import planformat
from agent.nomadapi.http import HttpError
from agent.nomadapi.jobwrites import (
    enforce_index,
    eval_priority,
    preserved_counts,
    preserved_resources,
    register_options,
)
from tests.agent_api import Agent, nomad_http

SPEC = """
job "%(id)s" {
  datacenters = ["dc1"]
  group "g" {
    count = %(count)d
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sleep"
        args    = ["%(seconds)s"]
      }
      env {
        MODE = "%(mode)s"
      }
      %(extra)s
    }
  }
}
"""


def _spec(
    job_id: str = "web", count: int = 1, mode: str = "a", *, seconds: str = "60", extra: str = ""
) -> str:
    return SPEC % {"id": job_id, "count": count, "mode": mode, "seconds": seconds, "extra": extra}


# -- the decisions (pure) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "given", "want"),
    [
        (None, 0, None),  # a new job, asked to be new
        (None, 7, "Enforcing job modify index 7: job does not exist"),
        (7, 0, "Enforcing job modify index 0: job already exists"),
        (7, 7, None),
        (9, 7, "Enforcing job modify index 7: job exists with conflicting job modify index: 9"),
    ],
)
def test_the_index_check_is_nomads_job_enforce_index(
    current: int | None, given: int, want: str | None
) -> None:
    assert enforce_index(current, given) == want


def test_register_options_refuse_a_wrong_type_naming_the_field() -> None:
    assert register_options({}) == (None, False)
    assert register_options({"JobModifyIndex": 5}) == (None, False), "no EnforceIndex: nothing enforced"
    assert register_options({"EnforceIndex": True}) == (0, False)
    assert register_options({"EnforceIndex": True, "JobModifyIndex": 5, "PreserveCounts": True}) == (5, True)
    for body, field in (
        ({"EnforceIndex": "yes"}, "EnforceIndex"),
        ({"PreserveCounts": 1}, "PreserveCounts"),
        ({"EnforceIndex": True, "JobModifyIndex": -1}, "JobModifyIndex"),
        ({"EnforceIndex": True, "JobModifyIndex": "5"}, "JobModifyIndex"),
        ({"EnforceIndex": True, "JobModifyIndex": True}, "JobModifyIndex"),
    ):
        with pytest.raises(HttpError) as err:
            register_options(body)
        assert err.value.status == 400 and f'"{field}"' in str(err.value), (body, str(err.value))


def test_preserved_counts_keep_the_running_groups_and_leave_new_ones() -> None:
    job = {"ID": "j", "TaskGroups": [{"Name": "a", "Count": 1}, {"Name": "new", "Count": 3}]}
    kept = preserved_counts(job, {"a": 4, "gone": 2})
    assert [(g["Name"], g["Count"]) for g in kept["TaskGroups"]] == [("a", 4), ("new", 3)]
    assert job["TaskGroups"][0]["Count"] == 1, "the body is not changed in place"
    assert preserved_counts(job, {}) == job


def test_preserved_resources_keep_the_tasks_the_job_had_and_leave_new_ones() -> None:
    prev = {"TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Resources": {"MemoryMB": 64}}]}]}
    job = {
        "TaskGroups": [
            {
                "Name": "g",
                "Tasks": [
                    {"Name": "t", "Resources": {"MemoryMB": 512}},
                    {"Name": "new", "Resources": {"MemoryMB": 128}},
                ],
            },
            {"Name": "h", "Tasks": [{"Name": "t", "Resources": {"MemoryMB": 256}}]},  # another group's t
        ]
    }
    kept = preserved_resources(job, prev)
    mem = [(g["Name"], t["Name"], t["Resources"]["MemoryMB"]) for g in kept["TaskGroups"] for t in g["Tasks"]]
    assert mem == [("g", "t", 64), ("g", "new", 128), ("h", "t", 256)]
    assert job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] == 512, "not changed in place"


@pytest.mark.parametrize("given", [None, 0, 1, 80, 100])
def test_an_eval_priority_from_1_to_100_is_the_evaluations_else_the_jobs(given: int | None) -> None:
    assert eval_priority(given) == (given or 50)


@pytest.mark.parametrize("given", [101, -1, 2.5, "80", True])
def test_an_eval_priority_outside_1_to_100_is_refused_as_nomads_agent_does(given: object) -> None:
    with pytest.raises(HttpError) as err:
        eval_priority(given)
    assert (err.value.status, str(err.value)) == (400, "Eval priority must be between 1 and 100 inclusively")


def _edited_diff() -> dict[str, Any]:
    return {
        "Type": "Edited",
        "ID": "web",
        "Fields": [{"Type": "None", "Name": "Priority", "Old": "50", "New": "50", "Annotations": None}],
        "Objects": None,
        "TaskGroups": [
            {
                "Type": "Edited",
                "Name": "g",
                "Updates": {"create": 1, "create/destroy update": 1},
                "Fields": [
                    {
                        "Type": "Edited",
                        "Name": "Count",
                        "Old": "1",
                        "New": "2",
                        "Annotations": ["forces create"],
                    }
                ],
                "Objects": None,
                "Tasks": [
                    {
                        "Type": "Edited",
                        "Name": "t",
                        "Annotations": ["forces create/destroy update"],
                        "Fields": [{"Type": "Edited", "Name": "Env[MODE]", "Old": "a", "New": "b"}],
                        "Objects": [
                            {
                                "Type": "Edited",
                                "Name": "Config",
                                "Fields": [{"Type": "Added", "Name": "args[1]", "Old": "", "New": "x"}],
                                "Objects": None,
                            }
                        ],
                    }
                ],
            }
        ],
    }


def test_a_diff_reads_as_nomads_plan_prints_it() -> None:
    assert planformat.diff_text(_edited_diff()).splitlines() == [
        '+/- Job: "web"',
        '+/- Task Group: "g" (1 create, 1 create/destroy update)',
        '  +/- Count: "1" => "2" (forces create)',
        '  +/- Task: "t" (forces create/destroy update)',
        '    +/- Env[MODE]: "a" => "b"',
        "    +/- Config {",
        '      + args[1]: "x"',
        "        }",
    ]
    verbose = planformat.diff_text(_edited_diff(), verbose=True)
    assert 'Priority: "50"' in verbose, "-verbose shows the unchanged fields too"


def test_the_plans_exit_code_says_whether_allocs_come_or_go() -> None:
    def plan(kind: str, **updates: int) -> dict[str, Any]:
        return {"Diff": {"Type": kind}, "Annotations": {"DesiredTGUpdates": {"g": updates}}}

    assert planformat.plan_exit_code(plan("None", Place=1)) == 0
    assert planformat.plan_exit_code(plan("Edited", Ignore=1, InPlaceUpdate=1)) == 0
    assert planformat.plan_exit_code(plan("Added", Place=1)) == 1
    assert planformat.plan_exit_code(plan("Edited", DestructiveUpdate=1)) == 1
    assert planformat.plan_exit_code(plan("Edited", Stop=2)) == 1


# -- against an agent ------------------------------------------------------------------------------


def test_a_register_with_enforce_index_writes_only_over_that_version(agent: Agent) -> None:
    """`EnforceIndex` as Nomad's server checks it: 0 only for a new job; the job's JobModifyIndex to
    write over it; anything else is Nomad's 500 with its message, and the job keeps its version."""
    base, tls, http = nomad_http(agent)

    def parsed(mode: str) -> dict[str, Any]:
        return dict(
            http.post(f"{base}/v1/jobs/parse", json={"JobHCL": _spec(mode=mode)}, timeout=10, **tls).json()
        )

    def register(mode: str, **opts: Any) -> Any:
        return http.put(f"{base}/v1/jobs", json={"Job": parsed(mode), **opts}, timeout=10, **tls)

    def job() -> dict[str, Any]:
        return dict(http.get(f"{base}/v1/job/web", timeout=10, **tls).json())

    missing = register("a", EnforceIndex=True, JobModifyIndex=3)
    assert (missing.status_code, missing.text.strip()) == (
        500,
        "Enforcing job modify index 3: job does not exist",
    )
    assert http.get(f"{base}/v1/job/web", timeout=10, **tls).status_code == 404

    assert register("a", EnforceIndex=True, JobModifyIndex=0).status_code == 200
    first = job()
    again = register("b", EnforceIndex=True, JobModifyIndex=0)
    assert (again.status_code, again.text.strip()) == (
        500,
        "Enforcing job modify index 0: job already exists",
    )
    stale = register("b", EnforceIndex=True, JobModifyIndex=first["JobModifyIndex"] + 100)
    assert stale.status_code == 500 and stale.text.strip() == (
        f"Enforcing job modify index {first['JobModifyIndex'] + 100}: "
        f"job exists with conflicting job modify index: {first['JobModifyIndex']}"
    )
    assert job()["Version"] == 0 and job()["TaskGroups"][0]["Tasks"][0]["Env"] == {"MODE": "a"}, (
        "a refused register changes nothing"
    )
    ok = register("b", EnforceIndex=True, JobModifyIndex=first["JobModifyIndex"])
    assert ok.status_code == 200, ok.text
    assert (job()["Version"], job()["TaskGroups"][0]["Tasks"][0]["Env"]) == (1, {"MODE": "b"})
    bad = register("c", EnforceIndex=True, JobModifyIndex="1")
    assert bad.status_code == 400 and '"JobModifyIndex"' in bad.text


def test_preserve_counts_keeps_the_running_count_through_an_update(agent: Agent) -> None:
    base, tls, http = nomad_http(agent)

    def register(count: int, mode: str, **opts: Any) -> None:
        job = http.post(
            f"{base}/v1/jobs/parse", json={"JobHCL": _spec(count=count, mode=mode)}, timeout=10, **tls
        )
        resp = http.put(f"{base}/v1/jobs", json={"Job": job.json(), **opts}, timeout=10, **tls)
        assert resp.status_code == 200, resp.text

    register(2, "a")
    register(1, "b", PreserveCounts=True)
    job = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
    assert (job["Version"], job["TaskGroups"][0]["Count"]) == (1, 2), "the count the job ran with"
    allocs = http.get(f"{base}/v1/job/web/allocations", timeout=10, **tls).json()
    assert sum(a["DesiredStatus"] == "run" for a in allocs) == 2, allocs
    register(1, "c")
    job = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
    assert job["TaskGroups"][0]["Count"] == 1, "without the option the file's count wins"


def test_eval_priority_and_preserve_resources_on_register_and_deregister(agent: Agent) -> None:
    base, tls, http = nomad_http(agent)

    def register(memory: int, mode: str, **opts: Any) -> Any:
        extra = f"resources {{\n        memory = {memory}\n      }}"
        job = http.post(
            f"{base}/v1/jobs/parse", json={"JobHCL": _spec(mode=mode, extra=extra)}, timeout=10, **tls
        )
        return http.put(f"{base}/v1/jobs", json={"Job": job.json(), **opts}, timeout=10, **tls)

    def priority(eval_id: str) -> int:
        return int(http.get(f"{base}/v1/evaluation/{eval_id}", timeout=10, **tls).json()["Priority"])

    def memory() -> int:
        job = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
        return int(job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"])

    refused = register(64, "a", EvalPriority=101)
    assert (refused.status_code, refused.text.strip()) == (
        400,
        "Eval priority must be between 1 and 100 inclusively",
    )
    assert http.get(f"{base}/v1/job/web", timeout=10, **tls).status_code == 404, (
        "a refused register stored the job"
    )
    first = register(64, "a", EvalPriority=80)
    assert first.status_code == 200 and priority(first.json()["EvalID"]) == 80
    second = register(512, "b", PreserveResources=True)
    assert second.status_code == 200 and priority(second.json()["EvalID"]) == 50
    job = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
    assert (job["Version"], memory()) == (1, 64), "the update's resources were not the running job's"
    assert job["TaskGroups"][0]["Tasks"][0]["Env"] == {"MODE": "b"}, "the rest of the update is written"
    assert register(512, "c").status_code == 200 and memory() == 512, "without the option the file's wins"
    bad = http.delete(f"{base}/v1/job/web?eval_priority=high", timeout=10, **tls)
    assert bad.status_code == 500 and 'Failed to parse value of "eval_priority" (high) as a int' in bad.text
    assert http.get(f"{base}/v1/job/web", timeout=10, **tls).json()["Stop"] is False, "a refused stop stopped"
    stop = http.delete(f"{base}/v1/job/web?eval_priority=70", timeout=10, **tls)
    assert stop.status_code == 200 and priority(stop.json()["EvalID"]) == 70


def test_job_run_takes_nomads_eval_priority_and_preserve_resources_flags(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, tls, http = nomad_http(agent)
    spec = tmp_path / "web.nomad.hcl"
    spec.write_text(_spec(extra="resources {\n        memory = 64\n      }"))
    code, out, err = _run(capsys, "job", "run", "-detach", "-eval-priority", "90", *agent.flags, str(spec))
    assert code == 0, (out, err)
    eval_id = out.split("Evaluation ID: ")[1].split()[0]
    assert http.get(f"{base}/v1/evaluation/{eval_id}", timeout=10, **tls).json()["Priority"] == 90
    spec.write_text(_spec(mode="b", extra="resources {\n        memory = 300\n      }"))
    assert _run(capsys, "job", "run", "-detach", "-preserve-resources", *agent.flags, str(spec))[0] == 0
    job = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
    assert job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] == 64


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_then_run_with_its_check_index_as_a_nomad_user_would(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`job plan FILE` says what `job run` would do (exit 1: allocs placed; 0: nothing changes) and
    the index to run with; `job run -check-index` with a stale index is refused ("Job not
    updated"), with the plan's index it runs; `job history -p` shows the versions and their diff;
    a job ID prefix names the job."""
    f = agent.flags
    spec = tmp_path / "web.nomad.hcl"
    spec.write_text(_spec())
    code, out, err = _run(capsys, "job", "plan", *f, str(spec))
    assert code == 1, (out, err)
    assert out.startswith('+ Job: "web"\n+ Task Group: "g" (1 create)\n  + Task: "t" (forces create)\n'), out
    assert "- All tasks successfully allocated." in out and "Job Modify Index: 0\n" in out
    assert f"fieldlab-agent job run -check-index 0 {spec}" in out
    assert _run(capsys, "job", "run", "-check-index", "0", *f, str(spec))[0] == 0

    code, out, _ = _run(capsys, "job", "plan", *f, str(spec))
    assert code == 0 and out.startswith('Job: "web"\nTask Group: "g" (1 ignore)\n'), out
    index = int(out.split("Job Modify Index: ")[1].split()[0])
    assert index > 0

    spec.write_text(_spec(mode="b"))
    code, out, _ = _run(capsys, "job", "plan", "-json-output", *f, str(spec))
    assert code == 1 and '"DestructiveUpdate": 1' in out
    code, out, _ = _run(capsys, "job", "plan", *f, str(spec))
    assert code == 1 and '+/- Task: "t" (forces create/destroy update)' in out, out
    assert '+/- Env[MODE]: "a" => "b"' in out

    code, out, err = _run(capsys, "job", "run", "-check-index", str(index + 5), *f, str(spec))
    assert (code, out) == (1, "") and err == (
        f"Enforcing job modify index {index + 5}: job exists with conflicting job modify index: {index}\n"
        "Job not updated\n"
    )
    assert _run(capsys, "job", "run", "-check-index", str(index), *f, str(spec))[0] == 0

    code, out, _ = _run(capsys, "job", "history", "-p", *f, "we")
    assert code == 0, out
    newest, oldest = out.split("\n\n")
    assert newest.startswith("Version     = 1\nStable      = false\nSubmit Date = "), newest
    assert 'Diff        =\n+/- Job: "web"' in newest and '+/- Env[MODE]: "a" => "b"' in newest
    assert oldest.startswith("Version     = 0\n") and "Diff" not in oldest
    code, out, _ = _run(capsys, "job", "history", "-version", "0", "-json", *f, "web")
    assert code == 0 and '"Version": 0' in out

    other = tmp_path / "web2.nomad.hcl"
    other.write_text(_spec(job_id="web2"))
    assert _run(capsys, "job", "run", "-detach", *f, str(other))[0] == 0
    code, out, _ = _run(capsys, "job", "status", *f, "web")
    assert code == 0 and "web2" not in out, "an exact ID wins over the longer ones it prefixes"
    code, _, err = _run(capsys, "job", "history", *f, "we")
    assert code == 2 and 'prefix "we" matched multiple jobs (web, web2)' in err, err


def test_a_plan_that_cannot_reach_the_agent_exits_255(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "web.nomad.hcl"
    spec.write_text(_spec())
    code, _, err = _run(capsys, "job", "plan", "-address=https://127.0.0.1:9", str(spec))
    assert code == 255 and "fieldlab-agent: error:" in err, err
    spec.write_text("job {")
    code, _, err = _run(capsys, "job", "plan", str(spec))
    assert code == 255 and str(spec) in err, err


def test_scale_registers_the_groups_new_count_as_nomads_server_does(agent: Agent) -> None:
    """`POST /v1/job/:id/scale` (`nomad job scale`): the job's next version with the group's count,
    allocs placed or stopped to it, a scaling event in `GET /v1/job/:id/scale`; an event without a
    count changes nothing; a wrong group, count, job or index is refused with Nomad's message."""
    base, tls, http = nomad_http(agent)
    job = http.post(f"{base}/v1/jobs/parse", json={"JobHCL": _spec()}, timeout=10, **tls).json()
    assert http.put(f"{base}/v1/jobs", json={"Job": job}, timeout=10, **tls).status_code == 200

    def scale(**body: Any) -> Any:
        return http.post(f"{base}/v1/job/web/scale", json=body, timeout=30, **tls)

    def live() -> int:
        allocs = http.get(f"{base}/v1/job/web/allocations", timeout=10, **tls).json()
        return sum(a["DesiredStatus"] == "run" for a in allocs)

    up = scale(Count=3, Target={"Group": "g"}, Message="more")
    assert up.status_code == 200 and up.json()["EvalID"], up.text
    got = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
    assert (got["Version"], got["TaskGroups"][0]["Count"], live()) == (1, 3, 3)
    stubs = http.get(f"{base}/v1/job/web/allocations", timeout=10, **tls).json()
    assert [a["JobVersion"] for a in stubs] == [1, 1, 1], "the kept alloc is updated in place to version 1"
    full = http.get(f"{base}/v1/allocation/{stubs[0]['ID']}", timeout=10, **tls).json()
    assert full["Job"]["Version"] == 1
    status = http.get(f"{base}/v1/job/web/scale", timeout=10, **tls).json()
    group = status["TaskGroups"]["g"]
    assert (group["Desired"], group["Placed"]) == (3, 3), group
    (event,) = group["Events"]
    assert (event["Count"], event["PreviousCount"], event["Message"], event["EvalID"]) == (
        3,
        1,
        "more",
        up.json()["EvalID"],
    )

    assert scale(Count=1, Target={"Group": "g"}).status_code == 200
    assert live() == 1 and http.get(f"{base}/v1/job/web", timeout=10, **tls).json()["Version"] == 2

    noted = scale(Target={"Group": "g"}, Message="autoscaler: nothing to do")
    assert noted.status_code == 200 and noted.json()["EvalID"] == ""
    assert http.get(f"{base}/v1/job/web", timeout=10, **tls).json()["Version"] == 2, "an event only"
    assert (
        len(http.get(f"{base}/v1/job/web/scale", timeout=10, **tls).json()["TaskGroups"]["g"]["Events"]) == 3
    )

    for body, status_code, said in (
        (
            {"Count": 2, "Target": {"Group": "nope"}},
            400,
            'task group "nope" specified for scaling does not exist',
        ),
        ({"Count": -1, "Target": {"Group": "g"}}, 400, "can't be negative"),
        ({"Count": 2, "Target": {"Group": "g", "Job": "other"}}, 400, "job ID in payload did not match URL"),
        ({"Count": 2}, 400, "missing task group name"),
        ({"Count": 2, "Target": {"Group": "g"}, "JobModifyIndex": 1}, 500, "Enforcing job modify index 1"),
    ):
        resp = scale(**body)
        assert (resp.status_code, said in resp.text) == (status_code, True), (body, resp.text)
    assert live() == 1 and http.get(f"{base}/v1/job/web", timeout=10, **tls).json()["Version"] == 2
    missing = http.post(
        f"{base}/v1/job/nope/scale", json={"Count": 1, "Target": {"Group": "g"}}, timeout=10, **tls
    )
    assert missing.status_code == 404


def test_revert_registers_an_earlier_version_again(agent: Agent) -> None:
    """`POST /v1/job/:id/revert` (`nomad job revert`): version N again as the next version; the
    current version, an unknown one, or a prior version that is not the current are refused with
    Nomad's messages, and nothing changes."""
    base, tls, http = nomad_http(agent)
    for mode in ("a", "b"):
        job = http.post(f"{base}/v1/jobs/parse", json={"JobHCL": _spec(mode=mode)}, timeout=10, **tls).json()
        assert http.put(f"{base}/v1/jobs", json={"Job": job}, timeout=10, **tls).status_code == 200

    def revert(**body: Any) -> Any:
        return http.post(f"{base}/v1/job/web/revert", json={"JobID": "web", **body}, timeout=30, **tls)

    def current() -> tuple[int, dict[str, str]]:
        got = http.get(f"{base}/v1/job/web", timeout=10, **tls).json()
        return got["Version"], got["TaskGroups"][0]["Tasks"][0]["Env"]

    for body, said in (
        ({"JobVersion": 1}, "can't revert to current version"),
        ({"JobVersion": 7}, 'job "web" in namespace "default" at version 7 not found'),
        ({"JobVersion": 0, "EnforcePriorVersion": 0}, "Current job has version 1; enforcing version 0"),
    ):
        resp = revert(**body)
        assert (resp.status_code, resp.text.strip()) == (500, said), resp.text
    assert current() == (1, {"MODE": "b"})
    wrong = http.post(
        f"{base}/v1/job/web/revert", json={"JobID": "other", "JobVersion": 0}, timeout=10, **tls
    )
    assert (wrong.status_code, wrong.text.strip()) == (400, "Job ID does not match")

    back = revert(JobVersion=0, EnforcePriorVersion=1)
    assert back.status_code == 200 and back.json()["EvalID"], back.text
    assert current() == (2, {"MODE": "a"})
    allocs = http.get(f"{base}/v1/job/web/allocations", timeout=10, **tls).json()
    versions = sorted((a["JobVersion"], a["DesiredStatus"]) for a in allocs)
    assert versions == [(0, "stop"), (1, "stop"), (2, "run")], "each alloc keeps the version it ran"
    stopped = next(a for a in allocs if a["JobVersion"] == 0)
    full = http.get(f"{base}/v1/allocation/{stopped['ID']}", timeout=10, **tls).json()
    assert (full["Job"]["Version"], full["Job"]["TaskGroups"][0]["Tasks"][0]["Env"]) == (0, {"MODE": "a"})


def test_job_scale_and_revert_as_a_nomad_user_types_them(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    spec = tmp_path / "web.nomad.hcl"
    spec.write_text(_spec())
    assert _run(capsys, "job", "run", "-detach", *f, str(spec))[0] == 0
    code, out, err = _run(capsys, "job", "scale", *f, "web", "2")  # the job's only group
    assert (code, out.splitlines()[0]) == (0, '==> Job "web" group "g" scaled to 2 (version 1)'), (out, err)
    assert out.count("    Allocation ") == 1, out
    code, out, _ = _run(capsys, "job", "scale", *f, "we", "g", "1")
    assert (code, out.splitlines()[0]) == (0, '==> Job "web" group "g" scaled to 1 (version 2)'), out
    code, _, err = _run(capsys, "job", "scale", *f, "web", "nope", "1")
    assert code == 2 and 'task group "nope" specified for scaling does not exist in job' in err, err
    code, out, _ = _run(capsys, "job", "revert", *f, "web", "1")
    assert (code, out.splitlines()[0]) == (0, '==> Job "web" reverted to version 1 (version 3)'), out
    code, out, _ = _run(capsys, "job", "history", "-json", *f, "web")
    assert [v["TaskGroups"][0]["Count"] for v in json.loads(out)] == [2, 1, 2, 1]
    assert _run(capsys, "job", "revert", *f, "web", "2")[0] == 0  # version 4: count 1 again
    code, out, _ = _run(capsys, "job", "revert", *f, "web", "0")  # the same spec as now: no new version
    assert (code, out.splitlines()[0]) == (0, '==> Job "web" reverted to version 0 (version 4)'), out


# -- versions and plans, read as Nomad's structs ---------------------------------------------------


def test_job_versions_with_diffs_say_what_changed_as_nomads_job_diff(agent: Agent) -> None:
    """`GET /v1/job/:id/versions?diffs=true` (`nomad job history -p`): Diffs[0] is version 0 ->
    version 1, an api.JobDiff with the edited task's env and config, the group's count kept."""
    base, tls, http = nomad_http(agent)
    for args, mode in (("60", "a"), ("61", "b")):
        hcl = _spec("hist", mode=mode, seconds=args)
        job = http.post(f"{base}/v1/jobs/parse", json={"JobHCL": hcl}, timeout=10, **tls).json()
        assert http.put(f"{base}/v1/jobs", json={"Job": job}, timeout=10, **tls).status_code == 200
    plain = http.get(f"{base}/v1/job/hist/versions", timeout=10, **tls).json()
    assert plain["Diffs"] is None and [v["Version"] for v in plain["Versions"]] == [1, 0]
    got = http.get(f"{base}/v1/job/hist/versions", params={"diffs": "true"}, timeout=10, **tls).json()
    (diff,) = got["Diffs"]
    assert (diff["Type"], diff["ID"], diff["Objects"]) == ("Edited", "hist", None), diff
    assert all(f["Type"] == "None" for f in diff["Fields"]), "nothing of the job itself changed"
    (group,) = diff["TaskGroups"]
    assert (group["Name"], group["Type"]) == ("g", "Edited")
    assert {f["Name"]: f["Type"] for f in group["Fields"]}["Count"] == "None"
    (task,) = group["Tasks"]
    changed = {f["Name"]: (f["Old"], f["New"]) for f in task["Fields"] if f["Type"] != "None"}
    assert changed == {"Env[MODE]": ("a", "b")}, changed
    (config,) = task["Objects"]
    args_field = {f["Name"]: (f["Type"], f["Old"], f["New"]) for f in config["Fields"]}["args[0]"]
    assert (config["Name"], config["Type"], args_field) == ("Config", "Edited", ("Edited", "60", "61"))


def test_job_plan_says_what_a_register_would_do_and_changes_nothing(agent: Agent) -> None:
    """`PUT /v1/job/:id/plan` (`nomad job plan`): a new job places its count; the same job again is
    ignored; a changed env and a count up replace the running alloc and place one more, annotated
    as Nomad's scheduler annotates them; a constraint the node fails is a FailedTGAllocs entry.
    Nothing is registered, stopped or started by a plan."""
    base, tls, http = nomad_http(agent)

    def job(count: int = 1, mode: str = "a", extra: str = "") -> dict[str, Any]:
        body = {"JobHCL": _spec("planned", count, mode, extra=extra)}
        return dict(http.post(f"{base}/v1/jobs/parse", json=body, timeout=10, **tls).json())

    def plan(j: dict[str, Any]) -> dict[str, Any]:
        resp = http.put(f"{base}/v1/job/planned/plan", json={"Job": j, "Diff": True}, timeout=10, **tls)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def updates(p: dict[str, Any]) -> dict[str, int]:
        return {k: v for k, v in p["Annotations"]["DesiredTGUpdates"]["g"].items() if v}

    fresh = plan(job())
    assert (fresh["JobModifyIndex"], fresh["Diff"]["Type"], updates(fresh)) == (0, "Added", {"Place": 1})
    assert fresh["Diff"]["TaskGroups"][0]["Updates"] == {"create": 1} and fresh["FailedTGAllocs"] is None
    assert http.get(f"{base}/v1/job/planned", timeout=10, **tls).status_code == 404, (
        "a plan registers nothing"
    )

    assert http.put(f"{base}/v1/jobs", json={"Job": job()}, timeout=10, **tls).status_code == 200
    allocs = http.get(f"{base}/v1/job/planned/allocations", timeout=10, **tls).json()
    index = http.get(f"{base}/v1/job/planned", timeout=10, **tls).json()["JobModifyIndex"]
    same = plan(job())
    assert (same["JobModifyIndex"], same["Diff"]["Type"], updates(same)) == (index, "None", {"Ignore": 1})

    changed = plan(job(count=2, mode="b"))
    assert updates(changed) == {"Place": 1, "DestructiveUpdate": 1}, changed["Annotations"]
    (group,) = changed["Diff"]["TaskGroups"]
    assert group["Updates"] == {"create": 1, "create/destroy update": 1}
    count = next(f for f in group["Fields"] if f["Name"] == "Count")
    assert (count["Old"], count["New"], count["Annotations"]) == ("1", "2", ["forces create"])
    assert group["Tasks"][0]["Annotations"] == ["forces create/destroy update"]
    after = http.get(f"{base}/v1/job/planned/allocations", timeout=10, **tls).json()
    assert [(a["ID"], a["DesiredStatus"]) for a in after] == [(a["ID"], "run") for a in allocs], "untouched"

    pinned = plan(job(extra='constraint {\n attribute = "${node.unique.name}"\n value = "elsewhere"\n}'))
    (why,) = pinned["FailedTGAllocs"]["g"]["ConstraintFiltered"]
    assert "elsewhere" in why and pinned["FailedTGAllocs"]["g"]["NodesFiltered"] == 1, pinned[
        "FailedTGAllocs"
    ]
