"""Restore and restart decisions, without I/O."""

from __future__ import annotations

import pytest

from agent.decisions import (
    ObservedAlloc,
    RestoreAction,
    plan_restore,
    plan_task_restart,
    trust_recorded_tasks,
)
from agent.model import RestartPolicy

HEALTHY = ObservedAlloc(
    alloc_dir_exists=True, bridge=True, tasks_running=[True, True], tasks_share_pause_netns=[True, True]
)


def test_healthy_alloc_is_reattached_untouched() -> None:
    assert plan_restore(HEALTHY).action is RestoreAction.REATTACH


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"pause_running": False}, "pause container is not running"),
        ({"pause_same_start": False}, "restarted by docker"),
        ({"tasks_share_pause_netns": [True, False]}, "another network namespace"),
        ({"network_diffs": ["no IPv4 default route inside netns"]}, "no IPv4 default route"),
        ({"has_cni_result": False}, "no CNI result"),
    ],
)
def test_broken_network_is_recreated_with_the_reason(change: dict[str, object], needle: str) -> None:
    obs = ObservedAlloc(**{**HEALTHY.__dict__, **change})  # type: ignore[arg-type]
    plan = plan_restore(obs)
    assert plan.action is RestoreAction.RECREATE_NETWORK
    assert needle in plan.reason


def test_missing_alloc_dir_is_replaced() -> None:
    obs = ObservedAlloc(**{**HEALTHY.__dict__, "alloc_dir_exists": False})  # type: ignore[arg-type]
    assert plan_restore(obs).action is RestoreAction.REPLACE


def test_without_alloc_dir_check_a_missing_dir_is_restored_as_if_there() -> None:
    """The nomad-27933 behaviour, kept behind the restore-missing-alloc-dir fault: the alloc is
    reattached (or its exited tasks restarted) instead of replaced."""
    obs = ObservedAlloc(**{**HEALTHY.__dict__, "alloc_dir_exists": False})  # type: ignore[arg-type]
    assert plan_restore(obs, check_alloc_dir=False).action is RestoreAction.REATTACH
    exited = ObservedAlloc(**{**obs.__dict__, "tasks_running": [True, False]})  # type: ignore[arg-type]
    assert plan_restore(exited, check_alloc_dir=False).action is RestoreAction.RESTART_TASKS
    broken = ObservedAlloc(**{**obs.__dict__, "pause_running": False})  # type: ignore[arg-type]
    assert plan_restore(broken, check_alloc_dir=False).action is RestoreAction.RECREATE_NETWORK


def test_a_task_that_vanished_while_the_agent_was_down_is_restarted() -> None:
    gone = ObservedAlloc(
        **{
            **HEALTHY.__dict__,
            "tasks_running": [True, False],  # type: ignore[arg-type]
            "tasks_share_pause_netns": [True, False],
        }
    )
    plan = plan_restore(gone)
    assert plan.action is RestoreAction.RESTART_TASKS
    assert "exited while the agent was down" in plan.reason


def test_trusting_recorded_task_states_leaves_a_vanished_task_unnoticed() -> None:
    """The nomad-23684/17079 behaviour, kept behind the half-alive-restore fault: the record says
    running, so the alloc is reattached with no live task and nothing says why."""
    gone = ObservedAlloc(
        **{
            **HEALTHY.__dict__,
            "tasks_running": [True, False],  # type: ignore[arg-type]
            "tasks_share_pause_netns": [True, False],
        }
    )
    trusted = trust_recorded_tasks(gone, [True, True])
    assert list(trusted.tasks_running) == [True, True]
    assert list(trusted.tasks_share_pause_netns) == [True, True]
    plan = plan_restore(trusted)
    assert plan.action is RestoreAction.REATTACH
    assert "exited" not in plan.reason


def test_trusting_recorded_states_still_sees_what_the_record_and_the_driver_agree_on() -> None:
    # A task recorded dead (it exited before the agent went down) is still restarted...
    gone = ObservedAlloc(
        **{
            **HEALTHY.__dict__,
            "tasks_running": [True, False],  # type: ignore[arg-type]
            "tasks_share_pause_netns": [True, False],
        }
    )
    assert plan_restore(trust_recorded_tasks(gone, [True, False])).action is RestoreAction.RESTART_TASKS
    # ...and a live task in another netns than the pause container is still a broken network.
    split = ObservedAlloc(**{**HEALTHY.__dict__, "tasks_share_pause_netns": [True, False]})  # type: ignore[arg-type]
    assert plan_restore(trust_recorded_tasks(split, [True, True])).action is RestoreAction.RECREATE_NETWORK


def test_without_network_check_a_restarted_pause_is_trusted() -> None:
    """The nomad-24292 behaviour, kept behind the no-network-check-on-restore fault."""
    obs = ObservedAlloc(
        **{
            **HEALTHY.__dict__,
            "pause_same_start": False,  # type: ignore[arg-type]
            "network_diffs": ["no route"],
        }
    )
    assert plan_restore(obs, check_network=False).action is RestoreAction.REATTACH
    assert plan_restore(obs).action is RestoreAction.RECREATE_NETWORK


def test_exited_task_is_restarted_on_restore() -> None:
    obs = ObservedAlloc(
        **{
            **HEALTHY.__dict__,
            "tasks_running": [True, False],  # type: ignore[arg-type]
            "tasks_share_pause_netns": [True, False],
        }
    )
    assert plan_restore(obs).action is RestoreAction.RESTART_TASKS


def test_restart_policy_counts_attempts_within_the_interval() -> None:
    pol = RestartPolicy(attempts=2, interval=60, delay=1, mode="fail")
    assert plan_task_restart(pol, [], 100).restart
    assert plan_task_restart(pol, [50], 100).restart
    d = plan_task_restart(pol, [50, 90], 100)
    assert not d.restart and "exceeded 2" in d.reason
    assert plan_task_restart(pol, [10, 20], 100).restart  # old restarts fell out of the interval
    delay = plan_task_restart(RestartPolicy(attempts=1, interval=60, delay=1, mode="delay"), [90], 100)
    assert delay.restart and delay.delay == pytest.approx(50)
