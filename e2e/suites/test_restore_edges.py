"""Restore edge cases the orphan sweeper meets (nomad-16338, 12216 orphans).

Narrative: the sweeper, running every 15 s on the lab, leaves restored allocs alone, and removes
everything of an alloc the agent forgot when its state was wiped. Afterwards all invariants hold, and
every task start is explained by one decision (start accounting), checked once more after the job's
restart delay. The other restore edges (an alloc dir deleted, a task container removed while the
agent is down: nomad-27933, 23684) are scenarios as data: e2e/scenarios/.
"""

from __future__ import annotations

import pytest

from e2e.harness import invariants
from e2e.harness.cluster import Cluster
from e2e.harness.faults import AgentDown, AgentRestart, alloc_containers, injected
from e2e.harness.jobs import SEED_RESTORE, read, running_job


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
