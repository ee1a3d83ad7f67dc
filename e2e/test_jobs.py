"""The reference agent on the lab: the seed's jobspec (seeds/cni-check-on-restore) submitted to
client1 over mTLS runs, and its mapped port answers from client2, across the lab network; a bad
jobspec is refused with its path. What happens to the job across restarts and reboots is
test_restore.py's story."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.client import ApiClient, ApiError
from e2e.harness.cluster import Cluster
from e2e.harness.waits import AGENT_HEALTHY, wait_until

JOBSPEC = Path(__file__).resolve().parents[1] / "tests" / "jobspecs" / "cni-check-on-restore.hcl"


@pytest.fixture
def seed_job(cluster: Cluster) -> Iterator[tuple[ApiClient, str]]:
    client1 = cluster.clients[0]
    api = cluster.api(client1)
    out = api.request("POST", "/fieldlab/v1/jobs", {"jobspec": JOBSPEC.read_text(), "source": JOBSPEC.name})
    yield api, out["allocs"][0]
    api.request("DELETE", "/fieldlab/v1/job/example")


def test_seed_job_answers_on_its_mapped_port_from_the_other_client(
    cluster: Cluster, seed_job: tuple[ApiClient, str]
) -> None:
    api, alloc_id = seed_job
    alloc = api.request("GET", f"/fieldlab/v1/allocation/{alloc_id}")
    assert alloc["status"] == "running", json.dumps(alloc, indent=2)
    port = alloc["network"]["ports"][0]["host"]
    client1, client2 = cluster.clients[0], cluster.clients[1]
    url = f"http://{client1.address}:{port}/bin/busybox"

    def answered() -> tuple[str | None, str]:
        code = client2.run(f"curl -s -o /dev/null -m 3 -w '%{{http_code}}' {url}", check=False).stdout.strip()
        return (code if code == "200" else None), f"HTTP {code or 'no answer'}"

    wait_until(answered, timeout=AGENT_HEALTHY, what=f"{url} from {client2.name}")
    events = [e["type"] for e in api.request("GET", f"/fieldlab/v1/allocation/{alloc_id}/events")]
    assert events[:3] == ["Received", "Task Setup", "Started"], events


def test_an_invalid_jobspec_is_refused_with_its_path(cluster: Cluster) -> None:
    api = cluster.api(cluster.clients[0])
    bad = 'job "x" {\n  group "g" {\n    task "t" {\n      driver = "rkt"\n    }\n  }\n}\n'
    with pytest.raises(ApiError) as exc:
        api.request("POST", "/fieldlab/v1/jobs", {"jobspec": bad, "source": "bad.hcl"})
    assert exc.value.status == 400
    assert "job.x.group.g.task.t.driver" in str(exc.value.body)
