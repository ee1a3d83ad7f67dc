"""`fieldlab-agent` as a user of Nomad's CLI meets it: `alloc logs -f -tail` prints the last lines
at once while the task keeps logging, a reader that goes away (`| head -1`) ends the CLI quietly,
`alloc exec` passes stdin by default (Nomad's -i defaults to true), NOMAD_ADDR and the TLS variables
are read as Nomad's CLI reads them, `alloc status` is laid out as `nomad alloc status`."""

from __future__ import annotations

import copy
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import cli
from agent.cli import allocstatus, commands
from agent.cli import logs as cli_logs
from agent.cli.parser import split_command
from agent.drivers import execframes as ef
from agent.drivers import raw_exec
from agent.drivers.base import TaskHandle
from agent.errors import AgentError
from lab.waits import wait_until
from tests.agent_api import Agent

SESSION_WAIT = 10.0  # seconds a subprocess of the CLI gets to answer
TICKS = 60  # lines a busy task writes, TICK apart, before it stops
TICK = 0.1  # seconds between them: never the 1 s of quiet the old window waited for


# -- 1. alloc logs -f -tail -n N: the last N lines at once, then the rest as it comes --------------


def test_a_followed_tail_prints_its_last_lines_while_the_task_keeps_logging() -> None:
    """The task logs every TICK seconds and never falls quiet for 1 s: its last 3 lines come out
    while it is still logging (the old window waited for 1 s of quiet, i.e. here for the task's
    last line), and every later line follows in order, none lost or doubled."""
    written: list[bytes] = []
    seen_first = threading.Event()

    def busy_task() -> Iterator[bytes]:
        backlog = b"".join(b"old %d\n" % i for i in range(1, 21))
        written.append(backlog)
        yield backlog
        for k in range(TICKS):
            if seen_first.wait(TICK):
                break
            line = b"tick %d\n" % k
            written.append(line)
            yield line

    out = cli_logs.tail_lines(busy_task(), 3)
    first = next(out)
    seen_first.set()
    ticks_before = sum(1 for w in written if w.startswith(b"tick"))
    assert ticks_before < TICKS, "the last lines came out only once the task had stopped logging"
    rest = b"".join(out)
    assert len(first.splitlines()) == 3, first
    assert b"".join(written).endswith(first + rest), (first, rest)


# -- 3. a reader that goes away: a quiet end, as a Unix CLI's ----------------------------------------


def _cli(*argv: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,  # type: ignore[call-overload]
    )


def _running(agent: Agent, tmp_path: Path) -> str:
    spec = tmp_path / "web.hcl"
    spec.write_text(
        'job "web" {\n  group "g" {\n    task "srv" {\n      driver = "exec"\n'
        '      config { command = "/bin/sleep" }\n    }\n  }\n}\n'
    )
    assert cli.main(["job", "run", "-detach", *agent.flags, str(spec)]) == 0
    alloc: str = agent.core.call(lambda: next(iter(agent.core.runners)))
    return alloc


def test_a_log_piped_into_head_ends_quietly(agent: Agent, tmp_path: Path) -> None:
    """`fieldlab-agent alloc logs ID | head -1`: head reads one line and goes away; the CLI ends as
    Nomad's does (killed by SIGPIPE: exit 141 in a shell), with nothing on stderr."""
    alloc = _running(agent, tmp_path)
    logs = agent.node.root / "data" / "alloc" / alloc / "alloc" / "logs"
    logs.mkdir(parents=True)
    (logs / "srv.stdout.0").write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)))
    for follow in ([], ["-f"]):
        cli = _cli("alloc", "logs", *follow, *agent.flags, alloc[:8])
        assert cli.stdout is not None and cli.stderr is not None
        assert cli.stdout.readline() == b"line 0\n"
        cli.stdout.close()  # what head does after its line
        code = cli.wait(SESSION_WAIT)
        err = cli.stderr.read().decode()
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert (code, err) == (141, ""), follow


# -- 4. NOMAD_ADDR and the TLS variables, as Nomad's CLI reads them ------------------------------------

NOMAD_VARS = ("NOMAD_ADDR", "NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY")
OURS = (
    "FIELDLAB_AGENT_ADDR",
    "FIELDLAB_AGENT_CACERT",
    "FIELDLAB_AGENT_CLIENT_CERT",
    "FIELDLAB_AGENT_CLIENT_KEY",
)


def test_nomads_variables_are_read_with_the_flags_over_them() -> None:
    env = dict(zip(NOMAD_VARS, ("https://nomad:4646", "n-ca.pem", "n.crt", "n.key"), strict=True))
    none: dict[str, object] = {}
    assert commands.api_settings(none, env) == {
        "address": "https://nomad:4646",
        "ca_file": "n-ca.pem",
        "cert_file": "n.crt",
        "key_file": "n.key",
        "server_name": "",
        "skip_verify": False,
    }
    flags = {"address": "https://flag:4646", "key_file": "f.key", "server_name": "a.b", "skip_verify": True}
    got = commands.api_settings(flags, env)
    assert (got["address"], got["ca_file"], got["key_file"]) == ("https://flag:4646", "n-ca.pem", "f.key")
    assert (got["server_name"], got["skip_verify"]) == ("a.b", True)
    # this CLI's own variables are the more particular: they win over Nomad's
    both = {**env, "FIELDLAB_AGENT_ADDR": "https://ours:4646"}
    assert commands.api_settings(none, both)["address"] == "https://ours:4646"
    tls = {**env, "NOMAD_TLS_SERVER_NAME": "client.global.nomad", "NOMAD_SKIP_VERIFY": "1"}
    assert commands.api_settings(none, tls)["server_name"] == "client.global.nomad"
    assert commands.api_settings(none, tls)["skip_verify"] is True
    assert commands.api_settings(none, {**env, "NOMAD_SKIP_VERIFY": "false"})["skip_verify"] is False
    with pytest.raises(AgentError, match=r"NOMAD_SKIP_VERIFY='yes': true or false"):
        commands.api_settings(none, {**env, "NOMAD_SKIP_VERIFY": "yes"})


def test_the_cli_reaches_the_agent_with_nomads_variables_alone(
    agent: Agent, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """NOMAD_ADDR, NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY and no flag: the agent is
    reached. NOMAD_TLS_SERVER_NAME names the cert's name to check (a wrong one is refused),
    NOMAD_SKIP_VERIFY=true checks nothing."""
    f = agent.flags
    for key in (*OURS, "NOMAD_TLS_SERVER_NAME", "NOMAD_SKIP_VERIFY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in zip(NOMAD_VARS, (f[0].split("=", 1)[1], f[2], f[4], f[6]), strict=True):
        monkeypatch.setenv(key, value)
    assert cli.main(["node", "status"]) == 0
    assert capsys.readouterr().out.startswith("Name          = client1\n")
    monkeypatch.setenv("NOMAD_TLS_SERVER_NAME", "wrong.example")
    assert cli.main(["node", "status"]) == 2
    assert "certificate verify failed" in capsys.readouterr().err
    assert cli.main(["node", "status", "-tls-server-name", "localhost"]) == 0  # in the cert's names
    capsys.readouterr()
    monkeypatch.setenv("NOMAD_SKIP_VERIFY", "true")
    assert cli.main(["node", "status"]) == 0
    capsys.readouterr()


# -- 2. alloc exec: stdin attached by default (-i), a terminal when there is one (-t) ------------------


class CatSession:
    """An exec session (agent.drivers.session.ExecSession) that answers as `cat` would: without a
    tty, what came on stdin once stdin has ended; with one, the line typed once Enter comes."""

    def __init__(self, tty: bool) -> None:
        self.tty, self.stdin, self.done = tty, b"", False
        self.ended = threading.Event()  # stdin ended (without a tty) or a line was typed (with one)
        self.stdin_closed = threading.Event()
        self.killed = threading.Event()

    def read(self) -> tuple[bytes, bytes]:
        if self.done:
            return ef.STDOUT, b""
        self.ended.wait(SESSION_WAIT)
        self.done = True
        return ef.STDOUT, b"got " + self.stdin

    def write(self, data: bytes) -> None:
        self.stdin += data
        if self.tty and (b"\r" in data or b"\n" in data):  # Enter, raw or not yet
            self.ended.set()

    def close_stdin(self) -> None:
        self.stdin_closed.set()
        self.ended.set()

    def resize(self, rows: int, cols: int) -> None:
        pass

    def wait(self, timeout: float) -> int | None:
        return 137 if self.killed.is_set() else 0

    def kill(self) -> None:
        self.killed.set()


def _cat(agent: Agent) -> list[tuple[list[str], bool, CatSession]]:
    """Each exec session the agent opens in the fake exec driver: (command, tty, session)."""
    opened: list[tuple[list[str], bool, CatSession]] = []

    def exec_session(handle: TaskHandle, argv: list[str], *, tty: bool, **kw: Any) -> CatSession:
        opened.append((argv, tty, CatSession(tty)))
        return opened[-1][2]

    agent.node.exec.exec_session = exec_session  # type: ignore[method-assign,assignment]
    return opened


def test_exec_takes_nomads_defaults_for_i_and_t() -> None:
    """Nomad's `alloc exec`: -i defaults to true, -t to whether stdin and stdout are terminals, -t
    without -i is refused; Go's bool flags take `-i=false`."""
    args = cli.parser_().parse_args(split_command(["alloc", "exec", "ab12", "cat"])[0])
    assert (args.stdin, args.tty) == (None, None)
    assert commands.exec_modes(None, None, terminals=False) == (True, False)
    assert commands.exec_modes(None, None, terminals=True) == (True, True)
    head, cmd = split_command(["alloc", "exec", "-i=false", "-t=0", "ab12", "ls"])
    args = cli.parser_().parse_args(head)
    assert (args.stdin, args.tty, cmd) == (False, False, ["ls"])
    assert commands.exec_modes(False, False, terminals=True) == (False, False)
    assert commands.exec_modes(True, False, terminals=True) == (True, False)
    with pytest.raises(AgentError, match="-i must be enabled if running with tty"):
        commands.exec_modes(False, None, terminals=True)


def test_piped_stdin_reaches_the_command_and_its_end_closes_the_commands_stdin(
    agent: Agent, tmp_path: Path
) -> None:
    """`echo hi | fieldlab-agent alloc exec ID cat` prints hi, and `< FILE` the file (no -i given)."""
    alloc = _running(agent, tmp_path)
    opened = _cat(agent)
    for given in ("pipe", "file"):
        feed = tmp_path / "feed"
        feed.write_bytes(b"hi\n")
        with feed.open("rb") as file:
            run = subprocess.run(
                [sys.executable, "-m", "agent.cli", "alloc", "exec", *agent.flags, alloc[:8], "cat"],
                input=b"hi\n" if given == "pipe" else None,
                stdin=None if given == "pipe" else file,
                capture_output=True,
                timeout=SESSION_WAIT * 2,
                check=False,
            )
        assert (run.returncode, run.stdout, run.stderr) == (0, b"got hi\n", b""), given
        argv, tty, session = opened[-1]
        assert (argv, tty, session.stdin_closed.is_set()) == (["cat"], False, True), given


def test_exec_on_a_terminal_is_interactive_without_flags(agent: Agent, tmp_path: Path) -> None:
    """`fieldlab-agent alloc exec ID /bin/sh` on a terminal: a tty session with the keys typed going
    in (it used to end at once, its stdin closed, rc 0)."""
    alloc = _running(agent, tmp_path)
    opened = _cat(agent)
    argv = [sys.executable, "-m", "agent.cli", "alloc", "exec", *agent.flags, alloc[:8], "/bin/sh"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on the pty (its stdin, stdout and stderr)
        os.execv(sys.executable, argv)
    try:
        wait_until(
            lambda: (True if opened else None, "no session"),
            timeout=SESSION_WAIT,
            what="the exec session",
            interval=0.05,
        )
        os.write(fd, b"hello\r")
        seen = b""
        while b"got hello" not in seen:
            if not select.select([fd], [], [], SESSION_WAIT)[0]:
                break
            try:
                more = os.read(fd, 4096)
            except OSError:  # EIO: the CLI ended
                break
            if not more:
                break
            seen += more
        _, status = os.waitpid(pid, 0)
        pid = 0
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    ((command, tty, _),) = opened
    assert (command, tty) == (["/bin/sh"], True)
    assert b"got hello" in seen, seen
    assert os.waitstatus_to_exitcode(status) == 0


# -- 5. the raw_exec-disabled refusal: once, with how to enable it -------------------------------------

RAW = """job "r" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
"""


def test_a_raw_exec_job_on_a_client_without_it_is_refused_once_saying_how_to_enable_it(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent's answer (and so the CLI's line) says the reason once, with Nomad's client config
    for it and the lab's switch."""
    monkeypatch.setattr(agent.core.drivers, "_disabled", {"raw_exec": raw_exec.DISABLED})
    spec = tmp_path / "r.hcl"
    spec.write_text(RAW)
    assert cli.main(["job", "run", *agent.flags, str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("driver raw_exec is disabled on this client") == 1, err
    assert 'plugin "raw_exec" { config { enabled = true } }' in err, err
    assert '"raw_exec_enabled": true' in err and "make lab-up RAW_EXEC=1" in err, err
    assert err.startswith("fieldlab-agent: error: job r: register: HTTP 400: ") and err.count("\n") == 1, err


# -- 6. alloc status laid out as `nomad alloc status` -------------------------------------------------

MIB = 1024 * 1024


def test_alloc_status_is_laid_out_as_nomads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nomad's command/alloc_status.go: the header (Eval ID, Node ID/Name, Desired Description),
    the addresses, then a block per task (lifecycle tasks first) with its resources (usage from the
    stats), its times and restarts and its own Recent Events (Time, Type, Description)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    from tests.test_agent_cli import EVENTS, JOB, NOW, VIEW, nomad_alloc

    job = copy.deepcopy(JOB)
    job["TaskGroups"][0]["Tasks"][1]["Lifecycle"] = {"Hook": "prestart", "Sidecar": False}
    alloc = nomad_alloc(VIEW, EVENTS, job)
    alloc["EvalID"] = "e1e2e3e4-0000-4000-8000-000000000009"
    alloc["TaskResources"]["redis"].update(CPU=500, MemoryMB=256, MemoryMaxMB=512)
    alloc["Resources"]["DiskMB"] = 300
    memory = {"RSS": 0, "Usage": 50 * MIB, "Measured": ["Usage"]}  # cgroup v2: no RSS, its Usage
    usage = {"CpuStats": {"TotalTicks": 12.7}, "MemoryStats": memory}
    text = allocstatus.alloc_status(alloc, NOW, stats={"Tasks": {"redis": {"ResourceUsage": usage}}})
    head, addresses, side = text.split("\n\n")[:3]
    redis = 'Task "redis"' + text.split('Task "redis"')[1].split("\n\nTask Events")[0]
    assert head.splitlines() == [
        "ID                  = 8c1a2b3c-0000-4000-8000-000000000001",
        "Eval ID             = e1e2e3e4",
        "Name                = web.cache[0]",
        "Node ID             = 5f8e2d1c",
        "Node Name           = client1",
        "Job ID              = web",
        "Job Version         = 3",
        "Client Status       = running",
        "Client Description  = <none>",
        "Desired Status      = run",
        "Desired Description = <none>",
        "Created             = 5m ago",
        "Modified            = 5s ago",
    ]
    assert addresses == (
        'Allocation Addresses (mode = "bridge"):\n'
        "Label  Dynamic  Address\n"
        "*http  yes      10.213.251.5:20000 -> 8080"
    )
    assert side.startswith('Task "side" (prestart) is "dead"\nTask Resources:\nCPU    Memory  Disk '), side
    assert redis == (
        'Task "redis" is "running"\n'
        "Task Resources:\n"
        "CPU         Memory          Disk     Addresses\n"
        "12/500 MHz  50 MiB/256 MiB  300 MiB\n"
        "            Max: 512 MiB"
    )
    blocks = text.split('Task "redis" is "running"')[1]
    assert (
        "Task Events:\n"
        "Started At     = 2023-11-14T22:08:41Z\n"
        "Finished At    = N/A\n"
        "Total Restarts = 2\n"
        "Last Restart   = N/A\n"
        "\n"
        "Recent Events:\n"
        "Time                  Type          Description\n"
        "2023-11-14T22:11:40Z  Network Lost  pause container died\n"
        "2023-11-14T22:08:41Z  Started       start 11\n"
    ) in blocks
    assert "2023-11-14T22:13:15Z  Terminated    Exit Code: 1" in text.split('Task "redis"')[0]
    assert [allocstatus.ibytes(n) for n in (0, 9, 5 * MIB, 256 * MIB, 1536 * MIB)] == [
        "0 B",
        "9 B",
        "5.0 MiB",
        "256 MiB",
        "1.5 GiB",
    ]


def test_alloc_status_through_the_cli_reads_the_alloc_and_its_stats(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alloc = _running(agent, tmp_path)
    assert cli.main(["alloc", "status", *agent.flags, alloc[:8]]) == 0
    out = capsys.readouterr().out
    assert "\nNode ID             = 5f8e2d1c\nNode Name           = client1\n" in out, out
    assert '\n\nTask "srv" is "running"\nTask Resources:\nCPU' in out, out
    assert "\nTask Events:\nStarted At     = " in out and "\nTotal Restarts = 0\n" in out, out
    assert "\nRecent Events:\nTime" in out and "  Started   " in out, out
