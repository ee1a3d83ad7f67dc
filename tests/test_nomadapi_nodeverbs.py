"""Nomad's node verbs on the one node (issue 52): eligibility (an ineligible node places nothing, the
register's evaluation says so and its blocked evaluation places the job once the node is eligible
again), drain (Nomad's drainer: deadlines, batch and system allocs, completion, cancel), evaluate,
and python-nomad's calls as it sends them. On the real Core and loop with a fake node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.api.handler import Streamed
from agent.client.core import Core
from agent.nomadapi.nodeverbs import DRAIN_TICK
from tests.agent_lab import NODE, run_job
from tests.fakes import FakeNode
from tests.test_routes_ops import ONE_TASK, Api, start_api

WAIT = 5.0  # seconds for the loop (and the drainer's ticks) to act
A_TICK = DRAIN_TICK + 0.1  # long enough for the drainer to have looked again (to show it did nothing)

BATCH = """
job "crunch" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""

SYSTEM = """
job "agentd" {
  type = "system"
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""

SERVICE3 = """
job "web3" {
  group "g" {
    count = 3
    task "srv" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Core, Api]]:
    core, api = start_api(FakeNode(tmp_path))
    yield core, api
    core.stop()


def _poll(what: str, fn: Any, deadline: float = WAIT) -> Any:
    """fn() until it is truthy (its value), failing with `what` after `deadline` seconds."""
    end = time.monotonic() + deadline
    while not (got := fn()):
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline}s: {what}")
        time.sleep(0.02)
    return got


def _node(api: Api) -> dict[str, Any]:
    return dict(api.request("GET", f"/v1/node/{NODE.id}"))


def _live(api: Api, job: str) -> list[str]:
    return [
        a["ID"]
        for a in api.request("GET", f"/v1/job/{job}/allocations")
        if a["ClientStatus"] in ("pending", "running") and a["DesiredStatus"] == "run"
    ]


def _messages(api: Api) -> list[str]:
    return [e["Message"] for e in _node(api)["Events"]]


def _eligible(api: Api, value: str) -> dict[str, Any]:
    # python-nomad's eligible_node: POST {"Eligibility", "NodeID"}
    return dict(
        api.request("POST", f"/v1/node/{NODE.id}/eligibility", {"Eligibility": value, "NodeID": NODE.id})
    )


# -- eligibility ---------------------------------------------------------------------------------------


def test_an_ineligible_node_places_nothing_and_its_blocked_evaluation_places_the_job_once_eligible(
    lab: tuple[Core, Api],
) -> None:
    _, api = lab
    out = _eligible(api, "ineligible")
    assert set(out) >= {"NodeModifyIndex", "EvalIDs", "EvalCreateIndex", "Index"}
    node = _node(api)
    assert node["SchedulingEligibility"] == "ineligible" and node["ModifyIndex"] == out["NodeModifyIndex"]
    assert api.request("GET", "/v1/nodes")[0]["SchedulingEligibility"] == "ineligible"
    assert "Node marked as ineligible for scheduling" in _messages(api)

    assert run_job(api.request, ONE_TASK) == []  # stored, nothing placed
    assert api.request("GET", "/v1/job/web")["ID"] == "web"
    assert _live(api, "web") == []
    (ev,) = [e for e in api.request("GET", "/v1/job/web/evaluations") if e["TriggeredBy"] == "job-register"]
    assert ev["Status"] == "complete" and ev["FailedTGAllocs"]["g"]["NodesEvaluated"] == 0
    assert ev["QueuedAllocations"] == {"g": 1}
    blocked = api.request("GET", f"/v1/evaluation/{ev['BlockedEval']}")
    assert (blocked["Status"], blocked["TriggeredBy"], blocked["PreviousEval"]) == (
        "blocked",
        "queued-allocs",
        ev["ID"],
    )

    again = _eligible(api, "eligible")
    assert _node(api)["SchedulingEligibility"] == "eligible"
    assert "Node marked as eligible for scheduling" in _messages(api)
    assert again["NodeModifyIndex"] > out["NodeModifyIndex"]
    (placed,) = _poll("the blocked eval's alloc", lambda: _live(api, "web"))
    assert api.request("GET", f"/v1/allocation/{placed}")["EvalID"] == blocked["ID"]
    assert api.request("GET", f"/v1/evaluation/{blocked['ID']}")["Status"] == "complete"


def test_eligibility_survives_an_agent_restart(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    _eligible(api, "ineligible")
    core.stop()
    core, api = start_api(node, restore=True)
    try:
        assert _node(api)["SchedulingEligibility"] == "ineligible"
        assert run_job(api.request, ONE_TASK) == []
    finally:
        core.stop()


def test_a_stopped_jobs_blocked_evaluation_places_nothing(lab: tuple[Core, Api]) -> None:
    _, api = lab
    _eligible(api, "ineligible")
    run_job(api.request, ONE_TASK)
    (ev,) = [e for e in api.request("GET", "/v1/job/web/evaluations") if e["TriggeredBy"] == "job-register"]
    api.request("DELETE", "/v1/job/web")
    _eligible(api, "eligible")
    assert api.request("GET", f"/v1/evaluation/{ev['BlockedEval']}")["Status"] == "canceled"
    assert _live(api, "web") == []


# -- drain ---------------------------------------------------------------------------------------------


def _drain(api: Api, spec: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return dict(
        api.request("PUT", f"/v1/node/{NODE.id}/drain", {"NodeID": NODE.id, "DrainSpec": spec, **extra})
    )


def test_a_drain_stops_a_service_alloc_completes_and_the_node_stays_ineligible(lab: tuple[Core, Api]) -> None:
    _, api = lab
    (alloc,) = run_job(api.request, ONE_TASK)
    out = _drain(api, {"Deadline": 3600 * 10**9, "IgnoreSystemJobs": False}, Meta={"why": "kernel"})
    assert out["NodeModifyIndex"] > 0
    node = _node(api)
    assert node["SchedulingEligibility"] == "ineligible"
    assert "Node drain strategy set" in _messages(api)
    _poll(
        "the alloc stopped", lambda: api.request("GET", f"/v1/allocation/{alloc}")["DesiredStatus"] == "stop"
    )
    done = _poll("the drain complete", lambda: (n := _node(api))["DrainStrategy"] is None and n)
    assert done["Drain"] is False and done["SchedulingEligibility"] == "ineligible"
    assert done["LastDrain"]["Status"] == "complete" and done["LastDrain"]["Meta"] == {"why": "kernel"}
    complete = [e for e in done["Events"] if e["Message"] == "Node drain complete"]
    assert len(complete) == 1 and complete[0]["Subsystem"] == "Drain" and complete[0]["Details"] is None
    assert _live(api, "web") == []  # not replaced: no other node
    # owed to the job: placed again once the node is eligible
    _eligible(api, "eligible")
    _poll("the drained alloc placed again", lambda: _live(api, "web"))


def test_a_drain_waits_for_batch_allocs_shows_its_strategy_and_is_cancelled(lab: tuple[Core, Api]) -> None:
    _, api = lab
    (alloc,) = run_job(api.request, BATCH)
    _drain(api, {"Deadline": 0, "IgnoreSystemJobs": True})  # 0: no deadline
    node = _node(api)
    strategy = node["DrainStrategy"]
    assert node["Drain"] is True and strategy["Deadline"] == 0 and strategy["IgnoreSystemJobs"] is True
    assert strategy["ForceDeadline"] == "0001-01-01T00:00:00Z" and strategy["StartedAt"].endswith("Z")
    assert node["LastDrain"]["Status"] == "draining"
    assert api.request("GET", "/v1/nodes")[0]["Drain"] is True
    status, text = api.call("PUT", f"/v1/node/{NODE.id}/eligibility", {"Eligibility": "eligible"})
    assert (status, text) == (
        400,
        "can not set node's scheduling eligibility to eligible while it is draining\n",
    )
    time.sleep(A_TICK)  # a drainer tick: a batch alloc is left to finish until the deadline
    assert api.request("GET", f"/v1/allocation/{alloc}")["DesiredStatus"] == "run"
    out = _drain(api, None, MarkEligible=True)  # cancel
    node = _node(api)
    assert node["DrainStrategy"] is None and node["LastDrain"]["Status"] == "canceled"
    assert node["SchedulingEligibility"] == "eligible" and out["EvalIDs"]  # the batch job's node-update
    assert "Node drain disabled" in _messages(api)


def test_a_forced_drain_stops_every_alloc_at_once_but_the_system_ones_when_ignored(
    lab: tuple[Core, Api],
) -> None:
    _, api = lab
    (batch,) = run_job(api.request, BATCH)
    (system,) = run_job(api.request, SYSTEM)
    _drain(api, {"Deadline": -1, "IgnoreSystemJobs": True})
    node = _node(api)
    assert node["DrainStrategy"] is None and node["LastDrain"]["Status"] == "complete"
    (complete,) = [e for e in node["Events"] if e["Message"] == "Node drain complete"]
    assert complete["Details"] == {"deadline_reached": "true"}
    assert api.request("GET", f"/v1/allocation/{batch}")["DesiredStatus"] == "stop"
    assert api.request("GET", f"/v1/allocation/{system}")["DesiredStatus"] == "run"


def test_a_service_group_drains_one_alloc_at_a_time_then_the_rest_at_the_deadline(
    lab: tuple[Core, Api],
) -> None:
    _, api = lab
    run_job(api.request, SERVICE3)
    _drain(api, {"Deadline": 2 * 10**9, "IgnoreSystemJobs": False})
    _poll("one alloc drained", lambda: len(_live(api, "web3")) == 2)
    time.sleep(A_TICK)  # a drainer tick: the replacement never becomes healthy, nothing more drains
    assert len(_live(api, "web3")) == 2 and _node(api)["DrainStrategy"] is not None
    _poll("the rest stopped at the deadline", lambda: not _live(api, "web3"), deadline=WAIT + 2)
    node = _poll("the drain complete", lambda: (n := _node(api))["DrainStrategy"] is None and n)
    assert node["LastDrain"]["Status"] == "complete"


def test_the_event_stream_sees_a_drain_update_as_python_nomads_test_reads_it(lab: tuple[Core, Api]) -> None:
    core, api = lab
    index = core.changes.current()
    _drain(api, None)  # python-nomad's drain_node_with_spec(node_id, None): nothing to cancel
    out = api.answer("GET", f"/v1/event/stream?topic=Node:*&index={index}")
    assert isinstance(out, Streamed)
    try:
        line = json.loads(next(iter(out.chunks)))
    finally:
        out.close()
    (event,) = line["Events"]
    assert (event["Topic"], event["Type"], event["Key"]) == ("Node", "NodeDrain", NODE.id)
    assert event["Index"] == _node(api)["ModifyIndex"]


# -- evaluate, errors ----------------------------------------------------------------------------------


def test_evaluate_makes_a_node_update_evaluation_per_job_on_the_node(lab: tuple[Core, Api]) -> None:
    _, api = lab
    assert api.request("POST", f"/v1/node/{NODE.id}/evaluate")["EvalIDs"] is None  # nothing on the node
    run_job(api.request, ONE_TASK)
    out = api.request("POST", f"/v1/node/{NODE.id}/evaluate")  # python-nomad's evaluate_node
    (eval_id,) = out["EvalIDs"]
    assert out["EvalCreateIndex"] > 0 and out["NodeModifyIndex"] > 0
    ev = api.request("GET", f"/v1/evaluation/{eval_id}")
    assert (ev["TriggeredBy"], ev["JobID"], ev["NodeID"], ev["Status"]) == (
        "node-update",
        "web",
        NODE.id,
        "complete",
    )


@pytest.mark.parametrize(
    ("verb", "body", "status", "text"),
    [
        ("eligibility", {"Eligibility": "maybe"}, 400, "invalid scheduling eligibility 'maybe'"),
        ("eligibility", None, 400, "Request body is empty"),
        ("eligibility", {"Eligibility": "eligible", "Junk": 1}, 400, "unknown field(s) 'Junk'"),
        ("drain", {"DrainSpec": {"Deadline": "1h"}}, 400, "DrainSpec.Deadline: an integer (nanoseconds)"),
        ("drain", {"DrainSpec": {"Deadline": 1, "Force": True}}, 400, "DrainSpec: unknown field(s) 'Force'"),
        ("drain", {"DrainSpec": None, "MarkEligible": "yes"}, 400, "MarkEligible: a bool"),
        ("drain", {"DrainSpec": None, "Meta": {"a": 1}}, 400, "Meta: a map of strings"),
        ("drain", b"[1", 400, "the request body is not JSON"),
    ],
)
def test_bad_bodies_are_refused_naming_what(
    lab: tuple[Core, Api], verb: str, body: Any, status: int, text: str
) -> None:
    _, api = lab
    got, out = api.call("PUT", f"/v1/node/{NODE.id}/{verb}", body)
    assert got == status and text in out, out
    assert _node(api)["SchedulingEligibility"] == "eligible"


@pytest.mark.parametrize("verb", ["eligibility", "drain", "evaluate"])
def test_an_unknown_node_is_nomads_404(lab: tuple[Core, Api], verb: str) -> None:
    _, api = lab
    body = {"Eligibility": "ineligible"} if verb == "eligibility" else {"DrainSpec": None}
    assert api.call("POST", f"/v1/node/{NODE.id[:8]}/{verb}", body) == (404, "node not found\n")


def test_a_drain_goes_on_after_an_agent_restart_and_ends_at_its_deadline(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    (alloc,) = run_job(api.request, BATCH)
    _drain(api, {"Deadline": 2 * 10**9, "IgnoreSystemJobs": False})
    started = _node(api)["DrainStrategy"]["StartedAt"]
    core.stop()
    core, api = start_api(node, restore=True)
    try:
        node_json = _node(api)
        assert node_json["Drain"] is True and node_json["DrainStrategy"]["StartedAt"] == started
        assert node_json["SchedulingEligibility"] == "ineligible"
        done = _poll(
            "the drain complete at its deadline", lambda: (n := _node(api))["DrainStrategy"] is None and n
        )
        assert done["LastDrain"]["Status"] == "complete"
        assert api.request("GET", f"/v1/allocation/{alloc}")["DesiredStatus"] == "stop"
    finally:
        core.stop()


def _drained_batch_allocs(root: Path, flags: frozenset[str]) -> list[str]:
    """A batch alloc stopped by a forced drain, the node made eligible again: the job's allocs."""
    import threading

    from agent.fieldbugs.faults import Faults
    from tests.test_routes_ops import Api as RoutesApi

    node = FakeNode(root)
    core = node.core(faults=Faults(flags))
    threading.Thread(target=core.loop.run, daemon=True).start()
    api = RoutesApi(node, core)
    try:
        (alloc,) = run_job(api.request, BATCH)
        _drain(api, {"Deadline": -1, "IgnoreSystemJobs": False})
        assert api.request("GET", f"/v1/allocation/{alloc}")["DesiredStatus"] == "stop"
        _eligible(api, "eligible")  # what its evaluations place, they place within the request
        return [a["ID"] for a in api.request("GET", "/v1/job/crunch/allocations")]
    finally:
        core.stop()


def test_a_drained_batch_alloc_is_not_replaced_when_the_node_is_eligible_again(tmp_path: Path) -> None:
    """nomad-28008 (PR #28018, after #26961): a batch alloc a drain stopped is not placed again; the
    `drained-batch-replaced` fault places a second one once the node is eligible."""
    from agent.fieldbugs.bugs import Bugs
    from agent.nomadapi.nodeverbs import plan_drained_alloc_owed

    assert len(_drained_batch_allocs(tmp_path / "fixed", frozenset())) == 1
    assert len(_drained_batch_allocs(tmp_path / "fault", frozenset({"drained-batch-replaced"}))) == 2
    owed = {t: plan_drained_alloc_owed(t) for t in ("service", "batch", "system", "sysbatch")}
    assert owed == {"service": True, "batch": False, "system": False, "sysbatch": False}
    assert plan_drained_alloc_owed("batch", Bugs(drained_batch_replaced=True)) is True
