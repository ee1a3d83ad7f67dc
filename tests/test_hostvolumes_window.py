"""No window between a host volume's check and its mount (issue 51): a component of the path
swapped for a link to the agent's own dir after the check never reaches the task. The runner holds
the checked dir open (agent.allocdir.hostvolumes.hold_host_volume) until the driver's start returned; the
exec driver's setup compares what it mounted with the held dir before the task runs; the docker
driver gives dockerd a bind of the held dir (root test at the end, real dockerd)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.allocdir.hostvolumes import HostVolumeError, dir_identity, hold_host_volume, pin_path
from agent.drivers.base import Mount, TaskContext, TaskHandle
from agent.drivers.exec import ExecDriver
from agent.jobspec import parse_jobspec
from agent.runner.alloc import AllocRunner
from agent.structs.records import AllocRecord, AllocStatus
from tests.fakes import FakeNode

SPEC = """
job "vol" {
  group "g" {
    volume "data" {
      type   = "host"
      source = "scratch"
    }
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
"""


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A host volume dir with a file "checked", and an "agent data dir" with "state.db" planted."""
    data_dir = tmp_path / "agent-data"
    data_dir.mkdir()
    (data_dir / "state.db").write_text("SQLite format 3")
    volume = tmp_path / "srv" / "scratch"
    volume.mkdir(parents=True)
    (volume / "checked").write_text("the operator's files")
    return volume, data_dir, tmp_path / "srv" / "scratch.moved"


def _swap(volume: Path, data_dir: Path, moved: Path) -> Callable[..., None]:
    def swap(*_: object) -> None:  # the window: the path now leads into the agent's data dir
        volume.rename(moved)
        volume.symlink_to(data_dir)

    return swap


def test_a_path_swapped_for_a_link_between_the_check_and_the_open_is_refused(tmp_path: Path) -> None:
    volume, data_dir, moved = _layout(tmp_path)
    with pytest.raises(HostVolumeError, match=r'host volume "scratch": .* changed while it was mounted'):
        hold_host_volume("scratch", str(volume), (data_dir,), checked=_swap(volume, data_dir, moved))


def test_a_parent_swapped_for_a_link_between_the_check_and_the_open_is_refused(tmp_path: Path) -> None:
    volume, data_dir, _ = _layout(tmp_path)
    (data_dir / "scratch").mkdir()
    srv = volume.parent

    def swap(_: Path) -> None:  # a parent component, not the last one
        srv.rename(tmp_path / "srv.moved")
        srv.symlink_to(data_dir)

    with pytest.raises(HostVolumeError, match="changed while it was mounted"):
        hold_host_volume("scratch", str(volume), (data_dir,), checked=swap)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_the_driver_gets_the_checked_dir_held_open_whatever_the_path_becomes(tmp_path: Path) -> None:
    """The swap happens in the driver's start (before it mounts): the dir it is handed, by its fd,
    is still the checked one; the fd is closed once the start returned."""
    node = FakeNode(tmp_path)
    data_dir = node.deps().data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "state.db").write_text("SQLite format 3")
    volume = tmp_path / "srv" / "scratch"
    volume.mkdir(parents=True)
    (volume / "checked").write_text("the operator's files")
    checked_identity = f"{volume.stat().st_dev}:{volume.stat().st_ino}"
    seen: list[tuple[list[str], str]] = []
    start = node.exec.start

    def start_after_swap(ctx: TaskContext) -> TaskHandle:
        _swap(volume, data_dir, tmp_path / "srv" / "scratch.moved")()
        (m,) = ctx.mounts
        assert m.fd >= 0, "the driver is handed the held dir, not only a path to resolve again"
        seen.append((sorted(os.listdir(f"/proc/self/fd/{m.fd}")), dir_identity(m.fd)))
        return start(ctx)

    node.exec.start = start_after_swap  # type: ignore[method-assign]
    before = _fds()
    job = parse_jobspec(SPEC, source="vol.hcl").job
    deps = node.deps()
    deps.host_volumes = {"scratch": (str(volume), False)}
    r = AllocRunner(deps, AllocRecord(id=str(uuid.uuid4()), job="vol", group="g"), job, job.groups[0])
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    assert r.rec.status is AllocStatus.RUNNING, r.rec.reason
    assert seen == [(["checked"], checked_identity)], "the mount's dir is the checked one, not the link's"
    assert "state.db" in os.listdir(volume), "the path itself now leads into the data dir"
    assert _fds() - before == set(), "the held fd is closed after the start"


def test_the_held_fd_is_closed_when_the_start_fails(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    volume = tmp_path / "srv" / "scratch"
    volume.mkdir(parents=True)

    def failing(ctx: TaskContext) -> TaskHandle:
        raise OSError("the driver failed")

    node.exec.start = failing  # type: ignore[method-assign]
    before = _fds()
    job = parse_jobspec(SPEC, source="vol.hcl").job
    deps = node.deps()
    deps.host_volumes = {"scratch": (str(volume), False)}
    r = AllocRunner(deps, AllocRecord(id=str(uuid.uuid4()), job="vol", group="g"), job, job.groups[0])
    node.store.put("alloc", r.id, r.rec.to_record())
    with contextlib.suppress(OSError):
        r.start()
    assert _fds() - before == set()


def _identity_line(script: str) -> str:
    (line,) = [x for x in script.splitlines() if "%d:%i" in x]
    return line


@pytest.mark.parametrize(("mounted", "ok"), [("checked", True), ("planted", False)])
def test_the_exec_setup_refuses_a_mount_that_is_not_the_held_dir(
    tmp_path: Path, mounted: str, ok: bool
) -> None:
    """The line the exec setup runs right after the bind, before any task process: run here on a
    root "$R" where /scratch is the checked dir or another one (what a swap would have mounted)."""
    volume, data_dir, _ = _layout(tmp_path)
    held = hold_host_volume("scratch", str(volume), ())
    try:
        mounts = (Mount(held.path, "/scratch", False, fd=held.fd),)
        script = ExecDriver().setup_script(tmp_path / "task", mounts)
        root = volume.parent  # "$R"/scratch is the checked dir itself
        if mounted == "planted":
            root = data_dir.parent / "root"
            (root / "scratch").mkdir(parents=True)  # another dir at the mount's place
        got = subprocess.run(
            ["/bin/sh", "-c", _identity_line(script)],
            env={"R": str(root)},
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        held.close()
    assert (got.returncode == 0) is ok, got
    if not ok:
        assert f"host volume {volume} at /scratch changed while it was mounted: refused" in got.stderr


def test_a_docker_bind_source_is_pinned_without_following_a_link(tmp_path: Path) -> None:
    """agent.allocdir.hostvolumes.pin_path: what the docker driver opens for a task's own bind (config
    `volumes`, `mount`), after dockermounts checked its resolved path."""
    volume, data_dir, moved = _layout(tmp_path)
    fd = pin_path(str(volume))
    try:
        assert os.listdir(f"/proc/self/fd/{fd}") == ["checked"]
    finally:
        os.close(fd)
    fd = pin_path(str(volume / "checked"))  # a file is bound as a file
    os.close(fd)
    fd = pin_path(str(tmp_path / "made" / "here"))  # missing dirs are made, as dockerd makes them
    os.close(fd)
    assert (tmp_path / "made" / "here").is_dir()
    _swap(volume, data_dir, moved)()
    with pytest.raises(OSError):
        pin_path(str(volume))  # the leaf is a link now
    with pytest.raises(OSError):
        pin_path(str(volume / "state.db"))  # a parent is a link now


# -- the real dockerd (root) ------------------------------------------------------------------------
@pytest.mark.root
def test_a_docker_tasks_host_volume_swapped_after_the_check_never_shows_the_planted_dir(
    tmp_path: Path,
) -> None:
    """The runner's check, then the path swapped for a link to a planted "agent data dir", then the
    docker driver's start: the container sees the checked dir; the staging bind is gone after."""
    from tests.agent_lab import why_not_ready

    if reason := why_not_ready():
        pytest.skip(reason)
    import docker

    from agent.drivers.docker import DockerDriver
    from agent.structs.model import Resources, Task

    volume, data_dir, moved = _layout(tmp_path)
    held = hold_host_volume("scratch", str(volume), (data_dir,))  # the runner's check (VolumeHook)
    _swap(volume, data_dir, moved)()  # right after it, before the driver mounts
    staging = tmp_path / "staging"
    driver = DockerDriver(staging_dir=staging)
    task_dir = tmp_path / "alloc" / "t"
    (task_dir / "local").mkdir(parents=True)
    (task_dir / "secrets").mkdir()
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    tags = driver.client.images.get("fieldlab/busybox:latest").tags  # a pinned tag: never a pull
    image = next((t for t in tags if not t.endswith(":latest")), "fieldlab/busybox:latest")
    cfg = {"image": image, "command": "/bin/ls", "args": ["/data"]}
    task = Task("t", "docker", config=cfg, resources=Resources(cpu=100, memory=64))
    mount = Mount(held.path, "/data", True, fd=held.fd)
    ctx = TaskContext(
        job="vol",
        group="g",
        alloc_id=str(uuid.uuid4()),
        task=task,
        task_dir=task_dir,
        env={},
        mounts=(mount,),
    )
    try:
        handle = driver.start(ctx)
    finally:
        held.close()
    container = driver.client.containers.get(handle.id)
    try:
        container.wait(timeout=60)
        listed = container.logs().decode().split()
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
    assert listed == ["checked"], f"the container saw {listed}, not the checked dir"
    assert os.listdir(staging) == [], "the staging bind is unmounted and removed once the container runs"
    assert str(staging) not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.root
def test_a_docker_config_volume_swapped_after_its_check_is_refused(tmp_path: Path) -> None:
    """A task's own bind (config volumes, a path in its dir) checked by dockermounts, then swapped
    for a link to a planted "agent data dir" before dockerd mounts it: the start is refused."""
    from tests.agent_lab import why_not_ready

    if reason := why_not_ready():
        pytest.skip(reason)
    import docker

    from agent.drivers.base import DriverError
    from agent.drivers.docker import DockerDriver
    from agent.drivers.dockernames import task_container_name
    from agent.structs.model import Resources, Task

    _, data_dir, _ = _layout(tmp_path)
    driver = DockerDriver(staging_dir=tmp_path / "staging")
    task_dir = tmp_path / "alloc" / "t"
    shared = task_dir / "local" / "shared"
    shared.mkdir(parents=True)
    (shared / "checked").write_text("the task's own files")
    (task_dir / "secrets").mkdir()
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    tags = driver.client.images.get("fieldlab/busybox:latest").tags
    image = next((t for t in tags if not t.endswith(":latest")), "fieldlab/busybox:latest")
    cfg = {"image": image, "command": "/bin/ls", "args": ["/data"], "volumes": ["local/shared:/data"]}
    task = Task("t", "docker", config=cfg, resources=Resources(cpu=100, memory=64))
    ctx = TaskContext("vol", "g", str(uuid.uuid4()), task, task_dir, env={})
    first = driver.client.containers.get(driver.start(ctx).id)  # unswapped: the bind works, pinned
    try:
        first.wait(timeout=60)
        assert first.logs().decode().split() == ["checked"]
    finally:
        first.remove(force=True)
    checked = driver.options

    def options_then_swap(c: TaskContext) -> object:
        got = checked(c)  # dockermounts resolved and checked the source here
        shared.rename(task_dir / "local" / "moved")
        shared.symlink_to(data_dir)
        return got

    driver.options = options_then_swap  # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(DriverError, match="changed while it was mounted"):
            handle = driver.start(ctx)
            container = driver.client.containers.get(handle.id)
            container.wait(timeout=60)
            listed = container.logs().decode().split()
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
            pytest.fail(f"started; the container saw {listed}")
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            driver.client.containers.get(task_container_name("t", ctx.alloc_id)).remove(force=True)
    assert not (tmp_path / "staging").exists() or os.listdir(tmp_path / "staging") == []
