"""What Nomad's clients read of allocations and evaluations (issue 51): each alloc's EvalID is the
evaluation that placed it (register, scale, alloc stop, a failed alloc's replacement), the alloc ->
evaluation -> allocations round-trip holds after an agent restart, CreateIndex is never rewritten,
and `?reverse=true` reverses Nomad's list orders. On the real Core and loop with a fake node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_lab import NODE, run_job
from tests.fakes import FakeNode
from tests.test_reschedule_core import reschedule_now
from tests.test_routes_ops import CRASHY, ONE_TASK, TWO_TASKS, Api, _exits, start_api

WAIT = 5.0  # seconds for the loop to place a replacement


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    yield api
    core.stop()


def _round_trip(api: Api, alloc_id: str) -> dict[str, object]:
    """alloc -> its evaluation -> that evaluation's allocations, as python-nomad's tests walk it."""
    alloc = api.request("GET", f"/v1/allocation/{alloc_id}")
    ev = api.request("GET", f"/v1/evaluation/{alloc['EvalID']}")
    listed = [a["ID"] for a in api.request("GET", f"/v1/evaluation/{ev['ID']}/allocations")]
    assert alloc_id in listed, (alloc["EvalID"], listed)
    return dict(ev)


def test_each_alloc_names_the_evaluation_that_placed_it(api: Api) -> None:
    placed = run_job(api.request, TWO_TASKS)
    evals = {a["EvalID"] for a in api.request("GET", "/v1/job/pair/allocations")}
    assert len(placed) == 2 and len(evals) == 1 and "" not in evals
    (eval_id,) = evals
    assert {a["EvalID"] for a in api.request("GET", "/v1/allocations")} == {eval_id}
    assert {a["EvalID"] for a in api.request("GET", f"/v1/node/{NODE.id}/allocations")} == {eval_id}
    for alloc in placed:
        ev = _round_trip(api, alloc)
        assert (ev["ID"], ev["TriggeredBy"], ev["JobID"]) == (eval_id, "job-register", "pair")


def test_an_alloc_stops_replacement_and_a_failed_allocs_replacement_have_their_own_evaluation(
    api: Api,
) -> None:
    (first,) = run_job(api.request, ONE_TASK)
    stop = api.request("POST", f"/v1/allocation/{first}/stop")
    (replacement,) = [a["ID"] for a in api.request("GET", f"/v1/evaluation/{stop['EvalID']}/allocations")]
    assert replacement != first
    assert api.request("GET", f"/v1/allocation/{replacement}")["EvalID"] == stop["EvalID"]
    assert _round_trip(api, replacement)["TriggeredBy"] == "alloc-stop"
    assert _round_trip(api, first)["TriggeredBy"] == "job-register"

    (crashing,) = run_job(api.request, CRASHY)
    _exits(api, crashing, 2)
    deadline = time.monotonic() + WAIT
    # Nomad's default service reschedule policy: replaced after 30s by the follow-up evaluation,
    # which the test runs early rather than wait for it
    while not reschedule_now(api.core):
        assert time.monotonic() < deadline, "no reschedule of the failed alloc"
        time.sleep(0.02)
    while not (after := api.request("GET", f"/v1/allocation/{crashing}"))["NextAllocation"]:
        assert time.monotonic() < deadline, "no replacement of the failed alloc"
        time.sleep(0.02)
    ev = _round_trip(api, after["NextAllocation"])
    assert (ev["TriggeredBy"], ev["JobID"]) == ("alloc-reschedule", "crashy")
    assert ev["ID"] == after["FollowupEvalID"]


def test_the_eval_id_and_its_evaluation_outlive_an_agent_restart(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core, api = start_api(node)
    placed = run_job(api.request, TWO_TASKS)
    before = {a: api.request("GET", f"/v1/allocation/{a}")["EvalID"] for a in placed}
    creates = {a: api.request("GET", f"/v1/allocation/{a}")["CreateIndex"] for a in placed}
    core.stop()
    core, api = start_api(node, restore=True)
    try:
        after = {a: api.request("GET", f"/v1/allocation/{a}")["EvalID"] for a in placed}
        assert after == before
        for alloc in placed:
            assert _round_trip(api, alloc)["TriggeredBy"] == "job-register"
        assert {a: api.request("GET", f"/v1/allocation/{a}")["CreateIndex"] for a in placed} == creates
    finally:
        core.stop()


def test_create_index_is_never_rewritten_and_a_replacement_is_created_after_what_it_replaces(
    api: Api,
) -> None:
    (first,) = run_job(api.request, ONE_TASK)
    created = api.request("GET", f"/v1/allocation/{first}")["CreateIndex"]
    api.request("POST", f"/v1/client/allocation/{first}/signal", {"Signal": "SIGHUP"})
    api.request("POST", f"/v1/allocation/{first}/stop")
    old = api.request("GET", f"/v1/allocation/{first}")
    second = old["NextAllocation"]
    new = api.request("GET", f"/v1/allocation/{second}")
    assert old["CreateIndex"] == created < old["ModifyIndex"]
    assert old["CreateIndex"] < new["CreateIndex"] <= new["ModifyIndex"]
    stub = next(a for a in api.request("GET", "/v1/allocations") if a["ID"] == first)
    assert stub["CreateIndex"] == created


def test_reverse_lists_allocs_and_evals_newest_first_and_jobs_by_id_backwards(api: Api) -> None:
    run_job(api.request, ONE_TASK)
    run_job(api.request, TWO_TASKS)
    forward = api.request("GET", "/v1/allocations")
    assert [a["CreateIndex"] for a in forward] == sorted(a["CreateIndex"] for a in forward)
    backward = api.request("GET", "/v1/allocations?reverse=true")
    assert [a["ID"] for a in backward] == [a["ID"] for a in reversed(forward)]
    evals = [e["ID"] for e in api.request("GET", "/v1/evaluations")]
    assert [e["ID"] for e in api.request("GET", "/v1/evaluations?reverse=true")] == evals[::-1]
    jobs = [j["ID"] for j in api.request("GET", "/v1/jobs?reverse=true")]
    assert jobs == ["web", "pair"]
