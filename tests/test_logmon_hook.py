"""A process task's output through its logmon (agent.runner.logmonhook, agent.logmon) on a real agent:
Nomad's files `alloc/<id>/alloc/logs/<task>.stdout.N`, rotated by the task's `logs` block, and no line
lost or written twice when the agent stops and the logmon is killed while the task keeps writing."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from agent.drivers.process import proc_start_time
from agent.runner.logmonhook import FIFO_DIR
from lab.waits import wait_until
from tests.agent_lab import AgentLab, why_not_ready

LINES = 12000
PHASE1 = 4000
PAD = "x" * 90  # ~110 bytes a line: 1.3 MB in all, over the 1 MB files of `counter`

JOB = f"""
job "logs" {{
  group "g" {{
    task "counter" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", <<EOT
i=0
emit() {{ while [ $i -lt $1 ]; do printf 'line %06d {PAD}\\n' $i; i=$((i+1)); done; }}
emit {PHASE1}
echo ready > local/phase1
while [ ! -e local/go ]; do sleep 0.05; done
emit {LINES}
echo done > local/phase2
exec sleep 600
EOT
        ]
      }}
      logs {{
        max_files     = 10
        max_file_size = 1
      }}
    }}
    task "flood" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", <<EOT
head -c 3500000 /dev/zero | tr '\\000' y | fold -w 99
echo end > local/flooded
exec sleep 600
EOT
        ]
      }}
      logs {{
        max_files     = 2
        max_file_size = 1
      }}
    }}
  }}
}}
"""

WAIT = 60.0  # seconds for a phase of the tasks or the agent

pytestmark = [pytest.mark.root]


@pytest.fixture
def lab(tmp_path: Path):  # type: ignore[no-untyped-def]
    reason = why_not_ready()
    if reason:
        pytest.skip(reason)
    lab = AgentLab(tmp_path / "agentlab")
    yield lab
    lab.cleanup()


def _there(path: Path) -> tuple[bool | None, str]:
    return (True if path.exists() else None), f"{path.name} {'there' if path.exists() else 'not yet'}"


def _gone(pid: int) -> tuple[bool | None, str]:
    alive = proc_start_time(pid) is not None
    return (None if alive else True), f"pid {pid} {'running' if alive else 'gone'}"


def _files(logs: Path, base: str) -> list[Path]:
    found = [p for p in logs.glob(f"{base}.*") if p.name.rsplit(".", 1)[1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.rsplit(".", 1)[1]))


def _logmon_pid(alloc_dir: Path, task: str) -> int:
    pid, started = (alloc_dir / FIFO_DIR / f"{task}.pid").read_text().split()
    assert proc_start_time(int(pid)) == started, "the recorded logmon is not running"
    return int(pid)


def test_rotated_files_hold_every_line_once_across_an_agent_stop_and_a_killed_logmon(lab: AgentLab) -> None:
    agent = lab.start_agent(raw_exec_enabled=True, docker_enabled=True)
    (alloc,) = agent.core.call(lambda: agent.core.submit(JOB, None, source="test"))["allocs"]
    alloc_dir = lab.data_dir / "alloc" / alloc
    logs = alloc_dir / "alloc" / "logs"
    counter = alloc_dir / "counter"
    wait_until(lambda: _there(counter / "local" / "phase1"), timeout=WAIT, what="phase 1 written")
    first_logmon = _logmon_pid(alloc_dir, "counter")

    # The agent stops (its tasks and their logmons go on), then the logmon is killed: the task
    # writes its second phase with no one reading; what fits waits in the pipe, then it blocks.
    agent.stop()
    os.kill(first_logmon, signal.SIGKILL)
    wait_until(lambda: _gone(first_logmon), timeout=WAIT, what="the killed logmon gone")
    (counter / "local" / "go").write_text("")
    agent = lab.start_agent(raw_exec_enabled=True, docker_enabled=True)  # restore: a new logmon
    try:
        wait_until(lambda: _there(counter / "local" / "phase2"), timeout=WAIT, what="phase 2 written")
        assert _logmon_pid(alloc_dir, "counter") != first_logmon

        def all_lines() -> tuple[list[str] | None, str]:
            text = b"".join(p.read_bytes() for p in _files(logs, "counter.stdout")).decode()
            numbered = re.findall(r"^line (\d{6}) x+$", text, re.M)
            return (numbered if len(numbered) >= LINES else None), f"{len(numbered)} lines"

        numbered = wait_until(all_lines, timeout=WAIT, what="every line in the files")
        assert [int(n) for n in numbered] == list(range(LINES)), "a line lost, doubled or out of order"
        names = [p.name for p in _files(logs, "counter.stdout")]
        assert names == ["counter.stdout.0", "counter.stdout.1"], names  # 1.3 MB over 1 MB files
        assert all(p.stat().st_size <= 1024 * 1024 for p in _files(logs, "counter.stdout"))

        # The flood: 3.5 MB over 1 MB files, 2 kept: the oldest purged as Nomad's rotator does.
        wait_until(lambda: _there(alloc_dir / "flood" / "local" / "flooded"), timeout=WAIT, what="flood")

        def purged() -> tuple[list[str] | None, str]:
            names = [p.name for p in _files(logs, "flood.stdout")]
            return (names if names == ["flood.stdout.2", "flood.stdout.3"] else None), str(names)

        wait_until(purged, timeout=WAIT, what="flood's files rotated and purged to 2")

        # The job stops: each logmon drains and ends, nothing of it is left running.
        pids = [_logmon_pid(alloc_dir, t) for t in ("counter", "flood")]
        agent.stop_job("logs")
        for pid in pids:
            wait_until(lambda p=pid: _gone(p), timeout=WAIT, what="the job's logmons ended")
    finally:
        agent.stop()
