"""Restore after an agent restart and a host reboot (seeds/cni-check-on-restore: nomad-24292, 24236,
11272).

Narrative: the seed's job runs on client1 and answers on its mapped port from client2. An agent
restart (SIGTERM, then SIGKILL) must leave it untouched: the same containers, zero task restarts, a
"Restored" event, back within seconds. A clean and a hard reboot of client1 kill everything: the agent
must notice that docker brought the pause container back with an empty network namespace, rebuild the
network and restart the tasks, so the port answers from client2 again, and the address the agent
reports is the one the task really has. Before the reboot a filler alloc holding the first address is
stopped, so the rebuilt network gets a different address than the one recorded (nomad-24236). An exec
job (busybox httpd in a named netns) runs beside the seed's: an agent restart leaves its process
alone, a reboot gets it back with a rebuilt network. After every fault all invariants hold: no
orphans, one set of containers or processes, no half-alive alloc, and every task start is explained
by one decision (start accounting); the last check comes after the jobs' restart delay.
"""

from __future__ import annotations

import time

import pytest

from e2e.harness import history, invariants
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.faults import AgentRestart, Reboot, alloc_containers, injected
from e2e.harness.jobs import (
    EXEC_WEB,
    SEED_RESTORE,
    longest_restart_delay,
    probe_job,
    read,
    running_job,
    task_handles,
)
from e2e.harness.waits import TARGET_REBOOT_REACHABLE


@pytest.mark.destructive
@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_agent_restart_leaves_the_alloc_untouched(cluster: Cluster, signal: str) -> None:
    client1 = cluster.clients[0]
    agent = cluster.agent(client1)
    with (
        running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job,
        running_job(agent, read(EXEC_WEB), EXEC_WEB.name) as exe,
    ):
        invariants.wait_invariants(cluster, "the seed and exec jobs started", [client1])
        before = alloc_containers(client1, job.alloc_id, target=cluster.target)
        pids = task_handles(exe)
        fault = AgentRestart(cluster, client1, signal=signal)
        with injected(fault):
            pass
        invariants.wait_invariants(cluster, f"agent {signal}", [client1])
        assert alloc_containers(client1, job.alloc_id, target=cluster.target) == before, (
            f"agent {signal} replaced containers"
        )
        assert task_handles(exe) == pids, (
            f"agent {signal} restarted the exec task: {pids} -> {task_handles(exe)}"
        )
        for j in (job, exe):
            alloc = agent.alloc(j.alloc_id)
            events = [e["type"] for e in agent.events(j.alloc_id)]
            assert all(t["restarts"] == 0 for t in alloc["tasks"].values()), (j.job, alloc["tasks"])
            assert events[-1] == "Restored", (j.job, events)
            assert_no_ipam_errors(agent, j.alloc_id)
        invariants.final_check(cluster, f"agent {signal}", [client1], delay=longest_restart_delay([job, exe]))


@pytest.mark.destructive
@pytest.mark.reboot
@pytest.mark.parametrize("hard", [False, True], ids=["clean-reboot", "hard-reboot"])
def test_reboot_restores_the_alloc_with_its_network(cluster: Cluster, hard: bool) -> None:
    client1 = cluster.clients[0]
    agent = cluster.agent(client1)
    kind = "hard reboot" if hard else "clean reboot"
    # The filler holds the first address; once it is stopped the rebuilt network gets another one.
    with (
        running_job(agent, probe_job("filler", "noop"), "filler") as filler,
        running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job,
        running_job(agent, read(EXEC_WEB), EXEC_WEB.name) as exe,
    ):
        agent.stop_job(filler.job)
        invariants.wait_invariants(cluster, "the seed and exec jobs started, the filler stopped", [client1])
        recorded = agent.alloc(job.alloc_id)["network"]["address"]
        t0 = time.monotonic()
        with injected(Reboot(cluster, client1, hard=hard)):
            pass
        invariants.wait_invariants(cluster, kind, [client1])
        history.measure(
            f"{kind} to alloc reachable",
            time.monotonic() - t0,
            node=client1.name,
            target=TARGET_REBOOT_REACHABLE,
        )
        alloc = job.current()
        events = [e["type"] for e in agent.events(alloc["id"])]
        assert alloc["id"] == job.alloc_id, f"the alloc was replaced instead of restored: {events}"
        assert "Network Recovered" in events, events
        assert len(alloc_containers(client1, job.alloc_id, target=cluster.target)) == 2
        assert_no_ipam_errors(agent, job.alloc_id)
        ex = exe.current()
        ex_events = [e["type"] for e in agent.events(ex["id"])]
        assert ex["id"] == exe.alloc_id, f"the exec alloc was replaced instead of restored: {ex_events}"
        assert "Network Recovered" in ex_events, ex_events
        assert_no_ipam_errors(agent, exe.alloc_id)
        history.record(
            history.NOTE,
            f"address before {kind} {recorded}, after {alloc['network']['address']}",
            node=client1.name,
        )
        invariants.final_check(cluster, kind, [client1], delay=longest_restart_delay([job, exe]))


def assert_no_ipam_errors(agent: Agent, alloc_id: str) -> None:
    """nomad-11272/15763: the alloc never met its own stale host-local reservation."""
    bad = [e["message"] for e in agent.events(alloc_id) if "duplicate allocation" in e["message"]]
    assert not bad, f"{agent.node.name}: alloc {alloc_id[:8]}: {bad}"
