"""The alloc runner against fake drivers, netns owners and network (tests/fakes.py): every outcome
of start, restart policy, pause death, network recovery, restore and stop, and what each fault flag
changes there. No root, no docker: these run in `make unit` in well under a second each."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from agent.decide.decisions import Bugs, RestoreAction
from agent.drivers.base import DriverError
from agent.drivers.registry import DriverRegistry
from agent.runner.alloc import AllocRunner
from agent.runner.state import NETNS_OWNER
from agent.structs.model import Group, Job, Network, Port, RestartPolicy, Service, Task, Template
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, NetworkState, PortAlloc, TaskState
from tests.fakes import FakeNode

POLICY = RestartPolicy(attempts=2, interval=600, delay=3, mode="fail")


def _job(
    driver: str = "docker",
    *,
    mode: str = "bridge",
    tasks: int = 2,
    policy: RestartPolicy = POLICY,
    job_type: str = "service",
) -> tuple[Job, Group]:
    group = Group(
        name="g",
        tasks=tuple(Task(name=f"t{i}", driver=driver, config={"image": "x"}) for i in range(tasks)),
        network=Network(mode=mode, ports=(Port("http", to=8080),)) if mode != "none" else None,
        restart=policy,
    )
    return Job(id="web", groups=(group,), type=job_type), group


def _record(alloc_id: str = "a1b2c3d4-0000-4000-8000-000000000001") -> AllocRecord:
    return AllocRecord(id=alloc_id, job="web", group="g", ports=(PortAlloc("http", 20001, 8080),))


def _started(node: FakeNode, driver: str = "docker", **kw: object) -> AllocRunner:
    job, group = _job(driver, **kw)  # type: ignore[arg-type]
    runner = AllocRunner(node.deps(), _record(), job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


def _events(node: FakeNode, runner: AllocRunner) -> list[str]:
    return [e.type for e in node.store.events(runner.id)]


def _causes(node: FakeNode, runner: AllocRunner, task: str = "t0") -> list[str]:
    """The cause of each start of `task`, in order (the "Started" events' details)."""
    return [e.details["cause"] for e in node.store.events(runner.id, task) if e.type == "Started"]


def _crash(node: FakeNode, r: AllocRunner, task: str = "t0", code: int = 3) -> None:
    (hid,) = [h for h in node.docker.running() if h.startswith(f"docker-{task}")]
    node.docker.exit(hid, code)
    r.on_task_exit(hid)


def _again(node: FakeNode, runner: AllocRunner, bugs: Bugs | None = None) -> AllocRunner:
    """The agent restarted: a new runner on the same state and node (what Core.restore builds)."""
    if bugs is not None:
        node.bugs = bugs
    rec = AllocRecord.from_record(node.store.get("alloc", runner.id) or {})
    return AllocRunner(node.deps(), rec, runner.job, runner.group)


# -- start -------------------------------------------------------------------------------------------
def test_bridge_docker_group_gets_a_pause_owner_an_address_and_running_tasks(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    assert r.rec.status is AllocStatus.RUNNING and r.rec.network_state is NetworkState.READY
    assert r.rec.address == "10.9.0.1" and node.pause.created == ["pause-1"] and node.named.created == []
    assert [c.netns_owner.id if c.netns_owner else None for c in node.docker.starts] == ["pause-1"] * 2
    assert r.tasks[r.group.tasks[0].name].env()["NOMAD_ALLOC_IP"] == "10.9.0.1"
    assert r.tasks[r.group.tasks[0].name].env()["NOMAD_HOST_PORT_http"] == "20001"
    view = r.view()
    assert view["network"]["pause_container"] == "pause-1" and view["status"] == "running"
    assert {t["state"] for t in view["tasks"].values()} == {"running"}
    stored = AllocRecord.from_record(node.store.get("alloc", r.id) or {})
    assert stored == r.rec, "every transition is persisted"


def test_bridge_exec_group_joins_a_named_netns_by_path(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "exec")
    assert node.named.created == [f"ns-{r.id}"] and node.pause.created == []
    assert {str(c.netns) for c in node.exec.starts} == {f"/fake/netns/ns-{r.id}"}
    assert all(c.netns_owner is None for c in node.exec.starts)
    assert r.view()["network"]["pause_container"] is None


def test_host_mode_has_no_owner_and_no_network(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, mode="host")
    assert node.pause.created == [] and node.network.adds == []
    assert {c.network_mode for c in node.docker.starts} == {"host"} and r.alloc_running()


def test_setup_failure_tears_down_and_fails_without_replacement(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    node.network.fail_adds = 1
    r = _started(node)
    assert r.rec.status is AllocStatus.FAILED and "duplicate allocation" in r.rec.reason
    assert _events(node, r).count("Setup Failure") == 2
    states = r.view()["tasks"]
    assert all(states[t.name]["state"] == "dead" and states[t.name]["failed"] for t in r.group.tasks), states
    assert node.pause.removed == ["pause-1"] and node.docker.starts == []
    assert node.dirs.cleaned == [r.alloc_dir] and node.replaced == []


def test_unknown_driver_is_a_setup_failure_naming_the_drivers(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "qemu", mode="none")
    assert r.rec.status is AllocStatus.FAILED
    assert "not run by this agent (it runs docker, exec)" in r.rec.reason


def test_registry_refuses_a_driver_twice() -> None:
    node = FakeNode.__new__(FakeNode)
    from tests.fakes import FakeDriver

    with pytest.raises(ValueError, match="registered twice"):
        DriverRegistry([FakeDriver("docker", joins_container_netns=True)] * 2)
    del node


# -- restart policy ------------------------------------------------------------------------------
def test_a_crashed_task_restarts_after_the_delay_until_attempts_run_out(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    for attempt in (1, 2):
        (hid,) = [h for h in node.docker.running() if h.startswith("docker-t0")]
        node.docker.exit(hid, 3)
        r.on_task_exit(hid)
        assert r.state.task("t0").state is TaskState.DEAD
        assert [d for d, _ in node.timers] == [POLICY.delay], "restart waits for the policy's delay"
        node.run_timers()
        assert r.state.task("t0").state is TaskState.RUNNING and r.state.task("t0").restarts == attempt
    (hid,) = [h for h in node.docker.running() if h.startswith("docker-t0")]
    node.docker.exit(hid, 3)
    r.on_task_exit(hid)
    assert r.rec.status is AllocStatus.FAILED and "exceeded 2 restart(s)" in r.rec.reason
    assert r.state.task("t0").failed and node.replaced == [(r.id, r.rec.reason)]
    assert "Exit Code: 3" in [e.message for e in node.store.events(r.id, "t0")]


def test_an_exit_the_engine_cannot_answer_for_is_looked_at_again_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task died as dockerd stopped (e2e test_outages): the inspect of its exit found no engine. The
    exit was dropped and the task stayed "running" with no container; now it waits for the engine."""
    node = FakeNode(tmp_path)
    r = _started(node)
    (hid,) = [h for h in node.docker.running() if h.startswith("docker-t0")]
    node.docker.exit(hid, 3)
    answers = node.docker.status

    def engine_down(handle: object) -> object:
        raise DriverError("docker", "inspect", "engine unavailable", unavailable=True)

    monkeypatch.setattr(node.docker, "status", engine_down)
    r.on_task_exit(hid)
    assert r.state.task("t0").state is TaskState.RUNNING  # not decided without the exit code
    assert len(node.timers) == 1, "the exit is to be looked at again"
    monkeypatch.setattr(node.docker, "status", answers)  # the engine is back
    node.run_timers()  # the exit decided by the restart policy, then its restart
    assert "Exit Code: 3" in [e.message for e in node.store.events(r.id, "t0")]
    assert r.state.task("t0").restarts == 1


def test_restart_attempts_are_counted_in_tumbling_intervals_from_the_tasks_start(tmp_path: Path) -> None:
    """Nomad's restart tracker: the interval starts with the task runner and a new one (count 0)
    starts at the first exit after it ended, kept in the task record. Two restarts at +10 s and
    +20 s and an exit at +61 s: restarted (a sliding window would have failed the alloc)."""
    node = FakeNode(tmp_path)
    now = [1000.0]
    job, group = _job(policy=RestartPolicy(attempts=2, interval=60, delay=1, mode="fail"))
    rec = dataclasses.replace(_record(), created=1000.0)
    r = AllocRunner(dataclasses.replace(node.deps(), clock=lambda: now[0]), rec, job, group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    for at in (1010.0, 1020.0, 1061.0):
        now[0] = at
        _crash(node, r)
        node.run_timers()
        assert r.alloc_running() and r.state.task("t0").state is TaskState.RUNNING, at
    assert r.state.task("t0").interval_start == 1061.0
    now[0] = 1062.0
    _crash(node, r)
    node.run_timers()
    now[0] = 1063.0
    _crash(node, r)
    assert r.rec.status is AllocStatus.FAILED and "exceeded 2 restart(s)" in r.rec.reason


def test_exit_of_a_container_the_alloc_no_longer_owns_is_ignored(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    r.on_task_exit("some-old-container")
    assert node.timers == [] and r.alloc_running()


def test_a_task_that_cannot_start_in_a_bridge_group_gets_its_network_rebuilt(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    node.docker.fail_starts = 1
    (hid,) = [h for h in node.docker.running() if h.startswith("docker-t0")]
    node.docker.exit(hid)
    r.on_task_exit(hid)
    node.run_timers()
    assert "Network Recovered" in _events(node, r) and r.alloc_running()
    assert node.network.deletes == [r.id] and len(node.network.adds) == 2


def test_a_task_that_cannot_start_outside_bridge_fails_the_alloc(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, mode="host")
    node.docker.fail_starts = 1
    (hid,) = [h for h in node.docker.running() if h.startswith("docker-t0")]
    node.docker.exit(hid)
    r.on_task_exit(hid)
    node.run_timers()
    assert r.rec.status is AllocStatus.FAILED and node.replaced and "could not start" in r.rec.reason


def test_a_recoverable_start_error_goes_through_the_restart_policy(tmp_path: Path) -> None:
    """Nomad's task runner: a start error the driver calls recoverable is counted as a failure and
    the start tried again after the policy's delay; the task then runs."""
    node = FakeNode(tmp_path)
    r = _started(node, mode="host")
    node.docker.fail_starts, node.docker.fail_recoverable = 1, True
    _crash(node, r)
    node.run_timers()  # the restart after the exit: its start fails, and is tried again on a timer
    t0 = r.state.task("t0")
    assert r.alloc_running() and t0.state is TaskState.RUNNING
    assert len(t0.restart_times) == 2, "the exit and the failed start both count"
    kinds = [e.type for e in node.store.events(r.id, "t0")]
    assert kinds[-4:] == ["Restarting", "Driver Failure", "Restarting", "Started"], kinds


def test_recoverable_start_errors_fail_the_alloc_once_attempts_run_out(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, mode="host")
    node.docker.fail_starts, node.docker.fail_recoverable = 5, True
    _crash(node, r)
    node.run_timers()
    assert r.rec.status is AllocStatus.FAILED and "exceeded 2 restart(s)" in r.rec.reason
    assert "start error" in [e.message for e in node.store.events(r.id, "t0")][-1]
    assert node.docker.fail_starts == 3, "two restarts were tried, no more"


def test_a_recoverable_error_at_the_first_start_is_retried_not_a_setup_failure(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    node.docker.fail_starts, node.docker.fail_recoverable = 1, True
    r = _started(node, mode="host", tasks=1)
    assert r.alloc_running() and r.state.task("t0").state is TaskState.DEAD
    assert [d for d, _ in node.timers] == [POLICY.delay], "tried again after the policy's delay"
    node.run_timers()
    assert r.state.task("t0").state is TaskState.RUNNING and r.state.task("t0").restarts == 1


def test_an_unrecoverable_start_error_is_not_restarted(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, mode="host")
    node.docker.fail_starts = 1
    _crash(node, r)
    node.run_timers()
    assert r.rec.status is AllocStatus.FAILED
    events = [(e.type, e.message) for e in node.store.events(r.id, "t0")]
    assert events[-1] == ("Not Restarting", "Error was unrecoverable"), events
    t0 = r.state.task("t0")
    assert (t0.state, t0.failed) == (TaskState.DEAD, True), "the task is dead and failed, as Nomad shows it"


def test_the_1858_flag_makes_a_recoverable_start_error_fail_the_task(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, Bugs(start_errors_unrecoverable=True))
    r = _started(node, mode="host")
    node.docker.fail_starts, node.docker.fail_recoverable = 1, True
    _crash(node, r)
    node.run_timers()
    assert r.rec.status is AllocStatus.FAILED and r.state.task("t0").state is TaskState.DEAD
    assert [e.message for e in node.store.events(r.id, "t0")][-1] == "Error was unrecoverable"


# -- pause death and network recovery --------------------------------------------------------------
def test_pause_death_recreates_the_whole_network_once(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    old_tasks = set(node.docker.running())
    node.pause.alive["pause-1"] = False
    r.on_task_exit("pause-1")
    assert node.network.deletes == [r.id] and node.pause.removed == ["pause-1"]
    assert node.pause.created == ["pause-1", "pause-2"] and r.rec.address == "10.9.0.2"
    running = set(node.docker.running())
    assert len(running) == 2 and not running & old_tasks, "one fresh set of task containers"
    assert {c.netns_owner.id for c in node.docker.starts[-2:] if c.netns_owner} == {"pause-2"}
    assert r.state.handle(NETNS_OWNER).id == "pause-2"  # type: ignore[union-attr]
    assert "Network Recovered" in _events(node, r) and r.alloc_running()


def test_reuse_dead_pause_bug_restarts_tasks_into_the_dead_network(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, Bugs(reuse_dead_pause=True))
    r = _started(node)
    node.docker.fail_starts = 2  # "cannot join network of a non running container"
    node.pause.alive["pause-1"] = False
    r.on_task_exit("pause-1")
    assert len(node.network.adds) == 1 and node.pause.created == ["pause-1"], "no network was rebuilt"
    assert r.rec.status is AllocStatus.FAILED and "could not start" in r.rec.reason
    assert "Network Recovered" not in _events(node, r)


def test_recovery_that_fails_replaces_the_alloc(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    node.network.fail_adds = 1
    r.recover_network("test")
    assert r.rec.status is AllocStatus.FAILED and "network recovery failed" in r.rec.reason
    assert node.replaced == [(r.id, r.rec.reason)]
    assert node.docker.running() == [] and node.pause.alive == {}, "nothing left running"


def test_ipam_stale_bug_forgets_the_result_without_del(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, Bugs(ipam_stale_after_reboot=True))
    r = _started(node)
    r.recover_network("test")
    assert node.network.forgotten == [r.id] and node.network.deletes == []


def test_stale_network_status_bug_keeps_the_old_address(tmp_path: Path) -> None:
    fixed, buggy = (
        FakeNode(tmp_path / "fixed"),
        FakeNode(tmp_path / "buggy", Bugs(stale_network_status_on_restore=True)),
    )
    for node, want in ((fixed, "10.9.0.2"), (buggy, "10.9.0.1")):
        r = _started(node)
        r.recover_network("test")
        assert r.rec.address == want and node.network.results[r.id] == "10.9.0.2"


def test_leak_portmap_bug_releases_addresses_instead_of_del(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, Bugs(leak_portmap_chains=True))
    r = _started(node)
    r.stop()
    assert node.network.released == [r.id] and node.network.deletes == []


# -- restore -----------------------------------------------------------------------------------------
def test_restore_reattaches_a_healthy_alloc_without_touching_it(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    starts = len(node.docker.starts)
    again = _again(node, r)
    assert again.restore() is RestoreAction.REATTACH
    assert len(node.docker.starts) == starts and node.network.deletes == []
    assert sorted(node.docker.reattached) == sorted(node.docker.running())
    assert "Restored" in _events(node, r)


def test_restore_restarts_only_the_task_that_died_while_down(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    (t1,) = [h for h in node.docker.running() if h.startswith("docker-t1")]
    node.docker.exit(t1)
    again = _again(node, r)
    assert again.restore() is RestoreAction.RESTART_TASKS
    assert node.docker.starts[2:] == [] and [d for d, _ in node.timers] == [POLICY.delay], "per the policy"
    node.run_timers()
    assert [c.task.name for c in node.docker.starts[2:]] == ["t1"] and node.network.deletes == []
    assert again.state.task("t1").restarts == 1 and again.state.task("t1").restart_times


@pytest.mark.parametrize(
    ("break_it", "reason"),
    [
        (lambda n, r: n.pause.restarted.add("pause-1"), "restarted by docker"),
        (lambda n, r: n.pause.alive.update({"pause-1": False}), "pause container is not running"),
        (lambda n, r: n.network.diffs.append("no IPv4 default route"), "no IPv4 default route"),
        (lambda n, r: n.network.results.pop(r.id), "no CNI result"),
        (
            lambda n, r: n.pause.foreign_pids.add(n.docker.pid(r.state.handle("t0"))),
            "another network namespace",
        ),
    ],
)
def test_restore_recreates_a_network_it_cannot_trust(tmp_path: Path, break_it: object, reason: str) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    break_it(node, r)  # type: ignore[operator]
    again = _again(node, r)
    assert again.restore() is RestoreAction.RECREATE_NETWORK
    restore_events = [e.message for e in node.store.events(r.id) if e.type == "Restore Network"]
    assert restore_events and reason in restore_events[0]
    assert len(node.docker.running()) == 2 and again.alloc_running()
    assert node.pause.created[-1] == "pause-2"


def test_restore_replaces_an_alloc_whose_dir_is_gone(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    r.alloc_dir.rename(tmp_path / "moved")
    again = _again(node, r)
    assert again.restore() is RestoreAction.REPLACE
    assert again.rec.status is AllocStatus.FAILED and node.replaced == [(r.id, again.rec.reason)]
    assert node.docker.running() == []


def test_restore_bugs_change_only_what_their_flag_names(tmp_path: Path) -> None:
    # nomad-27933: a missing alloc dir is restored as if there.
    node = FakeNode(tmp_path / "a")
    r = _started(node)
    r.alloc_dir.rename(tmp_path / "moved")
    assert _again(node, r, Bugs(restore_missing_alloc_dir=True)).restore() is RestoreAction.REATTACH
    # nomad-24292: a pause restarted by docker is trusted.
    node = FakeNode(tmp_path / "b")
    r = _started(node)
    node.pause.restarted.add("pause-1")
    assert _again(node, r, Bugs(no_network_check_on_restore=True)).restore() is RestoreAction.REATTACH
    # nomad-23684: a task that vanished is believed running.
    node = FakeNode(tmp_path / "c")
    r = _started(node)
    node.docker.exit(node.docker.running()[0])
    assert _again(node, r, Bugs(half_alive_restore=True)).restore() is RestoreAction.REATTACH
    assert len(node.docker.running()) == 1


def test_stopped_alloc_is_torn_down_completely(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    r.stop()
    assert r.rec.status is AllocStatus.COMPLETE and r.rec.desired is DesiredStatus.STOP
    assert node.docker.running() == [] and len(node.docker.removed) == 2
    assert node.network.deletes == [r.id] and node.pause.removed == ["pause-1"]
    assert {r.state.task(t.name).state for t in r.group.tasks} == {TaskState.DEAD}
    r.on_task_exit(node.docker.removed[0])
    assert node.timers == [], "a stopped alloc never restarts"


def test_driver_error_names_driver_and_reason() -> None:
    err = DriverError("docker", "task web", "image 'x' not found on this node")
    assert str(err) == "docker: task web: image 'x' not found on this node"


def test_stopping_a_job_marks_its_failed_alloc_stopped_too(tmp_path: Path) -> None:
    """As Nomad's `job stop`: a failed (terminal) alloc of the job gets desired "stop" as well, so no
    replacement starts and nothing reports it as "failed and not replaced"."""
    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults

    node = FakeNode(tmp_path)
    node.network.fail_adds = 1
    core = Core(
        node.store,
        node.registry,
        node.network,
        data_dir=tmp_path / "data",
        faults=Faults(),
        task_dirs=node.dirs,
    )
    spec = """
job "web" {
  group "g" {
    network {
      mode = "bridge"
    }
    task "t" {
      driver = "docker"
      config {
        image = "x"
      }
    }
  }
}
"""
    (alloc,) = core.job_registry.submit(spec, "hcl")["allocs"]
    failed = core.allocs.runner(alloc)
    assert failed.rec.status is AllocStatus.FAILED and failed.rec.desired is DesiredStatus.RUN
    assert core.job_registry.stop_job("web") == []
    assert failed.rec.desired is DesiredStatus.STOP
    stored = AllocRecord.from_record(node.store.get("alloc", alloc) or {})
    assert stored.desired is DesiredStatus.STOP and stored.status is AllocStatus.FAILED


def test_a_job_for_other_datacenters_is_refused_and_meta_reaches_the_task_env(tmp_path: Path) -> None:
    """Nomad places a job only in its datacenters (globs); meta of job, group and task becomes
    NOMAD_META_<key> (as written and upper-cased, the task's winning), as Nomad's task env."""
    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults
    from agent.jobspec import JobspecError

    node = FakeNode(tmp_path)
    core = Core(
        node.store,
        node.registry,
        node.network,
        data_dir=tmp_path / "data",
        faults=Faults(),
        task_dirs=node.dirs,
        datacenter="eu-west-1a",
    )
    spec = """
job "web" {
  name        = "the web"
  datacenters = ["us-*"]
  meta {
    owner = "job"
    tier  = "gold"
  }
  group "g" {
    meta { owner = "group" }
    task "t" {
      driver = "docker"
      config { image = "x" }
      meta {
        owner      = "task"
        build-id   = "42"
      }
    }
  }
}
"""
    with pytest.raises(JobspecError) as info:
        core.job_registry.submit(spec, "hcl")
    assert info.value.problems == [
        (
            "job.web.datacenters",
            "['us-*'] does not include this client's datacenter \"eu-west-1a\" (config datacenter): "
            "Nomad would not place it here",
        )
    ]
    assert node.store.get("job", "web") is None, "nothing stored"
    (alloc,) = core.job_registry.submit(spec.replace('["us-*"]', '["us-*", "eu-*"]'), "hcl")["allocs"]
    r = core.allocs.runner(alloc)
    env = r.tasks[r.group.tasks[0].name].env()
    assert (env["NOMAD_META_owner"], env["NOMAD_META_OWNER"]) == ("task", "task")
    assert (env["NOMAD_META_tier"], env["NOMAD_META_build_id"], env["NOMAD_META_BUILD_ID"]) == (
        "gold",
        "42",
        "42",
    )
    assert (env["NOMAD_JOB_ID"], env["NOMAD_JOB_NAME"]) == ("web", "the web")


# -- restart accounting (Nomad's restart tracker) --------------------------------------------------
def test_fault_stale_restart_timer_starts_the_task_a_second_time(tmp_path: Path) -> None:
    """The bug the fault puts back: the pending timer fires after the recovery's start."""
    node = FakeNode(tmp_path, Bugs(stale_restart_timer=True))
    r = _started(node)
    _crash(node, r)
    node.pause.alive["pause-1"] = False
    r.on_task_exit("pause-1")
    node.run_timers()
    assert _causes(node, r) == ["first start", "network recovery", "restart policy"]
    assert [c.task.name for c in node.docker.starts[2:]] == ["t0", "t1", "t0"]


def test_a_recovery_during_a_pending_restart_timer_starts_the_task_once(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    _crash(node, r)
    assert len(node.timers) == 1, "the policy's restart waits for its delay"
    node.pause.alive["pause-1"] = False
    r.on_task_exit("pause-1")  # the recovery restarts every task, t0 included
    assert [c.task.name for c in node.docker.starts[2:]] == ["t0", "t1"]
    running = sorted(node.docker.running())
    assert node.run_timers() == 1
    assert [c.task.name for c in node.docker.starts[2:]] == ["t0", "t1"], "the timer was cancelled"
    assert sorted(node.docker.running()) == running and node.docker.removed == []
    assert _causes(node, r) == ["first start", "network recovery"]
    assert r.state.task("t0").restarts == 1 and r.state.task("t0").restart_due == 0.0


def test_an_operator_restart_during_a_pending_restart_timer_starts_the_task_once(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    _crash(node, r)
    r.user_restart(r.group.tasks[0])
    node.run_timers()
    assert [c.task.name for c in node.docker.starts[2:]] == ["t0"]
    assert _causes(node, r) == ["first start", "operator restart"]


def test_network_recoveries_do_not_use_up_restart_attempts(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)  # attempts = 2
    r.recover_network("test")
    r.recover_network("test again")
    _crash(node, r)
    assert r.alloc_running() and "Restarting" in _events(node, r) and "Not Restarting" not in _events(node, r)
    node.run_timers()
    t0 = r.state.task("t0")
    assert t0.state is TaskState.RUNNING and t0.restarts == 3 and len(t0.restart_times) == 1
    assert _causes(node, r) == ["first start", "network recovery", "network recovery", "restart policy"]
    _crash(node, r)
    node.run_timers()
    assert r.alloc_running(), "the second crash is the second counted restart"
    _crash(node, r)
    assert r.rec.status is AllocStatus.FAILED and "exceeded 2 restart(s)" in r.rec.reason


def test_operator_and_change_mode_restarts_are_not_counted(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, policy=RestartPolicy(attempts=0, interval=600, delay=3, mode="fail"))
    for _ in range(3):
        r.user_restart(r.group.tasks[0])
    r.tasks[r.group.tasks[0].name].restart_for_template()
    assert r.alloc_running() and r.state.task("t0").restarts == 4 and r.state.task("t0").restart_times == ()
    assert _causes(node, r) == ["first start", *["operator restart"] * 3, "change_mode restart"]
    _crash(node, r)  # the task's own exit is the only thing attempts = 0 refuses
    assert r.rec.status is AllocStatus.FAILED


def test_a_task_dead_at_restore_fails_the_alloc_as_it_would_while_the_agent_runs(tmp_path: Path) -> None:
    no_restarts = RestartPolicy(attempts=0, interval=600, delay=3, mode="fail")
    up = FakeNode(tmp_path / "up")
    r = _started(up, policy=no_restarts)
    _crash(up, r, "t1", 7)
    assert r.rec.status is AllocStatus.FAILED
    node = FakeNode(tmp_path / "down")
    r = _started(node, policy=no_restarts)
    (t1,) = [h for h in node.docker.running() if h.startswith("docker-t1")]
    node.docker.exit(t1, 7)  # while the agent was down
    again = _again(node, r)
    again.restore()
    assert again.rec.status is AllocStatus.FAILED and "exit code 7" in again.rec.reason
    assert node.replaced == [(r.id, again.rec.reason)] and node.docker.starts[2:] == []
    (terminated,) = [e for e in node.store.events(r.id, "t1") if e.type == "Terminated"]
    assert terminated.message == "Exit Code: 7"
    assert terminated.details == {"exit_code": 7, "while_agent_down": True}
    (refused,) = [e for e in node.store.events(r.id, "t1") if e.type == "Not Restarting"]
    assert "exceeded 0 restart(s)" in refused.message and "exit code 7" in refused.message
    assert again.rec.replace_pending, "the replacement is owed until it is recorded"


def test_a_task_dead_at_restore_restarts_after_the_policys_delay(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, policy=RestartPolicy(attempts=1, interval=600, delay=5, mode="fail"))
    (t1,) = [h for h in node.docker.running() if h.startswith("docker-t1")]
    node.docker.exit(t1, 9)
    again = _again(node, r)
    assert again.restore() is RestoreAction.RESTART_TASKS
    assert node.docker.starts[2:] == [] and [d for d, _ in node.timers] == [5]
    assert [e.details for e in node.store.events(r.id, "t1") if e.type == "Terminated"] == [
        {"exit_code": 9, "while_agent_down": True}
    ]
    node.run_timers()
    assert [c.task.name for c in node.docker.starts[2:]] == ["t1"] and again.alloc_running()
    assert _causes(node, again, "t1") == ["first start", "restart policy"]
    assert len(again.state.task("t1").restart_times) == 1
    _crash(node, again, "t1", 9)  # attempts used up: the next exit fails the alloc
    assert again.rec.status is AllocStatus.FAILED


def test_a_restart_owed_when_the_agent_was_killed_is_resumed_not_counted_again(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    _crash(node, r)
    node.timers.clear()  # the agent was killed with the restart on its timer
    assert r.state.task("t0").restart_due > 0
    again = _again(node, r)
    assert again.restore() is RestoreAction.RESTART_TASKS
    assert len(node.timers) == 1 and node.docker.starts[2:] == []
    node.run_timers()
    assert [c.task.name for c in node.docker.starts[2:]] == ["t0"]
    assert [e.type for e in node.store.events(r.id, "t0")].count("Terminated") == 1
    t0 = again.state.task("t0")
    assert len(t0.restart_times) == 1 and t0.restarts == 1 and t0.restart_due == 0.0
    assert _causes(node, again) == ["first start", "restart policy"]


def test_a_task_never_started_before_the_kill_is_started_by_the_restore(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    node.store.delete("handle", f"{r.id}/t1")  # the agent died between STARTING and the handle
    r.state.update_task("t1", state=TaskState.STARTING)
    node.docker.exit(node.docker.running()[1])
    again = _again(node, r)
    assert again.restore() is RestoreAction.RESTART_TASKS
    assert [c.task.name for c in node.docker.starts[2:]] == ["t1"] and node.timers == []
    assert _causes(node, again, "t1") == ["first start", "restore"]
    assert again.state.task("t1").restart_times == ()


def test_a_task_gone_without_an_exit_status_is_started_by_the_restore_uncounted(tmp_path: Path) -> None:
    """As Nomad's task runner with a handle it cannot recover: no Terminated event, no attempt used
    (the container was removed: docker keeps the exit status of a container that exited, so a
    container that is gone did not just exit)."""
    node = FakeNode(tmp_path)
    r = _started(node, policy=RestartPolicy(attempts=0, interval=600, delay=3, mode="fail"))
    (t1,) = [h for h in node.docker.running() if h.startswith("docker-t1")]
    node.docker.procs.pop(t1)  # docker rm -f while the agent was down
    again = _again(node, r)
    assert again.restore() is RestoreAction.RESTART_TASKS and again.alloc_running()
    assert [c.task.name for c in node.docker.starts[2:]] == ["t1"] and node.timers == []
    assert _causes(node, again, "t1") == ["first start", "restore"]
    assert "Terminated" not in [e.type for e in node.store.events(r.id, "t1")]


def test_a_network_recreated_at_restore_starts_each_task_once_with_cause_restore(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    node.pause.alive["pause-1"] = False
    again = _again(node, r)
    assert again.restore() is RestoreAction.RECREATE_NETWORK
    assert _causes(node, again, "t0") == _causes(node, again, "t1") == ["first start", "restore"]


def test_a_template_change_mode_restart_names_its_cause(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    r.tasks[r.group.tasks[1].name].restart_for_template()
    assert _causes(node, r, "t1") == ["first start", "change_mode restart"]
    assert {e.details.get("why") for e in node.store.events(r.id, "t1") if e.type == "Started"} == {
        None,
        "template re-rendered",
    }


def test_a_stop_cancels_a_pending_restart(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node)
    _crash(node, r)
    r.stop()
    node.run_timers()
    assert node.docker.starts[2:] == [] and r.rec.status is AllocStatus.COMPLETE


_RESTART_SPEC = """
job "web" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "docker"
      config {
        image = "x"
      }
    }
  }
}
"""


def test_a_replacement_pending_at_a_kill_is_started_at_restore_once(tmp_path: Path) -> None:
    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults

    node = FakeNode(tmp_path)

    def core() -> Core:
        return Core(
            node.store, node.registry, None, data_dir=tmp_path / "data", faults=Faults(), task_dirs=node.dirs
        )

    first = core()
    (alloc,) = first.job_registry.submit(_RESTART_SPEC, "hcl")["allocs"]
    _crash(node, first.allocs.runner(alloc), "t", 2)
    failed = AllocRecord.from_record(node.store.get("alloc", alloc) or {})
    assert failed.status is AllocStatus.FAILED and failed.replace_pending and not failed.replaced_by
    # Killed before the loop ran the replacement's timer: a new agent on the same state.
    second = core()
    second.restorer.restore()
    # Nomad's reschedule policy (the service default, 30s): placed when due, not at restore
    failed = AllocRecord.from_record(node.store.get("alloc", alloc) or {})
    assert not failed.replaced_by and failed.replace_pending and failed.reschedule_due
    (timer,) = [t for t in second.loop._timers if t.due - time.monotonic() > 20]
    timer.fn()  # the reschedule, due
    failed = AllocRecord.from_record(node.store.get("alloc", alloc) or {})
    assert failed.replaced_by and not failed.replace_pending
    new = second.allocs.runner(failed.replaced_by)
    assert new.rec.replaces == alloc and new.alloc_running()
    assert "Replaced" in _events(node, second.allocs.runner(alloc))
    third = core()
    third.restorer.restore()
    allocs = node.store.list("alloc").records
    assert sorted(allocs) == sorted([alloc, failed.replaced_by]), "replaced exactly once"
    assert [c.task.name for c in node.docker.starts] == ["t", "t"]


def test_an_owed_replacement_already_started_is_only_recorded_at_restore(tmp_path: Path) -> None:
    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults

    node = FakeNode(tmp_path)
    first = Core(
        node.store, node.registry, None, data_dir=tmp_path / "data", faults=Faults(), task_dirs=node.dirs
    )
    (alloc,) = first.job_registry.submit(_RESTART_SPEC, "hcl")["allocs"]
    _crash(node, first.allocs.runner(alloc), "t", 2)
    job = first.jobs["web"]
    new = first.allocs.new_alloc(job, "g", replaces=alloc)  # killed before replaced_by was written
    second = Core(
        node.store, node.registry, None, data_dir=tmp_path / "data", faults=Faults(), task_dirs=node.dirs
    )
    second.restorer.restore()
    failed = AllocRecord.from_record(node.store.get("alloc", alloc) or {})
    assert failed.replaced_by == new.id and not failed.replace_pending
    assert sorted(node.store.list("alloc").records) == sorted([alloc, new.id])


def test_env_templates_reach_the_task_env_at_every_start_and_win_over_the_tasks_env(tmp_path: Path) -> None:
    """Nomad's `template { env = true }`: the rendered KEY=VALUE lines are the task's environment at
    each start (a change_mode restart after a re-render gives the task the new values), as the agent
    rendered them: a task that rewrites the file between its starts does not choose its next
    environment (issue 32, item 1)."""
    node = FakeNode(tmp_path)
    tpl = Template(
        "secrets/app.env",
        data='DB_PASS="{{ env "SEED" }}-pw-{{ file "local/gen" }}"\nexport MODE=blue\n# a comment\n'
        "not a pair\nPORT=8080 # inline\n",
        env=True,
        change_mode="restart",
        splay=0,
    )
    task = Task("t0", "docker", config={"image": "x"}, env={"MODE": "task", "SEED": "s1"}, templates=(tpl,))
    group = Group(name="g", tasks=(task,), restart=POLICY)
    r = AllocRunner(node.deps(), _record(), Job(id="web", groups=(group,)), group)
    node.store.put("alloc", r.id, r.rec.to_record())
    (r.tasks[task.name].task_dir / "local").mkdir(parents=True)
    (r.tasks[task.name].task_dir / "local" / "gen").write_text("1")
    r.start()
    env = node.docker.starts[-1].env
    assert (env["DB_PASS"], env["MODE"], env["PORT"]) == ("s1-pw-1", "blue", "8080"), env
    assert _events(node, r).count("Template Env Failed") == 1  # "not a pair", named at the render

    # The task rewrites its env file: its next start still gets what the agent rendered.
    (r.tasks[task.name].task_dir / "secrets" / "app.env").write_text(
        "DB_PASS=rotated\nLD_PRELOAD=/tmp/evil.so\n"
    )
    r.tasks[task.name].restart_for_template()
    env = node.docker.starts[-1].env
    assert env["DB_PASS"] == "s1-pw-1" and "LD_PRELOAD" not in env, env
    assert _events(node, r).count("Template Env Failed") == 1, "named once, at its render"

    # A re-render (what it read changed) is what the next start gets, and the same after an agent
    # restart (the values are in the agent's state, not in the task's file).
    (r.tasks[task.name].task_dir / "local" / "gen").write_text("2")
    r.tasks[task.name].templates().schedule_rerender(0.0)
    node.run_timers()
    env = node.docker.starts[-1].env
    assert (env["DB_PASS"], env["MODE"]) == ("s1-pw-2", "blue"), env
    (r.tasks[task.name].task_dir / "secrets" / "app.env").write_text("DB_PASS=rotated\n")
    again = _again(node, r)
    assert again.tasks[task.name].template_env()["DB_PASS"] == "s1-pw-2"


def test_env_template_state_from_an_older_agent_reads_the_file_only_while_it_is_as_rendered(
    tmp_path: Path,
) -> None:
    """A template state written before the values were kept (no `env` in the record): the file is
    read back only while its sha256 is the one rendered; a rewritten file is refused, named."""
    node = FakeNode(tmp_path)
    tpl = Template("secrets/app.env", data="A=1\n", env=True, change_mode="noop", splay=0)
    task = Task("t0", "docker", config={"image": "x"}, templates=(tpl,))
    group = Group(name="g", tasks=(task,), restart=POLICY)
    r = AllocRunner(node.deps(), _record(), Job(id="web", groups=(group,)), group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    key = f"{r.id}/t0/secrets/app.env"
    old = {k: v for k, v in (node.store.get("template", key) or {}).items() if k != "env"}
    node.store.put("template", key, old)
    assert r.tasks[task.name].template_env() == {"A": "1"}
    (r.tasks[task.name].task_dir / "secrets" / "app.env").write_text("A=2\nLD_PRELOAD=/x.so\n")
    assert r.tasks[task.name].template_env() == {}
    (msg,) = [e.message for e in node.store.events(r.id, "t0") if e.type == "Template Env Failed"]
    assert "changed since it was rendered" in msg


def test_a_recovery_interrupted_by_an_unavailable_engine_retries_until_done(
    tmp_path: Path,
) -> None:
    """docker restarting under a recovery: the pause container cannot be created twice, then can.
    The recovery says so each time and tries again on a timer; no failure, no replacement, each
    task started once, after the network was recreated."""
    node = FakeNode(tmp_path)
    r = _started(node)
    node.pause.unavailable = 2
    r.recover_network("pause container died")
    assert _events(node, r).count("Network Recovery Retrying") == 1
    assert r.rec.status is AllocStatus.RUNNING and node.docker.running() == []
    node.run_timers()
    events = _events(node, r)
    assert events.count("Network Recovery Retrying") == 2 and events[-1] == "Network Recovered", events
    assert r.rec.status is AllocStatus.RUNNING and node.replaced == []
    assert _causes(node, r, "t0") == ["first start", "network recovery"]
    assert _causes(node, r, "t1") == ["first start", "network recovery"]
    assert len(node.docker.running()) == 2 and node.pause.created[-1] in node.pause.alive


def test_a_recovery_whose_task_start_finds_the_engine_away_starts_again_from_the_top(tmp_path: Path) -> None:
    """The engine goes away after t0 was started into the new network: the retry is a new decision
    for every task (Restart Signaled), t0 is stopped and each task started once for it."""
    node = FakeNode(tmp_path)
    r = _started(node)
    node.docker.unavailable_once.add("t1")
    r.recover_network("pause container died")
    assert _events(node, r)[-1] == "Network Recovery Retrying"
    node.run_timers()
    assert _events(node, r)[-1] == "Network Recovered"
    assert _causes(node, r, "t0") == ["first start", "network recovery", "network recovery"]
    assert _causes(node, r, "t1") == ["first start", "network recovery"]
    signaled = [e.task for e in node.store.events(r.id) if e.type == "Restart Signaled"]
    assert signaled.count("t0") == 2 and signaled.count("t1") == 2
    assert r.rec.status is AllocStatus.RUNNING and node.replaced == [] and len(node.docker.running()) == 2


# -- batch jobs: an exit 0 completes the task (Nomad's restart tracker) ----------------------------
def _exit(node: FakeNode, r: AllocRunner, driver: str, task: str, code: int) -> None:
    fake = node.exec if driver == "exec" else node.docker
    (hid,) = [h for h in fake.running() if h.startswith(f"{driver}-{task}-")]
    fake.exit(hid, code)
    r.on_task_exit(hid)


@pytest.mark.parametrize("job_type", ["batch", "sysbatch"])
def test_a_batch_task_that_exits_0_is_complete_and_the_alloc_with_its_last_task(
    tmp_path: Path, job_type: str
) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "exec", mode="none", job_type=job_type)
    _exit(node, r, "exec", "t0", 0)
    t0 = r.state.task("t0")
    assert (t0.state, t0.failed, t0.completed, t0.restarts) == (TaskState.DEAD, False, True, 0)
    assert node.timers == [] and len(node.exec.starts) == 2, "no restart of a completed task"
    assert r.rec.status is AllocStatus.RUNNING, "t1 still runs"
    shown = r.view()["tasks"]["t0"]
    assert (shown["state"], shown["failed"], shown["restarts"]) == ("dead", False, 0)
    _exit(node, r, "exec", "t1", 0)
    assert r.rec.status is AllocStatus.COMPLETE and r.rec.reason == "All tasks have completed"
    assert node.replaced == [] and node.timers == [] and len(node.exec.starts) == 2
    assert node.dirs.cleaned == [r.alloc_dir], "the completed alloc is torn down"
    events = [(e.type, e.message) for e in node.store.events(r.id, "t0")]
    assert ("Terminated", "Exit Code: 0") in events
    assert not {"Restarting", "Not Restarting", "Alloc Failed"} & {t for t, _ in events}
    assert "Alloc Failed" not in _events(node, r)
    # A restart of the agent finds nothing to do: the alloc is terminal, its tasks complete.
    again = _again(node, r)
    assert again.rec.status is AllocStatus.COMPLETE and again.view()["status"] == "complete"


def test_a_batch_task_that_fails_is_restarted_by_the_policy_and_completes_after(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "exec", mode="none", tasks=1, job_type="batch")
    _exit(node, r, "exec", "t0", 1)
    assert [d for d, _ in node.timers] == [POLICY.delay] and len(r.state.task("t0").restart_times) == 1
    node.run_timers()
    _exit(node, r, "exec", "t0", 1)
    node.run_timers()
    # attempts (2) used up: an exit 0 still completes the task, it does not fail it.
    _exit(node, r, "exec", "t0", 0)
    assert r.rec.status is AllocStatus.COMPLETE and not r.state.task("t0").failed
    assert r.state.task("t0").restarts == 2 and node.replaced == []


def test_a_batch_task_with_no_restarts_allowed_completes_on_exit_0_and_fails_on_another(
    tmp_path: Path,
) -> None:
    no_restarts = RestartPolicy(attempts=0, interval=600, delay=3, mode="fail")
    ok = FakeNode(tmp_path / "ok")
    r = _started(ok, "exec", mode="none", tasks=1, job_type="batch", policy=no_restarts)
    _exit(ok, r, "exec", "t0", 0)
    assert r.rec.status is AllocStatus.COMPLETE and ok.replaced == []
    bad = FakeNode(tmp_path / "bad")
    r = _started(bad, "exec", mode="none", tasks=1, job_type="batch", policy=no_restarts)
    _exit(bad, r, "exec", "t0", 2)
    assert r.rec.status is AllocStatus.FAILED and r.state.task("t0").failed
    assert "exit code 2" in r.rec.reason and bad.replaced == [(r.id, r.rec.reason)]


def test_a_service_task_that_exits_0_is_restarted_and_counted(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "exec", mode="none", tasks=1)
    for attempt in (1, 2):
        _exit(node, r, "exec", "t0", 0)
        assert [d for d, _ in node.timers] == [POLICY.delay]
        node.run_timers()
        assert r.state.task("t0").restarts == attempt and not r.state.task("t0").completed
    _exit(node, r, "exec", "t0", 0)
    assert r.rec.status is AllocStatus.FAILED and r.state.task("t0").failed
    assert r.rec.reason.startswith("task t0 failed with exit code 0: exceeded 2 restart(s)")


def test_a_completed_task_is_left_alone_by_a_restore_and_a_network_recovery(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "exec", job_type="batch")  # bridge: a netns the tasks join by path
    _exit(node, r, "exec", "t0", 0)
    again = _again(node, r)
    assert again.restore() is RestoreAction.REATTACH
    assert len(node.exec.starts) == 2 and node.timers == []
    restored = [e.message for e in node.store.events(r.id) if e.type == "Restored"]
    assert restored == ["reattached: every task running or complete, network verified"]
    again.recover_network("netns gone")
    assert _causes(node, again, "t0") == ["first start"], "a completed task is not started again"
    assert _causes(node, again, "t1") == ["first start", "network recovery"]
    _exit(node, again, "exec", "t1", 0)
    assert again.rec.status is AllocStatus.COMPLETE


# -- restore: an exec task that died while the agent was down (its exit code went with the agent) ----
def _die_while_down(node: FakeNode, task: str) -> None:
    """As the real exec driver after an agent restart: the process is gone, no exit status."""
    (hid,) = [h for h in node.exec.running() if h.startswith(f"exec-{task}-")]
    node.exec.procs[hid].running = False


def test_an_exec_task_that_died_while_down_is_a_counted_failure_with_an_unknown_exit_code(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    r = _started(node, "exec", mode="none", policy=RestartPolicy(attempts=1, interval=600, delay=5))
    _die_while_down(node, "t1")
    again = _again(node, r)
    assert again.restore() is RestoreAction.RESTART_TASKS
    assert len(node.exec.starts) == 2 and [d for d, _ in node.timers] == [5], "after the policy's delay"
    (terminated,) = [e for e in node.store.events(r.id, "t1") if e.type == "Terminated"]
    assert terminated.message == "Exit Code: unknown (the task died while the agent was down)"
    assert terminated.details == {"exit_code": None, "while_agent_down": True}
    assert len(again.state.task("t1").restart_times) == 1, "counted against the attempts"
    node.run_timers()
    assert _causes(node, again, "t1") == ["first start", "restart policy"]
    _exit(node, again, "exec", "t1", 4)  # the one attempt is used up
    assert again.rec.status is AllocStatus.FAILED


@pytest.mark.parametrize("job_type", ["service", "batch"])
def test_an_exec_task_that_died_while_down_with_no_restarts_allowed_fails_the_alloc(
    tmp_path: Path, job_type: str
) -> None:
    """Nomad cannot know that the task succeeded: a batch task is failed too, never completed."""
    node = FakeNode(tmp_path)
    no_restarts = RestartPolicy(attempts=0, interval=600, delay=3, mode="fail")
    r = _started(node, "exec", mode="none", policy=no_restarts, job_type=job_type)
    _die_while_down(node, "t1")
    again = _again(node, r)
    again.restore()
    t1 = again.state.task("t1")
    assert (t1.state, t1.failed, t1.completed) == (TaskState.DEAD, True, False)
    assert again.rec.status is AllocStatus.FAILED and node.replaced == [(r.id, again.rec.reason)]
    assert "unknown (the task died while the agent was down)" in again.rec.reason
    assert len(node.exec.starts) == 2 and node.timers == [], "not started again"
    (refused,) = [e for e in node.store.events(r.id, "t1") if e.type == "Not Restarting"]
    assert "exceeded 0 restart(s)" in refused.message


def test_a_batch_task_found_exited_0_at_restore_is_complete(tmp_path: Path) -> None:
    """docker keeps the exit status: a batch task that exited 0 while the agent was down is done."""
    node = FakeNode(tmp_path)
    r = _started(node, mode="none", tasks=1, job_type="batch")
    (t0,) = node.docker.running()
    node.docker.exit(t0, 0)
    again = _again(node, r)
    again.restore()
    assert again.rec.status is AllocStatus.COMPLETE and not again.state.task("t0").failed
    assert len(node.docker.starts) == 1 and node.timers == [] and node.replaced == []


def test_a_sticky_ephemeral_disk_is_taken_over_by_the_replacement_and_only_then(tmp_path: Path) -> None:
    """Nomad's sticky ephemeral_disk on one node: the replacement of a failed alloc gets its alloc/data
    and its tasks' local/ (moved, before anything of it runs); without sticky it starts empty."""
    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults

    def run(spec: str, where: Path) -> tuple[Path, Path]:
        node = FakeNode(where)
        core = Core(
            node.store, node.registry, None, data_dir=where / "data", faults=Faults(), task_dirs=node.dirs
        )
        (alloc,) = core.job_registry.submit(spec, "hcl")["allocs"]
        old = core.allocs.runner(alloc)
        (old.alloc_dir / "alloc" / "data").mkdir(parents=True)  # HostTaskDirs.prepare makes it
        (old.alloc_dir / "alloc" / "data" / "db").write_text("rows\n")
        (old.tasks[old.group.tasks[0].name].task_dir / "local" / "cache").write_text("warm\n")
        _crash(node, old, "t", 2)
        while core.loop._timers:  # the replacement, on the core's timer (its loop is not running here)
            core.loop._timers.sort()
            core.loop._timers.pop(0).fn()
        new = core.allocs.runner(AllocRecord.from_record(node.store.get("alloc", alloc) or {}).replaced_by)
        assert new.rec.replaces == alloc and new.alloc_running()
        return old.alloc_dir, new.alloc_dir

    sticky = _RESTART_SPEC.replace(
        'group "g" {', 'group "g" {\n    ephemeral_disk {\n      sticky = true\n    }', 1
    )
    old, new = run(sticky, tmp_path / "sticky")
    assert (new / "alloc" / "data" / "db").read_text() == "rows\n"
    assert (new / "t" / "local" / "cache").read_text() == "warm\n"
    assert not (old / "alloc" / "data").exists()  # moved, not copied
    old, new = run(_RESTART_SPEC, tmp_path / "plain")
    assert not (new / "alloc" / "data" / "db").exists() and (old / "alloc" / "data" / "db").exists()


def test_a_link_left_in_the_previous_alloc_is_not_taken_over(tmp_path: Path) -> None:
    from agent.runner.taskdirs import migrate_dirs

    old, new = tmp_path / "old", tmp_path / "new"
    (old / "alloc").mkdir(parents=True)
    (old / "alloc" / "data").symlink_to("/etc")  # a task can write alloc/
    (old / "t" / "local").mkdir(parents=True)
    (old / "t" / "local" / "x").write_text("mine")
    (new / "t" / "local").mkdir(parents=True)
    (new / "t" / "local" / "y").write_text("rendered already")  # not empty: kept as it is
    assert migrate_dirs(old, new, ["t"]) == []
    assert not (new / "alloc" / "data").exists() and (new / "t" / "local" / "y").exists()


def test_a_groups_shutdown_delay_holds_the_kills_after_the_services_left(tmp_path: Path) -> None:
    """Nomad's group shutdown_delay: at the stop the alloc's services go first (a nomad service is
    listed only while the alloc runs), then the delay, then the kill signals."""
    from dataclasses import replace

    node = FakeNode(tmp_path)
    job, group = _job()
    service = Service(name="web", port="http", provider="nomad")
    group = replace(group, shutdown_delay=7.0, services=(service,))
    r = AllocRunner(node.deps(), _record(), replace(job, groups=(group,)), group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    node.timers.clear()
    from agent.runner.services import nomad_registrations

    assert (
        len(
            nomad_registrations(
                [r], advertise_address="", node_id="n", datacenter="dc1", index_of=lambda a: 1
            )
        )
        == 1
    )

    def listed() -> list[str]:
        regs = nomad_registrations(
            [r], advertise_address="", node_id="n", datacenter="dc1", index_of=lambda a: 1
        )
        return [x["AllocID"] for x in regs]

    r.stop()
    assert listed() == [], "a stopping alloc's services are still listed during its shutdown_delay"
    assert node.docker.stops == [] and [d for d, _ in node.timers] == [7.0]
    assert "Shutdown Delay" in _events(node, r) and "Killing" not in _events(node, r)
    node.run_timers()
    assert len(node.docker.stops) == 2 and r.rec.status is AllocStatus.COMPLETE
    assert _events(node, r).count("Killing") == 2


def test_a_tasks_shutdown_delay_is_waited_before_its_kill_only(tmp_path: Path) -> None:
    from dataclasses import replace

    node = FakeNode(tmp_path)
    job, group = _job()
    slow = replace(group.tasks[0], shutdown_delay=3.0)
    group = replace(group, tasks=(slow, group.tasks[1]))
    r = AllocRunner(node.deps(), _record(), replace(job, groups=(group,)), group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    r.user_restart(slow)  # a restart is not a stop: no delay
    assert node.slept == []
    r.stop()
    assert node.slept == [3.0] and r.rec.status is AllocStatus.COMPLETE
    waits = [e for e in node.store.events(r.id, "t0") if e.type == "Waiting for shutdown delay"]
    assert [e.message for e in waits] == ["Waiting for shutdown_delay of 3s before killing the task."]
    assert not [e for e in node.store.events(r.id, "t1") if e.type == "Waiting for shutdown delay"]


def test_a_containers_log_is_read_to_its_end_before_the_teardown_removes_it(tmp_path: Path) -> None:
    """A task that exits at once and fails its alloc: the teardown ends each docker logger (it reads
    the container's log to its end, within its grace) before it removes the container. Removing
    first lost the output of a task that failed within its first second (its logger had not read
    it yet: an empty app.stdout.0, seen by the nomad-18034 scenario 1 run in 3)."""
    from dataclasses import replace

    order: list[str] = []

    class Logs:
        def ensure(self, alloc_dir: Path, task: str, limits: object) -> None: ...

        def pipes(self, alloc_dir: Path, task: str) -> tuple[int, int]:
            raise AssertionError("no process task here")

        def has_pipes(self, alloc_dir: Path, task: str) -> bool:
            return False

        def follow_container(self, alloc_dir: Path, task: str, container: str) -> None: ...

        def stop(self, alloc_dir: Path, task: str) -> None:
            order.append(f"logger {task}")

        def stop_all(self, alloc_dir: Path) -> None: ...

    node = FakeNode(tmp_path)
    node.docker.container_log = True
    removed = node.docker.remove

    def remove(alloc_id: str, task: Task, handle: object) -> None:
        order.append(f"remove {task.name}")
        removed(alloc_id, task, handle)  # type: ignore[arg-type]

    node.docker.remove = remove  # type: ignore[method-assign]
    job, group = _job("docker", tasks=1)
    r = AllocRunner(replace(node.deps(), task_logs=Logs()), _record(), job, group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    r.teardown()
    assert order.index("logger t0") < order.index("remove t0"), order
