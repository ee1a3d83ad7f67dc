"""The driver-option fault flags on the real thing (root): each flag's field symptom on a running
workload, as its catalogue scenario shows it in the lab, and the fixed driver without it. exec:
nomad-16642 (a user's cap_add only in the bounding set) and nomad-9911 (the node's pid namespace), read
from /proc of the workload; docker: nomad-1977, 8153 and 10572 on the real dockerd, from what the
container wrote into its alloc dir. The pure mappings: tests/test_driver_fault_flags.py."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.drivers.base import DriverError, TaskContext
from agent.drivers.docker import DockerDriver
from agent.drivers.exec import ExecDriver
from agent.drivers.raw_exec import RawExecDriver
from agent.fieldbugs.bugs import Bugs
from agent.structs.model import Resources, Task
from lab.waits import wait_until
from tests.agent_lab import why_not_ready
from tests.test_exec_options import (
    CAP_NET_BIND_SERVICE,
    Bench,
    _caps,
    _exec_workload,
    _pid_ns,
    _sleeping,
    bench,
)

pytestmark = [pytest.mark.root]
if os.geteuid() != 0:
    pytestmark.append(pytest.mark.skip(reason="needs root (namespaces, setpriv, dockerd)"))

__all__ = ["bench"]  # the fixture, from tests/test_exec_options.py


def test_exec_cap_add_is_effective_for_a_user_and_the_flag_leaves_it_bounding_only(bench: Bench) -> None:
    config = {"command": "/bin/sleep", "args": ["600"], "cap_drop": ["all"], "cap_add": ["net_bind_service"]}
    handle, task_dir = bench.start(ExecDriver(exits_dir=None), config)
    pid = _exec_workload(handle, task_dir)
    assert _caps(pid, "CapEff") == 1 << CAP_NET_BIND_SERVICE
    flagged = ExecDriver(exits_dir=None, bugs=Bugs(exec_caps_bounding_only=True))
    handle, task_dir = bench.start(flagged, config)
    pid = _exec_workload(handle, task_dir)
    assert (_caps(pid, "CapBnd"), _caps(pid, "CapEff")) == (1 << CAP_NET_BIND_SERVICE, 0)


def test_an_exec_task_has_its_own_pid_namespace_and_the_flag_shares_the_nodes(bench: Bench) -> None:
    config = {"command": "/bin/sleep", "args": ["600"]}
    handle, task_dir = bench.start(ExecDriver(exits_dir=None), config)
    assert _pid_ns(_exec_workload(handle, task_dir)) != _pid_ns(os.getpid())
    flagged = ExecDriver(exits_dir=None, bugs=Bugs(exec_shared_pid_namespace=True))
    handle, task_dir = bench.start(flagged, config)
    assert _pid_ns(_exec_workload(handle, task_dir)) == _pid_ns(os.getpid())


def test_a_user_has_no_capability_and_the_flag_gives_it_every_one(bench: Bench) -> None:
    config = {"command": "/bin/sleep", "args": ["600"]}
    handle, task_dir = bench.start(ExecDriver(exits_dir=None), config)
    assert _caps(_exec_workload(handle, task_dir), "CapEff") == 0
    flagged = ExecDriver(exits_dir=None, bugs=Bugs(exec_user_full_caps=True))
    handle, task_dir = bench.start(flagged, config)
    # every capability the agent holds (its own bounding set: all of them on a lab node)
    assert _caps(_exec_workload(handle, task_dir), "CapEff") == _caps(os.getpid(), "CapBnd")


@contextlib.contextmanager
def agent_oom_score_adj(value: int) -> Iterator[None]:
    """The agent's (this process's) oom_score_adj for a while: what its children would inherit.
    Raised, not lowered: no CAP_SYS_RESOURCE needed, and lowering it back to where it was is allowed."""
    own = Path("/proc/self/oom_score_adj")
    before = own.read_text().strip()
    own.write_text(str(value))
    try:
        yield
    finally:
        own.write_text(before)


def _oom(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def test_tasks_get_oom_score_adj_0_and_the_flag_leaves_exec_tasks_the_agents(bench: Bench) -> None:
    config = {"command": "/bin/sleep", "args": ["600"]}
    with agent_oom_score_adj(345):
        handle, task_dir = bench.start(ExecDriver(exits_dir=None), config)
        assert _oom(_exec_workload(handle, task_dir)) == 0
        flagged = ExecDriver(exits_dir=None, bugs=Bugs(exec_inherits_oom_score_adj=True))
        handle, task_dir = bench.start(flagged, config)
        assert _oom(_exec_workload(handle, task_dir)) == 345
        handle, _ = bench.start(RawExecDriver(exits_dir=None), config)
        pid = int(handle.id)
        wait_until(
            lambda: (_sleeping(pid) or None, "not yet"), timeout=20, what="sleep to run", interval=0.02
        )
        assert _oom(pid) == 0


# -- docker ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image() -> str:
    """A tag of the lab's busybox other than latest: found on the node, never pulled."""
    reason = why_not_ready()
    if reason:
        pytest.skip(reason)
    tags = DockerDriver().client.images.get("fieldlab/busybox:latest").tags
    pinned = [t for t in tags if not t.endswith(":latest")]
    if not pinned:
        pytest.skip("no pinned tag of fieldlab/busybox on this node (the workload_images role makes one)")
    return str(pinned[0])


@pytest.fixture
def started() -> Iterator[list[tuple[DockerDriver, str]]]:
    made: list[tuple[DockerDriver, str]] = []
    yield made
    for driver, cid in made:
        driver.client.containers.get(cid).remove(force=True)


def _wrote(
    started: list[tuple[DockerDriver, str]], bugs: Bugs, image: str, config: dict[str, Any], script: str
) -> str:
    """What the container wrote to /alloc/out.txt ("" when it did not start: the DriverError's text)."""
    driver = DockerDriver(bugs=bugs)
    root = Path(tempfile.mkdtemp(prefix="flags-"))
    task_dir = root / "app"
    for sub in (task_dir / "local" / "conf", task_dir / "secrets", root / "alloc" / "logs"):
        sub.mkdir(parents=True)
    (task_dir / "local" / "conf" / "app.conf").write_text("greeting=hello\n")
    config = {
        "image": image,
        "command": "sh",
        "args": ["-c", f"{script} > /alloc/out.txt 2>&1; sleep 60"],
        **config,
    }
    task = Task("app", "docker", config=config, resources=Resources(cpu=100, memory=64))
    ctx = TaskContext(
        job="flags",
        group="g",
        alloc_id=str(uuid.uuid4()),
        task=task,
        task_dir=task_dir,
        env={},
        network_mode="none",
    )
    try:
        handle = driver.start(ctx)
    except DriverError as exc:
        return f"refused: {exc}"
    started.append((driver, handle.id))
    out = root / "alloc" / "out.txt"
    return str(
        wait_until(
            lambda: ((out.read_text().strip() if out.exists() else "") or None, "nothing written yet"),
            timeout=20,
            what="the container's out.txt",
        )
    )


def test_docker_flags_on_the_real_engine(image: str, started: list[tuple[DockerDriver, str]]) -> None:
    caps = (
        'while read k v; do [ "$k" = CapEff: ] && echo "net_raw=$(( (0x$v >> 13) & 1 ))"; '
        "done < /proc/self/status"
    )
    assert _wrote(started, Bugs(), image, {}, caps) == "net_raw=0"
    assert _wrote(started, Bugs(net_raw_by_default=True), image, {}, caps) == "net_raw=1"
    limit = "{ cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null; }"
    hard = {"memory_hard_limit": 128}
    assert _wrote(started, Bugs(), image, hard, limit) == str(128 << 20)
    said = _wrote(started, Bugs(swap_below_hard_limit=True), image, hard, limit)
    assert said.startswith("refused:") and "memoryswap" in said, said
    conf = {"volumes": ["local/conf:/etc/app"]}
    assert _wrote(started, Bugs(), image, conf, "cat /etc/app/app.conf") == "greeting=hello"
    said = _wrote(started, Bugs(volumes_relative_to_alloc_dir=True), image, conf, "cat /etc/app/app.conf")
    assert "No such file" in said, said
