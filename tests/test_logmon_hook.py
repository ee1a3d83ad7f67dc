"""A process task's output through its logmon (agent.runner.logmonhook, agent.logmon) on a real agent:
Nomad's files `alloc/<id>/alloc/logs/<task>.stdout.N`, rotated by the task's `logs` block, and no line
lost or written twice when the agent stops and the logmon is killed while the task keeps writing."""

from __future__ import annotations

import functools
import os
import re
import signal
from pathlib import Path

import pytest

from agent.drivers.hostproc import proc_start_time
from agent.runner.logmonhook import FIFO_DIR
from lab.waits import wait_until
from tests.agent_lab import AgentLab

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


DOCKER_JOB = """
job "dlogs" {
  group "g" {
    restart {
      attempts = 3
      interval = "10m"
      delay    = "0s"
      mode     = "fail"
    }
    task "d" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "/bin/sh"
        args    = ["-c", <<EOT
n=$(cat /local/runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > /local/runs
i=0; while [ $i -lt 300 ]; do echo "run $n line $i"; i=$((i+1)); done
echo "run $n says on stderr" >&2
echo up > /local/up.$n
exec sleep 600
EOT
        ]
      }
    }
  }
}
"""


def _there(path: Path) -> tuple[bool | None, str]:
    return (True if path.exists() else None), f"{path.name} {'there' if path.exists() else 'not yet'}"


def _gone(pid: int) -> tuple[bool | None, str]:
    alive = proc_start_time(pid) is not None
    return (None if alive else True), f"pid {pid} {'running' if alive else 'gone'}"


def _files(logs: Path, base: str) -> list[Path]:
    found = [p for p in logs.glob(f"{base}.*") if p.name.rsplit(".", 1)[1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.rsplit(".", 1)[1]))


def _logmon_pid(alloc_dir: Path, task: str) -> int:
    pid, started, *_ = (alloc_dir / FIFO_DIR / f"{task}.pid").read_text().split()
    assert proc_start_time(int(pid)) == started, "the recorded logmon is not running"
    return int(pid)


def test_rotated_files_hold_every_line_once_across_an_agent_stop_and_a_killed_logmon(lab: AgentLab) -> None:
    agent = lab.start_agent(raw_exec_enabled=True, docker_enabled=True)
    (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(JOB, None, source="test"))["allocs"]
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
            wait_until(functools.partial(_gone, pid), timeout=WAIT, what="the job's logmons ended")
    finally:
        agent.stop()


def test_a_docker_tasks_log_lands_in_the_alloc_dir_across_its_containers_and_a_killed_logger(
    lab: AgentLab,
) -> None:
    """Nomad's docker_logger: the container's log copied into the task's logmon pipes. A restart
    (a new container) adds to the same files; a docker logger killed while the agent is down is
    started again on restore and writes nothing twice."""
    agent = lab.start_agent()
    (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(DOCKER_JOB, None, source="test"))[
        "allocs"
    ]
    alloc_dir = lab.data_dir / "alloc" / alloc
    logs, local = alloc_dir / "alloc" / "logs", alloc_dir / "d" / "local"
    try:
        wait_until(lambda: _there(local / "up.1"), timeout=WAIT, what="the first container up")

        def lines(want: int) -> tuple[list[str] | None, str]:
            text = b"".join(p.read_bytes() for p in _files(logs, "d.stdout")).decode()
            got = re.findall(r"^run \d+ line \d+$", text, re.M)
            return (got if len(got) >= want else None), f"{len(got)} lines"

        first = wait_until(lambda: lines(300), timeout=WAIT, what="run 1 in d.stdout.N")
        assert first == [f"run 1 line {i}" for i in range(300)]
        logger = _logmon_pid(alloc_dir, "d.docker")

        def restart() -> None:
            r = agent.core.allocs.runner(alloc)
            r.user_restart(r.group.tasks[0])

        agent.core.call(restart)
        wait_until(lambda: _there(local / "up.2"), timeout=WAIT, what="the second container up")
        both = wait_until(lambda: lines(600), timeout=WAIT, what="run 2 after run 1 in the same files")
        assert both == first + [f"run 2 line {i}" for i in range(300)]
        assert _logmon_pid(alloc_dir, "d.docker") != logger  # a logger per container

        agent.stop()
        os.kill(_logmon_pid(alloc_dir, "d.docker"), signal.SIGKILL)
        agent = lab.start_agent()  # restore: the container runs, its logger is started again
        _logmon_pid(alloc_dir, "d.docker")

        def stderr() -> tuple[str | None, str]:
            text = b"".join(p.read_bytes() for p in _files(logs, "d.stderr")).decode()
            return (text if "run 2 says" in text else None), text

        said = wait_until(stderr, timeout=WAIT, what="both runs' stderr in d.stderr.N")
        assert said == "run 1 says on stderr\nrun 2 says on stderr\n"
        assert lines(600)[0] == both  # the new logger skipped what the killed one wrote
    finally:
        agent.stop()


def test_a_task_that_plants_a_link_where_logmon_rotates_cannot_make_it_write_there(
    lab: AgentLab, tmp_path: Path
) -> None:
    """Hostile: an exec task (nobody, in its chroot) links `/alloc/logs/t.stdout.1` (the shared
    logs dir, 0777 as Nomad's) to a host file, then writes past the 1 MB file so that logmon (root, on
    the host) rotates into that name. logmon skips it for the next index; the host file is intact."""
    canary = tmp_path / "canary"
    canary.write_text("the host's file\n")
    canary.chmod(0o666)  # writable by anyone: only logmon's refusal keeps it intact
    job = f"""
job "hostile-logs" {{
  group "g" {{
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args = ["-c", <<EOT
ln -s {canary} /alloc/logs/t.stdout.1
head -c 1500000 /dev/zero | tr '\\000' y | fold -w 99
echo done > /local/done
exec sleep 600
EOT
        ]
      }}
      logs {{
        max_files     = 3
        max_file_size = 1
      }}
    }}
  }}
}}
"""
    agent = lab.start_agent()
    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(job, None, source="test"))["allocs"]
        alloc_dir = lab.data_dir / "alloc" / alloc
        logs = alloc_dir / "alloc" / "logs"
        wait_until(lambda: _there(alloc_dir / "t" / "local" / "done"), timeout=WAIT, what="the flood written")

        def copied() -> tuple[int | None, str]:
            total = sum(p.stat().st_size for p in _files(logs, "t.stdout") if not p.is_symlink())
            return (total if total >= 1500000 else None), f"{total} bytes in regular files"

        wait_until(copied, timeout=WAIT, what="the flood in logmon's files")
        assert canary.read_text() == "the host's file\n"
        assert (logs / "t.stdout.1").is_symlink()  # left as the task made it, skipped
        assert (logs / "t.stdout.2").is_file() and not (logs / "t.stdout.2").is_symlink()
    finally:
        agent.stop()
