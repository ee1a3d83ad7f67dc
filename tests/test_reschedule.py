"""Nomad's reschedule policy on one node (issue 52 item 4): the pure decision (agent.decide.decisions
.plan_reschedule, next_reschedule_delay, carried_reschedule_events: Nomad's NextDelay,
NextRescheduleTime and UpdateRescheduleTracker) with plain data, and the `reschedule` blocks read as
Nomad's api Canonicalize merges them and its ReschedulePolicy.Validate checks them."""

from __future__ import annotations

import json

import pytest

from agent.decide.reschedule import (
    RESCHEDULE_WINDOW,
    carried_reschedule_events,
    next_reschedule_delay,
    plan_reschedule,
)
from agent.jobspec import JobspecError, parse_jobspec
from agent.jobspec.reschedule import go_duration
from agent.nomadapi.jobjson import job_json
from agent.structs.model import ReschedulePolicy
from agent.structs.records import AllocRecord, RescheduleEvent

SERVICE = ReschedulePolicy(0, 0.0, 30.0, "exponential", 3600.0, True)
BATCH = ReschedulePolicy(1, 86400.0, 5.0, "constant", 0.0, False)
T0 = 1_800_000_000.0


def _events(*delays: float, every: float = 10.0) -> tuple[RescheduleEvent, ...]:
    """Reschedules with these delays, `every` seconds apart, the last at T0."""
    n = len(delays)
    return tuple(RescheduleEvent(T0 - (n - 1 - i) * every, f"a{i}", "n", d) for i, d in enumerate(delays))


# -- NextDelay ------------------------------------------------------------------------------------
def test_the_first_delay_is_the_policys_whatever_the_function() -> None:
    for fn in ("constant", "exponential", "fibonacci"):
        policy = ReschedulePolicy(0, 0.0, 7.0, fn, 100.0, True)
        assert next_reschedule_delay(policy, (), T0) == 7.0


def test_constant_keeps_the_delay_exponential_doubles_fibonacci_adds_the_last_two() -> None:
    constant = ReschedulePolicy(0, 0.0, 5.0, "constant", 0.0, True)
    assert next_reschedule_delay(constant, _events(5, 5, 5), T0 + 1) == 5.0
    assert next_reschedule_delay(SERVICE, _events(30, 60), T0 + 1) == 120.0
    fib = ReschedulePolicy(0, 0.0, 5.0, "fibonacci", 1000.0, True)
    assert next_reschedule_delay(fib, _events(5), T0 + 1) == 5.0  # one event: the delay again
    assert next_reschedule_delay(fib, _events(5, 5), T0 + 1) == 10.0
    assert next_reschedule_delay(fib, _events(5, 5, 10, 15), T0 + 1) == 25.0


def test_max_delay_caps_the_growth_and_a_failure_long_after_the_last_reschedule_starts_again() -> None:
    capped = ReschedulePolicy(0, 0.0, 30.0, "exponential", 100.0, True)
    assert next_reschedule_delay(capped, _events(30, 60), T0 + 50) == 100.0  # 120 capped
    assert next_reschedule_delay(capped, _events(30, 60), T0 + 101) == 30.0  # past the cap: reset
    fib = ReschedulePolicy(0, 0.0, 5.0, "fibonacci", 20.0, True)
    assert next_reschedule_delay(fib, _events(10, 15), T0 + 1) == 20.0
    # a series that was reset (ceiling then the base delay) starts again from the base delay
    assert next_reschedule_delay(fib, _events(20, 5), T0 + 1) == 5.0


# -- NextRescheduleTime: eligibility, the interval window, unlimited, now or later ---------------
def test_no_policy_or_a_disabled_one_owes_no_replacement() -> None:
    assert plan_reschedule(None, (), T0, T0) is None  # a system job's
    off = ReschedulePolicy(0, 3600.0, 5.0, "constant", 0.0, False)
    assert plan_reschedule(off, (), T0, T0) is None


def test_unlimited_reschedules_for_ever_after_its_delay() -> None:
    plan = plan_reschedule(SERVICE, _events(*([3600.0] * 40), every=1.0), T0 + 1, T0 + 1)
    assert plan is not None and plan.delay == 3600.0 and plan.due == T0 + 1 + 3600.0 and not plan.now


def test_limited_attempts_count_only_the_reschedules_within_the_interval() -> None:
    first = plan_reschedule(BATCH, (), T0, T0)
    assert first is not None and (first.delay, first.due) == (5.0, T0 + 5.0)
    used = (RescheduleEvent(T0 - 3600, "a", "n", 5.0),)
    assert plan_reschedule(BATCH, used, T0, T0) is None  # 1 attempt in 24h, used an hour ago
    old = (RescheduleEvent(T0 - 86401, "a", "n", 5.0),)
    again = plan_reschedule(BATCH, old, T0, T0)  # outside the window: it counts no more
    assert again is not None and again.delay == 5.0
    two = ReschedulePolicy(2, 600.0, 5.0, "constant", 0.0, False)
    assert plan_reschedule(two, (RescheduleEvent(T0 - 10, "a", "n", 5.0),), T0, T0) is not None
    both = (RescheduleEvent(T0 - 20, "a", "n", 5.0), RescheduleEvent(T0 - 10, "b", "n", 5.0))
    assert plan_reschedule(two, both, T0, T0) is None


def test_a_delay_as_long_as_the_interval_ends_limited_rescheduling() -> None:
    policy = ReschedulePolicy(5, 100.0, 30.0, "exponential", 1000.0, False)
    assert plan_reschedule(policy, _events(30), T0 + 1, T0 + 1) is not None  # next delay 60 < 100
    assert plan_reschedule(policy, _events(30, 60, every=1.0), T0 + 1, T0 + 1) is None  # 120 >= 100


def test_a_reschedule_due_within_nomads_window_is_placed_now() -> None:
    plan = plan_reschedule(BATCH, (), T0, T0 + 5.0 - RESCHEDULE_WINDOW)
    assert plan is not None and plan.now
    later = plan_reschedule(BATCH, (), T0, T0 + 5.0 - RESCHEDULE_WINDOW - 0.5)
    assert later is not None and not later.now


# -- UpdateRescheduleTracker ------------------------------------------------------------------------
def test_the_tracker_carries_the_events_within_the_interval_or_the_last_five() -> None:
    events = tuple(RescheduleEvent(T0 - 100 * i, f"a{i}", "n", 5.0) for i in range(8, -1, -1))
    limited = ReschedulePolicy(3, 250.0, 5.0, "constant", 0.0, False)
    assert [e.prev_alloc for e in carried_reschedule_events(limited, events, T0)] == ["a2", "a1", "a0"]
    kept = carried_reschedule_events(SERVICE, events, T0)
    assert [e.prev_alloc for e in kept] == ["a4", "a3", "a2", "a1", "a0"]


def test_the_alloc_record_keeps_the_tracker_and_the_pending_reschedule() -> None:
    rec = AllocRecord("a", "j", "g").with_(
        reschedule_events=_events(30, 60),
        followup_eval_id="ev",
        reschedule_due=T0 + 120,
        reschedule_delay=120.0,
    )
    back = AllocRecord.from_record(json.loads(json.dumps(rec.to_record())))
    assert back == rec
    assert AllocRecord.from_record({"id": "a", "job": "j", "group": "g"}).reschedule_events == ()


# -- the jobspec: defaults per type, job and group merged field by field, Nomad's checks ------------
def _job(job_type: str, job_block: str = "", group_block: str = "") -> str:
    task = 'task "t" {\n driver = "docker"\n config { image = "x" }\n }'
    return (
        f'job "j" {{\n type = "{job_type}"\n{job_block}\n group "g" {{\n{group_block}\n{task}\n }}\n'
        f' group "h" {{\n{task}\n }}\n}}\n'
    )


def _policies(text: str) -> dict[str, ReschedulePolicy | None]:
    parsed = parse_jobspec(text, source="t", fmt="hcl")
    assert not [w for w in parsed.warnings if "reschedule" in w]
    return {g.name: g.reschedule for g in parsed.job.groups}


def test_each_job_type_takes_nomads_defaults() -> None:
    assert _policies(_job("service")) == {"g": SERVICE, "h": SERVICE}
    assert _policies(_job("batch")) == {"g": BATCH, "h": BATCH}
    assert _policies(_job("system")) == {"g": None, "h": None}
    assert _policies(_job("sysbatch")) == {"g": None, "h": None}


def test_a_groups_block_is_merged_field_by_field_over_the_jobs() -> None:
    job_block = 'reschedule {\n delay = "10s"\n max_delay = "5m"\n}'
    group_block = 'reschedule {\n delay_function = "fibonacci"\n max_delay = "2m"\n}'
    got = _policies(_job("service", job_block, group_block))
    assert got["g"] == ReschedulePolicy(0, 0.0, 10.0, "fibonacci", 120.0, True)
    assert got["h"] == ReschedulePolicy(0, 0.0, 10.0, "exponential", 300.0, True)


@pytest.mark.parametrize(
    ("job_type", "block", "reasons"),
    [
        (
            "service",
            'reschedule {\n delay = "1s"\n delay_function = "linear"\n}',
            [
                "Delay cannot be less than 5s (got 1s)",
                'Invalid delay function "linear", must be one of ["constant" "exponential" "fibonacci"]',
            ],
        ),
        (
            "batch",
            'reschedule {\n attempts = 10\n interval = "1m"\n delay = "10s"\n}',
            [
                'Nomad can only make 6 attempts in 1m0s with initial delay 10s and delay function "constant"',
                "Set the interval to at least 1m40s to accommodate 10 attempts",
            ],
        ),
        (
            "service",
            'reschedule {\n attempts = 2\n interval = "1h"\n}',
            [
                "Reschedule Policy with Attempts = 2, Interval = 1h0m0s, and Unlimited = true is ambiguous",
                "If Attempts >0, Unlimited cannot also be set to true",
            ],
        ),
        ("system", "reschedule {\n}", ["System or sysbatch jobs should not have a reschedule policy"]),
    ],
)
def test_nomads_validate_refuses_with_its_texts(job_type: str, block: str, reasons: list[str]) -> None:
    with pytest.raises(JobspecError) as err:
        parse_jobspec(_job(job_type, "", block), source="t", fmt="hcl")
    assert [why for _, why in err.value.problems] == reasons


def test_the_policy_round_trips_through_nomads_api_json() -> None:
    text = _job("service", "", 'reschedule {\n attempts = 3\n interval = "1h"\n unlimited = false\n}')
    job = parse_jobspec(text, source="t", fmt="hcl").job
    out = job_json(
        job,
        region="global",
        namespace="default",
        status="running",
        version=0,
        stable=False,
        submit_time=0.0,
        create_index=1,
        modify_index=1,
        job_modify_index=1,
    )
    assert out["TaskGroups"][0]["ReschedulePolicy"] == {
        "Attempts": 3,
        "Interval": 3600 * 1_000_000_000,
        "Delay": 30 * 1_000_000_000,
        "DelayFunction": "exponential",
        "MaxDelay": 3600 * 1_000_000_000,
        "Unlimited": False,
    }
    again = parse_jobspec(json.dumps({"Job": out}), source="t", fmt="json")
    assert [g.reschedule for g in again.job.groups] == [g.reschedule for g in job.groups]
    assert not [w for w in again.warnings if "eschedul" in w]


def test_go_durations_are_written_as_go_writes_them() -> None:
    assert [go_duration(s) for s in (0, 0.5, 5, 90, 3600, 86400)] == [
        "0s",
        "500ms",
        "5s",
        "1m30s",
        "1h0m0s",
        "24h0m0s",
    ]
