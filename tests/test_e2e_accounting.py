"""The start-accounting checker (e2e/harness/accounting.py), without a lab: event sequences the agent
writes when all is well (every start answers one decision) and the ones a bug writes (a start with no
cause, a stale restart timer firing after a recovery, two starts for one recovery, a restart with no
exit, one before its delay, one owed and never made), each of which it must flag."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.harness.accounting import (
    CAUSES,
    OVERDUE,
    restart_delay,
    restarts_settle_at,
    start_count,
    start_problems,
)

T0 = 1_800_000_000.0
WHERE = "client1: alloc 1a2b3c4d"


def ev(t: float, task: str, kind: str, message: str = "", **details: Any) -> dict[str, Any]:
    return {"time": T0 + t, "task": task, "type": kind, "message": message, "details": details}


def started(t: float, task: str, cause: str | None) -> dict[str, Any]:
    return ev(t, task, "Started", "Task started by client", **({"cause": cause} if cause else {}))


def placed(*tasks: str) -> list[dict[str, Any]]:
    """An alloc placed and its tasks started once, as the agent writes it."""
    out = [ev(0.0, t, "Received", "Task received by client") for t in tasks]
    out += [ev(0.1, t, "Task Setup", "Building Task Directory") for t in tasks]
    out += [started(0.2 + i / 10, t, "first start") for i, t in enumerate(tasks)]
    return out


def exited(t: float, task: str, delay: float, code: int = 137) -> list[dict[str, Any]]:
    return [
        ev(t, task, "Terminated", f"Exit Code: {code}", exit_code=code),
        ev(t, task, "Restarting", f"Task restarting in {delay:.1f}s (restart 1 of 2 within 30m)"),
    ]


def recovery(t: float, *tasks: str, cause: str = "network recovery") -> list[dict[str, Any]]:
    out = [ev(t, "", "Network Lost", "pause container died; recovering the group's network")]
    out += [ev(t + 0.1, x, "Restart Signaled", "network recreated: pause container died") for x in tasks]
    out += [started(t + 1.0 + i / 10, x, cause) for i, x in enumerate(tasks)]
    out.append(ev(t + 2.0, "", "Network Recovered", "network recreated (pause container died)"))
    return out


def problems(events: list[dict[str, Any]], **kw: Any) -> list[str]:
    return start_problems(events, where=WHERE, **kw)


# --- what the agent writes when every start answers one decision ------------------------------------
GOOD = {
    "first starts of two tasks": placed("web", "side"),
    "a restart after the policy's delay": [
        *placed("web"),
        *exited(10.0, "web", 15.0),
        started(25.1, "web", "restart policy"),
    ],
    "a network recovery restarting every task once": [*placed("web", "side"), *recovery(10.0, "web", "side")],
    "a recovery cancelling a pending restart (nothing fires later)": [
        *placed("web"),
        *exited(10.0, "web", 15.0),
        *recovery(11.0, "web"),
    ],
    "a restart owed across an agent restart, resumed once": [
        *placed("web"),
        *exited(10.0, "web", 15.0),
        ev(14.0, "", "Restored", "task(s) exited while the agent was down"),
        ev(14.1, "web", "Restarting", "Task restarting in 10.9s (owed from before the agent stopped)"),
        started(25.0, "web", "restart policy"),
    ],
    "an exit found at restore, through the policy": [
        *placed("web"),
        ev(30.0, "", "Restored", "task(s) exited while the agent was down"),
        ev(30.1, "web", "Terminated", "Exit Code: 137", exit_code=137, while_agent_down=True),
        ev(30.1, "web", "Restarting", "Task restarting in 15.0s (restart 1 of 2 within 30m)"),
        started(45.2, "web", "restart policy"),
    ],
    "restores: a task gone, a network rebuilt, a setup resumed": [
        *placed("web", "side"),
        ev(20.0, "", "Restored", "task(s) exited while the agent was down"),
        started(20.1, "side", "restore"),
        ev(40.0, "", "Restore Network", "pause container restarted by docker"),
        *[ev(40.1, x, "Restart Signaled", "network recreated: pause restarted") for x in ("web", "side")],
        started(41.0, "web", "restore"),
        started(41.1, "side", "restore"),
        ev(60.0, "", "Setup Resumed", "the agent was killed while setting the alloc up"),
        started(61.0, "web", "restore"),
        started(61.1, "side", "restore"),
    ],
    "a change_mode restart, an operator's, a Vault token's": [
        *placed("web"),
        ev(10.0, "web", "Restart Signaled", "Template with change_mode restart re-rendered"),
        started(10.5, "web", "change_mode restart"),
        ev(20.0, "web", "Restart Signaled", "User requested task to restart"),
        started(20.5, "web", "operator restart"),
        ev(30.0, "web", "Restart Signaled", "new Vault token acquired (expired)"),
        started(30.5, "web", "change_mode restart"),
    ],
    "a recovery retried after docker did not answer: one start per attempt": [
        *placed("web"),
        ev(10.0, "web", "Restart Signaled", "network recreated: pause container died"),
        started(10.5, "web", "network recovery"),
        ev(10.6, "", "Network Recovery Retrying", "docker unavailable; trying again in 1s (attempt 2)"),
        ev(11.6, "web", "Restart Signaled", "network recreated: pause container died (attempt 2)"),
        started(12.0, "web", "network recovery"),
    ],
    "an exit the policy gave up on: no start owed": [
        *placed("web"),
        ev(10.0, "web", "Terminated", "Exit Code: 1", exit_code=1),
        ev(10.0, "web", "Not Restarting", "exceeded 2 restart(s) (exit code 1)", exit_code=1),
        ev(10.0, "", "Alloc Failed", "task web failed with exit code 1"),
    ],
}


@pytest.mark.parametrize("events", GOOD.values(), ids=GOOD.keys())
def test_every_start_that_answers_one_decision_passes(events: list[dict[str, Any]]) -> None:
    assert problems(events, status="running", now=T0 + 3600) == []


# --- what a bug writes -----------------------------------------------------------------------------
def test_a_start_with_no_cause_and_one_with_an_unknown_cause_are_flagged() -> None:
    events = [*placed("web"), ev(10.0, "web", "Restart Signaled", "x"), started(11.0, "web", None)]
    assert problems(events) == [f"{WHERE} task web started at 08:00:11.0 with no cause (details {{}})"]
    odd = [*placed("web"), *exited(10.0, "web", 1.0), started(12.0, "web", "because")]
    (p,) = problems(odd)
    assert "unknown cause 'because'" in p and all(c in p for c in CAUSES)


def test_a_stale_restart_timer_firing_after_a_recovery_is_two_starts_for_one_decision() -> None:
    """Issue 12: a recovery restarted the task while a restart timer was pending; the timer fires
    later, removes the healthy container and starts the task again."""
    events = [
        *placed("web"),
        *exited(10.0, "web", 15.0),
        *recovery(11.0, "web"),
        started(25.0, "web", "restart policy"),
    ]
    (p,) = problems(events)
    assert p.startswith(f"{WHERE} task web started at 08:00:25.0 for 'restart policy', a second start for")
    assert "Terminated at 08:00:10.0 (Exit Code: 137) + Restarting at 08:00:10.0" in p
    assert "answered by its start at 08:00:12.0 (network recovery)" in p


def test_two_recovery_starts_of_a_task_for_one_restart_signaled_are_flagged() -> None:
    events = [*placed("web"), *recovery(10.0, "web"), started(11.5, "web", "network recovery")]
    (p,) = problems(events)
    assert "for 'network recovery', a second start for one decision: Restart Signaled at" in p


def test_a_restart_policy_start_with_no_exit_is_flagged() -> None:
    assert problems([*placed("web"), started(30.0, "web", "restart policy")]) == [
        f"{WHERE} task web started at 08:00:30.0 for 'restart policy' with no exit (Terminated + "
        "Restarting) since its start at 08:00:00.2"
    ]
    no_terminated = [
        *placed("web"),
        ev(10.0, "web", "Restarting", "Task restarting in 1.0s (restart 1 of 2 within 30m)"),
        started(11.0, "web", "restart policy"),
    ]
    (p,) = problems(no_terminated)
    assert "with no exit (Terminated) before it" in p


def test_a_restart_before_its_delay_is_up_is_flagged() -> None:
    events = [*placed("web"), *exited(10.0, "web", 15.0), started(12.0, "web", "restart policy")]
    (p,) = problems(events)
    assert "13.0s before its delay was up" in p


def test_a_second_first_start_and_starts_with_no_decision_are_flagged() -> None:
    again = [*placed("web"), started(5.0, "web", "first start")]
    assert problems(again) == [
        f"{WHERE} task web started at 08:00:05.0 as 'first start' after it had started at 08:00:00.2"
    ]
    no_restore = [*placed("web"), started(5.0, "web", "restore")]
    (p,) = problems(no_restore)
    assert "for 'restore' with no Restart Signaled or restore (Restored/Restore Network/Setup Resumed)" in p
    no_signal = [*placed("web"), started(5.0, "web", "operator restart")]
    assert "for 'operator restart' with no Restart Signaled since" in problems(no_signal)[0]
    unplaced = [started(0.2, "web", "first start")]
    assert "for 'first start' with no Received" in problems(unplaced)[0]


def test_a_restart_owed_and_never_made_is_flagged_once_past_due() -> None:
    events = [*placed("web"), *exited(10.0, "web", 1.0)]
    due = T0 + 11.0
    assert problems(events, status="running", now=due + OVERDUE - 1) == []
    (p,) = problems(events, status="running", now=due + OVERDUE + 1)
    assert (
        "the restart decided by Terminated at 08:00:10.0" in p and "was due at 08:00:11.0 and never came" in p
    )
    assert problems(events, status="complete", now=due + 600) == [], "a stopped alloc owes no restart"
    assert problems(events) == [], "not asked (no now): not checked"


def test_each_alloc_task_is_accounted_on_its_own() -> None:
    events = [*placed("web", "side"), *exited(10.0, "web", 1.0), started(11.0, "side", "restart policy")]
    (p,) = problems(events)
    assert "task side started" in p
    assert start_count(events) == 3


def test_the_delay_is_read_from_the_restarting_event_and_the_settle_time_is_the_latest() -> None:
    assert restart_delay("Task restarting in 15.0s (restart 1 of 2 within 30m)") == 15.0
    assert restart_delay("Task restarting in 3s") == 3.0
    assert restart_delay("Template re-rendered") is None
    assert restarts_settle_at(placed("web"), 15.0) == 0.0, "nothing exited: nothing to wait for"
    events = [*placed("web"), *exited(10.0, "web", 1.0), *exited(20.0, "web", 30.0)]
    assert restarts_settle_at(events, 15.0) == T0 + 50.0  # its own 30 s beats the jobs' 15 s
    assert restarts_settle_at(events[:-2] + events[-2:-1], 15.0) == T0 + 35.0  # a Terminated alone
