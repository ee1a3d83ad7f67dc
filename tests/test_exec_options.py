"""The exec and raw_exec drivers' options on the real thing (root), read back from /proc of the
running workload: exec's `work_dir` (its cwd, inside the chroot), `cap_add` (ambient for a user, as
Nomad's executor) and `cap_drop` (out of root's bounding set), `pid_mode = "host"` where the plugin's
default_pid_mode is "host" (and the pid namespace otherwise); raw_exec's `work_dir`, `oom_score_adj`
and `denied_envvars` (the plugin's and the task's). The drivers are driven directly, as
tests/test_raw_exec.py does. The mapping and refusals: tests/test_execopts.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.command.plugins import ExecPlugin, RawExecPlugin
from agent.drivers.base import TaskContext, TaskHandle
from agent.drivers.cgroups import Cgroups
from agent.drivers.exec import ExecDriver, task_init
from agent.drivers.hostproc import children
from agent.drivers.raw_exec import RawExecDriver
from agent.runner.logmonhook import HOST_LOGMON, LogLimits, LogmonOutput
from agent.structs.model import Resources, Task
from lab.waits import wait_until

pytestmark = [pytest.mark.root]
if os.geteuid() != 0:
    pytestmark.append(pytest.mark.skip(reason="needs root (namespaces, cgroups, setpriv)"))

TIMEOUT = 20.0
CAP_CHOWN, CAP_KILL, CAP_NET_BIND_SERVICE = 0, 5, 10


@dataclass
class Bench:
    root: Path
    started: list[tuple[ExecDriver | RawExecDriver, TaskHandle, str]] = field(default_factory=list)

    def start(
        self,
        driver: ExecDriver | RawExecDriver,
        config: dict[str, Any],
        *,
        user: str = "",
        env: dict[str, str] | None = None,
    ) -> tuple[TaskHandle, Path]:
        alloc = str(uuid.uuid4())
        task_dir = self.root / "alloc" / alloc / "t"
        for sub in ("local", "secrets"):
            (task_dir / sub).mkdir(parents=True)
        (task_dir.parent / "alloc").mkdir()
        task = Task("t", driver.name, config=config, resources=Resources(cpu=100, memory=32), user=user)
        HOST_LOGMON.ensure(task_dir.parent, "t", LogLimits())
        ctx = TaskContext(
            job="opts",
            group="g",
            alloc_id=alloc,
            task=task,
            task_dir=task_dir,
            env={"NOMAD_ALLOC_ID": alloc, **(env or {})},
            output=LogmonOutput(HOST_LOGMON, task_dir.parent, "t"),
        )
        handle = driver.start(ctx)
        self.started.append((driver, handle, alloc))
        return handle, task_dir

    def cleanup(self) -> None:
        for driver, handle, alloc in self.started:
            driver.stop(handle, 1.0, "SIGKILL")
            Cgroups.of_task(alloc, "t").kill_all()
            HOST_LOGMON.stop_all(self.root / "alloc" / alloc)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.cleanup()


def _sleeping(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"sleep")
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()
    except OSError:
        return "(gone)"


def _exec_workload(handle: TaskHandle, task_dir: Path) -> int:
    """The exec workload's host pid once it runs `sleep` (the child of the task's init)."""

    def found() -> tuple[int | None, str]:
        init = task_init(int(handle.id))
        kids = children(init[0]) if init else []
        seen = [(c, _cmdline(c)) for c in children(int(handle.id))]
        logs = task_dir.parent / "alloc" / "logs"
        said = [f.read_text()[-300:] for f in sorted(logs.glob("t.std*"))] if logs.is_dir() else []
        why = f"init {init}, its children {kids}, P {_cmdline(int(handle.id))} with {seen}, output {said}"
        return next((k for k in kids if _sleeping(k)), None), why

    return wait_until(found, timeout=TIMEOUT, what="the exec workload to run sleep", interval=0.02)


def _caps(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"{name} not in /proc/{pid}/status")


def _same_dir(pid: int, host_dir: Path) -> bool:
    a, b = os.stat(f"/proc/{pid}/cwd"), os.stat(host_dir)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _pid_ns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def test_exec_work_dir_caps_and_pid_mode_on_the_running_workload(bench: Bench) -> None:
    sleep = {"command": "/bin/sleep", "args": ["600"]}
    user_task = {**sleep, "work_dir": "/local/wd", "cap_add": ["net_bind_service"]}
    handle, task_dir = bench.start(ExecDriver(exits_dir=None), user_task)
    pid = _exec_workload(handle, task_dir)
    assert _same_dir(pid, task_dir / "local" / "wd"), os.readlink(f"/proc/{pid}/cwd")
    for name in ("CapAmb", "CapEff", "CapBnd"):  # nobody, with only the added cap (Nomad: ambient)
        assert _caps(pid, name) == 1 << CAP_NET_BIND_SERVICE, name
    assert _pid_ns(pid) != _pid_ns(os.getpid())  # private, the default
    # root, less what it drops; host pid namespace where the plugin's default says so
    driver = ExecDriver(exits_dir=None, allow_root=True, plugin=ExecPlugin(default_pid_mode="host"))
    handle, task_dir = bench.start(driver, {**sleep, "cap_drop": ["CHOWN"], "pid_mode": "host"}, user="root")
    pid = _exec_workload(handle, task_dir)
    bounding = _caps(pid, "CapBnd")
    assert not bounding & (1 << CAP_CHOWN) and bounding & (1 << CAP_KILL), hex(bounding)
    assert _caps(pid, "CapAmb") == 0
    assert _pid_ns(pid) == _pid_ns(os.getpid())


def test_raw_exec_work_dir_oom_score_adj_and_denied_envvars(bench: Bench, tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    wd.mkdir()
    driver = RawExecDriver(exits_dir=None, plugin=RawExecPlugin(denied_envvars=("PLUGIN_*",)))
    config = {
        "command": "/bin/sleep",
        "args": ["600"],
        "work_dir": str(wd),
        "oom_score_adj": 432,
        "denied_envvars": ["TASK_SECRET"],
    }
    env = {"PLUGIN_KEY": "1", "TASK_SECRET": "2", "KEPT": "3"}
    handle, _ = bench.start(driver, config, env=env)
    pid = int(handle.id)
    wait_until(
        lambda: (_sleeping(pid) or None, "not yet"), timeout=TIMEOUT, what="sleep to run", interval=0.02
    )
    assert _same_dir(pid, wd)
    assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "432"
    names = {
        e.split(b"=", 1)[0].decode() for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e
    }
    assert "KEPT" in names and not names & {"PLUGIN_KEY", "TASK_SECRET"}, names
