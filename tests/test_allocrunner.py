"""The alloc runner against fake drivers, netns owners and network (tests/fakes.py): every outcome
of start, restart policy, pause death, network recovery, restore and stop, and what each fault flag
changes there. No root, no docker: these run in `make unit` in well under a second each."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.decisions import Bugs, RestoreAction
from agent.drivers.base import DriverError
from agent.drivers.registry import DriverRegistry
from agent.model import Group, Job, Network, Port, RestartPolicy, Task
from agent.records import AllocRecord, AllocStatus, DesiredStatus, NetworkState, PortAlloc, TaskState
from agent.runner.alloc import AllocRunner
from agent.runner.state import NETNS_OWNER
from tests.fakes import FakeNode

POLICY = RestartPolicy(attempts=2, interval=600, delay=3, mode="fail")


def _job(driver: str = "docker", *, mode: str = "bridge", tasks: int = 2) -> tuple[Job, Group]:
    group = Group(
        name="g",
        tasks=tuple(Task(name=f"t{i}", driver=driver, config={"image": "x"}) for i in range(tasks)),
        network=Network(mode=mode, ports=(Port("http", to=8080),)) if mode != "none" else None,
        restart=POLICY,
    )
    return Job(id="web", groups=(group,)), group


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
    assert r.task_env(r.group.tasks[0])["NOMAD_ALLOC_IP"] == "10.9.0.1"
    assert r.task_env(r.group.tasks[0])["NOMAD_HOST_PORT_http"] == "20001"
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
    assert [c.task.name for c in node.docker.starts[2:]] == ["t1"] and node.network.deletes == []
    assert again.state.task("t1").restarts == 1


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
    from agent.core import Core
    from agent.faults import Faults

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
    (alloc,) = core.submit(spec, "hcl")["allocs"]
    failed = core.runner(alloc)
    assert failed.rec.status is AllocStatus.FAILED and failed.rec.desired is DesiredStatus.RUN
    assert core.stop_job("web") == []
    assert failed.rec.desired is DesiredStatus.STOP
    stored = AllocRecord.from_record(node.store.get("alloc", alloc) or {})
    assert stored.desired is DesiredStatus.STOP and stored.status is AllocStatus.FAILED


def test_a_job_for_other_datacenters_is_refused_and_meta_reaches_the_task_env(tmp_path: Path) -> None:
    """Nomad places a job only in its datacenters (globs); meta of job, group and task becomes
    NOMAD_META_<key> (as written and upper-cased, the task's winning), as Nomad's task env."""
    from agent.core import Core
    from agent.faults import Faults
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
        core.submit(spec, "hcl")
    assert info.value.problems == [
        (
            "job.web.datacenters",
            "['us-*'] does not include this client's datacenter \"eu-west-1a\" (config datacenter): "
            "Nomad would not place it here",
        )
    ]
    assert node.store.get("job", "web") is None, "nothing stored"
    (alloc,) = core.submit(spec.replace('["us-*"]', '["us-*", "eu-*"]'), "hcl")["allocs"]
    r = core.runner(alloc)
    env = r.task_env(r.group.tasks[0])
    assert (env["NOMAD_META_owner"], env["NOMAD_META_OWNER"]) == ("task", "task")
    assert (env["NOMAD_META_tier"], env["NOMAD_META_build_id"], env["NOMAD_META_BUILD_ID"]) == (
        "gold",
        "42",
        "42",
    )
    assert (env["NOMAD_JOB_ID"], env["NOMAD_JOB_NAME"]) == ("web", "the web")
