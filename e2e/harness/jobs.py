"""The jobs the suites run: the seeds' jobspecs (tests/jobspecs, shared with the controller tests) and
the probe jobs built here, plus `running_job`, which submits a job and always stops it afterwards."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.harness.cluster import Agent
from e2e.harness.waits import ALLOC_RECOVERED, wait_until

JOBSPECS = Path(__file__).resolve().parents[2] / "tests" / "jobspecs"
SEED_RESTORE = JOBSPECS / "cni-check-on-restore.hcl"  # seeds/cni-check-on-restore (nginx -> busybox httpd)
SEED_ORPHANS = JOBSPECS / "pause-container-orphans.hcl"  # seeds/pause-container-orphans
# An exec task in bridge mode (busybox httpd as nobody, in the netns the agent creates and the task
# joins by path; its port mapped): what the suites run beside the docker jobs.
EXEC_WEB = JOBSPECS / "exec-bridge.hcl"

PKI_ISSUE = "pki_int/issue/fieldlab-workload"  # the pki role's workload role
# The lab's job policies (the pki role's pki_job_policies): each job's task gets a Vault token of its
# own with its policy, which issues certs for the job's service names only (never the agent's token).
PROBE_POLICY = "fieldlab-job-probe"  # probe jobs: pki-*, filler, probe (and the seeds' s)
NOOP_POLICY = "fieldlab-job-noop"  # noop-secrets jobs: noop-*

# The probe workload (fieldlab/probe) with a short-lived PKI certificate rendered by a template. The
# cert lives 1 h unless `ttl` says otherwise, so no periodic re-issue hides a missed delivery.
PROBE_JOB = """
job "{job}" {{
  group "g" {{
    network {{
      mode = "bridge"
      port "probe" {{ to = 8080 }}
    }}
    restart {{
      attempts = 10
      interval = "10m"
      delay    = "{delay}"
      mode     = "fail"
    }}
    task "probe" {{
      driver = "docker"
      config {{
        image = "fieldlab/probe:latest"
        args  = ["--port", "8080", "--cert", "/secrets/cert.pem"]
      }}
      vault {{
        policies = ["{policy}"]
      }}
      template {{
        data          = <<EOT
{{{{ with secret "{pki}" "common_name={job}.service.fieldlab" "ttl={ttl}" -}}}}
{{{{ .Data.certificate }}}}{{{{ end }}}}
EOT
        destination   = "secrets/cert.pem"
        change_mode   = "{mode}"
        change_signal = "SIGHUP"
{script}        splay         = "0s"
      }}
    }}
  }}
}}
"""
# change_mode "script": the script runs inside the task and tells the probe (SIGUSR1 to its PID 1).
SCRIPT = """        change_script {
          command = "/bin/sh"
          args    = ["-c", "kill -USR1 1"]
          timeout = "10s"
        }
"""

NOOP_JOB = """
job "{job}" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image   = "fieldlab/busybox:latest"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sleep"
        args    = ["3600"]
      }}
      vault {{
        policies = ["{policy}"]
      }}
      template {{
        data        = <<EOT
{{{{ with secret "{pki}" "common_name={job}.service.fieldlab" "ttl={ttl}" -}}}}
{{{{ .Data.serial_number }}}}{{{{ end }}}}
EOT
        destination = "secrets/serial"
        change_mode = "noop"
      }}
    }}
  }}
}}
"""


def probe_job(job: str, mode: str, *, ttl: str = "1h", delay: str = "1s") -> str:
    script = SCRIPT if mode == "script" else ""
    return PROBE_JOB.format(
        job=job, mode=mode, ttl=ttl, delay=delay, script=script, pki=PKI_ISSUE, policy=PROBE_POLICY
    )


def noop_job(job: str, *, ttl: str = "10s") -> str:
    return NOOP_JOB.format(job=job, ttl=ttl, pki=PKI_ISSUE, policy=NOOP_POLICY)


def job_name(jobspec: str) -> str:
    m = re.search(r'job\s+"([^"]+)"', jobspec)
    if not m:
        raise ValueError("jobspec has no job block")
    return m.group(1)


def restart_delay(jobspec: str) -> float:
    """The longest restart delay of the job's groups (the agent's own parser; its defaults apply)."""
    from agent.jobspec import parse_jobspec

    job = parse_jobspec(jobspec, source="e2e").job
    return max((g.restart.delay for g in job.groups), default=0.0)


@dataclass
class RunningJob:
    agent: Agent
    job: str
    allocs: list[str]
    restart_delay: float = 0.0  # the longest of its groups' restart delays

    @property
    def alloc_id(self) -> str:
        return self.allocs[0]

    def current(self) -> dict[str, Any]:
        """The job's live alloc now (after replacements): running or pending, else the newest."""
        mine = [a for a in self.agent.allocs() if a.get("job") == self.job]
        if not mine:
            raise AssertionError(f"{self.agent.node.name}: the agent knows no alloc of job {self.job}")
        live = [a for a in mine if a.get("status") in ("running", "pending")]
        return max(live or mine, key=lambda a: float(a.get("created") or 0))


@contextmanager
def running_job(agent: Agent, jobspec: str, source: str) -> Iterator[RunningJob]:
    """Submit, wait until the alloc runs, yield; always stop the job afterwards."""
    name = job_name(jobspec)
    allocs = agent.run_job(jobspec, source)
    job = RunningJob(agent, name, allocs, restart_delay(jobspec))
    try:

        def running() -> tuple[dict[str, Any] | None, str]:
            a = agent.alloc(allocs[0])
            return (a if a["status"] == "running" else None), str(a["status"])

        wait_until(running, timeout=ALLOC_RECOVERED, what=f"{agent.node.name}: job {name} running")
        yield job
    finally:
        try:
            agent.stop_job(name)
        except Exception as exc:  # the agent may be what broke: say so, let the test's error stand
            print(f"[e2e] could not stop job {name} on {agent.node.name}: {exc}")


def read(path: Path) -> str:
    return path.read_text()


def longest_restart_delay(jobs: Iterable[RunningJob]) -> float:
    """What a suite waits past (after the last exit) before its last check."""
    return max((j.restart_delay for j in jobs), default=0.0)


def task_handles(job: RunningJob) -> dict[str, str]:
    """{task: its handle} of the job's live alloc: a container id, or an exec task's pid."""
    return {t: str(ts.get("container") or "") for t, ts in job.current()["tasks"].items()}
