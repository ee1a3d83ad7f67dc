"""`fieldlab-agent job dispatch` and `job periodic force` as a Nomad user types them (issue 52), against
the agent's API over mTLS (tests/agent_api.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent import cli
from tests.agent_api import Agent

PARAMETERIZED = """
job "report" {
  type = "batch"
  parameterized {
    payload       = "required"
    meta_required = ["owner"]
  }
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
      dispatch_payload { file = "input.txt" }
    }
  }
}
"""
# Jan 1st 09:00: never due while the test runs (the agent's own launcher runs on the real clock)
PERIODIC = """
job "nightly" {
  type = "batch"
  periodic { cron = "0 9 1 1 *" }
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_job_dispatch_runs_a_child_with_the_payload_and_the_meta(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    spec = tmp_path / "report.nomad.hcl"
    spec.write_text(PARAMETERIZED)
    assert _run(capsys, "job", "run", "-detach", *f, str(spec))[0] == 0
    payload = tmp_path / "payload.txt"
    payload.write_text("quarterly\n")
    code, out, err = _run(capsys, "job", "dispatch", *f, "-meta", "owner=ops", "report", str(payload))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Dispatched Job ID = report/dispatch-"), out
    child = lines[0].split(" = ")[1]
    assert lines[2] == f'==> Job "{child}" dispatched (version 0)', out
    assert out.count("    Allocation ") == 1, out
    (runner,) = [r for r in agent.core.runners.values() if r.job.id == child]
    assert (runner.tasks["t"].task_dir / "local" / "input.txt").read_text() == "quarterly\n"
    assert runner.job.meta == {"owner": "ops"}
    code, _, err = _run(capsys, "job", "dispatch", *f, "report", str(payload))
    assert code == 2 and "Dispatch did not provide required meta keys: [owner]" in err, err
    code, _, err = _run(capsys, "job", "dispatch", *f, "-meta", "owner", "report", str(payload))
    assert code == 2 and "-meta 'owner': KEY=VALUE" in err, err


def test_job_periodic_force_launches_a_child_now(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    spec = tmp_path / "nightly.nomad.hcl"
    spec.write_text(PERIODIC)
    assert _run(capsys, "job", "run", "-detach", *f, str(spec))[0] == 0
    assert list(agent.core.runners) == []
    code, out, err = _run(capsys, "job", "periodic", "force", *f, "nightly")
    assert code == 0, err
    assert out.startswith('==> Job "nightly/periodic-') and "launched by nightly (version 0)" in out, out
    # again within the same second: the same child, registered again unchanged (Nomad's no-op)
    code, out, _ = _run(capsys, "job", "periodic", "force", "-json", *f, "nightly")
    assert code == 0 and json.loads(out)["EvalID"]
    children = {j for j in agent.core.jobs if j.startswith("nightly/periodic-")}
    placed = [r.job.id for r in agent.core.runners.values() if r.job.parent_id == "nightly"]
    assert sorted(placed) == sorted(children) and len(children) in (1, 2)  # one alloc per child
    code, _, err = _run(capsys, "job", "periodic", "force", *f, "report")
    assert code == 2 and "job not found" in err, err
