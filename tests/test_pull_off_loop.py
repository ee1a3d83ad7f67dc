"""A docker image pull never runs on the main loop: the driver's blocking first step (`prepare`,
docker's pull) runs off the loop, its continuation (the start) back on it, the alloc's later
operations waiting in order behind it; its events reach the store on the loop as they happen.

A fake driver whose prepare blocks on an event (as a pull from a registry that does not answer),
the real Core with its loop thread and threaded offload, Nomad's API routes over it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.client.core import Core
from agent.drivers.base import DriverError, TaskContext, TaskHandle
from agent.drivers.registry import DriverRegistry
from agent.fieldbugs.faults import Faults
from agent.structs.records import AllocStatus
from tests.agent_lab import NomadRoutes, alloc_events, run_job
from tests.fakes import FakeDriver, FakeNode, FakeSweeper

HUNG = 60.0  # what a hung pull would block for: far past every wait below
ANSWER_WITHIN = 2.0  # the API and another alloc's restart while a pull hangs
LOOP = "main-loop"
DOWNLOADING = "Downloading image"


def spec(job: str, driver: str) -> str:
    config = 'image = "busybox:latest"' if driver == "docker" else 'command = "/bin/sleep"'
    return f"""
job "{job}" {{
  group "g" {{
    restart {{
      attempts = 3
      interval = "10m"
      delay    = "0s"
      mode     = "fail"
    }}
    task "t" {{
      driver = "{driver}"
      config {{ {config} }}
    }}
  }}
}}
"""


class Pulling(FakeDriver):
    """A docker driver with a prepare step (the pull): those of the jobs in `hang` emit "Downloading
    image" and block until `release` is set; the next `fail_prepares` raise a DriverError (the one
    FakeDriver's failed start raises). Its start prepares itself unless the runner did
    (ctx.prepared), as the docker driver's."""

    def __init__(self) -> None:
        super().__init__("docker", joins_container_netns=True)
        self.hang: set[str] = set()
        self.release = threading.Event()
        self.fail_prepares = 0
        self.prepared_on: list[str] = []  # the thread each prepare ran on

    def prepare(self, ctx: TaskContext) -> None:
        self.prepared_on.append(threading.current_thread().name)
        if ctx.driver_event is not None:
            ctx.driver_event(DOWNLOADING, {"image": str(ctx.task.config["image"])})
        if ctx.job in self.hang:
            self.release.wait(HUNG)
        if self.fail_prepares:
            self.fail_prepares -= 1
            why = "cannot join network of a non running container"
            raise DriverError(self.name, f"task {ctx.task.name}", why, recoverable=self.fail_recoverable)

    def start(self, ctx: TaskContext) -> TaskHandle:
        if not getattr(ctx, "prepared", False):
            self.prepare(ctx)
        return super().start(ctx)


def wait_for(what: str, cond: Callable[[], bool], timeout: float) -> float:
    """Poll `cond` until true; the seconds it took. Fails naming `what` after `timeout`."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.01)
    return time.monotonic() - t0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Core, Pulling, FakeDriver]]:
    fake = FakeNode(tmp_path)
    docker, exec_ = Pulling(), FakeDriver("exec", joins_container_netns=False)
    fake.docker, fake.exec = docker, exec_
    fake.registry = DriverRegistry([docker, exec_], container_netns=fake.pause, path_netns=fake.named)
    core = Core(
        fake.store,
        fake.registry,
        fake.network,
        data_dir=tmp_path / "data",
        faults=Faults(),
        task_dirs=fake.dirs,
        sweeper=FakeSweeper(fake),
    )
    loop = threading.Thread(target=core.loop.run, name=LOOP, daemon=True)
    loop.start()
    yield core, docker, exec_
    docker.release.set()
    core.stop()
    loop.join(5)


def alloc_of(core: Core, job: str) -> str:
    return core.call(lambda: next(r.id for r in core.runners.values() if r.job.id == job), timeout=5)


def started(core: Core, alloc_id: str, cause: str) -> int:
    return sum(
        1
        for e in core.store.events(alloc_id)
        if e.type == "Started" and (e.details or {}).get("cause") == cause
    )


def restart_another_alloc(core: Core, exec_: FakeDriver) -> float:
    """The exec job's task crashes; the seconds until its restart (delay 0s) is recorded."""
    alloc_id = alloc_of(core, "other")
    (hid,) = exec_.running()
    exec_.exit(hid, 7)
    core.allocs.report_exit(alloc_id, hid)
    return wait_for(
        "the crashed task of another alloc restarted",
        lambda: started(core, alloc_id, "restart policy") == 1,
        ANSWER_WITHIN,
    )


def test_a_hung_pull_holds_up_neither_the_register_nor_the_api_nor_another_alloc(
    node: tuple[Core, Pulling, FakeDriver],
) -> None:
    core, docker, exec_ = node
    api = NomadRoutes(core)
    run_job(api.request, spec("other", "exec"))
    docker.hang.add("web")

    registered: list[list[str]] = []
    threading.Thread(
        target=lambda: registered.append(run_job(api.request, spec("web", "docker"))), daemon=True
    ).start()
    took = wait_for("the job register answered", lambda: bool(registered), ANSWER_WITHIN)
    print(f"PUT /v1/jobs while the pull hangs: {took * 1000:.0f} ms")
    ((alloc_id,),) = registered

    def task_state() -> dict[str, Any]:
        return dict(api.request("GET", f"/v1/allocation/{alloc_id}")["TaskStates"]["t"])

    # The pull's event is visible through the API while the pull hangs; the task is still pending.
    wait_for(
        "the Driver event through the API",
        lambda: any(e["Type"] == "Driver" for e in task_state()["Events"]),
        ANSWER_WITHIN,
    )
    (ev,) = [e for e in task_state()["Events"] if e["Type"] == "Driver"]
    assert ev["DisplayMessage"] == DOWNLOADING and ev["Details"]["image"] == "busybox:latest"
    assert task_state()["State"] == "pending"
    assert docker.prepared_on and LOOP not in docker.prepared_on
    # Another alloc's restart completes meanwhile.
    restart_another_alloc(core, exec_)
    assert docker.starts == []

    docker.release.set()
    wait_for("the task recorded running", lambda: task_state()["State"] == "running", 5)
    types = [e["Type"] for e in alloc_events(api.request("GET", f"/v1/allocation/{alloc_id}"))]
    assert types.index("Driver") < types.index("Started"), types
    # One pull in all: the start did not pull again.
    assert len(docker.prepared_on) == 1 and len(docker.starts) == 1 and docker.starts[0].prepared


def event_list(core: Core, alloc_id: str) -> list[tuple[str, str]]:
    return [(e.type, e.message) for e in core.store.events(alloc_id) if e.type != "Driver"]


def test_a_failed_pull_off_the_loop_is_a_start_failure_through_the_restart_policy(
    node: tuple[Core, Pulling, FakeDriver],
) -> None:
    """The same events as a start that fails (FakeDriver's fail_starts): Driver Failure, Restarting,
    then the restart's start; the failing prepare ran off the loop."""
    core, docker, _ = node
    docker.fail_recoverable = True
    docker.fail_starts = 1
    core.call(lambda: core.job_registry.submit(spec("start-fails", "docker"), "hcl"), timeout=10)
    failed_start = alloc_of(core, "start-fails")
    wait_for("the start failure restarted", lambda: started(core, failed_start, "restart policy") == 1, 5)
    pulls_before = len(docker.prepared_on)

    docker.fail_prepares = 1
    core.call(lambda: core.job_registry.submit(spec("pull-fails", "docker"), "hcl"), timeout=10)
    failed_pull = alloc_of(core, "pull-fails")
    wait_for("the pull failure restarted", lambda: started(core, failed_pull, "restart policy") == 1, 5)

    assert event_list(core, failed_pull) == event_list(core, failed_start)
    assert [t for t, _ in event_list(core, failed_pull)][-3:] == ["Driver Failure", "Restarting", "Started"]
    assert docker.prepared_on[pulls_before:] and LOOP not in docker.prepared_on[pulls_before:]
    record = core.call(lambda: core.runners[failed_pull].rec, timeout=5)
    assert record.status is AllocStatus.RUNNING


def test_a_restarts_pull_is_off_the_loop_and_a_stop_meanwhile_waits_and_wins(
    node: tuple[Core, Pulling, FakeDriver],
) -> None:
    """The task crashes; its restart's pull hangs: another alloc's restart completes meanwhile; the
    job's stop waits behind the pull and, once it is done, the task is not started again."""
    core, docker, exec_ = node
    core.call(lambda: core.job_registry.submit(spec("other", "exec"), "hcl"), timeout=10)
    core.call(lambda: core.job_registry.submit(spec("web", "docker"), "hcl"), timeout=10)
    alloc_id = alloc_of(core, "web")
    wait_for("the first start", lambda: started(core, alloc_id, "first start") == 1, 5)
    docker.hang.add("web")
    (hid,) = docker.running()
    docker.exit(hid, 1)
    core.allocs.report_exit(alloc_id, hid)
    wait_for("the restart's pull reached the driver", lambda: len(docker.prepared_on) == 2, ANSWER_WITHIN)
    assert docker.prepared_on[-1] != LOOP

    restart_another_alloc(core, exec_)
    core.call(lambda: core.job_registry.stop_job("web"), timeout=ANSWER_WITHIN)
    runner = core.call(lambda: core.runners[alloc_id], timeout=5)
    assert runner.serial.busy == "prepare t" and runner.rec.status is AllocStatus.RUNNING

    docker.release.set()
    wait_for("the alloc completed", lambda: runner.rec.status is AllocStatus.COMPLETE, 5)
    assert len(docker.starts) == 1, [e.type for e in core.store.events(alloc_id)]
    assert started(core, alloc_id, "restart policy") == 0


POSTSTOP = """
job "ending" {
  group "g" {
    task "main" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
    task "bye" {
      driver = "docker"
      lifecycle { hook = "poststop" }
      config { image = "busybox:latest" }
    }
  }
}
"""


def test_a_poststop_tasks_pull_is_off_the_loop_and_the_alloc_ends_after_its_run(
    node: tuple[Core, Pulling, FakeDriver],
) -> None:
    """The job's stop runs its poststop task: while that task's pull hangs, the loop answers and
    the alloc is not complete; once the pull is done the task starts (no second pull) and the
    alloc completes with its exit."""
    core, docker, _ = node
    core.call(lambda: core.job_registry.submit(POSTSTOP, "hcl"), timeout=10)
    alloc_id = alloc_of(core, "ending")
    wait_for("the main task's start", lambda: started(core, alloc_id, "first start") == 1, 5)
    docker.hang.add("ending")
    core.call(lambda: core.job_registry.stop_job("ending"), timeout=ANSWER_WITHIN)
    wait_for("the poststop task's pull reached the driver", lambda: bool(docker.prepared_on), ANSWER_WITHIN)
    runner = core.call(lambda: core.runners[alloc_id], timeout=ANSWER_WITHIN)  # the loop answers
    assert LOOP not in docker.prepared_on and runner.serial.busy == "prepare bye"
    assert core.call(lambda: runner.rec.status, timeout=ANSWER_WITHIN) is AllocStatus.RUNNING

    docker.release.set()
    wait_for("the poststop task started", lambda: len(docker.starts) == 1, 5)
    assert docker.starts[0].prepared and len(docker.prepared_on) == 1
    (hid,) = docker.running()
    docker.exit(hid, 0)
    core.allocs.report_exit(alloc_id, hid)
    wait_for("the alloc completed", lambda: runner.rec.status is AllocStatus.COMPLETE, 5)


def test_a_restores_network_recovery_pulls_off_the_loop(tmp_path: Path) -> None:
    """An agent restart finds the bridge group's pause container dead: the restore recreates the
    network and starts the task again; its pull hangs off the loop, the restore and the loop answer
    meanwhile, and once it is done the task starts with what the pull did."""
    fake = FakeNode(tmp_path)
    docker = Pulling()
    fake.docker = docker
    fake.registry = DriverRegistry([docker, fake.exec], container_netns=fake.pause, path_netns=fake.named)
    bridge = spec("web", "docker").replace('group "g" {', 'group "g" {\n    network { mode = "bridge" }', 1)

    def agent() -> tuple[Core, threading.Thread]:
        core = fake.core(sweeper=FakeSweeper(fake))
        loop = threading.Thread(target=core.loop.run, name=LOOP, daemon=True)
        loop.start()
        return core, loop

    first, loop = agent()
    first.call(lambda: first.job_registry.submit(bridge, "hcl"), timeout=10)
    alloc_id = alloc_of(first, "web")
    wait_for("the first start", lambda: started(first, alloc_id, "first start") == 1, 5)
    first.stop()
    loop.join(5)
    for oid in list(fake.pause.alive):  # the pause container died while the agent was down
        fake.pause.alive[oid] = False
    docker.hang.add("web")
    pulls = len(docker.prepared_on)

    again, loop = agent()
    try:
        again.call(again.restorer.restore, timeout=10)
        wait_for("the recovery's pull", lambda: len(docker.prepared_on) == pulls + 1, 5)
        assert docker.prepared_on[-1] != LOOP
        runner = again.call(lambda: again.runners[alloc_id], timeout=ANSWER_WITHIN)  # the loop answers
        assert "Restore Network" in [e.type for e in again.store.events(alloc_id)]
        assert runner.serial.busy == "prepare t"

        docker.release.set()
        wait_for("the task started by the restore", lambda: started(again, alloc_id, "restore") == 1, 5)
        assert docker.starts[-1].prepared and len(docker.prepared_on) == pulls + 1
        kinds = [e.type for e in again.store.events(alloc_id)]
        assert kinds[-2:] == ["Started", "Network Recovered"], kinds
        assert again.call(lambda: runner.rec.status, timeout=5) is AllocStatus.RUNNING
    finally:
        docker.release.set()
        again.stop()
        loop.join(5)


@pytest.mark.root
def test_the_docker_drivers_prepare_pulls_and_its_prepared_start_does_not(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """On the real dockerd: `prepare` is the pull (Puller.ensure, with the task's events); a start
    with ctx.prepared does not pull again, one without pulls as before (root)."""
    from tests.agent_lab import build_workload_images, why_not_ready

    if reason := why_not_ready():
        pytest.skip(reason)
    build_workload_images(tmp_path_factory.mktemp("images"))
    from agent.drivers.docker import DockerDriver
    from agent.structs.model import Task

    driver = DockerDriver()
    ensured: list[str] = []
    real = driver.puller.ensure

    def ensure(image: str, opts: Any, emit: Any, what: str) -> None:
        ensured.append(image)
        real(image, opts, emit, what)

    driver.puller.ensure = ensure  # type: ignore[method-assign]
    image = "fieldlab/busybox:lab"
    task = Task("t", "docker", config={"image": image, "command": "sleep", "args": ["300"]})
    alloc_id = f"prepare-{time.monotonic_ns()}"
    ctx = TaskContext("prep", "g", alloc_id, task, tmp_path_factory.mktemp("task"), env={})
    driver.prepare(ctx)
    assert ensured == [image]
    for prepared, pulls in ((True, 1), (False, 2)):
        handle = driver.start(dataclasses.replace(ctx, prepared=prepared))
        try:
            assert driver.status(handle).running
        finally:
            driver.remove_container(handle.id)
        assert len(ensured) == pulls, (prepared, ensured)
