"""The reference agent on the lab: the seed's jobspec (seeds/cni-check-on-restore) submitted to
client1 over mTLS runs, and its mapped port answers from client2, across the lab network; a bad
jobspec is refused with its path; an artifact served by the lab's artifact server (server1) lands in
the task dir, checked against its checksum, before the task starts. What happens to the job across
restarts and reboots is test_restore.py's story."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.errors import AgentError
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.waits import AGENT_HEALTHY, ALLOC_RECOVERED, wait_until

JOBSPEC = Path(__file__).resolve().parents[2] / "tests" / "jobspecs" / "cni-check-on-restore.hcl"


@pytest.fixture
def seed_job(cluster: Cluster) -> Iterator[tuple[Agent, str]]:
    agent = cluster.agent(cluster.clients[0])
    # the seed as its report has it: a `latest` image, pulled at every start through the lab registry
    # (the file pins the lab's `lab` tag, for the root tests on a controller with no registry)
    allocs = agent.run_job(
        JOBSPEC.read_text().replace("fieldlab/busybox:lab", "fieldlab/busybox:latest"), JOBSPEC.name
    )
    yield agent, allocs[0]
    agent.stop_job("example")


def test_seed_job_answers_on_its_mapped_port_from_the_other_client(
    cluster: Cluster, seed_job: tuple[Agent, str]
) -> None:
    agent, alloc_id = seed_job

    def running() -> tuple[dict[str, Any] | None, str]:  # the register answers before the pull is done
        alloc = agent.raw_alloc(alloc_id)  # Nomad's api.Allocation
        return (alloc if alloc["ClientStatus"] == "running" else None), json.dumps(alloc, indent=2)

    alloc = wait_until(running, timeout=ALLOC_RECOVERED, what=f"alloc {alloc_id[:8]} running")
    port = alloc["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
    client1, client2 = cluster.clients[0], cluster.clients[1]
    url = f"http://{client1.address}:{port}/bin/busybox"

    def answered() -> tuple[str | None, str]:
        code = client2.run(f"curl -s -o /dev/null -m 3 -w '%{{http_code}}' {url}", check=False).stdout.strip()
        return (code if code == "200" else None), f"HTTP {code or 'no answer'}"

    wait_until(answered, timeout=AGENT_HEALTHY, what=f"{url} from {client2.name}")
    events = [e["Type"] for e in agent.raw_alloc(alloc_id)["TaskStates"]["nginx"]["Events"]]
    # a `latest` image is pulled at every start, as Nomad's driver does: its Driver event
    # ("Downloading image") comes between the setup and the start
    assert events[:4] == ["Received", "Task Setup", "Driver", "Started"], events


def test_an_invalid_jobspec_is_refused_with_its_path(cluster: Cluster) -> None:
    agent = cluster.agent(cluster.clients[0])
    bad = 'job "x" {\n  group "g" {\n    task "t" {\n      driver = "rkt"\n    }\n  }\n}\n'
    before = agent.jobs()
    with pytest.raises(AgentError) as exc:
        agent.run_job(bad, "bad.hcl")
    assert "400" in str(exc.value), exc.value
    assert "job.x.group.g.task.t.driver" in str(exc.value), exc.value
    assert agent.jobs() == before, "a refused job must store nothing"


ARTIFACT_JOB = """
job "%(job)s" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "cat $NOMAD_TASK_DIR/app/conf/greeting"]
      }
      artifact {
        source      = "http://%(server)s:8089/%(file)s"
        destination = "local/app"
        options {
          checksum = "sha256:%(sha)s"
        }
      }
    }
  }
}
"""


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_an_artifact_from_the_lab_server_lands_checked_before_the_task_starts(cluster: Cluster) -> None:
    agent = cluster.agent(cluster.clients[0])
    server = cluster.servers[0]
    token = uuid.uuid4().hex[:8]
    body = _tar_gz({"conf/greeting": f"hello {token}\n".encode()})
    name = f"e2e-{token}.tar.gz"
    server.put(f"/srv/fieldlab-artifacts/{name}", body)
    job = f"artifact-{token}"
    spec = ARTIFACT_JOB % {
        "job": job,
        "server": server.address,
        "file": name,
        "sha": hashlib.sha256(body).hexdigest(),
    }
    (alloc_id,) = agent.run_job(spec, "artifact.hcl")
    try:

        def done() -> tuple[str | None, str]:
            status = agent.raw_alloc(alloc_id)["ClientStatus"]
            return (status if status in ("complete", "failed") else None), status

        assert (
            wait_until(done, timeout=AGENT_HEALTHY, what=f"alloc {alloc_id} of {job} to finish") == "complete"
        )
        code, out = agent.api.request_raw(
            "GET", f"/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true&origin=start"
        )
        assert code == 200 and out.decode() == f"hello {token}\n", (code, out[:200])
        events = [e["Type"] for e in agent.raw_alloc(alloc_id)["TaskStates"]["t"]["Events"]]
        assert events.index("Downloading Artifacts") < events.index("Started"), events
    finally:
        agent.stop_job(job)
        server.run(f"rm -f /srv/fieldlab-artifacts/{name}", check=False)
