"""A task's environment as exec'd (agent.drivers.hostproc.read_environ), what `alloc exec` and change
scripts run with. A process caught in the middle of an execve shows an empty environ for a moment;
that read is taken again (CI met it: a raw_exec task's `exec sleep` and the exec of a change script)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.drivers import hostproc
from agent.drivers.hostproc import read_environ


def test_a_live_process_environment_is_read_as_it_was_execd() -> None:
    proc = subprocess.Popen(["sleep", "30"], env={"GREETING": "hello", "EMPTY": ""})
    try:
        assert read_environ(proc.pid) == {"GREETING": "hello", "EMPTY": ""}
    finally:
        proc.kill()
        proc.wait()


def test_an_empty_read_mid_execve_is_read_again_until_the_environment_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = iter([b"", b"", b"GREETING=hello\0NOMAD_TASK_NAME=t\0"])
    monkeypatch.setattr(Path, "read_bytes", lambda self: next(reads))
    assert read_environ(4242) == {"GREETING": "hello", "NOMAD_TASK_NAME": "t"}


def test_an_environment_that_stays_empty_or_is_gone_reads_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostproc, "ENVIRON_SETTLE", 0.05)
    proc = subprocess.Popen(["sleep", "30"], env={})
    try:
        assert read_environ(proc.pid) == {}
    finally:
        proc.kill()
        proc.wait()
    assert read_environ(proc.pid) == {}  # reaped: no /proc entry
