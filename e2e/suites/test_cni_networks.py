"""cni/<name> networks (issue 52 item 3): an alloc on one of the lab's conflists beside `nomad`'s bridge
(the cni role's lab-macvlan and lab-bridge2) gets the restore and the orphan cleanup a bridge alloc gets.

Narrative: a busybox httpd job runs on client1 in `network { mode = "cni/<name>" }`. An agent restart
leaves it untouched: the agent reads which network the alloc is on from its kept ADD result, checks the
netns against it (the restore check of nomad-24292: for the macvlan network inside the netns only, it
has no bridge), and the alloc is "Restored" with the same containers and no task restart. Then the
agent loses its state while down (nomad-12216): on start the sweeper finds the alloc's kept result in
the lab-bridge2 network, runs its DEL, and nothing of the alloc is left: no container, no host-local
reservation in that network's dir, no CNI cache file, no iptables chain naming it.

Run on a lab whose clients have the cni role's conflists (`make deploy-agent` writes them): `.venv/bin/pytest
e2e/suites/test_cni_networks.py --lab <lab>`, or `make e2e K=cni` (every suite, filtered by -k).
"""

from __future__ import annotations

import pytest

from e2e.harness import invariants
from e2e.harness.cluster import Cluster
from e2e.harness.faults import AgentDown, AgentRestart, alloc_containers, injected
from e2e.harness.jobs import running_job

IPAM_ROOT = "/var/run/cni"  # the cni role's cni_ipam_data_dir: <dir>/<network name>/<address>
SUBNETS = {"lab-macvlan": "10.214.", "lab-bridge2": "172.26."}  # the cni role's defaults


def cni_job(job: str, network: str) -> str:
    port = 'port "http" {\n        to = 80\n      }' if network == "lab-bridge2" else ""
    ports = 'ports = ["http"]' if network == "lab-bridge2" else ""
    return f"""
job "{job}" {{
  group "web" {{
    network {{
      mode = "cni/{network}"
      {port}
      cni {{
        args = {{ FIELDLAB_E2E = "1" }}
      }}
    }}
    task "httpd" {{
      driver = "docker"
      config {{
        image   = "fieldlab/busybox:latest"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "httpd"
        args    = ["-f", "-p", "80"]
        {ports}
      }}
      resources {{
        cpu    = 100
        memory = 64
      }}
    }}
  }}
}}
"""


@pytest.mark.destructive
@pytest.mark.parametrize("network", ["lab-macvlan", "lab-bridge2"])
def test_a_cni_alloc_survives_an_agent_restart_with_its_check(cluster: Cluster, network: str) -> None:
    client1 = cluster.clients[0]
    agent = cluster.agent(client1)
    name = f"cni-{network}"
    with running_job(agent, cni_job(name, network), name) as job:
        invariants.wait_invariants(cluster, f"the {network} job started", [client1])
        alloc = agent.alloc(job.alloc_id)
        assert alloc["network"]["mode"] == f"cni/{network}", alloc["network"]
        assert alloc["network"]["address"].startswith(SUBNETS[network]), alloc["network"]
        before = alloc_containers(client1, job.alloc_id, target=cluster.target)
        with injected(AgentRestart(cluster, client1, signal="SIGTERM")):
            pass
        invariants.wait_invariants(cluster, f"agent restart with a {network} alloc", [client1])
        assert alloc_containers(client1, job.alloc_id, target=cluster.target) == before, (
            f"the agent restart replaced the {network} alloc's containers"
        )
        after = agent.alloc(job.alloc_id)
        events = [e["type"] for e in agent.events(job.alloc_id)]
        assert all(t["restarts"] == 0 for t in after["tasks"].values()), after["tasks"]
        # the restore check passed (a difference would have recreated the network: "Network Recovered")
        assert events[-1] == "Restored" and "Network Recovered" not in events, events
        assert after["network"]["address"] == alloc["network"]["address"]
        invariants.final_check(cluster, f"agent restart ({network})", [client1], delay=job.restart_delay)


@pytest.mark.destructive
@pytest.mark.agent_own  # it deletes the agent's state db
def test_a_forgotten_cni_allocs_leftovers_are_swept(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    network = "lab-bridge2"
    data = cluster.target.data_dir
    with running_job(agent, cni_job("cni-orphan", network), "cni-orphan") as job:
        invariants.wait_invariants(cluster, "the cni-orphan job started", [node])
        alloc_id = job.alloc_id

        def leftovers() -> dict[str, str]:
            return {
                "reservation": node.out(f"grep -ls {alloc_id} {IPAM_ROOT}/{network}/* || true").strip(),
                "cache": node.out(f"ls {data}/cni | grep -F {alloc_id} || true").strip(),
                "iptables": node.out(f"iptables-save | grep -F {alloc_id} || true").strip(),
            }

        held = leftovers()
        assert held["reservation"] and held["cache"] and held["iptables"], held
        with injected(AgentDown(cluster, node)):
            node.run(f"rm -f {data}/state/state.db*")
        assert agent.allocs() == [], "the agent still knows allocs after its state was wiped"
        invariants.wait_invariants(cluster, "the agent started with no state", [node])
        assert alloc_containers(node, alloc_id, target=cluster.target) == []
        left = {k: v for k, v in leftovers().items() if v}
        assert not left, f"the forgotten cni/{network} alloc left: {left}"
        invariants.final_check(cluster, "a forgotten cni alloc swept", [node], delay=job.restart_delay)
