"""Scenario files (e2e/scenarios/<bug>.yml): every file of the catalogue loads, agrees with the
agent's fault catalogue, and a bad file is refused with its path and field; the checks and the image
map are pure and tested here; `repro new` writes a skeleton that loads."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.fieldbugs.catalogue import FAULTS, IMPLEMENTED_FAULTS
from e2e.drivers import repro
from e2e.harness.scenario import (
    SCENARIOS,
    ScenarioError,
    Step,
    catalogue,
    load,
    substitute_images,
)
from e2e.harness.scenario_judge import SWEPT_KEY, check_problems, file_paths, wait_state
from e2e.harness.scenario_write import images_in


def test_every_catalogue_file_loads_and_names_a_real_flag_of_the_same_bug() -> None:
    scenarios = catalogue()
    assert len(scenarios) >= 16
    for s in scenarios:
        assert s.flag in IMPLEMENTED_FAULTS, f"{s.path}: flag {s.flag} is not one the agent can put back"
        # agent/fieldbugs/catalogue.py names the same bug (its first id; a suffix such as -orphans is the
        # entry's)
        number = s.bug.split("-")[1]
        assert FAULTS[s.flag].bug.split("/")[0].startswith(f"{s.bug.split('-')[0]}-{number}"), s.bug
        if s.as_data:
            assert s.jobspec is not None and s.jobspec.is_file()
            assert s.steps[0].name == "run" and (
                s.checks or s.steps[0].arg
            )  # refused: nothing to check after


def test_every_python_scenario_says_why_it_is_not_data_yet() -> None:
    for s in catalogue():
        if s.python:
            assert len(s.python_why) > 40, f"{s.path}: python_why"


def _write(tmp_path: Path, text: str, jobspec: bool = True) -> Path:
    if jobspec:
        (tmp_path / "job.hcl").write_text('job "j" { group "g" { task "t" { driver = "docker" } } }\n')
    p = tmp_path / "nomad-1.yml"
    p.write_text(text)
    return p


GOOD = """\
bug: nomad-1
title: t
link: https://github.com/hashicorp/nomad/issues/1
versions: "1.0"
family: restore
flag: half-alive-restore
symptom: 'x'
what: w
jobspec: job.hcl
steps: [run, {wait: {alloc: running, timeout: 30}}, {agent_restart: SIGKILL}]
checks: [{alloc: running}, invariants]
"""


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (("family: restore", "family: kernels"), "nomad-1.yml: family: one of"),
        (("steps: [run,", "steps: [{reboot: soft},"), "steps[0]: reboot takes one of clean, hard"),
        (("{agent_restart: SIGKILL}", "{agent_restart: SIGHUP}"), "steps[2]: agent_restart takes one of"),
        (("{agent_restart: SIGKILL}", "{teleport: 1}"), "steps[2]: unknown 'teleport'"),
        (("{agent_restart: SIGKILL}", "{update: nope.hcl}"), "steps[2]: update takes a jobspec"),
        (("timeout: 30", "timeout: -1"), "steps[1].timeout: a number of seconds > 0"),
        (("alloc: running, timeout", "alloc: sleeping, timeout"), "steps[1].alloc: one of"),
        (("[{alloc: running}", "[{starts: {task: t}}"), "checks[0]: missing ['count']"),
        (("symptom: 'x'", "symptom: '(x'"), "symptom: not a regular expression"),
        (("jobspec: job.hcl", "jobspec: nope.hcl"), "jobspec: no file"),
        (("bug: nomad-1", "bug: Issue 1"), "bug: 'Issue 1' is not a report id"),
        (("what: w\n", ""), "what: required"),
        (("steps: [run,", "steps: [{wait: invariants},"), "steps[0]: the first step is run"),
        (("steps: [run,", "steps: [{run: {refused: x}},"), "steps: after a refused run nothing more"),
        (("steps: [run,", "steps: [{run: {refused: '(x'}},"), "steps[0].refused: not a regular expression"),
        (("steps: [run,", "steps: [{run: {accepted: x}},"), "steps[0]: run takes nothing, or {refused: RE}"),
        (("[{alloc: running}, invariants]", "[{swept: all}]"), "checks[0]: swept: none"),
        (
            ("[{alloc: running}", "[{file: {path: /etc/passwd}}"),
            "checks[0].path: a path inside",
        ),
        (
            ("[{alloc: running}", "[{file: {path: alloc/../../x}}"),
            "checks[0].path: a path inside",
        ),
        (
            ("[{alloc: running}", "[{file: {path: alloc/x, contains: '(a'}}"),
            "checks[0].contains: not a regular",
        ),
        (("[{alloc: running}", "[{file: {path: alloc/x, exists: maybe}}"), "checks[0].exists: true or false"),
        (("what: w\n", "what: w\nnightly: ''\n"), "nightly: why it runs in make nightly only"),
        (("what: w\n", "what: w\nnightly: 30\n"), "nightly: why it runs in make nightly only"),
    ],
)
def test_a_bad_scenario_is_refused_with_its_file_and_field(
    tmp_path: Path, change: tuple[str, str], says: str
) -> None:
    p = _write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ScenarioError) as e:
        load(p)
    assert says in str(e.value) and str(p) in str(e.value)


def test_a_good_scenario_loads(tmp_path: Path) -> None:
    s = load(_write(tmp_path, GOOD))
    assert [st.name for st in s.steps] == ["run", "wait", "agent_restart"]
    assert s.steps[1].timeout == 30.0 and s.steps[1].arg == {"alloc": "running"}
    assert s.tests == ("test_scenarios.py::test_scenario_file",)  # outside the catalogue
    assert not load(SCENARIOS / "nomad-24140.yml").as_data
    timed = load(_write(tmp_path, GOOD.replace("[run,", "[run, {wait: {invariants: true, timeout: 9}},")))
    assert (timed.steps[1].arg, timed.steps[1].timeout) == ("invariants", 9.0)
    assert s.nightly == "" and load(_write(tmp_path, GOOD + "nightly: a 30 s kill timeout\n")).nightly


def test_only_the_scenarios_that_say_why_are_kept_for_the_nightly() -> None:
    """`make smoke` (so `make test`) deselects the nightly ones: each says why, and they are few."""
    nightly = {s.bug: s.nightly for s in catalogue() if s.nightly}
    assert set(nightly) == {
        "nomad-5577",
        "nomad-10005",
        "nomad-1795",
        "nomad-25714",
        "nomad-1858",
        "nomad-11052",
        "nomad-3201",
        "nomad-12147",
        "nomad-28008",
    }
    assert all(len(why) > 20 for why in nightly.values()), nightly


def _alloc(status: str = "running", **tasks: dict[str, object]) -> dict[str, object]:
    return {"id": "abcdef0123", "status": status, "replaced_by": None, "tasks": tasks}


def _ev(task: str, *types: str) -> list[dict[str, object]]:
    return [{"task": task, "type": t} for t in types]


def test_the_checks_say_what_a_bug_breaks() -> None:
    alloc = _alloc("running", main={"state": "running", "restarts": 0, "failed": False})
    twice = _ev("main", "Received", "Started", "Terminated", "Restored", "Started")
    assert check_problems(Step("alloc", "complete"), alloc, []) == [
        "alloc abcdef01 is running, expected complete ()"
    ]
    assert check_problems(Step("alloc", "running"), alloc, []) == []
    said = check_problems(Step("starts", {"task": "main", "count": 1}), alloc, twice)
    assert said and said[0].startswith("task main started 2 times, expected 1")
    assert check_problems(Step("starts", {"task": "main", "count": 2}), alloc, twice) == []
    after = Step("events", {"task": "main", "after": "Restored", "has": ["Started"], "lacks": ["Terminated"]})
    assert check_problems(after, alloc, twice) == []
    assert check_problems(after, alloc, twice[:4]) == ["no 'Started' event after 'Restored': []"]
    assert check_problems(Step("replaced", True), alloc, []) == [
        "alloc abcdef01 was not replaced, expected replaced"
    ]
    assert check_problems(Step("task", {"name": "main", "state": "dead"}), alloc, []) == [
        "task main: state is 'running', expected 'dead'"
    ]
    assert check_problems(Step("task", {"name": "other"}), alloc, []) == ["alloc abcdef01 has no task other"]


def test_a_file_check_reads_what_the_fs_api_gave() -> None:
    """`file`: the text of a file of the alloc dir (None: Nomad's fs API has no such file)."""
    check = Step("file", {"path": "alloc/addr.txt", "contains": r":28080$"})
    assert check_problems(check, _alloc(), [], {"alloc/addr.txt": "172.26.64.3:28080\n"}) == []
    said = check_problems(check, _alloc(), [], {"alloc/addr.txt": "172.26.64.3:0\n"})
    assert said == ["file alloc/addr.txt does not match ':28080$': '172.26.64.3:0'"]
    assert check_problems(check, _alloc(), [], {}) == ["no file alloc/addr.txt in the alloc dir"]
    gone = Step("file", {"path": "t/secrets/x", "exists": False})
    assert check_problems(gone, _alloc(), [], {"t/secrets/x": None}) == []
    assert check_problems(gone, _alloc(), [], {"t/secrets/x": ""}) == [
        "file t/secrets/x exists, expected none"
    ]
    lacks = Step("file", {"path": "alloc/log", "lacks": "^ERROR"})
    assert check_problems(lacks, _alloc(), [], {"alloc/log": "ok\nERROR x\n"})[0].startswith(
        "file alloc/log matches"
    )


def test_the_symptoms_of_data_scenarios_match_what_their_checks_say() -> None:
    """e2e/drivers/repro.py tells REPRODUCED by the scenario's symptom over the failure: the words of the
    checks that the flag breaks must match it."""
    s = repro.BUGS["nomad-5883"]
    alloc = _alloc("running", main={"state": "running"})
    said = [p for c in s.checks for p in check_problems(c, alloc, _ev("main", "Started", "Started"))]
    assert said and all(__import__("re").search(s.symptom, p) for p in said[:2]), said


def test_waits_read_the_alloc_and_its_events() -> None:
    alloc = _alloc("complete", main={"state": "dead"})
    assert wait_state(Step("wait", {"alloc": "complete"}), alloc, []) == (True, "alloc complete")
    assert wait_state(Step("wait", {"task": "main", "state": "running"}), alloc, [])[0] is False
    ev = Step("wait", {"task": "main", "event": "Started", "count": 2})
    assert wait_state(ev, alloc, _ev("main", "Started")) == (False, "1 Started event(s) of task main")


def test_images_are_substituted_and_reported() -> None:
    job = {
        "TaskGroups": [
            {"Tasks": [{"Name": "web", "Config": {"image": "nginx:latest", "ports": ["http"]}}]},
            {"Tasks": [{"Name": "db", "Config": {"image": "postgres:16"}}]},
        ]
    }
    images = {"nginx:latest": {"image": "fieldlab/busybox:latest", "command": "httpd", "args": ["-f"]}}
    out, done = substitute_images(job, images)
    web = out["TaskGroups"][0]["Tasks"][0]["Config"]
    assert web == {"image": "fieldlab/busybox:latest", "command": "httpd", "args": ["-f"], "ports": ["http"]}
    assert out["TaskGroups"][1]["Tasks"][0]["Config"]["image"] == "postgres:16"  # not in the map: kept
    assert done == ["web: nginx:latest -> fieldlab/busybox:latest (command=httpd args=['-f'])"]
    assert job["TaskGroups"][0]["Tasks"][0]["Config"]["image"] == "nginx:latest"  # the input untouched


def test_repro_new_writes_a_skeleton_that_loads_and_never_overwrites(tmp_path: Path) -> None:
    report = tmp_path / "report.hcl"
    report.write_text('job "x" {\n  group "g" {\n    task "t" {\n      config {\n        image = "redis:7"\n')
    assert images_in(report.read_text()) == ["redis:7"]
    root = tmp_path / "scenarios"
    root.mkdir()
    assert repro.new_scenario("nomad-4242", report, root) == 0
    s = load(root / "nomad-4242.yml")
    assert s.bug == "nomad-4242" and s.images == {"redis:7": "fieldlab/busybox:latest"}
    assert s.jobspec == root / "jobs" / "nomad-4242-report.hcl"
    assert repro.new_scenario("nomad-4242", report, root) == 2  # exists: nothing written
    assert repro.new_scenario("bug 1", report, root) == 2


def test_the_readme_flag_table_is_generated_from_the_catalogue() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    shown = readme.split("<!-- flags:start -->\n", 1)[1].split("<!-- flags:end -->", 1)[0]
    assert shown == repro.flags_table(), "README's flag table is stale: python -m e2e.drivers.repro flags"


# --- shrinking a chaos run (e2e/drivers/shrink.py): delta debugging over its steps ----------------------
def test_ddmin_finds_the_steps_that_matter_and_asks_each_subset_once() -> None:
    from e2e.drivers.shrink import ddmin

    asked: list[tuple[int, ...]] = []

    def fails(needed: set[int]) -> Callable[[list[int]], bool]:
        def oracle(subset: list[int]) -> bool:
            asked.append(tuple(subset))
            return needed <= set(subset)

        return oracle

    steps = list(range(12))
    assert ddmin(steps, fails({5})) == [5]
    assert ddmin(steps, fails({3, 7})) == [3, 7]
    assert ddmin(steps, fails({0, 6, 11})) == [0, 6, 11]
    asked.clear()
    minimal = ddmin(steps, fails({2, 9}))
    assert minimal == [2, 9] and len(asked) == len(set(asked)) and len(asked) < 30
    # 1-minimal: dropping any one step of the result makes the failure go away
    oracle = fails({2, 9})
    assert all(not oracle([s for s in minimal if s != drop]) for drop in minimal)


def test_a_chaos_steps_text_round_trips_and_bad_steps_are_named() -> None:
    from e2e.harness.chaos import ScheduleError, Step, parse_schedule, parse_step

    step = Step("kill-pause", 0, 5.4, 2)
    assert str(step) == "kill-pause client#1 hold 5s job#2"
    assert parse_step(str(step)) == Step("kill-pause", 0, 5.0, 2)
    assert parse_schedule("agent-sigkill client#2 hold 3s job#0; kill-task client#1 hold 9s job#1\n", 2) == [
        Step("agent-sigkill", 1, 3.0, 0),
        Step("kill-task", 0, 9.0, 1),
    ]
    for bad, says in [
        ("kill-all client#1 hold 5s job#0", "unknown kind 'kill-all'"),
        ("kill-pause client#3 hold 5s job#0", "no client#3 (the lab has 2)"),
        ("kill-pause client#1 hold 5s job#7", "job#7"),
        ("kill pause", "not '<kind> client#N"),
    ]:
        with pytest.raises(ScheduleError, match=re.escape(says)):
            parse_step(bad, 2)


def test_a_shrunk_schedule_is_a_scenario_file_repro_runs(tmp_path: Path) -> None:
    from e2e.drivers.shrink import FailedRun, Replays, scenario_text
    from e2e.harness.chaos import Step

    run = FailedRun(
        tmp_path / "run",
        77,
        "reuse-dead-pause",
        [Step("agent-sigterm", 0, 4.0, 0)] * 3,
        "x: events say 'non running container' for alloc 1234abcd",
    )
    replays = Replays("default", 77, tmp_path, count=6, seconds=420.0)
    p = tmp_path / "shrunk.yml"
    p.write_text(scenario_text(run, [Step("kill-pause", 0, 5.0, 1)], replays, True))
    s = load(p)
    assert s.chaos == ("kill-pause client#1 hold 5s job#1",) and s.seed == 77 and s.flag == "reuse-dead-pause"
    assert s.python == ("test_chaos.py::test_seeded_chaos_keeps_every_invariant",)
    assert re.search(s.symptom, run.failure)
    assert re.search(s.symptom, "x: events say 'non running container' for alloc 99ff00aa")  # ids differ
    assert "3 step(s) -> 1 in 6 replays, 420s" in p.read_text() and "passes" in p.read_text()


def test_a_shrink_reads_the_first_problem_under_a_waits_header() -> None:
    from e2e.drivers.shrink import _first_problem, _symptom_of

    message = "after chaos step 6 (x), within 90s:\n  client2: alloc 668efa8c port http does not answer\n"
    first = _first_problem(message)
    assert first == "client2: alloc 668efa8c port http does not answer"
    assert re.search(_symptom_of(first), "client1: alloc 0badf00d port http does not answer")


# --- a report's own Vault policies, created for the run (e2e/harness/vaultpolicy.py) ------------------
def test_a_reports_own_policies_become_the_runs_job_policy_scoped_to_the_job() -> None:
    from e2e.harness import vaultpolicy

    job = {
        "ID": "dyn-secret",
        "TaskGroups": [
            {
                "Services": [{"Name": "web"}, {"Name": "${NOMAD_JOB_NAME}-x"}],
                "Tasks": [
                    {"Name": "app", "Vault": {"Policies": ["dyn-secret-pki", "fieldlab-job-probe"]}},
                    {"Name": "side", "Services": [{"Name": "metrics"}]},
                ],
            }
        ],
    }
    assert vaultpolicy.report_policies(job) == ["dyn-secret-pki"]
    assert vaultpolicy.service_names(job) == ["dyn-secret", "metrics", "web"]  # no interpolated name
    out, done = vaultpolicy.substitute_policies(job, "fieldlab-job-dyn-secret")
    assert out["TaskGroups"][0]["Tasks"][0]["Vault"]["Policies"] == [
        "fieldlab-job-dyn-secret",
        "fieldlab-job-probe",
    ]
    assert done == ["app: vault policies dyn-secret-pki -> fieldlab-job-dyn-secret"]
    assert job["TaskGroups"][0]["Tasks"][0]["Vault"]["Policies"][0] == "dyn-secret-pki"  # input untouched
    hcl = vaultpolicy.policy_hcl("dyn-secret", ["dyn-secret", "web"])
    assert '"common_name" = ["dyn-secret.service.fieldlab", "web.service.fieldlab"]' in hcl
    assert 'path "secret/data/fieldlab/jobs/dyn-secret/*"' in hcl and "probe" not in hcl
    assert hcl.count('capabilities = ["update"]') == 2  # the two certificate roles, nothing else written


def test_the_symptom_line_names_its_test_once() -> None:
    bug = repro.BUGS["nomad-5883"]
    first = "test_scenario[nomad-5883]: AssertionError: nomad-5883: task main started 2 times, expected 1"
    assert repro._symptom(bug, [first]) == first
    wrapped = "test_x: failed\nE   task main started 3 times, expected 1"
    assert repro._symptom(bug, [wrapped]) == "test_x: E   task main started 3 times, expected 1"
    assert repro._symptom(bug, ["test_x: something else"]) is None


def test_swept_none_names_what_the_sweeper_removed_of_the_alloc() -> None:
    alloc = _alloc("complete")
    step = Step("swept", "none")
    assert file_paths((step,)) == [SWEPT_KEY]
    seen = "netns abcdef0123 fl-abcdef0123\ncontainer otheralloc00 web-pause"
    assert check_problems(step, alloc, [], {SWEPT_KEY: seen}) == [
        "the agent's sweeper removed netns fl-abcdef0123 of alloc abcdef01: its teardown left it"
    ]
    assert check_problems(step, alloc, [], {SWEPT_KEY: "container otheralloc00 web-pause"}) == []
    assert check_problems(step, alloc, [], {SWEPT_KEY: ""}) == []
