"""Restore and restart decisions, without I/O."""

from __future__ import annotations

import dataclasses

import pytest

from agent.decide.decisions import (
    NO_BUGS,
    AfterRestore,
    Bugs,
    DeadOnRestore,
    ObservedAlloc,
    OwedReplacement,
    PauseDeathAction,
    PendingRestart,
    RestoreAction,
    StartCause,
    StartFailure,
    SweepPlan,
    TeardownPlan,
    plan_after_restore,
    plan_dead_on_restore,
    plan_network_recovery,
    plan_network_teardown,
    plan_orphan_sweep,
    plan_owed_replacements,
    plan_pause_death,
    plan_pending_restart,
    plan_render_retry,
    plan_restore,
    plan_restore_render,
    plan_restore_statuses,
    plan_start_failure,
    plan_task_restart,
    restart_interval,
    restarts_on_success,
    trust_recorded_tasks,
)
from agent.decide.taskdecisions import (
    plan_alloc_addr_port,
    plan_cleanup_failed_restore,
    plan_group_shutdown_delay,
    plan_keep_previous_alloc_dir,
    plan_kill_signal,
    plan_kill_timeout,
    plan_next_log_file,
    plan_remount_secrets,
    plan_restart_logmon,
    plan_shutdown_delay,
    plan_task_network_address,
)
from agent.decide.vaultrate import (
    RATE_LIMIT_RETRY_MAX,
    RATE_LIMIT_RETRY_MIN,
    RateBucket,
    plan_rate_cap,
    plan_rate_limit_retry,
)
from agent.fieldbugs.catalogue import KNOWN_FAULTS
from agent.fieldbugs.faults import Faults
from agent.network.plugins import plan_cni_chain
from agent.structs.model import RestartPolicy
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, TaskState

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
    assert plan_restore(obs, Bugs(restore_missing_alloc_dir=True)).action is RestoreAction.REATTACH
    exited = ObservedAlloc(**{**obs.__dict__, "tasks_running": [True, False]})  # type: ignore[arg-type]
    assert plan_restore(exited, Bugs(restore_missing_alloc_dir=True)).action is RestoreAction.RESTART_TASKS
    broken = ObservedAlloc(**{**obs.__dict__, "pause_running": False})  # type: ignore[arg-type]
    assert plan_restore(broken, Bugs(restore_missing_alloc_dir=True)).action is RestoreAction.RECREATE_NETWORK


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
    assert plan_restore(obs, Bugs(no_network_check_on_restore=True)).action is RestoreAction.REATTACH
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
    assert plan_task_restart(pol, [], 100, interval_start=50).restart
    assert plan_task_restart(pol, [60], 100, interval_start=50).restart
    d = plan_task_restart(pol, [60, 90], 100, interval_start=50)
    assert not d.restart and "exceeded 2" in d.reason
    fresh = plan_task_restart(pol, [10, 20], 100, interval_start=5)  # that interval ended at 65
    assert fresh.restart and fresh.interval_start == 100 and "restart 1 of 2" in fresh.reason
    delaying = RestartPolicy(attempts=1, interval=60, delay=1, mode="delay")
    delay = plan_task_restart(delaying, [90], 100, interval_start=80)
    assert delay.restart and delay.delay == pytest.approx(40) and delay.interval_start == 80


def test_restart_intervals_tumble_as_nomads_tracker_not_slide() -> None:
    """Nomad's restart tracker: an interval starts with the tracker; the first counted exit after it
    ended starts the next one with a count of 0. A sliding window would refuse the third exit below
    (two restarts in the last 60 s); Nomad restarts it, and waits only to the interval's end."""
    pol = RestartPolicy(attempts=2, interval=60, delay=1, mode="fail")
    assert restart_interval(pol, [50, 55], 59, 0) == (0, 2)
    assert restart_interval(pol, [50, 55], 60, 0) == (0, 2), "the interval's end is still in it"
    assert restart_interval(pol, [50, 55], 61, 0) == (61, 0)
    third = plan_task_restart(pol, [50, 55], 61, interval_start=0)
    assert (third.restart, third.counted, third.interval_start) == (True, True, 61)
    refused = plan_task_restart(pol, [50, 55], 59, interval_start=0)
    assert not refused.restart
    delayed = plan_task_restart(dataclasses.replace(pol, mode="delay"), [50, 55], 59, interval_start=0)
    assert delayed.restart and delayed.delay == pytest.approx(1), "to the interval's end, not 60 s after 50"


def test_no_attempts_means_no_restart_whatever_the_mode() -> None:
    for mode in ("fail", "delay"):
        pol = RestartPolicy(attempts=0, interval=60, delay=1, mode=mode)
        d = plan_task_restart(pol, [], 100, interval_start=90)
        assert not d.restart and "Policy allows no restarts" in d.reason, mode


def test_half_alive_bug_believes_the_record_inside_plan_restore() -> None:
    gone = ObservedAlloc(
        **{
            **HEALTHY.__dict__,
            "tasks_running": [True, False],  # type: ignore[arg-type]
            "tasks_share_pause_netns": [True, False],
        }
    )
    assert plan_restore(gone, NO_BUGS, [True, True]).action is RestoreAction.RESTART_TASKS
    assert plan_restore(gone, Bugs(half_alive_restore=True), [True, True]).action is RestoreAction.REATTACH


def test_every_fault_flag_has_a_bugs_field_and_every_field_a_flag() -> None:
    fields = {f.name for f in dataclasses.fields(Bugs)}
    assert fields == {Bugs.field_name(flag) for flag in KNOWN_FAULTS}
    for flag in KNOWN_FAULTS:
        bugs = Faults(frozenset({flag})).bugs()
        assert getattr(bugs, Bugs.field_name(flag)) is True
        assert sum(getattr(bugs, f) for f in fields) == 1, flag
    assert Faults().bugs() == NO_BUGS
    with pytest.raises(ValueError, match="no Bugs field"):
        Bugs.from_flags(["not-a-flag"])


def test_pause_death_and_start_failure_recover_the_network_unless_the_12216_bug() -> None:
    assert plan_pause_death() is PauseDeathAction.RECOVER_NETWORK
    assert plan_pause_death(Bugs(reuse_dead_pause=True)) is PauseDeathAction.RESTART_INTO_DEAD_PAUSE
    assert plan_start_failure(bridge=True) is StartFailure.RECOVER_NETWORK
    assert plan_start_failure(bridge=True, recoverable=True) is StartFailure.RECOVER_NETWORK
    assert plan_start_failure(bridge=False) is StartFailure.FAIL  # nothing to rebuild, nothing to retry
    assert plan_start_failure(bridge=False, recoverable=True) is StartFailure.RESTART_POLICY
    assert plan_start_failure(bridge=True, bugs=Bugs(reuse_dead_pause=True)) is StartFailure.FAIL
    # nomad-1858: with the flag, a recoverable start error fails the task as an unrecoverable one.
    unhandled = Bugs(start_errors_unrecoverable=True)
    assert plan_start_failure(bridge=False, recoverable=True, bugs=unhandled) is StartFailure.FAIL


def test_network_recovery_runs_del_and_takes_the_new_address() -> None:
    fixed = plan_network_recovery()
    assert (fixed.run_del, fixed.forget_cached_result, fixed.keep_old_address) == (True, False, False)
    stale = plan_network_recovery(Bugs(ipam_stale_after_reboot=True))
    assert (stale.run_del, stale.forget_cached_result) == (False, True)
    assert plan_network_recovery(Bugs(stale_network_status_on_restore=True)).keep_old_address


def test_teardown_runs_del_unless_chains_are_leaked() -> None:
    assert plan_network_teardown() == TeardownPlan(run_del=True, release_only=False)
    assert plan_network_teardown(Bugs(leak_portmap_chains=True)) == TeardownPlan(
        run_del=False, release_only=True
    )


def test_sweep_plan() -> None:
    assert plan_orphan_sweep() == SweepPlan(run=True, reap_untracked_pause=False)
    assert not plan_orphan_sweep(Bugs(no_orphan_sweep=True)).run
    assert plan_orphan_sweep(Bugs(sweep_untracked_pause=True)).reap_untracked_pause


def test_after_restore_acts_on_the_loop_unless_a_template_bug() -> None:
    assert plan_after_restore() is AfterRestore.ACT_ON_LOOP
    assert plan_after_restore(Bugs(no_change_on_restore=True)) is AfterRestore.FORGET
    assert plan_after_restore(Bugs(script_change_before_handle=True)) is AfterRestore.ACT_BEFORE_HANDLE


def test_render_retries_back_off_and_never_give_up_unless_28016() -> None:
    delays = [plan_render_retry(n, all_noop=True).delay for n in range(1, 12)]
    assert delays == sorted(delays) and delays[0] == 2.0 and max(delays) == 60.0
    assert not any(plan_render_retry(n, all_noop=True).give_up for n in range(1, 50))
    dies = Bugs(noop_runner_dies=True)
    assert not plan_render_retry(2, all_noop=True, bugs=dies).give_up
    assert plan_render_retry(3, all_noop=True, bugs=dies).give_up
    assert not plan_render_retry(3, all_noop=False, bugs=dies).give_up  # only all-noop runners died


def test_only_the_tasks_own_exits_count_against_the_restart_policy() -> None:
    pol = RestartPolicy(attempts=1, interval=60, delay=5, mode="fail")
    exhausted = [90.0]
    assert not plan_task_restart(pol, exhausted, 100, StartCause.RESTART_POLICY).restart
    for cause in StartCause:
        if cause is StartCause.RESTART_POLICY:
            continue
        d = plan_task_restart(pol, exhausted, 100, cause)
        assert (d.restart, d.delay, d.counted) == (True, 0.0, False), cause
        assert cause.value in d.reason and "not counted" in d.reason
    counted = plan_task_restart(pol, [], 100, StartCause.RESTART_POLICY)
    assert (counted.restart, counted.delay, counted.counted) == (True, 5, True)
    delayed = plan_task_restart(RestartPolicy(attempts=1, interval=60, delay=1, mode="delay"), exhausted, 100)
    assert delayed.counted and delayed.delay == pytest.approx(50)


def test_start_causes_are_the_started_events_vocabulary() -> None:
    assert {c.value for c in StartCause} == {
        "first start",
        "restart policy",
        "network recovery",
        "change_mode restart",
        "restore",
        "operator restart",
    }
    assert [c for c in StartCause if c.counted] == [StartCause.RESTART_POLICY]


def test_a_pending_restart_fires_only_while_its_generation_is_current() -> None:
    pending = PendingRestart("web", 3)
    assert plan_pending_restart(pending, 3, alloc_running=True)
    assert not plan_pending_restart(pending, 4, alloc_running=True)  # a later decision came first
    assert not plan_pending_restart(pending, 3, alloc_running=False)  # stopped or failed meanwhile


def test_a_task_dead_at_restore_goes_through_the_policy_unless_there_is_no_exit_to_count() -> None:
    assert plan_dead_on_restore(TaskState.RUNNING, 0.0, 3) is DeadOnRestore.RESTART_POLICY
    assert plan_dead_on_restore(TaskState.STARTING, 0.0, 0) is DeadOnRestore.RESTART_POLICY
    # Its exit was handled before the agent stopped: the owed restart is resumed, not counted again.
    assert plan_dead_on_restore(TaskState.DEAD, 1234.0, 3) is DeadOnRestore.RESUME_PENDING
    # No exit status: never started (no handle), gone (docker rm), or running under the agent
    # (docker restarted it): started again by the restore, not counted.
    assert plan_dead_on_restore(TaskState.STARTING, 0.0, None) is DeadOnRestore.START_AGAIN
    assert plan_dead_on_restore(TaskState.RUNNING, 0.0, None) is DeadOnRestore.START_AGAIN
    assert (
        plan_dead_on_restore(TaskState.DEAD, 0.0, 3) is DeadOnRestore.START_AGAIN
    )  # an earlier agent's record


def test_an_exit_status_lost_with_the_agent_is_a_failure_the_policy_counts() -> None:
    """An exec or raw_exec task found gone at restore died while the agent was down: its exit code
    is unknown, and unknown is a failure (restart policy, counted), never an uncounted start."""
    assert plan_dead_on_restore(TaskState.RUNNING, 0.0, None, exit_lost=True) is DeadOnRestore.RESTART_POLICY
    # Its exit handled before the agent stopped, or stopped for a restart: as before.
    assert plan_dead_on_restore(TaskState.DEAD, 99.0, None, exit_lost=True) is DeadOnRestore.RESUME_PENDING
    assert plan_dead_on_restore(TaskState.DEAD, 0.0, None, exit_lost=True) is DeadOnRestore.START_AGAIN
    # A task that completed (a batch task's exit 0) stays dead, whatever the driver says of it.
    for code in (0, None):
        assert plan_dead_on_restore(TaskState.DEAD, 0.0, code, completed=True) is DeadOnRestore.COMPLETE


@pytest.mark.parametrize("job_type", ["batch", "sysbatch"])
def test_a_batch_task_that_exits_0_is_complete_whatever_its_attempts(job_type: str) -> None:
    """Nomad's restart tracker: a batch or sysbatch job's successful exit is no failure and needs no
    restart (attempts = 0, or used up, changes nothing); any other exit goes through the policy."""
    pol = RestartPolicy(attempts=1, interval=60, delay=5, mode="fail")
    for policy, history in ((pol, []), (pol, [90.0]), (dataclasses.replace(pol, attempts=0), [])):
        done = plan_task_restart(policy, history, 100, exit_code=0, job_type=job_type)
        assert (done.restart, done.complete, done.counted) == (False, True, False)
        assert done.reason == "Restart unnecessary as task terminated successfully"
    failed = plan_task_restart(pol, [], 100, exit_code=1, job_type=job_type)
    assert (failed.restart, failed.complete, failed.counted, failed.delay) == (True, False, True, 5)
    unknown = plan_task_restart(pol, [90.0], 100, exit_code=None, job_type=job_type)
    assert (unknown.restart, unknown.complete) == (False, False), "an unknown exit code is a failure"
    assert not restarts_on_success(job_type)


@pytest.mark.parametrize("job_type", ["service", "system"])
def test_a_service_task_is_restarted_on_any_exit_and_each_counts(job_type: str) -> None:
    pol = RestartPolicy(attempts=1, interval=60, delay=5, mode="fail")
    again = plan_task_restart(pol, [], 100, exit_code=0, job_type=job_type)
    assert (again.restart, again.complete, again.counted) == (True, False, True)
    spent = plan_task_restart(pol, [90.0], 100, exit_code=0, job_type=job_type)
    assert (spent.restart, spent.complete) == (False, False) and "exceeded 1" in spent.reason
    assert restarts_on_success(job_type)


def test_a_task_recorded_complete_leaves_nothing_to_restore() -> None:
    done = dataclasses.replace(HEALTHY, tasks_running=[True, False], tasks_completed=[False, True])
    plan = plan_restore(done)
    assert plan.action is RestoreAction.REATTACH and "running or complete" in plan.reason
    dead = dataclasses.replace(done, tasks_completed=[False, False])
    assert plan_restore(dead).action is RestoreAction.RESTART_TASKS


def test_nomad_5883_a_completed_alloc_is_not_run_again_on_restore() -> None:
    """Fixed: restore picks up live allocs only, and a task recorded complete stays dead. With
    `rerun-completed-on-restore` (nomad-5883) a complete alloc is picked up, its completion not seen,
    and its task started again."""
    assert plan_restore_statuses() == (AllocStatus.PENDING, AllocStatus.RUNNING)
    bug = Bugs(rerun_completed_on_restore=True)
    assert AllocStatus.COMPLETE in plan_restore_statuses(bug)
    assert AllocStatus.FAILED not in plan_restore_statuses(bug)
    assert plan_dead_on_restore(TaskState.DEAD, 0.0, 0, completed=True) is DeadOnRestore.COMPLETE
    assert plan_dead_on_restore(TaskState.DEAD, 0.0, 0, completed=True, bugs=bug) is DeadOnRestore.START_AGAIN
    done = dataclasses.replace(HEALTHY, tasks_running=[False, False], tasks_completed=[True, True])
    assert plan_restore(done).action is RestoreAction.REATTACH
    assert plan_restore(done, bug).action is RestoreAction.RESTART_TASKS


def test_nomad_1795_old_allocs_are_not_picked_up_by_the_restore() -> None:
    """Fixed: a failed alloc (replaced) is history at restore. With `rerun-old-allocs-on-restore`
    (nomad-1795) it is picked up with the live ones."""
    assert AllocStatus.FAILED not in plan_restore_statuses()
    old = plan_restore_statuses(Bugs(rerun_old_allocs_on_restore=True))
    assert {AllocStatus.FAILED, AllocStatus.COMPLETE, AllocStatus.RUNNING} <= set(old)


def test_nomad_7271_a_tasks_shutdown_delay_does_not_need_a_service() -> None:
    """Fixed: the delay is the task's, with or without a service of its own. With
    `shutdown-delay-needs-service` (nomad-7271) a task with no service is killed at once."""
    assert plan_shutdown_delay(8.0, has_services=False) == 8.0
    assert plan_shutdown_delay(8.0, has_services=True) == 8.0
    bug = Bugs(shutdown_delay_needs_service=True)
    assert plan_shutdown_delay(8.0, has_services=False, bugs=bug) == 0.0
    assert plan_shutdown_delay(8.0, has_services=True, bugs=bug) == 8.0


def test_nomad_10005_the_clients_max_kill_timeout_caps_a_tasks_kill_timeout() -> None:
    """Fixed: a stop waits min(kill_timeout, max_kill_timeout). With `no-max-kill-timeout`
    (nomad-10005) the task's own 10m is waited."""
    assert plan_kill_timeout(600.0, 30.0) == 30.0
    assert plan_kill_timeout(5.0, 30.0) == 5.0
    assert plan_kill_timeout(600.0, 30.0, Bugs(no_max_kill_timeout=True)) == 600.0


def test_nomad_27305_the_alloc_addr_port_is_to_or_else_the_host_port() -> None:
    """Fixed: NOMAD_ALLOC_ADDR_'s port is `to` when set, else the host port (a static port). With
    `alloc-addr-port-zero` (nomad-27305) a port with no `to` gives port 0."""
    assert plan_alloc_addr_port(8080, 25000) == 8080
    assert plan_alloc_addr_port(0, 8080) == 8080
    assert plan_alloc_addr_port(0, 8080, Bugs(alloc_addr_port_zero=True)) == 0
    assert plan_alloc_addr_port(8080, 25000, Bugs(alloc_addr_port_zero=True)) == 8080


def test_nomad_26699_a_restored_allocs_tasks_keep_their_alloc_address() -> None:
    """Fixed: the recorded address, restored or not. With `network-status-lost-on-restore`
    (nomad-26699) a network taken over at a restore gives its tasks no address."""
    assert plan_task_network_address("172.26.64.5", from_state=True) == "172.26.64.5"
    bug = Bugs(network_status_lost_on_restore=True)
    assert plan_task_network_address("172.26.64.5", from_state=True, bugs=bug) == ""
    assert plan_task_network_address("172.26.64.5", from_state=False, bugs=bug) == "172.26.64.5"


def test_nomad_28345_a_restore_mounts_the_secrets_tmpfs_again() -> None:
    assert plan_remount_secrets() is True
    assert plan_remount_secrets(Bugs(no_tmpfs_remount_on_restore=True)) is False


def test_nomad_9989_a_docker_task_without_kill_signal_stops_with_its_images_stopsignal() -> None:
    """Fixed: unset means the driver's default: the image's STOPSIGNAL for docker ("": docker stop),
    SIGINT for exec and raw_exec; a kill_signal set is used as it is. With
    `ignore-image-stopsignal` (nomad-9989) docker's default is SIGTERM."""
    assert plan_kill_signal("", "docker") == ""
    assert plan_kill_signal("", "exec") == plan_kill_signal("", "raw_exec") == "SIGINT"
    assert plan_kill_signal("SIGQUIT", "docker") == "SIGQUIT"
    bug = Bugs(ignore_image_stopsignal=True)
    assert plan_kill_signal("", "docker", bug) == "SIGTERM"
    assert plan_kill_signal("SIGQUIT", "docker", bug) == "SIGQUIT"


def test_nomad_18034_the_previous_alloc_dir_outlives_the_migration() -> None:
    assert plan_keep_previous_alloc_dir() is True
    assert plan_keep_previous_alloc_dir(Bugs(migrate_destroys_previous_alloc=True)) is False


def test_nomad_25157_no_group_shutdown_delay_when_no_task_is_alive() -> None:
    assert plan_group_shutdown_delay(10.0, tasks_alive=True) == 10.0
    assert plan_group_shutdown_delay(10.0, tasks_alive=False) == 0.0
    bug = Bugs(group_delay_for_dead_tasks=True)
    assert plan_group_shutdown_delay(10.0, tasks_alive=False, bugs=bug) == 10.0


def test_nomad_15215_a_restart_waits_its_delay() -> None:
    policy = RestartPolicy(attempts=2, interval=300.0, delay=10.0, mode="fail")
    assert plan_task_restart(policy, [], 100.0, exit_code=1).delay == 10.0
    bug = plan_task_restart(policy, [], 100.0, exit_code=1, bugs=Bugs(restart_without_delay=True))
    assert bug.restart and bug.delay == 0.0 and bug.counted


def test_nomad_13428_the_loopback_plugin_runs_unless_the_flag_is_on() -> None:
    types = ["loopback", "bridge", "firewall", "portmap"]
    assert plan_cni_chain(types) == (0, 1, 2, 3)
    assert plan_cni_chain(types, Bugs(no_loopback_in_netns=True)) == (1, 2, 3)


def test_nomad_11721_a_log_read_finishes_a_file_before_the_next() -> None:
    assert plan_next_log_file(100, 100, has_next=True) is True
    assert plan_next_log_file(40, 100, has_next=True) is False
    assert plan_next_log_file(100, 100, has_next=False) is False
    assert plan_next_log_file(40, 100, has_next=True, bugs=Bugs(log_skips_rotated_tail=True)) is True


def test_nomad_17104_a_failed_restore_cleans_up_unless_the_flag_is_on() -> None:
    assert plan_cleanup_failed_restore() is True
    assert plan_cleanup_failed_restore(Bugs(failed_restore_leaks_tasks=True)) is False


def test_nomad_5577_a_gone_logmon_is_started_again_at_restore() -> None:
    assert plan_restart_logmon() is True
    assert plan_restart_logmon(Bugs(no_logmon_recovery=True)) is False


def test_owed_replacements_are_owed_once() -> None:
    def rec(id_: str, **kw: object) -> AllocRecord:
        return AllocRecord(id=id_, job="web", group="g", **kw)  # type: ignore[arg-type]

    failed = {"status": AllocStatus.FAILED, "replace_pending": True}
    records = [
        rec("a", **failed),  # owed, nothing started yet
        rec("b", **failed),  # owed, and "b2" was started before the kill
        rec("b2", status=AllocStatus.RUNNING, replaces="b"),
        rec("c", **failed, replaced_by="c2"),  # done (the flag was not cleared yet)
        rec("d", **failed, desired=DesiredStatus.STOP),  # its job was stopped
        rec("e", status=AllocStatus.FAILED),  # a setup failure: never replaced
        rec("f", status=AllocStatus.RUNNING, replace_pending=True),  # not failed
    ]
    assert plan_owed_replacements(records) == [OwedReplacement("a", ""), OwedReplacement("b", "b2")]


# -- Vault under a storm: the 429 backoff, the agent's own cap, the restart window -----------------


def test_a_rate_limit_retry_is_full_jitter_over_a_doubling_window_after_retry_after() -> None:
    # Full jitter: the draw picks a point of the window, 0 to all of it (bounded below by the minimum).
    assert plan_rate_limit_retry(1, None, 0.0) == RATE_LIMIT_RETRY_MIN
    assert plan_rate_limit_retry(1, None, 0.5) == 0.5
    assert plan_rate_limit_retry(3, None, 0.5) == 2.0  # window 4 s at the third attempt
    assert [plan_rate_limit_retry(n, None, 0.999) for n in (1, 2, 3, 4)] == pytest.approx(
        [0.999, 1.998, 3.996, 7.992]
    )
    # Retry-After is a floor: never earlier than the server said; the jitter comes on top.
    assert plan_rate_limit_retry(1, 3.0, 0.0) == 3.0
    assert plan_rate_limit_retry(2, 3.0, 0.5) == 4.0
    assert plan_rate_limit_retry(1, 0.0, 0.25) == 0.25  # OpenBao says 0 within its 1 s window
    # Bounded, whatever the attempt, the draw or the server's word.
    assert plan_rate_limit_retry(60, None, 1.0) == RATE_LIMIT_RETRY_MAX
    assert plan_rate_limit_retry(1, 3600.0, 0.5) == RATE_LIMIT_RETRY_MAX
    assert plan_rate_limit_retry(0, -5.0, 2.0) == 1.0  # out-of-range inputs are clamped
    # The cap of a caller that may not wait long (a setup on the main loop).
    assert plan_rate_limit_retry(5, 10.0, 0.9, cap=2.0) == 2.0


def test_rate_limit_retries_of_many_clients_spread_over_the_window() -> None:
    import random

    rng = random.Random(15)
    draws = [plan_rate_limit_retry(4, 0.0, rng.random()) for _ in range(1000)]
    assert min(draws) < 0.5 and max(draws) > 7.5  # spread over all of the 8 s window
    buckets = [sum(1 for d in draws if i <= d < i + 1) for i in range(8)]
    assert min(buckets) > 80, buckets  # roughly uniform: no second gets them all back together


def test_the_rate_cap_spaces_requests_1_over_rate_apart_and_refuses_a_slot_too_far() -> None:
    bucket = RateBucket(tokens=1.0, at=0.0)
    waits = []
    for _ in range(5):  # five requests at once, at 2 per second
        plan = plan_rate_cap(bucket, 0.0, rate=2.0, max_wait=10.0)
        assert plan.granted
        bucket = plan.bucket
        waits.append(plan.wait)
    assert waits == [0.0, 0.5, 1.0, 1.5, 2.0]
    # A slot further than the caller may wait is refused, and books nothing.
    refused = plan_rate_cap(bucket, 0.0, rate=2.0, max_wait=1.0)
    assert not refused.granted and refused.wait == 2.5 and refused.bucket.tokens == bucket.tokens
    # Idle time refills the bucket, to one token (burst 1): an idle agent does not save up a burst.
    later = plan_rate_cap(bucket, 100.0, rate=2.0, max_wait=1.0)
    assert later.granted and later.wait == 0.0 and later.bucket.tokens == 0.0


def test_under_the_rate_cap_no_second_holds_more_than_rate_plus_one_requests() -> None:
    """Requests arriving in bursts at random times: the times they are sent, under a cap of 5/s,
    never put more than 6 in any window of one second (so a server quota of 6/s is never hit)."""
    import random

    rng = random.Random(3)
    bucket, sent = RateBucket(1.0, 0.0), []
    now = 0.0
    for _ in range(200):
        now += rng.choice([0.0, 0.0, 0.0, 0.01, 0.3, 2.0])
        plan = plan_rate_cap(bucket, now, rate=5.0, max_wait=1e9)
        bucket = plan.bucket
        sent.append(now + plan.wait)
    sent.sort()
    most = max(sum(1 for t in sent if start <= t < start + 1.0) for start in sent)
    assert most <= 6, most


def test_the_restore_render_is_spread_only_when_the_files_on_disk_are_still_good() -> None:
    def plan(bugs: Bugs = NO_BUGS, **changes: object) -> float | None:
        ok: dict[str, object] = {
            "task_running": True,
            "content_intact": True,
            "now": 1000.0,
            "renew_by": 2000.0,
            "spread": 3.0,
        }
        return plan_restore_render(**{**ok, **changes}, bugs=bugs)  # type: ignore[arg-type]

    assert plan() == 3.0
    assert plan(renew_by=0.0) == 3.0  # no dynamic secret: nothing is due
    assert plan(renew_by=1001.0) == 1.0  # never later than the re-issue the last pass scheduled
    for case in (
        {"spread": None},  # no restart window (vault.restart_jitter 0): at once, as before
        {"task_running": False},  # a task the restore starts again reads fresh content
        {"content_intact": False},  # secrets/ emptied by a reboot, or a file changed
        {"renew_by": None},  # a record of an agent that kept no re-issue time
        {"renew_by": 999.0},  # due already
    ):
        assert plan(**case) is None, case
    # The faults that reproduce nomad-9636 and nomad-15851 need the render inside the restore.
    assert plan(Bugs(no_change_on_restore=True)) is None
    assert plan(Bugs(script_change_before_handle=True)) is None
