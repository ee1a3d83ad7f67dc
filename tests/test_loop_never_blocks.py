"""The main loop never waits on a task: a stop that hangs until its kill_timeout and a change script
that hangs until its timeout run off the loop, and another alloc's restart still completes at once.
The alloc whose stop hangs takes its next operations in order once the stop is done.

Fakes for the drivers (their stop and exec block until the test releases them), the real Core with
its real loop thread and threaded offload (agent.client.offload).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from agent.client.core import Core
from agent.drivers.base import TaskHandle
from agent.drivers.registry import DriverRegistry
from agent.errors import NotRun
from agent.fieldbugs.faults import Faults
from agent.runner.alloc import AllocRunner
from agent.structs.records import AllocStatus
from tests.fakes import FakeDriver, FakeNode, FakeSweeper

HUNG = 60.0  # what a hung stop or script would block for: far past every wait below
RESTART_WITHIN = 2.0  # the bound for another alloc's restart while those hang


def spec(job: str, driver: str) -> str:
    config = 'image = "x"' if driver == "docker" else 'command = "/bin/sleep"'
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
      driver       = "{driver}"
      kill_timeout = "60s"
      config {{ {config} }}
    }}
  }}
}}
"""


class Hanging(FakeDriver):
    """Its stop and exec of the jobs in `hang` block until `release` is set (or HUNG passes)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, joins_container_netns=name == "docker")
        self.hang: set[str] = set()
        self.release = threading.Event()
        self.blocked: list[str] = []

    def _job(self, handle: TaskHandle) -> str:
        p = self.procs.get(handle.id)
        return p.ctx.job if p else ""

    def _block(self, what: str, handle: TaskHandle) -> None:
        if self._job(handle) in self.hang:
            self.blocked.append(what)
            self.release.wait(HUNG)

    def stop(self, handle: TaskHandle, timeout: float, sig: str) -> None:
        self._block("stop", handle)
        super().stop(handle, timeout, sig)

    def exec(
        self, handle: TaskHandle, argv: list[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        self._block("exec", handle)
        return 1, "script failed"


def wait_for(what: str, cond: Callable[[], bool], timeout: float) -> float:
    """Poll `cond` until true; the seconds it took. Fails naming `what` after `timeout`."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.01)
    return time.monotonic() - t0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Core, Hanging, Hanging]]:
    fake = FakeNode(tmp_path)
    docker, exec_ = Hanging("docker"), Hanging("exec")
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
    loop = threading.Thread(target=core.loop.run, name="main-loop", daemon=True)
    loop.start()
    yield core, docker, exec_
    docker.release.set()
    exec_.release.set()
    core.stop()
    loop.join(5)


def runner_of(core: Core, job: str) -> AllocRunner:
    return core.call(lambda: next(r for r in core.runners.values() if r.job.id == job), timeout=5)


def started(core: Core, alloc_id: str, cause: str) -> int:
    return sum(
        1
        for e in core.store.events(alloc_id)
        if e.type == "Started" and (e.details or {}).get("cause") == cause
    )


def test_hung_stop_and_hung_script_hold_up_no_other_alloc(node: tuple[Core, Hanging, Hanging]) -> None:
    core, docker, exec_ = node
    for job, driver in (("hung-stop", "docker"), ("hung-script", "docker"), ("crasher", "exec")):
        core.call(
            lambda job=job, driver=driver: core.job_registry.submit(spec(job, driver), "hcl"), timeout=10
        )
    docker.hang |= {"hung-stop", "hung-script"}

    # One stop that hangs (docker stop past its kill_timeout) ...
    stopping = runner_of(core, "hung-stop")
    core.call(lambda: core.job_registry.stop_job("hung-stop"), timeout=5)
    wait_for("the hung stop reached the driver", lambda: "stop" in docker.blocked, 5)
    # ... and one change script that hangs until its timeout.
    scripted = runner_of(core, "hung-script")
    script_done: list[tuple[int, str]] = []
    core.call(
        lambda: scripted.tasks[scripted.group.tasks[0].name].exec(
            ["/hang"], HUNG, lambda rc, out: script_done.append((rc, out))
        ),
        timeout=5,
    )
    wait_for("the hung script reached the driver", lambda: "exec" in docker.blocked, 5)

    # Another alloc's task crashes: its restart (delay 0s) completes while both hang.
    crasher = runner_of(core, "crasher")
    (hid,) = exec_.running()
    exec_.exit(hid, 7)
    core.allocs.report_exit(crasher.id, hid)
    took = wait_for(
        "the crashed task of another alloc restarted",
        lambda: started(core, crasher.id, "restart policy") == 1,
        RESTART_WITHIN,
    )
    print(f"restart of another alloc while a stop and a script hang: {took * 1000:.0f} ms")
    # The API answers too, and the hung ones are still where they were.
    views = core.call(lambda: [r.view() for r in core.runners.values()], timeout=RESTART_WITHIN)
    assert len(views) == 3
    assert stopping.rec.status is AllocStatus.RUNNING and stopping.serial.busy == "stop"
    assert script_done == []

    # What arrives for the stopping alloc meanwhile waits for the stop, in order.
    (stop_hid,) = [h for h, p in docker.procs.items() if p.ctx.job == "hung-stop"]
    core.allocs.report_exit(stopping.id, stop_hid)
    wait_for("the exit report queued behind the stop", lambda: stopping.serial.waiting == 1, 5)

    docker.release.set()
    wait_for("the stop finished", lambda: stopping.rec.status is AllocStatus.COMPLETE, 5)
    wait_for("the script's result came back", lambda: script_done == [(1, "script failed")], 5)
    assert stopping.serial.waiting == 0
    # The exit of the stopped task is not a crash: no restart, the alloc stays complete.
    assert started(core, stopping.id, "restart policy") == 0
    assert [e.type for e in core.store.events(stopping.id)][-1] != "Restarting"


def test_a_stop_during_a_hung_restart_waits_and_wins(node: tuple[Core, Hanging, Hanging]) -> None:
    """An operator restart whose stop hangs, then the job is stopped: the stop is recorded at once
    (a kill now would finish it at restore); when the restart's stop returns, the task is not
    started again, and the alloc completes. One start in all: the first."""
    core, docker, _ = node
    core.call(lambda: core.job_registry.submit(spec("web", "docker"), "hcl"), timeout=10)
    docker.hang.add("web")
    r = runner_of(core, "web")
    core.call(lambda: r.user_restart(r.group.tasks[0]), timeout=5)
    wait_for("the restart's stop reached the driver", lambda: docker.blocked == ["stop"], 5)
    core.call(lambda: core.job_registry.stop_job("web"), timeout=5)
    assert r.rec.desired.value == "stop"
    docker.release.set()
    wait_for("the alloc completed", lambda: r.rec.status is AllocStatus.COMPLETE, 5)
    assert len(docker.starts) == 1, [e.type for e in core.store.events(r.id)]
    assert started(core, r.id, "operator restart") == 0


def test_a_call_the_loop_did_not_take_in_time_is_withdrawn_not_run_later(tmp_path: Path) -> None:
    """The API's call times out while the loop is busy elsewhere: NotRun (HTTP 503, safe to retry),
    and when the loop comes round the call is not carried out behind its caller's back."""
    fake = FakeNode(tmp_path)
    core = Core(fake.store, fake.registry, fake.network, data_dir=tmp_path / "data", faults=Faults())
    ran: list[str] = []
    with pytest.raises(NotRun, match="not carried out"):
        core.call(lambda: ran.append("late"), timeout=0.2)  # no loop runs yet: nobody takes it
    loop = threading.Thread(target=core.loop.run, daemon=True)
    loop.start()
    assert core.call(lambda: ran.append("now") or "ok", timeout=5) == "ok"
    core.stop()
    loop.join(5)
    assert ran == ["now"], "a withdrawn call ran later"


def test_an_engine_that_does_not_answer_is_an_unavailable_driver_error(tmp_path: Path) -> None:
    """Every docker SDK or HTTP error reaches the runner as a DriverError; connection refused (dockerd
    restarting) is `unavailable`, so a recovery waits it out rather than failing the alloc."""
    import docker

    from agent.drivers.base import DriverError
    from agent.drivers.docker import DockerDriver

    sock = tmp_path / "docker.sock"
    client = docker.DockerClient(base_url=f"unix://{sock}", version="1.43", timeout=2)
    driver = DockerDriver(client)
    handle = TaskHandle("docker", "0" * 64, "t0")
    calls: list[Callable[[], object]] = [
        lambda: driver.status(handle),
        lambda: driver.stop(handle, 1.0),
        lambda: driver.signal(handle, "SIGHUP"),
        lambda: driver.pid(handle),
        driver.managed_containers,
        lambda: driver.start_pause("j", "g", "a" * 36),
    ]
    for call in calls:
        with pytest.raises(DriverError) as err:
            call()
        assert err.value.unavailable, err.value
        assert "engine unavailable" in str(err.value)
