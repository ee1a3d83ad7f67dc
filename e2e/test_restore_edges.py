"""Restore edge cases: things that change under a stopped agent (nomad-27933, 23684/17079, 16338,
12216 orphans).

Narrative: the agent is stopped and, while it is down, an alloc's directory is deleted, or a task's
container is removed. When the agent starts, each alloc must end in a clear state with an event
saying why: the alloc without its directory is replaced by a new one (never "running" without its
files); the alloc that lost its task container gets the task back (never "running" with nothing
running). The sweeper, running every 15 s on the lab, leaves restored allocs alone, and removes
everything of an alloc the agent forgot when its state was wiped. Afterwards all invariants hold, and
every task start is explained by one decision (start accounting), checked once more after the job's
restart delay.
"""

from __future__ import annotations

import pytest

from e2e.harness import invariants
from e2e.harness.cluster import Cluster
from e2e.harness.faults import AgentDown, AgentRestart, alloc_containers, injected
from e2e.harness.jobs import SEED_RESTORE, read, running_job


@pytest.mark.destructive
def test_an_alloc_whose_dir_vanished_is_replaced(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job:
        invariants.wait_invariants(cluster, "the seed job started", [node])
        with injected(AgentDown(cluster, node)):
            d = f"{cluster.target.data_dir}/alloc/{job.alloc_id}"
            # Its secrets/ tmpfs mounts go first, as a lost or replaced disk would take them.
            node.run(f"findmnt -rn -o TARGET | grep '^{d}/' | sort -r | xargs -r umount -l; rm -rf {d}")
        invariants.wait_invariants(cluster, "restore without the alloc dir", [node])
        old = agent.alloc(job.alloc_id)
        events = [(e["type"], e["message"]) for e in agent.events(job.alloc_id)]
        assert old["status"] == "failed" and old["replaced_by"], f"alloc kept as {old['status']}: {events}"
        assert any(t == "Restore Failed" and "dir" in m for t, m in events), events
        assert job.current()["status"] == "running"
        invariants.final_check(cluster, "restore without the alloc dir", [node], delay=job.restart_delay)


@pytest.mark.destructive
def test_a_task_container_removed_while_the_agent_was_down_is_started_again(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job:
        invariants.wait_invariants(cluster, "the seed job started", [node])
        with injected(AgentDown(cluster, node)):
            tasks = alloc_containers(node, job.alloc_id, "task", target=cluster.target)
            node.run("docker rm -f " + " ".join(tasks))
        invariants.wait_invariants(cluster, "restore without the task container", [node])
        alloc = job.current()
        events = [e["type"] for e in agent.events(alloc["id"])]
        assert alloc["id"] == job.alloc_id, f"replaced instead of restarting the task: {events}"
        assert "Started" in events[events.index("Restored") :] if "Restored" in events else False, events
        invariants.final_check(cluster, "restore without the task container", [node], delay=job.restart_delay)


@pytest.mark.destructive
def test_the_sweeper_leaves_restored_allocs_alone(cluster: Cluster) -> None:
    """nomad-16338: after an agent restart, sweeps over the restored allocs (older than the grace
    period by then) take nothing from them."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job:
        invariants.wait_invariants(cluster, "the seed job started", [node])
        with injected(AgentRestart(cluster, node, signal="SIGTERM")):
            pass
        changed = invariants.sweeps_leave_alone(cluster, node, [job])
        assert not changed, f"containers of a live alloc changed while the sweeper ran: {changed}"
        invariants.final_check(cluster, "sweeps over a restored alloc", [node], delay=job.restart_delay)


@pytest.mark.destructive
@pytest.mark.agent_own  # it deletes the agent's state db
def test_what_a_forgotten_alloc_left_behind_is_swept(cluster: Cluster) -> None:
    """nomad-12216 (orphans): the agent lost its state while down (a wiped disk, a restored
    backup): on start it knows no alloc, and the sweeper must remove everything the old one left
    (containers, IP reservation, CNI chains and cache, alloc dir) and nothing else."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job:
        invariants.wait_invariants(cluster, "the seed job started", [node])
        with injected(AgentDown(cluster, node)):
            node.run(f"rm -f {cluster.target.data_dir}/state/state.db*")
        assert agent.allocs() == [], "the agent still knows allocs after its state was wiped"
        invariants.wait_invariants(cluster, "the agent started with no state", [node])
        left = alloc_containers(node, job.alloc_id, target=cluster.target)
        assert left == [], f"containers of the forgotten alloc still there: {left}"
        invariants.final_check(cluster, "the agent started with no state", [node], delay=job.restart_delay)
