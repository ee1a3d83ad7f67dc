"""The scenario vocabulary of job types and node verbs (e2e.harness.scenario, scenario_steps): a
parameterized or periodic job placing nothing at `run`, `dispatch`, `periodic_force`,
`node_eligibility`, `wait: {children: N}`, `wait: {launch_due: true}`, the `children` and `allocs`
checks, and the cleanup of the child jobs and the node's eligibility. The runner is driven against a
fake agent that answers as the lab's would; what it sends is what Nomad's CLI sends."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from e2e.drivers import repro
from e2e.harness.scenario import SCENARIOS, ScenarioError, Step, load
from e2e.harness.scenario_judge import family_problems
from e2e.harness.scenario_steps import ScenarioRun
from e2e.harness.waits import WaitTimeout

PARAMETERIZED: dict[str, Any] = {
    "ID": "p",
    "ParameterizedJob": {"Payload": "optional"},
    "Periodic": None,
    "TaskGroups": [],
}
PERIODIC: dict[str, Any] = {
    "ID": "p",
    "ParameterizedJob": None,
    "Periodic": {"Enabled": True, "Spec": "* * * * *", "Specs": None, "TimeZone": "UTC"},
    "TaskGroups": [],
}


class FakeAgent:
    """The lab agent's answers for one job `p` and its children (`kids`: child ID -> its allocs)."""

    def __init__(self, job: dict[str, Any], placed: list[str] | None = None) -> None:
        self.job = job
        self.placed = placed or []  # what the register's evaluation placed
        self.kids: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.stopped: list[str] = []

    def request(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        if path == "/v1/jobs/parse":
            return dict(self.job)
        if path == "/v1/jobs":
            return {"EvalID": "register"}
        if path == "/v1/evaluation/register/allocations":
            return [{"ID": a, "JobID": "p"} for a in self.placed]
        if path in ("/v1/job/p/dispatch", "/v1/job/p/periodic/force"):
            kid = "p/dispatch-1-abc" if path.endswith("dispatch") else "p/periodic-1700000000"
            self.kids[kid] = ["a1"]
            return {"DispatchedJobID": kid, "EvalID": "e1"}
        if path == "/v1/evaluation/e1/allocations":
            (kid,) = self.kids
            return [{"ID": a, "JobID": kid} for a in self.kids[kid]]
        if m := re.fullmatch(r"/v1/job/(.+)/allocations", path):
            kid = m.group(1).replace("%2F", "/")
            return [{"ID": a, "ClientStatus": "running"} for a in self.kids.get(kid, [])]
        if path in ("/v1/node/n1/eligibility", "/v1/node/n1/drain"):
            return {}
        raise AssertionError(f"unexpected {method} {path}")

    def jobs(self) -> list[dict[str, Any]]:
        return [{"ID": "p", "ParentID": ""}] + [{"ID": k, "ParentID": "p"} for k in self.kids]

    def node_info(self) -> dict[str, Any]:
        return {"ID": "n1"}

    def stop_job(self, job: str, timeout: float = 0.0, *, must_end: bool = True) -> None:
        self.stopped.append(job)


def _run(tmp_path: Path, agent: FakeAgent) -> ScenarioRun:
    spec = tmp_path / "job.hcl"
    spec.write_text('job "p" {}\n')
    cluster: Any = SimpleNamespace(agent=lambda node: agent)
    scenario: Any = SimpleNamespace(images={}, jobspec=spec, bug="nomad-1", checks=(), steps=())
    return ScenarioRun(cluster, scenario, SimpleNamespace(name="client1"))  # type: ignore[arg-type]


def test_a_parameterized_job_places_nothing_at_run_then_a_dispatch_gives_the_alloc(tmp_path: Path) -> None:
    agent = FakeAgent(PARAMETERIZED)
    run = _run(tmp_path, agent)
    run._step_run(Step("run"))
    assert (run.job, run.alloc_id) == ("p", "")
    run._step_dispatch(Step("dispatch", {"payload": "hello", "meta": {"command": "echo"}}))
    (body,) = [b for m, p, b in agent.calls if (m, p) == ("POST", "/v1/job/p/dispatch")]
    assert body == {"JobID": "p", "Meta": {"command": "echo"}, "Payload": base64.b64encode(b"hello").decode()}
    assert (run.alloc_id, run.children) == ("a1", ["p/dispatch-1-abc"])
    placing = _run(tmp_path, FakeAgent(PARAMETERIZED, placed=["x1"]))
    with pytest.raises(AssertionError, match="parameterized or periodic job placed"):
        placing._step_run(Step("run"))


def test_periodic_force_and_a_wait_for_children_adopt_the_first_childs_alloc(tmp_path: Path) -> None:
    agent = FakeAgent(PERIODIC)
    run = _run(tmp_path, agent)
    run._step_run(Step("run"))
    assert run.periodic == PERIODIC["Periodic"] and run.alloc_id == ""
    with pytest.raises(WaitTimeout, match="0 child jobs"):
        run._step_wait(Step("wait", {"children": 2}, timeout=0.1))
    agent.kids["p/periodic-1700000000"] = ["a7"]
    run._step_wait(Step("wait", {"children": 1}, timeout=1))
    assert (run.alloc_id, run.children) == ("a7", ["p/periodic-1700000000"])
    forced = _run(tmp_path, FakeAgent(PERIODIC))
    forced._step_run(Step("run"))
    forced._step_periodic_force(Step("periodic_force"))
    assert (forced.alloc_id, forced.children) == ("a1", ["p/periodic-1700000000"])


def test_launch_due_waits_for_the_cron_time_after_the_newest_child(tmp_path: Path) -> None:
    agent = FakeAgent(PERIODIC)
    run = _run(tmp_path, agent)
    run._step_run(Step("run"))
    agent.kids[f"p/periodic-{int(time.time()) - 180}"] = ["old"]
    run._step_wait(Step("wait", {"launch_due": True}, timeout=1))  # its next minute passed long ago
    agent.kids[f"p/periodic-{int(time.time())}"] = ["new"]
    with pytest.raises(WaitTimeout, match="to the next launch time"):
        run._step_wait(Step("wait", {"launch_due": True}, timeout=0.2))


def test_node_eligibility_and_the_cleanup_put_back_what_the_steps_changed(tmp_path: Path) -> None:
    agent = FakeAgent(PARAMETERIZED)
    run = _run(tmp_path, agent)
    run._step_run(Step("run"))
    run._step_dispatch(Step("dispatch", {}))
    run._step_node_eligibility(Step("node_eligibility", "ineligible"))
    run._step_node_eligibility(Step("node_eligibility", "eligible"))
    run._step_node_drain(Step("node_drain", "force"))
    run._step_node_drain(Step("node_drain", 2.5))
    agent.kids["p/dispatch-2-def"] = []  # a child made by the agent, not by a step
    run.cleanup()
    bodies = [b for m, p, b in agent.calls if p.startswith("/v1/node/n1/")]
    assert bodies == [
        {"NodeID": "n1", "Eligibility": "ineligible"},
        {"NodeID": "n1", "Eligibility": "eligible"},
        {"NodeID": "n1", "DrainSpec": {"Deadline": -1, "IgnoreSystemJobs": False}, "MarkEligible": False},
        {
            "NodeID": "n1",
            "DrainSpec": {"Deadline": 2_500_000_000, "IgnoreSystemJobs": False},
            "MarkEligible": False,
        },
        {"NodeID": "n1", "DrainSpec": None, "MarkEligible": True},  # the cleanup: drain off, eligible
    ]
    assert agent.stopped == ["p", "p/dispatch-1-abc", "p/dispatch-2-def"]


def test_an_earlier_runs_children_are_not_this_runs(tmp_path: Path) -> None:
    """A repro's second half registers the job again while the first half's launches are kept
    (stopped, not purged, as Nomad keeps them): they neither satisfy a wait nor count in a check."""
    agent = FakeAgent(PERIODIC)
    agent.kids = {"p/periodic-1699999880": ["old1"], "p/periodic-1699999940": ["old2"]}
    run = _run(tmp_path, agent)
    run._step_run(Step("run"))
    with pytest.raises(WaitTimeout, match="0 child jobs"):
        run._step_wait(Step("wait", {"children": 1}, timeout=0.1))
    agent.kids["p/periodic-1700000000"] = ["a7"]
    run._step_wait(Step("wait", {"children": 1}, timeout=1))
    assert (run.alloc_id, run.children) == ("a7", ["p/periodic-1700000000"])
    assert [k["id"] for k in run.job_children()] == ["p/periodic-1700000000"]
    assert run._family_problems(Step("children", {"count": 1}), {}) == []


def test_the_cleanup_stops_a_child_launched_while_it_stops_the_parent(tmp_path: Path) -> None:
    """The parent is stopped before its children are listed: a launch that came just before the
    stop took effect is listed and stopped too, not left running into the next run."""

    class LaunchingAgent(FakeAgent):
        def stop_job(self, job: str, timeout: float = 0.0, *, must_end: bool = True) -> None:
            if job == "p":
                self.kids["p/periodic-1700000060"] = ["late"]
            super().stop_job(job, timeout, must_end=must_end)

    agent = LaunchingAgent(PERIODIC)
    run = _run(tmp_path, agent)
    run._step_run(Step("run"))
    run.cleanup()
    assert agent.stopped == ["p", "p/periodic-1700000060"]


def test_the_children_and_allocs_checks_say_what_is_wrong() -> None:
    kids = [{"id": "j/periodic-1", "live": True}, {"id": "j/periodic-2", "live": True}]
    assert family_problems(Step("children", {"running": 1}), "j", kids, []) == [
        "2 child jobs of j running, expected 1: j/periodic-1, j/periodic-2"
    ]
    assert family_problems(Step("children", {"count": 2, "running": 2}), "j", kids, []) == []
    assert family_problems(Step("children", {"count": 1}), "j", kids, []) == [
        "2 child jobs of j, expected 1: j/periodic-1, j/periodic-2"
    ]
    said = family_problems(
        Step("allocs", {"count": 2}), "j/dispatch-1-ab", [], ["a" * 36, "b" * 36, "c" * 36]
    )
    assert said == ["3 allocs of job j/dispatch-1-ab, expected 2: aaaaaaaa, bbbbbbbb, cccccccc"]


@pytest.mark.parametrize(
    ("bug", "said"),
    [
        (
            "nomad-11052",
            "2 child jobs of overlap running, expected 1: overlap/periodic-1, overlap/periodic-2",
        ),
        ("nomad-3201", "2 child jobs of stopped-periodic, expected 1: stopped-periodic/periodic-1, x"),
        ("nomad-12147", "3 allocs of job example/dispatch-1765000000-0a1b2c3d, expected 2: a, b, c"),
        (
            "nomad-3720",
            "file alloc/out.txt does not match '^before  after$': 'before ${NOMAD_META_optional} after'",
        ),
        ("nomad-13748", "file alloc/claims.json does not match '\"nomad_job_id\": ?\"ident\"': '{}'"),
        ("nomad-28008", "2 allocs of job drain-batch, expected 1: 0a1b2c3d, 4e5f6a7b"),
    ],
)
def test_each_new_entrys_symptom_matches_what_its_check_says(bug: str, said: str) -> None:
    """e2e/drivers/repro.py tells REPRODUCED by the symptom over the failure's words."""
    assert re.search(repro.BUGS[bug].symptom, said), (bug, said)


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ("{dispatch: {payload: 3}}", "steps[1].payload: a string"),
        ("{dispatch: {meta: {a: 1}}}", "steps[1].meta: a mapping of strings"),
        ("{dispatch: {token: x}}", "steps[1]: unknown key(s) ['token']"),
        ("{wait: {children: 0}}", "steps[1].children: a whole number >= 1"),
        ("{wait: {launch_due: false}}", "steps[1].launch_due: true"),
        ("{node_eligibility: drained}", "steps[1]: node_eligibility takes one of eligible, ineligible"),
        ("{periodic_force: now}", "steps[1]: periodic_force takes no argument"),
        ("{node_drain: 0}", "steps[1]: node_drain takes force or a deadline in seconds > 0"),
        ("{node_drain: soon}", "steps[1]: node_drain takes force or a deadline in seconds > 0"),
    ],
)
def test_a_bad_job_type_step_is_refused_naming_it(tmp_path: Path, step: str, says: str) -> None:
    (tmp_path / "job.hcl").write_text('job "j" { group "g" { task "t" { driver = "docker" } } }\n')
    p = tmp_path / "nomad-1.yml"
    p.write_text(
        "bug: nomad-1\ntitle: t\nsymptom: x\nwhat: w\njobspec: job.hcl\n"
        f"steps: [run, {step}]\nchecks: [{{children: {{count: 1}}}}]\n"
    )
    with pytest.raises(ScenarioError) as e:
        load(p)
    assert says in str(e.value), str(e.value)


def test_a_bad_children_or_allocs_check_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.hcl").write_text('job "j" {}\n')
    p = tmp_path / "nomad-1.yml"
    for check, says in [
        ("{children: {}}", "children: count and/or running"),
        ("{children: {count: -1}}", "checks[0].count: a whole number >= 0"),
        ("{allocs: {running: 1}}", "unknown key(s) ['running']"),
    ]:
        head = "bug: nomad-1\ntitle: t\nsymptom: x\nwhat: w\njobspec: job.hcl\n"
        p.write_text(f"{head}steps: [run]\nchecks: [{check}]\n")
        with pytest.raises(ScenarioError, match=re.escape(says)):
            load(p)


def test_the_new_entries_load_with_their_steps() -> None:
    steps = {b: [s.name for s in load(SCENARIOS / f"{b}.yml").steps] for b in ("nomad-3720", "nomad-12147")}
    assert steps == {
        "nomad-3720": ["run", "dispatch", "wait"],
        "nomad-12147": ["run", "dispatch", "node_eligibility", "wait", "node_eligibility"],
    }
