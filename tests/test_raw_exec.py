"""The raw_exec driver on the real thing (root): a task starts as root in its task dir with Nomad's
task environment, in a session and a cgroup of its own with its memory limit, without any namespace of
its own and with every signal at its default; it survives the driver being created again (reattached
by pid and start time; a pid some other process holds is not adopted); a stop sends kill_signal, then
SIGKILL after kill_timeout, and takes down children that left the process group; exit codes are
reported as docker reports them; `user = "nobody"` runs as nobody; a change_mode script runs as the
task runs; a disabled driver is refused. The driver is driven directly (AgentLab's agent cannot enable
raw_exec yet: CoreSettings has no raw_exec_enabled), except for the refusal.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.drivers.base import DriverError, TaskContext, TaskHandle
from agent.drivers.cgroups import Cgroups
from agent.drivers.hostproc import TOOL_PATH, proc_start_time
from agent.drivers.raw_exec import DISABLED, RawExecDriver
from agent.runner.logmonhook import HOST_LOGMON, LogLimits, LogmonOutput
from agent.structs.model import Resources, Task
from lab.waits import wait_until

pytestmark = [pytest.mark.root]
if os.geteuid() != 0:
    pytestmark.append(pytest.mark.skip(reason="needs root (cgroups, setpriv)"))

TIMEOUT = 20.0
NOBODY = 65534
MEMORY_MB = 48


@dataclass
class Exits:
    """What a driver's on_exit reported: (alloc id, handle id)."""

    seen: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, alloc: str, handle_id: str) -> None:
        with self.lock:
            self.seen.append((alloc, handle_id))

    def wait_for(self, alloc: str, handle: TaskHandle) -> None:
        wait_until(
            lambda: (True if (alloc, handle.id) in self.seen else None, str(self.seen)),
            timeout=TIMEOUT,
            what=f"the exit of pid {handle.id} to be reported",
            interval=0.05,
        )


@dataclass
class Bench:
    root: Path
    allocs: list[str] = field(default_factory=list)

    def task_dir(self, alloc: str) -> Path:
        d = self.root / "alloc" / alloc / "t"
        for sub in ("local", "secrets"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d.parent / "alloc").mkdir(exist_ok=True)
        return d

    def start(
        self,
        driver: RawExecDriver,
        script: str,
        *,
        user: str = "",
        kill_signal: str = "SIGINT",
        kill_timeout: float = 5.0,
    ) -> tuple[str, Task, TaskHandle, Path]:
        alloc = str(uuid.uuid4())
        self.allocs.append(alloc)
        task = Task(
            "t",
            "raw_exec",
            config={"command": "/bin/sh", "args": ["-c", script]},
            env={"GREETING": "hello"},
            resources=Resources(cpu=200, memory=MEMORY_MB),
            kill_signal=kill_signal,
            kill_timeout=kill_timeout,
            user=user,
        )
        task_dir = self.task_dir(alloc)
        env = {
            "GREETING": "hello",
            "NOMAD_ALLOC_ID": alloc,
            "NOMAD_TASK_NAME": "t",
            "NOMAD_JOB_NAME": "rawjob",
            "NOMAD_GROUP_NAME": "g",
            "NOMAD_ALLOC_DIR": str(task_dir.parent / "alloc"),
        }
        HOST_LOGMON.ensure(task_dir.parent, "t", LogLimits())  # as the runner does before a start
        output = LogmonOutput(HOST_LOGMON, task_dir.parent, "t")
        ctx = TaskContext(
            job="rawjob", group="g", alloc_id=alloc, task=task, task_dir=task_dir, env=env, output=output
        )
        return alloc, task, driver.start(ctx), task_dir

    def cleanup(self) -> None:
        for alloc in self.allocs:
            Cgroups.of_task(alloc, "t").kill_all()
            HOST_LOGMON.stop_all(self.root / "alloc" / alloc)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.cleanup()


def _wait_file(path: Path, needle: str, what: str) -> str:
    def seen() -> tuple[str | None, str]:
        text = path.read_text() if path.exists() else ""
        return (text if needle in text else None), text[-300:]

    return wait_until(seen, timeout=TIMEOUT, what=what, interval=0.05)


def _lines(text: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)


def _status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{name} not in /proc/{pid}/status")


REPORT = r"""
echo "uid $(id -u)"
echo "cwd $(pwd)"
echo "task_dir $NOMAD_TASK_DIR"
echo "secrets_dir $NOMAD_SECRETS_DIR"
echo "alloc_dir $NOMAD_ALLOC_DIR"
echo "name $NOMAD_TASK_NAME"
echo "greeting $GREETING"
echo "path $PATH"
echo ready
exec sleep 600
"""


def test_a_raw_exec_task_runs_as_root_in_its_task_dir_session_and_cgroup(bench: Bench) -> None:
    driver = RawExecDriver(Exits())
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an agent that ignores a signal must not pass
    try:  # that on to its tasks
        alloc, task, handle, task_dir = bench.start(driver, REPORT)
    finally:
        signal.signal(signal.SIGHUP, old)
    assert handle.driver == "raw_exec"
    pid = int(handle.id)
    stdout = task_dir.parent / "alloc" / "logs" / "t.stdout.0"  # through the task's logmon
    out = _lines(_wait_file(stdout, "ready", "the task's report"))
    assert out["uid"] == "0", out
    assert out["cwd"] == str(task_dir), out
    assert out["task_dir"] == str(task_dir / "local"), out
    assert out["secrets_dir"] == str(task_dir / "secrets"), out
    assert out["alloc_dir"] == str(task_dir.parent / "alloc"), out
    assert out["name"] == "t" and out["greeting"] == "hello", out
    assert "/usr/bin" in out["path"].split(":"), out

    # P is the workload itself (sh exec'd sleep), leader of its own session and process group.
    assert driver.status(handle).running and driver.pid(handle) == pid
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    assert os.getsid(pid) != os.getsid(0)
    # glibc reserves signals 32 and 33 (bits 31, 32) for itself: no userland tool can reset them, so an
    # ignored 32 inherited from whatever started the test run (seen under CI) is not the agent's doing.
    ignored = int(_status_field(pid, "SigIgn"), 16) & ~((1 << 31) | (1 << 32))
    assert ignored == 0, f"signals the agent ignores leaked to the task: {ignored:#x}"
    assert _status_field(pid, "Uid").split()[0] == "0"
    # No isolation: the agent's own namespaces.
    for ns in ("mnt", "pid", "net", "ipc", "uts"):
        assert os.readlink(f"/proc/{pid}/ns/{ns}") == os.readlink(f"/proc/self/ns/{ns}"), ns
    # Its own cgroup, with its limits, named as the sweeper finds exec tasks.
    name = f"{alloc}.t"
    assert name in Cgroups.names()
    cg = Cgroups.of_task(alloc, "t")
    assert cg.pids() == [pid]
    found = Cgroups.of_pid(pid)
    assert found is not None and found.name == name
    limit_files = [
        d / f for d in cg.dirs for f in ("memory.max", "memory.limit_in_bytes") if (d / f).exists()
    ]
    assert limit_files, cg.dirs
    assert int(limit_files[0].read_text()) == MEMORY_MB * 1024 * 1024

    driver.remove(alloc, task, handle)
    assert proc_start_time(pid) is None
    assert name not in Cgroups.names(), "remove left the task's cgroup"


SIGNALLED = r"""
trap 'echo USR1 >> local/signals' USR1
echo up >> local/signals
while :; do sleep 1 & wait $!; done
"""


def test_a_new_driver_reattaches_by_pid_and_start_time_and_a_reused_pid_is_not_adopted(
    bench: Bench,
) -> None:
    first = RawExecDriver(Exits())
    alloc, task, handle, task_dir = bench.start(first, SIGNALLED)
    signals = task_dir / "local" / "signals"
    _wait_file(signals, "up", "the task to start")
    pid = int(handle.id)

    exits = Exits()
    second = RawExecDriver(exits)  # what a restarted agent makes, with the handle from its state store
    again = TaskHandle.from_record(handle.to_record())
    assert second.status(again).running and second.pid(again) == pid
    second.reattach(alloc, again)
    second.signal(again, "SIGUSR1")
    _wait_file(signals, "USR1", "SIGUSR1 from the new driver")
    assert exits.seen == [], "a running task was reported as exited"

    # A pid another process holds now (this one has its own start time): never adopted.
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        impostor = TaskHandle("raw_exec", str(other.pid), handle.started_at)
        assert proc_start_time(other.pid) != handle.started_at
        assert not second.status(impostor).running and second.pid(impostor) == 0
        with pytest.raises(DriverError, match="is gone"):
            second.signal(impostor, "SIGTERM")
        second.stop(impostor, 1.0, "SIGKILL")
        second.reattach("impostor-alloc", impostor)
        assert ("impostor-alloc", str(other.pid)) in exits.seen, "reported as gone at once"
        assert other.poll() is None, "the driver touched a process that is not its task"
    finally:
        other.kill()
        other.wait()

    second.stop(again, task.kill_timeout, task.kill_signal)
    exits.wait_for(alloc, again)
    assert not second.status(again).running and proc_start_time(pid) is None


TERM_TRAP = r"""
trap 'echo TERM >> local/seen; exit 7' TERM
echo up >> local/seen
while :; do sleep 1 & wait $!; done
"""

IGNORES_INT = r"""
trap '' INT
setsid sleep 600 &
echo "$!" > local/escaped
echo up >> local/seen
while :; do sleep 1; done
"""


def test_stop_sends_kill_signal_then_sigkill_after_kill_timeout_and_reports_exit_codes(
    bench: Bench,
) -> None:
    exits = Exits()
    driver = RawExecDriver(exits)

    # kill_signal SIGTERM, handled: a quick, clean exit with the task's own code.
    alloc, task, handle, task_dir = bench.start(driver, TERM_TRAP, kill_signal="SIGTERM", kill_timeout=30)
    _wait_file(task_dir / "local" / "seen", "up", "the TERM task")
    t0 = time.monotonic()
    driver.stop(handle, task.kill_timeout, task.kill_signal)
    assert time.monotonic() - t0 < 10, "SIGTERM did not end the task: ended by SIGKILL"
    assert "TERM" in (task_dir / "local" / "seen").read_text()
    exits.wait_for(alloc, handle)
    assert driver.status(handle).exit_code == 7

    # The default kill_signal SIGINT, ignored: SIGKILL after kill_timeout (137), and a child that left
    # the process group (its own session) goes too.
    alloc, task, handle, task_dir = bench.start(driver, IGNORES_INT, kill_timeout=1.0)
    _wait_file(task_dir / "local" / "seen", "up", "the task that ignores SIGINT")
    escaped = int((task_dir / "local" / "escaped").read_text())
    # `$!` is known before the background child has called setsid(): wait for its own session.
    wait_until(
        lambda: (True if os.getsid(escaped) == escaped else None, f"sid {os.getsid(escaped)}"),
        timeout=TIMEOUT,
        what="the escaped child in a session of its own",
        interval=0.05,
    )
    assert escaped != int(handle.id)
    t0 = time.monotonic()
    driver.stop(handle, task.kill_timeout, task.kill_signal)
    took = time.monotonic() - t0
    assert 1.0 <= took < 8, took
    exits.wait_for(alloc, handle)
    assert driver.status(handle).exit_code == 137
    assert proc_start_time(escaped) is None, "a child that left the process group outlived the stop"

    # No handler: the workload dies of the agent's signal; 128+N, as docker and exec report it.
    alloc, task, handle, task_dir = bench.start(driver, "echo up > local/seen; exec sleep 600")
    _wait_file(task_dir / "local" / "seen", "up", "the plain task")
    driver.signal(handle, "SIGTERM")
    exits.wait_for(alloc, handle)
    assert driver.status(handle).exit_code == 143

    # A task that exits on its own (at once, even): its code, not a start failure.
    alloc, task, handle, task_dir = bench.start(driver, "exit 3")
    exits.wait_for(alloc, handle)
    assert driver.status(handle).exit_code == 3


def test_a_task_with_user_nobody_runs_as_nobody_and_so_does_its_change_script(bench: Bench) -> None:
    driver = RawExecDriver(Exits())
    script = 'echo "uid $(id -u)" > local/who; echo "gid $(id -g)" >> local/who; exec sleep 600'
    alloc, task, handle, task_dir = bench.start(driver, script, user="nobody")
    out = _lines(_wait_file(task_dir / "local" / "who", "gid", "the nobody task"))
    assert out == {"uid": str(NOBODY), "gid": str(pwd.getpwuid(NOBODY).pw_gid)}, out
    pid = int(handle.id)
    assert _status_field(pid, "Uid").split() == [str(NOBODY)] * 4
    assert _status_field(pid, "CapEff") == "0000000000000000"
    assert (task_dir / "local").stat().st_uid == NOBODY and (task_dir / "secrets").stat().st_uid == NOBODY

    # change_mode "script": as the task runs (user, cwd, environment, cgroup).
    code, said = driver.exec(
        handle,
        [
            "/bin/sh",
            "-c",
            'echo "uid $(id -u)"; echo "cwd $(pwd)"; echo "name $NOMAD_TASK_NAME"; '
            'echo "cgroup $(grep -c /nomad.slice/ /proc/self/cgroup)"',
        ],
        10.0,
        {"NOMAD_TASK_NAME": "t", "PATH": TOOL_PATH},  # as the runner recorded it at start
    )
    assert code == 0, said
    lines = _lines(said)
    assert lines["uid"] == str(NOBODY) and lines["cwd"] == str(task_dir) and lines["name"] == "t", said
    assert int(lines["cgroup"]) >= 1, said
    driver.remove(alloc, task, handle)
    assert proc_start_time(pid) is None


def test_a_root_tasks_change_script_runs_as_root_with_the_tasks_env(bench: Bench) -> None:
    driver = RawExecDriver(Exits())
    alloc, task, handle, task_dir = bench.start(driver, "echo up > local/seen; exec sleep 600")
    _wait_file(task_dir / "local" / "seen", "up", "the task")
    code, said = driver.exec(
        handle, ["/bin/sh", "-c", 'echo "$(id -u) $GREETING"'], 10.0, {"GREETING": "hello"}
    )
    assert (code, said) == (0, "0 hello\n")
    assert driver.exec(handle, ["/bin/sh", "-c", "exit 4"], 10.0) == (4, "")
    driver.remove(alloc, task, handle)


def test_a_missing_command_or_user_is_a_start_failure(bench: Bench) -> None:
    driver = RawExecDriver(Exits())
    alloc = str(uuid.uuid4())
    task_dir = bench.task_dir(alloc)
    for task, says in (
        (Task("t", "raw_exec", config={"command": "/no/such/tool"}), "not found"),
        (Task("t", "raw_exec", config={"command": "no-such-tool-4711"}), "not found"),
        (Task("t", "raw_exec", config={}), "command is required"),
        (Task("t", "raw_exec", config={"command": "/bin/true"}, user="no-such-user-4711"), "does not exist"),
    ):
        ctx = TaskContext(job="j", group="g", alloc_id=alloc, task=task, task_dir=task_dir, env={})
        with pytest.raises(DriverError, match=says):
            driver.start(ctx)


RAW_JOB = """
job "raw" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
"""


def test_a_disabled_raw_exec_is_refused_at_submission(tmp_path: Path) -> None:
    """The agent's default (raw_exec_enabled false): the job is refused with the reason, and nothing
    of it starts."""
    try:
        from tests.agent_lab import AgentLab, why_not_ready
    except Exception as exc:  # the agent does not import (another change in progress)
        pytest.skip(f"the agent does not import: {exc!r}")
    reason = why_not_ready()
    if reason:
        pytest.skip(reason)
    from agent.errors import AgentError

    lab = AgentLab(tmp_path / "agentlab")
    try:
        agent = lab.start_agent()
        try:
            assert not agent.core.drivers.enabled("raw_exec")
            assert agent.core.drivers.refusal("raw_exec") == DISABLED
            with pytest.raises(AgentError) as refused:
                agent.core.call(lambda: agent.core.job_registry.submit(RAW_JOB, None, source="test"))
            if "unsupported driver" in str(refused.value):
                pytest.skip("the jobspec does not take driver raw_exec yet")
            assert "raw_exec_enabled" in str(refused.value), refused.value
            assert agent.core.runners == {}, "a refused job started allocs"
        finally:
            agent.stop()
    finally:
        lab.cleanup()


def test_the_sweeper_sees_and_kills_an_orphaned_raw_exec_task(bench: Bench) -> None:
    """An alloc the agent no longer knows: its raw_exec task is found by its cgroup, as an exec task's
    is, and killed. Only this test's own removal is carried out (other cgroups on the node may belong
    to other tests' live allocs)."""
    from agent.drivers.docker import DockerDriver
    from agent.node.sweeper import Sweeper, plan_sweep

    docker = DockerDriver()
    try:
        docker.client.ping()
    except Exception as exc:
        pytest.skip(f"dockerd not reachable (the sweeper observes containers too): {exc}")
    driver = RawExecDriver(Exits())
    alloc, _task, handle, task_dir = bench.start(driver, "echo up > local/seen; exec sleep 600")
    _wait_file(task_dir / "local" / "seen", "up", "the task")
    pid = int(handle.id)
    sweeper = Sweeper(docker, None, bench.root)
    seen = sweeper.observe()
    assert (f"{alloc}.t", [pid]) in [(n, list(p)) for n, p in seen.task_cgroups]
    others = [n.rsplit(".", 1)[0] for n, _ in seen.task_cgroups if not n.startswith(alloc)]
    mine = [r for r in plan_sweep(others, seen) if r.owner == alloc]
    assert {r.kind for r in mine} == {"task_process", "alloc_dir"}, mine
    still_live = plan_sweep([*others, alloc], seen)
    assert not [r for r in still_live if r.owner == alloc], "a live alloc's raw_exec task would be swept"
    for r in mine:
        if r.kind == "task_process":
            sweeper._remove(r)
    assert proc_start_time(pid) is None, "the orphaned raw_exec task survived the sweep"
    assert f"{alloc}.t" not in Cgroups.names()
