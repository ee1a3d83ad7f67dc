"""Host volumes mounted for real (root, a real agent): an exec task (in its chroot) and a docker task
see the node's directory at their destination, can write it when it is read-write and cannot when
any of the client, the group or the mount says read only; raw_exec, with no filesystem of its own,
is refused as Nomad refuses it. tests/test_volumes.py has the rules without root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.waits import wait_until
from tests.agent_lab import AgentLab, AgentUnderTest

WAIT = 60.0  # seconds for a task to run its script and the alloc to settle

pytestmark = [pytest.mark.root]

SCRIPT = (
    "cat /data/in > $NOMAD_TASK_DIR/seen; "
    "if echo x > /data/out-$NOMAD_TASK_NAME 2>/dev/null; then w=yes; else w=no; fi; "
    "echo $w > $NOMAD_TASK_DIR/wrote"
)


def _job(driver: str, read_only: str) -> str:
    config = (
        f'image = "fieldlab/busybox:lab"\n        command = "/bin/sh"\n        args = ["-c", "{SCRIPT}"]'
        if driver == "docker"
        else f'command = "/bin/sh"\n        args = ["-c", "{SCRIPT}"]'
    )
    return f"""
job "vol-{driver}" {{
  type = "batch"
  group "g" {{
    volume "data" {{
      type   = "host"
      source = "shared"
    }}
    task "t" {{
      driver = "{driver}"
      config {{
        {config}
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
        read_only   = {read_only}
      }}
    }}
  }}
}}
"""


def _view(agent: AgentUnderTest, alloc: str) -> dict[str, Any]:
    return next(v for v in agent.core.call(agent.core.allocs.views) if v["id"] == alloc)


def _ended(agent: AgentUnderTest, alloc: str) -> dict[str, Any]:
    def done() -> tuple[dict[str, Any] | None, str]:
        v = _view(agent, alloc)
        return (v if v["status"] in ("complete", "failed") else None), str(v["status"])

    return wait_until(done, timeout=WAIT, what=f"alloc {alloc[:8]} to end")


@pytest.mark.parametrize("driver", ["exec", "docker"])
@pytest.mark.parametrize("read_only", ["false", "true"])
def test_a_task_sees_the_host_volume_and_writes_it_only_when_read_write(
    lab: AgentLab, tmp_path: Path, driver: str, read_only: str
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # an exec task runs as nobody
    (shared / "in").write_text("from the host\n")
    agent = lab.start_agent(host_volumes=(("shared", str(shared), False),))
    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(_job(driver, read_only), "hcl"))[
            "allocs"
        ]
        view = _ended(agent, alloc)
        assert view["status"] == "complete", view
        local = lab.data_dir / "alloc" / alloc / "t" / "local"
        assert (local / "seen").read_text() == "from the host\n", "the volume is at /data"
        wrote = (local / "wrote").read_text().strip()
        assert wrote == ("no" if read_only == "true" else "yes")
        assert (shared / "out-t").exists() is (read_only == "false")
    finally:
        agent.stop()


def test_a_read_only_host_volume_of_the_client_stays_read_only(lab: AgentLab, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "in").write_text("ro\n")
    agent = lab.start_agent(host_volumes=(("shared", str(shared), True),))
    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(_job("exec", "false"), "hcl"))[
            "allocs"
        ]
        assert _ended(agent, alloc)["status"] == "complete"
        assert (lab.data_dir / "alloc" / alloc / "t" / "local" / "wrote").read_text().strip() == "no"
        assert not (shared / "out-t").exists()
    finally:
        agent.stop()


def test_raw_exec_is_refused_a_host_volume_as_nomad_refuses_it(lab: AgentLab, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    agent = lab.start_agent(raw_exec_enabled=True, host_volumes=(("shared", str(shared), False),))
    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(_job("raw_exec", "false"), "hcl"))[
            "allocs"
        ]
        view = _ended(agent, alloc)
        assert view["status"] == "failed", view
        assert 'task driver "raw_exec" for "t" does not support host volumes' in view["reason"], view
    finally:
        agent.stop()


@pytest.mark.parametrize("driver", ["exec", "docker"])
def test_a_host_volume_that_became_a_link_to_the_data_dir_is_not_mounted(
    lab: AgentLab, tmp_path: Path, driver: str
) -> None:
    """Issue 51: the volume is a real directory when the agent starts and a link to its data dir
    when the task starts; a task that lists /data saw `alloc ... state` and the state database."""
    shared = tmp_path / "shared"
    shared.mkdir()
    agent = lab.start_agent(host_volumes=(("shared", str(shared), False),))
    try:
        shared.rmdir()
        shared.symlink_to(lab.data_dir)
        job = _job(driver, "true").replace(
            "cat /data/in > $NOMAD_TASK_DIR/seen", "ls /data > $NOMAD_TASK_DIR/seen"
        )
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(job, "hcl"))["allocs"]
        view = _ended(agent, alloc)
        seen = lab.data_dir / "alloc" / alloc / "t" / "local" / "seen"
        assert not seen.exists() or "state" not in seen.read_text(), seen.read_text()
        assert view["status"] == "failed", view
        assert (
            f'host volume "shared": {shared} (resolved: {lab.data_dir.resolve()}) leads into'
            in view["reason"]
        )
    finally:
        agent.stop()
