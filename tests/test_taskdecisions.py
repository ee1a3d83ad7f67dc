"""The task-level decisions of agent.decide.taskdecisions that the later catalogue entries added: each
fixed answer, and what its fault flag changes (the field bug's mechanism, in one line each)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.decide.decisions import ObservedAlloc, RestoreAction, plan_restore, plan_task_restart
from agent.decide.lifecycle import Stage, plan_kill_order
from agent.decide.taskdecisions import (
    ValidationChecks,
    plan_env_templates,
    plan_host_namespaces,
    plan_logs_read_only,
    plan_mapped_ports,
    plan_remove_agent_netns,
    plan_task_dir_mounts,
    plan_teardown_restored_network,
    plan_templates_to_render,
    plan_user_restart,
    plan_validation,
    plan_vault_token_allowed,
    plan_watched_group,
)
from agent.fieldbugs.bugs import Bugs
from agent.jobspec import JobspecError, parse_jobspec
from agent.jobspec.limits import Limits
from agent.structs.model import RestartPolicy
from agent.structs.records import PortAlloc


def test_nomad_19268_a_stopping_alloc_still_gets_vault_tokens_for_its_poststop_tasks() -> None:
    assert plan_vault_token_allowed(alloc_stopping=False) is True
    assert plan_vault_token_allowed(alloc_stopping=True) is True
    bug = Bugs(no_vault_token_after_stop=True)
    assert plan_vault_token_allowed(alloc_stopping=False, bugs=bug) is True
    assert plan_vault_token_allowed(alloc_stopping=True, bugs=bug) is False


def test_nomad_26880_templates_with_the_same_text_are_each_rendered() -> None:
    same = [
        ("", "{{ key }}", "local/a.conf"),
        ("", "{{ key }}", "local/b.conf"),
        ("", "{{ key }}", "local/a.conf"),
    ]
    assert plan_templates_to_render(same) == [0, 1]  # only the exact repeat merges
    assert plan_templates_to_render(same, Bugs(templates_merged_by_content=True)) == [0]
    assert plan_templates_to_render(
        [("a.tpl", "", "x"), ("b.tpl", "", "y")], Bugs(templates_merged_by_content=True)
    ) == [0]


def test_nomad_17455_a_network_taken_over_at_a_restore_is_torn_down() -> None:
    assert plan_teardown_restored_network() is True
    assert plan_teardown_restored_network(Bugs(no_teardown_after_restore=True)) is False


def test_nomad_1830_a_container_gets_its_local_dir() -> None:
    assert plan_task_dir_mounts() == ("alloc", "local", "secrets")
    assert "local" not in plan_task_dir_mounts(Bugs(no_local_mount=True))


def test_nomad_9757_the_agents_own_netns_is_taken_over_at_a_restore() -> None:
    obs = ObservedAlloc(
        alloc_dir_exists=True, bridge=True, tasks_running=[True], tasks_share_pause_netns=[True]
    )
    exec_obs = replace(obs, netns_by_agent=True)
    assert plan_restore(exec_obs).action is RestoreAction.REATTACH
    bug = Bugs(recreate_netns_on_restore=True)
    assert plan_restore(exec_obs, bug).action is RestoreAction.RECREATE_NETWORK
    assert plan_restore(obs, bug).action is RestoreAction.REATTACH  # a pause container's: unchanged


def test_nomad_9951_two_host_ports_may_reach_one_container_port() -> None:
    ports = [
        PortAlloc("public", 21000, 8080),
        PortAlloc("internal", 21001, 8080),
        PortAlloc("db", 21002, 5432),
    ]
    assert plan_mapped_ports(ports) == ports
    keyed = plan_mapped_ports(ports, Bugs(ports_keyed_by_container_port=True))
    assert [p.label for p in keyed] == ["internal", "db"]


def test_nomad_25714_a_batch_allocs_own_netns_goes_at_its_teardown() -> None:
    assert plan_remove_agent_netns(batch=True) is True
    bug = Bugs(netns_left_after_batch=True)
    assert plan_remove_agent_netns(batch=True, bugs=bug) is False
    assert plan_remove_agent_netns(batch=False, bugs=bug) is True


ONLY_PRESTART = """
job "migrate" {
  group "db" {
    task "migrate" {
      lifecycle { hook = "prestart" }
      driver = "docker"
      config { image = "busybox" }
    }
  }
}
"""
NO_HOOK = ONLY_PRESTART.replace('hook = "prestart"', "sidecar = true")


def test_nomad_17570_and_26285_the_submission_checks_refuse_what_nomad_refuses() -> None:
    assert plan_validation() == ValidationChecks(main_task=True, lifecycle_hook=True, cores_not_negative=True)
    with pytest.raises(JobspecError, match="must have at least one main task"):
        parse_jobspec(ONLY_PRESTART, source="t.hcl")
    flagged = Limits(bugs=Bugs(group_without_main_task_accepted=True))
    assert parse_jobspec(ONLY_PRESTART, source="t.hcl", limits=flagged).job.groups[0].tasks[0].lifecycle
    with pytest.raises(JobspecError, match="hook"):
        parse_jobspec(NO_HOOK, source="t.hcl")
    no_hook = Limits(bugs=Bugs(lifecycle_without_hook_accepted=True))
    task = parse_jobspec(NO_HOOK, source="t.hcl", limits=no_hook).job.groups[0].tasks[0]
    assert task.lifecycle is None  # Nomad's IsMain: a lifecycle without a hook is a main task


def test_nomad_9841_an_alloc_restart_leaves_a_finished_prestart_task_alone() -> None:
    tasks = [("prepare", False), ("main", True)]
    assert plan_user_restart(tasks, "") == (["main"], "")
    assert plan_user_restart(tasks, "prepare") == ([], "no running task to restart")
    assert plan_user_restart(tasks, "main") == (["main"], "")
    assert plan_user_restart([("main", False)], "") == ([], "no running task to restart")
    bug = Bugs(restart_dead_prestart=True)
    assert plan_user_restart(tasks, "", bug) == ([], "Task not running: prepare")
    assert plan_user_restart(tasks, "main", bug) == (["main"], "")


def test_nomad_28190_host_namespaces_need_privileged_modes() -> None:
    assert plan_host_namespaces([]) == ((), "")
    granted, refused = plan_host_namespaces(["pid_mode"])
    assert granted == () and 'pid_mode = "host" is not allowed' in refused
    assert plan_host_namespaces(["pid_mode", "ipc_mode"], Bugs(host_namespaces_allowed=True)) == (
        ("pid_mode", "ipc_mode"),
        "",
    )


def test_nomad_27918_a_tasks_view_of_the_logs_dir_is_read_only() -> None:
    assert plan_logs_read_only() is True
    assert plan_logs_read_only(Bugs(logs_dir_writable=True)) is False


def test_nomad_491_a_batch_task_that_exits_0_is_done() -> None:
    policy = RestartPolicy(attempts=3, interval=60.0, delay=2.0, mode="fail")
    done = plan_task_restart(policy, [], 100.0, exit_code=0, job_type="batch")
    assert done.complete and not done.restart
    again = plan_task_restart(
        policy, [], 100.0, exit_code=0, job_type="batch", bugs=Bugs(restart_batch_on_success=True)
    )
    assert again.restart and again.counted and not again.complete
    prestart = plan_task_restart(
        policy,
        [],
        100.0,
        exit_code=0,
        job_type="batch",
        hook="prestart",
        bugs=Bugs(restart_batch_on_success=True),
    )
    assert prestart.complete  # a lifecycle task decides by its hook: not this bug


def test_nomad_3529_every_env_template_is_read_at_a_restart() -> None:
    assert plan_env_templates([False, True]) == [True, True]
    assert plan_env_templates([False, False], Bugs(env_from_changed_templates_only=True)) == [True, True]
    assert plan_env_templates([False, True], Bugs(env_from_changed_templates_only=True)) == [False, True]


NEGATIVE_CORES = ONLY_PRESTART.replace('lifecycle { hook = "prestart" }', "resources { cores = -1 }")


def test_nomad_10511_a_negative_cores_value_is_refused() -> None:
    assert plan_validation().cores_not_negative
    with pytest.raises(JobspecError, match="cores value \\(-1\\) cannot be negative"):
        parse_jobspec(NEGATIVE_CORES, source="t.hcl")
    flagged = Limits(bugs=Bugs(negative_cores_accepted=True))
    assert parse_jobspec(NEGATIVE_CORES, source="t.hcl", limits=flagged).job.id == "migrate"


def test_nomad_2753_the_leader_is_killed_first() -> None:
    tasks = [("shipper", Stage.MAIN), ("leader", Stage.MAIN), ("proxy", Stage.PRESTART_SIDECAR)]
    assert plan_kill_order(tasks, leaders=["leader"]) == (("leader",), ("shipper",), ("proxy",))
    assert plan_kill_order(tasks) == (("shipper", "leader"), ("proxy",))
    bug = Bugs(leader_killed_with_others=True)
    assert plan_kill_order(tasks, bug, ["leader"]) == (("shipper", "leader"), ("proxy",))


def test_nomad_16240_the_check_watcher_hashes_the_check_id_with_the_group() -> None:
    assert plan_watched_group("web") == "web"
    assert plan_watched_group("web", Bugs(check_id_without_group=True)) == ""
