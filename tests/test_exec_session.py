"""`fieldlab-agent alloc exec -i/-t` end to end (root): the real CLI, run on a pseudo-terminal of
the test's own, talks mTLS to a real API server (the agent's Nomad routes and its exec websocket,
`GET /v1/client/allocation/:id/exec`) over a real Core with a docker task, an exec task and a
raw_exec task on the controller's dockerd.

What a bug would break: typed input reaching the command and its answer coming back, the exit code,
the command getting a terminal of the caller's size that follows a window resize, stdout and stderr
apart without -t, the session being inside the task (an exec task's chroot, pid namespace and user:
never the agent's files), and the command dying with its session when the caller goes away or
breaks the websocket's format (no exec left running in a task).
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from agent.api.client import ApiClient
from agent.api.server import ApiServer
from agent.cli.calls import CallError
from agent.cli.session import exec_path
from agent.cli.wsclient import WebSocket
from agent.command.config import Config, TLSConfig
from agent.drivers.base import LABEL_TASK
from agent.drivers.session import set_winsize
from agent.errors import AgentError
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.nomadapi.wsexec import exec_stream
from lab.waits import wait_until
from tests.agent_lab import AgentLab, AgentUnderTest, build_workload_images, why_not_ready
from tests.pki import TestCA

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

CLI = str(Path(sys.executable).with_name("fieldlab-agent"))
ANSWER_TIMEOUT = 30.0  # seconds for a typed command's answer to come back through the session
GONE_TIMEOUT = 20.0  # seconds for a session's command to be killed after its caller went away
NOBODY = 65534

JOB = """
job "shell" {
  group "g" {
    task "box" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sleep"
        args    = ["600"]
      }
    }
    task "jail" {
      driver = "exec"
      user   = "nobody"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
    task "raw" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
"""


class Terminal:
    """The CLI on a pty of its own (its controlling terminal), as a user's shell would run it."""

    def __init__(self, argv: list[str], env: dict[str, str], rows: int, cols: int) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a terminal of this size, then the CLI
            set_winsize(0, rows, cols)
            os.execve(CLI, [CLI, *argv], env)
        self.pid, self.fd, self.seen = pid, fd, b""
        self.code: int | None = None

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def resize(self, rows: int, cols: int) -> None:
        set_winsize(self.fd, rows, cols)  # the kernel sends the CLI (the foreground) SIGWINCH

    def expect(self, text: str, timeout: float = ANSWER_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} did not come within {timeout:g}s; seen: {self.seen[-600:]!r}")
            if select.select([self.fd], [], [], left)[0]:
                try:
                    more = os.read(self.fd, 65536)
                except OSError:  # EIO: the CLI has ended and closed the terminal
                    more = b""
                if not more:
                    raise AssertionError(f"the CLI ended before {text!r}; seen: {self.seen[-600:]!r}")
                self.seen += more
        return self.seen.decode(errors="replace")

    def expect_prompt(self) -> None:
        def prompted() -> tuple[bool | None, str]:
            text = self.seen.rstrip(b"\x1b[J6n\r")
            return (True if text.endswith((b"$ ", b"# ", b"$", b"#")) else None), repr(self.seen[-80:])

        deadline = time.monotonic() + ANSWER_TIMEOUT
        while not prompted()[0]:
            if time.monotonic() > deadline:
                raise AssertionError(f"no shell prompt within {ANSWER_TIMEOUT:g}s: {self.seen[-300:]!r}")
            if select.select([self.fd], [], [], 1.0)[0]:
                self.seen += os.read(self.fd, 65536)

    def exit_code(self, timeout: float = ANSWER_TIMEOUT) -> int:
        def ended() -> tuple[int | None, str]:
            with_data = select.select([self.fd], [], [], 0)[0]
            if with_data:
                with contextlib.suppress(OSError):  # EIO: the CLI has closed the terminal
                    self.seen += os.read(self.fd, 65536)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            return (os.waitstatus_to_exitcode(status) if pid else None), "the CLI still running"

        self.code = wait_until(ended, timeout=timeout, what="the CLI to exit", interval=0.1)
        return self.code

    def close(self) -> None:
        if self.code is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentLab]:
    tmp = tmp_path_factory.mktemp("exec-session")
    (tmp / "images").mkdir()
    build_workload_images(tmp / "images")
    lab = AgentLab(tmp / "agentlab")
    yield lab
    lab.cleanup()


@pytest.fixture(scope="module")
def served(
    lab: AgentLab, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[AgentUnderTest, ApiClient, str]]:
    """One agent and one alloc for the module: the tests only exec into its tasks."""
    ca = TestCA(tmp_path_factory.mktemp("exec-session-pki"))
    srv, op = (
        ca.issue("client1.agent.fieldlab", server=True),
        ca.issue("controller.operator.fieldlab", server=False),
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cfg = Config(
        node_name="t", bind_address="127.0.0.1", port=port, tls=TLSConfig(srv.cert, srv.key, ca.ca_file)
    )
    agent = lab.start_agent(raw_exec_enabled=True)
    nomad = NomadApi(
        agent.core,
        NodeIdentity("5f8e2d1c-0000-4000-8000-000000000003", "t", "dc1", "global", f"127.0.0.1:{port}"),
    )
    server = ApiServer(cfg, {}, build_nomad_routes(nomad), [exec_stream(nomad)])
    server.start()
    api = ApiClient(f"https://127.0.0.1:{port}", str(ca.ca_file), str(op.cert), str(op.key))
    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(JOB, None, source="shell.hcl"))[
            "allocs"
        ]

        def running() -> tuple[bool | None, str]:
            view = agent.core.call(lambda: agent.core.allocs.runner(alloc).view())
            states = {name: t["state"] for name, t in view["tasks"].items()}
            return (True if set(states.values()) == {"running"} else None), str(states)

        wait_until(running, timeout=90, what="the three tasks running")
        yield agent, api, alloc
    finally:
        server.stop(5)
        agent.stop_job("shell")
        agent.stop()


def _resized(term: Terminal, size: str) -> tuple[bool | None, str]:
    """The resize travels as a frame: ask the command's terminal until it has the new size."""
    term.type("stty size\r")
    try:
        term.expect(size, timeout=2.0)
        return True, "resized"
    except AssertionError as exc:
        return None, str(exc)


def _env(api: ApiClient) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FIELDLAB_AGENT_ADDR": api.address,
        "FIELDLAB_AGENT_CACERT": api.ca_file,
        "FIELDLAB_AGENT_CLIENT_CERT": api.cert_file,
        "FIELDLAB_AGENT_CLIENT_KEY": api.key_file,
    }


def test_a_tty_session_in_each_driver_types_answers_resizes_and_exits(
    served: tuple[AgentUnderTest, ApiClient, str], lab: AgentLab
) -> None:
    _, api, alloc = served
    for task, shell in (("box", "sh"), ("jail", "/bin/sh"), ("raw", "/bin/sh")):
        term = Terminal(["alloc", "exec", "-i", "-t", alloc[:8], task, "--", shell], _env(api), 33, 101)
        try:
            term.expect_prompt()  # a shell reading its terminal (typed-ahead keys may be flushed)
            term.type("echo sum=$((6*7))\r")
            term.expect("sum=42")
            term.type('stty size; test -t 0 && echo stdin-is-a-"tty"\r')  # quoted: not matched by the echo
            term.expect("33 101")
            term.expect("stdin-is-a-tty")
            term.resize(40, 120)

            wait_until(
                partial(_resized, term, "40 120"),
                timeout=ANSWER_TIMEOUT,
                what=f"{task}: the new window size in the session",
            )
            if task == "jail":  # inside the exec task: its chroot, its pid namespace, its user
                term.type(f'id -u; echo pid=$$; ls {lab.data_dir} || echo no-agent-"dir"\r')
                seen = term.expect("no-agent-dir")
                assert f"{NOBODY}\r\n" in seen, seen
                pid_line = seen[seen.rindex("pid=") :].split()[0]
                assert int(pid_line.removeprefix("pid=")) < 100, (
                    f"not in the task's pid namespace: {pid_line}"
                )
            term.type("exit 7\r")
            assert term.exit_code() == 7, term.seen[-400:]
        finally:
            term.close()


def test_without_a_tty_stdin_flows_in_and_stdout_and_stderr_stay_apart(
    served: tuple[AgentUnderTest, ApiClient, str],
) -> None:
    _, api, alloc = served
    for task in ("box", "jail"):
        run = subprocess.run(
            [
                CLI,
                "alloc",
                "exec",
                "-i",
                alloc[:8],
                task,
                "--",
                "/bin/sh",
                "-c",
                "tr a-z A-Z; echo err >&2; exit 3",
            ],
            input=b"hello from stdin\n" * 5000,  # more than one frame: 85 KB
            capture_output=True,
            env=_env(api),
            timeout=ANSWER_TIMEOUT,
            check=False,
        )
        assert run.returncode == 3, run.stderr
        assert run.stdout == b"HELLO FROM STDIN\n" * 5000, run.stdout[-200:]
        assert run.stderr == b"err\n"


def _running_sleepers(lab: AgentLab, alloc: str, marker: str) -> int:
    """How many `sleep <marker>` run in the alloc's docker task (what a session started there)."""
    (box,) = [c for c in lab.containers(alloc) if c.labels.get(LABEL_TASK) == "box"]
    out = box.exec_run(["sh", "-c", f"ps -o args | grep -c '^sleep {marker}$' || true"]).output
    return int(out.decode().strip())


def test_a_session_whose_caller_goes_away_or_breaks_the_format_ends_its_command(
    served: tuple[AgentUnderTest, ApiClient, str], lab: AgentLab
) -> None:
    _, api, alloc = served

    def sleepers(marker: str) -> int:
        return _running_sleepers(lab, alloc, marker)

    # The caller is killed mid-session.
    term = Terminal(["alloc", "exec", "-i", "-t", alloc[:8], "box", "--", "sleep", "4711"], _env(api), 24, 80)
    try:
        wait_until(
            lambda: (True if sleepers("4711") == 1 else None, "not started"),
            timeout=ANSWER_TIMEOUT,
            what="the session's sleep",
        )
        os.kill(term.pid, signal.SIGKILL)
        os.waitpid(term.pid, 0)
        term.code = -9
        wait_until(
            lambda: (True if sleepers("4711") == 0 else None, f"{sleepers('4711')} left"),
            timeout=GONE_TIMEOUT,
            what="the sleep of a session whose caller was killed to be killed",
        )
    finally:
        term.close()

    # The caller breaks the websocket's format: an unmasked frame, or a terminal of no size.
    for marker, breaking in (("4712", bytes([0x81, 0x02]) + b"{}"), ("4713", None)):
        ws = WebSocket.connect(api, exec_path(alloc, "box", ["sleep", marker], tty=breaking is None), "exec")
        try:
            wait_until(
                partial(_count_is, sleepers, marker, 1),
                timeout=ANSWER_TIMEOUT,
                what="the raw session's sleep",
            )
            if breaking is None:
                ws.send({"tty_size": {"height": 0, "width": 0}})
            else:
                ws.sock.sendall(breaking)
            wait_until(
                partial(_count_is, sleepers, marker, 0),
                timeout=GONE_TIMEOUT,
                what=f"the sleep of a session that broke the format to be killed ({marker})",
            )
        finally:
            ws.close()


def _count_is(sleepers: Callable[[str], int], marker: str, n: int) -> tuple[bool | None, str]:
    found = sleepers(marker)
    return (True if found == n else None), f"{found} running"


def _exit_of(ws: WebSocket) -> int:
    """The exit code the agent sends last (the session's stdin closed first)."""
    ws.send({"stdin": {"close": True}})
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while time.monotonic() < deadline:
        messages, closed = ws.receive()
        for m in messages:
            if m.get("exited"):
                return int(m["result"]["exit_code"])
        assert closed is None, f"closed without an exit code: {closed}"
    raise AssertionError("no exit code")


def test_a_session_is_refused_with_a_reason_and_without_an_upgrade(
    served: tuple[AgentUnderTest, ApiClient, str],
) -> None:
    _, api, alloc = served
    for task, command, status, says in (
        ("nope", ["sh"], 404, "task 'nope' not found"),
        ("box", [], 400, "command must be a JSON list of strings"),
    ):
        with pytest.raises(CallError) as caught:
            WebSocket.connect(api, exec_path(alloc, task, command, tty=False), "exec")
        assert caught.value.status == status and says in caught.value.reason, caught.value
    # a command that is not there starts a session whose exit code says so (127 from the shell's
    # exec, or the agent's -1 when it could not start it)
    ws = WebSocket.connect(api, exec_path(alloc, "raw", ["/no/such/binary"], tty=True), "exec")
    try:
        assert _exit_of(ws) != 0
    finally:
        ws.close()
    with pytest.raises(AgentError, match=r"cannot reach|closed"):  # no client cert: no TLS session
        WebSocket.connect(
            ApiClient(api.address, api.ca_file, "", ""), exec_path(alloc, "box", ["sh"], tty=False), "exec"
        )
