"""The driver-option fault flags (agent.fieldbugs.faults, catalogue scenarios nomad-1977, 8153, 10572, 16642,
9911):
each one changes its option's mapping exactly where the field bug lived, and nothing while it is off.
Pure: dockeropts.plan / execopts.exec_plan over plain data, and the docker driver's own options()."""

from __future__ import annotations

from pathlib import Path

from agent.command.plugins import DockerPlugin, ExecPlugin, RawExecPlugin
from agent.drivers.base import TaskContext
from agent.drivers.docker import DockerDriver
from agent.drivers.dockeropts import plan
from agent.drivers.dockervalues import TaskFacts
from agent.drivers.exec import ExecDriver
from agent.drivers.execopts import caps_in_mask, exec_plan, raw_exec_plan
from agent.fieldbugs.bugs import Bugs
from agent.structs.model import Resources, Task

FACTS = TaskFacts(network_mode="host", memory_mb=64, task_dir="/allocs/a1/app", alloc_dir="/allocs/a1")


def _facts(**bugs: bool) -> TaskFacts:
    return TaskFacts(
        network_mode=FACTS.network_mode,
        memory_mb=FACTS.memory_mb,
        task_dir=FACTS.task_dir,
        alloc_dir=FACTS.alloc_dir,
        bugs=Bugs(**bugs),
    )


def test_relative_volumes_are_in_the_task_dir_and_the_flag_joins_them_to_the_alloc_dir() -> None:
    """nomad-1977: `local/conf` is the task's local/conf (where its template rendered), not the
    alloc dir's (an empty dir the engine would create)."""
    config = {"image": "busybox:1", "volumes": ["local/conf:/etc/app:ro"]}
    fixed = plan(config, DockerPlugin(), _facts())
    assert fixed.refused == []
    assert fixed.kwargs["volumes"] == ["/allocs/a1/app/local/conf:/etc/app:ro"]
    bug = plan(config, DockerPlugin(), _facts(volumes_relative_to_alloc_dir=True))
    assert bug.refused == []  # still inside the alloc dir: the sandbox lets it through
    assert bug.kwargs["volumes"] == ["/allocs/a1/local/conf:/etc/app:ro"]


def test_swap_is_the_hard_limit_and_the_flag_sets_it_to_the_soft_memory() -> None:
    """nomad-8153: memory+swap below memory is what the engine refuses ('Minimum memoryswap limit
    should be larger than memory limit')."""
    config = {"image": "busybox:1", "memory_hard_limit": 128}
    fixed = plan(config, DockerPlugin(), _facts()).kwargs
    assert (fixed["mem_limit"], fixed["mem_reservation"], fixed["memswap_limit"]) == ("128m", "64m", "128m")
    bug = plan(config, DockerPlugin(), _facts(swap_below_hard_limit=True)).kwargs
    assert (bug["mem_limit"], bug["memswap_limit"]) == ("128m", "64m")


def test_net_raw_is_dropped_by_default_and_the_flag_keeps_it() -> None:
    """nomad-10572: Docker's default NET_RAW goes unless the plugin's allow_caps has it."""
    config = {"image": "busybox:1"}
    assert "net_raw" in plan(config, DockerPlugin(), _facts()).kwargs["cap_drop"]
    bug = plan(config, DockerPlugin(), _facts(net_raw_by_default=True)).kwargs
    assert "net_raw" not in bug.get("cap_drop", [])
    # a task's own cap_drop is still honoured with the flag on
    own = plan({**config, "cap_drop": ["MKNOD"]}, DockerPlugin(), _facts(net_raw_by_default=True))
    assert own.kwargs["cap_drop"] == ["mknod"]


def test_the_docker_driver_hands_its_flags_to_the_option_mapping(tmp_path: Path) -> None:
    """The flags reach dockeropts through the driver (wiring gives it faults.bugs()): no engine call."""
    task = Task(
        "app",
        "docker",
        config={"image": "busybox:1", "memory_hard_limit": 128, "volumes": ["local:/etc/app"]},
        resources=Resources(cpu=100, memory=64),
    )
    task_dir = tmp_path / "a1" / "app"
    ctx = TaskContext(
        job="j", group="g", alloc_id="a1", task=task, task_dir=task_dir, env={}, network_mode="host"
    )
    fixed = DockerDriver(client=object()).options(ctx).kwargs
    assert fixed["memswap_limit"] == "128m" and fixed["volumes"] == [f"{task_dir}/local:/etc/app"]
    bugs = Bugs(swap_below_hard_limit=True, volumes_relative_to_alloc_dir=True, net_raw_by_default=True)
    bug = DockerDriver(client=object(), bugs=bugs).options(ctx).kwargs
    assert bug["memswap_limit"] == "64m" and bug["volumes"] == [f"{tmp_path / 'a1'}/local:/etc/app"]
    assert "net_raw" not in bug.get("cap_drop", [])


def test_a_users_cap_add_is_ambient_and_the_flag_leaves_it_in_the_bounding_set_only() -> None:
    """nomad-16642: a task of another user than root needs its caps inheritable and ambient to keep
    them across exec; in the bounding set only its process has none."""
    config = {"command": "/bin/sh", "cap_drop": ["all"], "cap_add": ["net_bind_service"]}
    fixed = exec_plan(config, ExecPlugin(), basis=(), root=False)
    assert fixed.refused == [] and fixed.caps == ("net_bind_service",)
    assert fixed.ambient == ("net_bind_service",)
    bug = exec_plan(config, ExecPlugin(), basis=(), root=False, bugs=Bugs(exec_caps_bounding_only=True))
    assert bug.caps == ("net_bind_service",) and bug.ambient == ()


def test_an_exec_task_gets_its_own_pid_and_ipc_namespaces_and_the_flag_shares_the_nodes() -> None:
    """nomad-9911 (CVE-2021-3283): private by default (Nomad's default_pid_mode / default_ipc_mode);
    with the flag the task runs in the node's, whatever its config asks."""
    config = {"command": "/bin/sh"}
    fixed = exec_plan(config, ExecPlugin(), basis=())
    assert (fixed.pid_host, fixed.ipc_host) == (False, False)
    bug = exec_plan(config, ExecPlugin(), basis=(), bugs=Bugs(exec_shared_pid_namespace=True))
    assert (bug.pid_host, bug.ipc_host) == (True, True)
    asked = exec_plan(
        {**config, "pid_mode": "private"}, ExecPlugin(), basis=(), bugs=Bugs(exec_shared_pid_namespace=True)
    )
    assert asked.pid_host is True


def test_a_user_without_cap_add_has_no_capability_and_the_flag_gives_it_every_one() -> None:
    """nomad-5783 (CVE-2019-12618): nobody with every capability (setuid, sys_admin, kill, ...)."""
    fixed = exec_plan({"command": "/bin/sh"}, ExecPlugin(), basis=(), root=False)
    assert (fixed.caps, fixed.ambient) == ((), ())
    bug_on = Bugs(exec_user_full_caps=True)
    bug = exec_plan({"command": "/bin/sh"}, ExecPlugin(), basis=(), bugs=bug_on)
    assert {"setuid", "sys_admin", "kill"} <= set(bug.ambient) and bug.ambient == bug.caps
    held = exec_plan({"command": "/bin/sh"}, ExecPlugin(), basis=(), bugs=bug_on, held=("kill", "setuid"))
    assert held.caps == held.ambient == ("kill", "setuid")  # what the agent itself holds, no more
    assert caps_in_mask(0x2000 | 1 << 7) == ("net_raw", "setuid")
    root = exec_plan({"command": "/bin/sh"}, ExecPlugin(), basis=("chown",), root=True)
    assert (
        exec_plan(
            {"command": "/bin/sh"},
            ExecPlugin(),
            basis=("chown",),
            root=True,
            bugs=Bugs(exec_user_full_caps=True),
        )
        == root
    )  # root's own set is not what the bug changed


def test_an_exec_task_gets_oom_score_adj_0_and_the_flag_leaves_it_the_agents() -> None:
    """nomad-10663 (fixed by PR 10698): the task's own 0 written before its init runs, never the
    agent's (-1000 under Nomad's packaged unit); raw_exec writes it too (PR 19515)."""
    fixed = exec_plan({"command": "/bin/sh"}, ExecPlugin(), basis=())
    assert fixed.oom_score_adj == 0
    script = ExecDriver(exits_dir=None).setup_script(Path("/d/a/t"), (), "", fixed.oom_score_adj)
    assert "echo 0 > /proc/self/oom_score_adj\n" in script
    assert script.index("oom_score_adj") < script.index('exec "$@"')
    bug = exec_plan(
        {"command": "/bin/sh"}, ExecPlugin(), basis=(), bugs=Bugs(exec_inherits_oom_score_adj=True)
    )
    assert bug.oom_score_adj is None
    assert "oom_score_adj" not in ExecDriver(exits_dir=None).setup_script(Path("/d/a/t"), (), "", None)
    assert raw_exec_plan({"command": "x"}, RawExecPlugin()).oom_score_adj == 0
