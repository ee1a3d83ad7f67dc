"""`fieldlab-agent alloc logs` and `alloc exec` through the CLI, over mTLS, against the agent's Nomad
routes (the logs route, the exec websocket) with a real docker task and a real exec task on the
controller's dockerd (root): the container's stdout and stderr apart, an exec's output (its stdout
and stderr apart) and exit code, the command killed past -timeout, and an exec task's log files."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import cli
from agent.api.server import ApiServer
from agent.command.config import Config, TLSConfig
from agent.drivers.base import LABEL_TASK
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.nomadapi.wsexec import exec_stream
from lab.waits import wait_until
from tests.agent_lab import AgentLab, build_workload_images, why_not_ready
from tests.pki import TestCA

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

JOB = """
job "talk" {
  group "g" {
    task "docker" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sh"
        args    = ["-c", "echo to-stdout; echo to-stderr >&2; exec sleep 600"]
      }
    }
    task "proc" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo proc-out; echo proc-err >&2; exec sleep 600"]
      }
    }
  }
}
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[AgentLab]:
    (tmp_path / "images").mkdir()
    build_workload_images(tmp_path / "images")
    lab = AgentLab(tmp_path / "agentlab")
    yield lab
    lab.cleanup()


def test_logs_and_exec_through_the_cli_against_real_tasks(
    lab: AgentLab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = TestCA(tmp_path)
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
    agent = lab.start_agent()
    nomad = NomadApi(
        agent.core,
        NodeIdentity("5f8e2d1c-0000-4000-8000-000000000002", "t", "dc1", "global", f"127.0.0.1:{port}"),
    )
    server = ApiServer(cfg, {}, build_nomad_routes(nomad), [exec_stream(nomad)])
    server.start()
    flags = ["-address", f"https://127.0.0.1:{port}", "-ca-cert", str(ca.ca_file)]
    flags += ["-client-cert", str(op.cert), "-client-key", str(op.key)]

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(JOB, None, source="talk.hcl"))[
            "allocs"
        ]

        def logged() -> tuple[bool | None, str]:
            got = [run("alloc", "logs", *flags, alloc[:8], t)[1] for t in ("docker", "proc")]
            ok = got[0] == "to-stdout\n" and "proc-out\n" in got[1]
            return (True if ok else None), str(got)

        wait_until(logged, timeout=60, what="both tasks' stdout")
        assert run("alloc", "logs", "-stderr", *flags, alloc[:8], "docker")[:2] == (0, "to-stderr\n")
        code, out, _ = run("alloc", "logs", "-stderr", *flags, alloc[:8], "proc")
        assert code == 0 and "proc-err\n" in out  # after what the exec driver's setup may have said

        script = "echo hi; echo oops >&2; exit 3"
        code, out, err = run("alloc", "exec", *flags, alloc[:8], "docker", "--", "sh", "-c", script)
        assert (code, out, err) == (3, "hi\n", "oops\n")
        code, out, _ = run("alloc", "exec", *flags, alloc[:8], "proc", "--", "/bin/sh", "-c", "echo in-proc")
        assert (code, out) == (0, "in-proc\n")
        code, _, err = run("alloc", "exec", *flags, "-timeout", "1", alloc[:8], "docker", "--", "sleep", "31")
        assert code == 126 and "timeout" in err
        (box,) = [c for c in lab.containers(alloc) if c.labels.get(LABEL_TASK) == "docker"]

        def sleeping() -> tuple[bool | None, str]:
            ps = box.exec_run(["ps", "-o", "args"]).output.decode()
            return (None if "sleep 31" in ps else True), ps

        wait_until(sleeping, timeout=20, what="the exec past its -timeout to be killed")
    finally:
        server.stop(5)
        agent.stop_job("talk")
        agent.stop()
