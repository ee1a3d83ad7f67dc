"""Rescheduling a failed alloc on the one node, as Nomad's scheduler does (issue 52 item 4): after its
policy's delay (a follow-up evaluation, FollowupEvalID), with the RescheduleTracker carried into the
replacement, never once the attempts are used up, resumed for the rest of its delay after an agent
restart, cancelled by a job stop. On the real Core and loop with a fake node; the delays (5 s to 1 h,
Nomad's minimum is 5 s) are not waited for: `reschedule_now` runs a pending follow-up early."""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.client.core import Core
from tests.agent_lab import NODE, run_job
from tests.fakes import FakeNode
from tests.test_routes_ops import CRASHY, Api, _exits, start_api

WAIT = 5.0  # seconds for the loop to act on an exit or a due reschedule
NS = 1_000_000_000

CRASHY_BATCH = """
job "crashy-batch" {
  type = "batch"
  group "g" {
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


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def _until(what: str, probe: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return found


def pending_reschedules(core: Core) -> list[float]:
    """On the loop: the seconds until each pending reschedule timer of the Core is due."""

    def look() -> list[float]:
        now = time.monotonic()
        return [
            t.due - now
            for t in core.loop._timers
            if isinstance(t.fn, functools.partial) and t.fn.func == core.allocs._start_replacement
        ]

    return core.call(look)


def reschedule_now(core: Core) -> int:
    """On the loop: every pending reschedule timer made due now (Nomad's follow-up evaluation run
    before its WaitUntil); how many there were."""

    def move() -> int:
        moved = 0
        for t in core.loop._timers:
            if isinstance(t.fn, functools.partial) and t.fn.func == core.allocs._start_replacement:
                t.due, moved = 0.0, moved + 1
        heapq.heapify(core.loop._timers)
        return moved

    return core.call(move)


def _fail(api: Api, alloc: str) -> dict[str, Any]:
    """The alloc's task exits 2 (its restart policy fails the alloc); the alloc once failed."""
    _exits(api, alloc, 2)
    return dict(
        _until(
            f"alloc {alloc} failed",
            lambda: (a := api.request("GET", f"/v1/allocation/{alloc}"))["ClientStatus"] == "failed" and a,
        )
    )


def _replaced(api: Api, alloc: str) -> str:
    probe = lambda: api.request("GET", f"/v1/allocation/{alloc}")["NextAllocation"]  # noqa: E731
    return str(_until(f"a replacement of {alloc}", probe))


def test_a_failed_service_alloc_is_replaced_after_its_delay_by_a_follow_up_evaluation(api: Api) -> None:
    (first,) = run_job(api.request, CRASHY)
    group = api.request("GET", "/v1/job/crashy")["TaskGroups"][0]
    assert group["ReschedulePolicy"] == {  # Nomad's DefaultServiceJobReschedulePolicy
        "Attempts": 0,
        "Interval": 0,
        "Delay": 30 * NS,
        "DelayFunction": "exponential",
        "MaxDelay": 3600 * NS,
        "Unlimited": True,
    }
    failed = _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(api.core))
    (left,) = pending_reschedules(api.core)
    assert 25.0 < left <= 30.0  # the policy's delay, not at once
    failed = api.request("GET", f"/v1/allocation/{first}")
    assert failed["NextAllocation"] == "" and failed["FollowupEvalID"]
    assert (failed["DesiredStatus"], failed["DesiredTransition"]["Reschedule"]) == ("run", None)
    follow = api.request("GET", f"/v1/evaluation/{failed['FollowupEvalID']}")
    assert (follow["TriggeredBy"], follow["JobID"]) == ("alloc-reschedule", "crashy")
    assert api.request("GET", "/v1/job/crashy/allocations")[0]["ID"] == first  # nothing placed yet

    assert reschedule_now(api.core) == 1
    second = _replaced(api, first)
    new = api.request("GET", f"/v1/allocation/{second}")
    assert new["PreviousAllocation"] == first and new["EvalID"] == failed["FollowupEvalID"]
    (event,) = new["RescheduleTracker"]["Events"]
    assert (event["PrevAllocID"], event["PrevNodeID"], event["Delay"]) == (first, NODE.id, 30 * NS)
    assert abs(event["RescheduleTime"] / NS - time.time()) < 5
    assert new["RescheduleTracker"]["LastReschedule"] == "ok"
    old = api.request("GET", f"/v1/allocation/{first}")
    assert old["RescheduleTracker"] == {"Events": None, "LastReschedule": "ok"}
    assert (old["DesiredStatus"], old["DesiredDescription"]) == (
        "stop",
        "alloc was rescheduled because it failed",
    )

    # the replacement fails too: exponential, the delay doubles and the tracker grows
    _fail(api, second)
    _until("the second reschedule timer", lambda: pending_reschedules(api.core))
    (left,) = pending_reschedules(api.core)
    assert 55.0 < left <= 60.0
    reschedule_now(api.core)
    third = api.request("GET", f"/v1/allocation/{_replaced(api, second)}")
    delays = [(e["PrevAllocID"], e["Delay"]) for e in third["RescheduleTracker"]["Events"]]
    assert delays == [(first, 30 * NS), (second, 60 * NS)]


def test_no_replacement_once_the_attempts_are_used_up_and_the_job_goes_dead(api: Api) -> None:
    (first,) = run_job(api.request, CRASHY_BATCH)  # Nomad's batch default: 1 attempt in 24h, 5s
    _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(api.core))
    (left,) = pending_reschedules(api.core)
    assert 0.0 < left <= 5.0
    reschedule_now(api.core)
    second = _replaced(api, first)
    _fail(api, second)
    done = _until(
        "the failed replacement's reschedule decided",
        lambda: api.core.call(lambda: not api.core.runners[second].rec.replace_pending),
    )
    assert done and pending_reschedules(api.core) == []
    last = api.request("GET", f"/v1/allocation/{second}")
    assert (last["ClientStatus"], last["NextAllocation"], last["FollowupEvalID"]) == ("failed", "", "")
    assert len(api.request("GET", "/v1/job/crashy-batch/allocations")) == 2
    assert api.request("GET", "/v1/job/crashy-batch")["Status"] == "dead"


def test_a_pending_reschedule_outlives_an_agent_restart_for_the_rest_of_its_delay(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    (first,) = run_job(api.request, CRASHY)
    _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(core))
    follow = api.request("GET", f"/v1/allocation/{first}")["FollowupEvalID"]
    core.stop()
    core, api = start_api(node, restore=True)
    try:
        (left,) = _until("the reschedule timer after the restart", lambda: pending_reschedules(core))
        assert 20.0 < left <= 30.0  # the rest of its delay, not at once and not a fresh one
        assert api.request("GET", f"/v1/allocation/{first}")["NextAllocation"] == ""
        reschedule_now(core)
        new = api.request("GET", f"/v1/allocation/{_replaced(api, first)}")
        assert new["EvalID"] == follow and new["RescheduleTracker"]["Events"][0]["PrevAllocID"] == first
    finally:
        core.stop()


def test_a_job_stop_cancels_a_pending_reschedule(api: Api) -> None:
    (first,) = run_job(api.request, CRASHY)
    _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(api.core))
    api.request("DELETE", "/v1/job/crashy")
    reschedule_now(api.core)
    _until("the reschedule dropped", lambda: pending_reschedules(api.core) == [])
    assert api.request("GET", f"/v1/allocation/{first}")["NextAllocation"] == ""
    assert [a["ID"] for a in api.request("GET", "/v1/job/crashy/allocations")] == [first]


def test_a_reschedule_due_on_an_ineligible_node_waits_as_a_blocked_evaluation(api: Api) -> None:
    (first,) = run_job(api.request, CRASHY)
    _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(api.core))
    body = {"Eligibility": "ineligible", "NodeID": NODE.id}
    api.request("POST", f"/v1/node/{NODE.id}/eligibility", body)
    reschedule_now(api.core)
    _until("the reschedule decided", lambda: pending_reschedules(api.core) == [])
    assert api.request("GET", f"/v1/allocation/{first}")["NextAllocation"] == ""
    (ev,) = [e for e in api.request("GET", "/v1/job/crashy/evaluations") if e["BlockedEval"]]
    assert ev["TriggeredBy"] == "alloc-failure" and ev["QueuedAllocations"] == {"g": 1}
    assert api.request("GET", f"/v1/evaluation/{ev['BlockedEval']}")["Status"] == "blocked"
    api.request("POST", f"/v1/node/{NODE.id}/eligibility", {**body, "Eligibility": "eligible"})
    live = _until(
        "the blocked evaluation placing the alloc",
        lambda: [a["ID"] for a in api.request("GET", "/v1/job/crashy/allocations") if a["ID"] != first],
    )
    assert len(live) == 1


def _blocked_then_placed(api: Api, job: str, first: str) -> str:
    """`first` failed; its reschedule comes due on an ineligible node (a blocked evaluation); the node
    turns eligible again: the alloc the blocked evaluation placed."""
    _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(api.core))
    body = {"Eligibility": "ineligible", "NodeID": NODE.id}
    api.request("POST", f"/v1/node/{NODE.id}/eligibility", body)
    reschedule_now(api.core)
    _until("the reschedule decided", lambda: pending_reschedules(api.core) == [])
    api.request("POST", f"/v1/node/{NODE.id}/eligibility", {**body, "Eligibility": "eligible"})
    (placed,) = _until(
        "the blocked evaluation placing the alloc",
        lambda: [a["ID"] for a in api.request("GET", f"/v1/job/{job}/allocations") if a["ID"] != first],
    )
    return str(placed)


def _blocked_reschedule_run(root: Path, flags: frozenset[str]) -> tuple[list[str], str, str, int]:
    """A batch job's alloc fails, its reschedule is blocked, then placed, and it fails too: (the
    placed alloc's tracker's previous allocs, its PreviousAllocation, the first alloc, the job's
    allocs once every owed reschedule is made)."""
    import threading

    from agent.fieldbugs.faults import Faults

    node = FakeNode(root)
    core = node.core(faults=Faults(flags))
    threading.Thread(target=core.loop.run, daemon=True).start()
    api = Api(node, core)
    try:
        (first,) = run_job(api.request, CRASHY_BATCH)
        second = _blocked_then_placed(api, "crashy-batch", first)
        new = api.request("GET", f"/v1/allocation/{second}")
        tracker = [e["PrevAllocID"] for e in (new["RescheduleTracker"] or {}).get("Events") or []]
        _fail(api, second)
        _until(
            "its reschedule decided", lambda: core.call(lambda: not core.runners[second].rec.replace_pending)
        )
        if reschedule_now(core):  # a second reschedule: its alloc fails as well
            _fail(api, _replaced(api, second))
        return (
            tracker,
            new["PreviousAllocation"],
            first,
            len(api.request("GET", "/v1/job/crashy-batch/allocations")),
        )
    finally:
        core.stop()


def test_a_blocked_reschedule_places_the_replacement_with_its_tracker(tmp_path: Path) -> None:
    """nomad-12147 (PR #12319): the alloc placed once the node takes allocs again is the failed one's
    replacement, its RescheduleTracker carried: with a batch job's 1 attempt in 24h, its own failure
    is not rescheduled. The `blocked-reschedule-drops-tracker` fault places a new alloc without it,
    and the job is rescheduled a second time."""
    tracker, previous, first, allocs = _blocked_reschedule_run(tmp_path / "fixed", frozenset())
    assert (tracker, previous, allocs) == ([first], first, 2)
    fault = frozenset({"blocked-reschedule-drops-tracker"})
    tracker, previous, first, allocs = _blocked_reschedule_run(tmp_path / "fault", fault)
    assert (tracker, previous, allocs) == ([], "", 3)


def test_a_reschedule_a_job_stop_dropped_is_not_revived_by_a_later_blocked_evaluation(api: Api) -> None:
    """The job stopped while its failed alloc's reschedule was held, then registered again on the
    ineligible node: its blocked evaluation places a fresh alloc, not the stopped one's replacement."""
    (first,) = run_job(api.request, CRASHY_BATCH)
    _fail(api, first)
    _until("the reschedule timer", lambda: pending_reschedules(api.core))
    body = {"Eligibility": "ineligible", "NodeID": NODE.id}
    api.request("POST", f"/v1/node/{NODE.id}/eligibility", body)
    reschedule_now(api.core)
    _until("the reschedule decided", lambda: pending_reschedules(api.core) == [])
    api.request("DELETE", "/v1/job/crashy-batch")
    assert run_job(api.request, CRASHY_BATCH) == []  # registered again: held, nothing placed
    api.request("POST", f"/v1/node/{NODE.id}/eligibility", {**body, "Eligibility": "eligible"})
    (placed,) = _until(
        "the blocked evaluation placing the alloc",
        lambda: [a["ID"] for a in api.request("GET", "/v1/job/crashy-batch/allocations") if a["ID"] != first],
    )
    new = api.request("GET", f"/v1/allocation/{placed}")
    assert (new["PreviousAllocation"], new["RescheduleTracker"]) == ("", None)
    assert api.request("GET", f"/v1/allocation/{first}")["NextAllocation"] == ""
