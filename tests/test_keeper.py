"""agent/drivers/keeper.py, the parent of a process task's P that records how P ended (no root: a keeper of
plain commands, its records in a tmp dir). The driver's use of it across agent restarts is in
tests/test_agent_runtime.py and tests/test_lifecycle_agent.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from agent.drivers.hostproc import proc_start_time
from agent.drivers.keeperclient import KEEPER
from lab.waits import wait_until

WAIT = 20.0  # seconds for a keeper to start P, or to record its end


class Kept:
    def __init__(self, exits: Path, *argv: str, prefix: str = "a1.t.") -> None:
        self.exits = exits
        r, w = os.pipe2(os.O_CLOEXEC)
        self.keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", KEEPER, str(exits), prefix, str(w), *argv],
            pass_fds=(w,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        os.close(w)
        with os.fdopen(r, "rb") as report:
            self.report = report.read().decode().strip()
        self.prefix = prefix

    @property
    def pid(self) -> int:
        return int(self.report.split()[0])

    def record(self) -> str:
        pid, started = self.report.split()
        path = self.exits / f"{self.prefix}{pid}-{started}"

        def written() -> tuple[str | None, str]:
            return (path.read_text() if path.exists() else None), f"{path.name}: {os.listdir(self.exits)}"

        return wait_until(written, timeout=WAIT, what="the keeper's record", interval=0.02).strip()


def test_the_exit_code_is_recorded_under_the_pid_and_start_time_p_had(tmp_path: Path) -> None:
    kept = Kept(tmp_path, "/bin/sh", "-c", "sleep 0.2; exit 7")
    pid, started = kept.report.split()
    assert proc_start_time(int(pid), zombie_ok=True) in (started, None)  # None: ended and reaped already
    assert kept.record() == "7"
    assert kept.keeper.wait(WAIT) == 0
    assert [p.name for p in tmp_path.iterdir()] == [f"a1.t.{pid}-{started}"], "no temporary file left"
    assert (tmp_path / f"a1.t.{pid}-{started}").stat().st_mode & 0o777 == 0o600


def test_p_gets_signals_at_their_default_while_the_keeper_ignores_them(tmp_path: Path) -> None:
    # INT to itself: a P that inherited the keeper's ignored SIGINT would sleep on and exit 0
    kept = Kept(tmp_path, "/bin/sh", "-c", "kill -INT $$; sleep 5; exit 0")
    assert kept.record() == str(-signal.SIGINT)
    # the stop's signal goes to P's group, not the keeper's: a keeper sent it directly lives on
    kept = Kept(tmp_path, "/bin/sleep", "30")
    os.kill(kept.keeper.pid, signal.SIGTERM)
    os.killpg(kept.pid, signal.SIGTERM)
    assert kept.record() == str(-signal.SIGTERM)
    assert kept.keeper.wait(WAIT) == 0


def test_p_is_in_a_session_of_its_own_without_the_report_pipe(tmp_path: Path) -> None:
    kept = Kept(tmp_path, "/bin/sh", "-c", "exec sleep 30")
    try:

        def sleeping() -> tuple[bool | None, str]:
            comm = Path(f"/proc/{kept.pid}/comm").read_text().strip()
            return (True if comm == "sleep" else None), comm

        wait_until(sleeping, timeout=WAIT, what="P exec'ing its command", interval=0.02)
        assert os.getsid(kept.pid) == kept.pid != os.getsid(kept.keeper.pid)
        fds = sorted(int(n) for n in os.listdir(f"/proc/{kept.pid}/fd"))
        assert fds == [0, 1, 2], fds
    finally:
        os.killpg(kept.pid, signal.SIGKILL)
    assert kept.record() == str(-signal.SIGKILL)


def test_a_command_that_cannot_start_is_said_on_the_report_pipe(tmp_path: Path) -> None:
    kept = Kept(tmp_path, "/no/such/program")
    assert kept.report.startswith("error cannot start '/no/such/program'"), kept.report
    assert kept.keeper.wait(WAIT) == 2 and list(tmp_path.iterdir()) == []


def test_bad_arguments_are_a_usage_line_and_exit_2(tmp_path: Path) -> None:
    for args in ([], [str(tmp_path), "p", "x", "/bin/true"], [str(tmp_path), "a/b", "5", "/bin/true"]):
        out = subprocess.run([sys.executable, "-I", "-S", KEEPER, *args], capture_output=True, check=False)
        assert out.returncode == 2 and out.stderr.startswith(b"usage: keeper.py"), (args, out)


def test_a_record_written_after_the_driver_first_looked_is_still_read(tmp_path: Path) -> None:
    """The driver asks as soon as P's pidfd fires; the keeper reaps P and writes a moment later
    (a first look that fixed the record's name before it existed read nothing: a flaky setup test)."""
    import threading

    from agent.drivers.base import TaskHandle
    from agent.drivers.raw_exec import RawExecDriver

    driver = RawExecDriver(exits_dir=tmp_path)
    handle = TaskHandle("raw_exec", "4242", "777")
    assert driver.recorded_code(handle) is None
    timer = threading.Timer(0.3, lambda: (tmp_path / "a1.t.4242-777").write_text("-15\n"))
    timer.start()
    try:
        assert driver.recorded_code(handle, wait=WAIT) == 143  # 128 + SIGTERM, as docker reports it
    finally:
        timer.cancel()
    driver.forget_records("a1", "t")
    assert list(tmp_path.iterdir()) == []
