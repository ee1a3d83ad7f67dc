"""Pause container kills (seeds/pause-container-orphans: nomad-12216, 16338, 11272, 6385).

Narrative: on client1 the reporter's job (bridge network, no port) runs beside the seed job with a
mapped port. Then, on both allocs: the pause container is killed (docker brings it back with an
empty network namespace; the agent must rebuild the group's network), then the task container, then
the pause container again followed straight away by an agent restart, and last the task container
and, while its restart is still on the policy's timer, the pause container (the recovery restarts
the task and must cancel the timer: one start, not two, when the delay runs out). After each step:
one live set of containers per alloc, the port answers from client2, zero orphans, and no alloc
event says "duplicate allocation". An exec job (busybox httpd in a netns the agent creates) runs
beside them: its task is killed with the docker tasks, and the agent restart must leave it alone.
After each step every task start is explained by one decision (start accounting); after the last
one the suite waits past the jobs' restart delay and checks again, so a restart timer a recovery
should have cancelled has had its chance to fire. The orphan sweeper runs all along (every 15 s on
the lab) and must never take a container or process from a live alloc. Finally the jobs stop:
nothing of them is left on the node, and the freed host port works again for a new alloc.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

from e2e.harness import history, invariants
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.faults import AgentRestart, ContainerKill, ProcessKill, injected
from e2e.harness.jobs import (
    EXEC_WEB,
    SEED_ORPHANS,
    SEED_RESTORE,
    longest_restart_delay,
    read,
    running_job,
)
from e2e.harness.waits import FAULT_EFFECT, wait_until

# (what is killed, the agent signal after it); "task-then-pause": the pause once the task's restart is
# on the policy's timer.
STEPS = [("pause", None), ("task", None), ("pause", "SIGKILL"), ("task-then-pause", None)]


@pytest.mark.destructive
def test_pause_and_task_kills_leave_one_working_set_and_no_orphans(cluster: Cluster) -> None:
    client1 = cluster.clients[0]
    agent = cluster.agent(client1)
    started = time.time()
    with ExitStack() as jobs:
        seed = jobs.enter_context(running_job(agent, read(SEED_ORPHANS), SEED_ORPHANS.name))
        web = jobs.enter_context(running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name))
        exe = jobs.enter_context(running_job(agent, read(EXEC_WEB), EXEC_WEB.name))
        invariants.wait_invariants(cluster, "the jobs started", [client1])
        for which, agent_signal in STEPS:
            t0 = time.monotonic()
            kill_at = invariants.node_clock(client1)
            for job in (seed, web):
                first = "task" if which == "task-then-pause" else which
                ContainerKill(cluster, client1, alloc_id=job.current()["id"], which=first).inject()
            if which == "task":  # an exec task has no pause container: only its task is killed
                ProcessKill(cluster, client1, alloc_id=exe.current()["id"]).inject()
            if which == "task-then-pause":
                for job in (seed, web):
                    restart_pending(agent, job.current()["id"], kill_at)
                    ContainerKill(cluster, client1, alloc_id=job.current()["id"], which="pause").inject()
            if agent_signal:
                with injected(AgentRestart(cluster, client1, signal=agent_signal)):
                    pass
            step = f"kill {which}" + (f" + agent {agent_signal}" if agent_signal else "")
            invariants.wait_invariants(cluster, step, [client1])
            history.measure(f"{step} to network recovered", time.monotonic() - t0, node=client1.name)
            # Every event of the step, also of allocs replaced (and forgotten) meanwhile:
            # nomad-11272 ("duplicate allocation"), nomad-12216 (a task started into a dead pause).
            for symptom in ("duplicate allocation", "non running container"):
                seen = [
                    f"{e['alloc'][:8]} {e['task']}: {e['message']}"
                    for e in invariants.events_seen(cluster, since=started)
                    if symptom in e["message"]
                ]
                assert not seen, f"{step}: events say {symptom!r}: {seen}"
            invariants.check_starts(cluster, step, [client1])
        # nomad-16338: after the agent restart, sweeps run over the restored allocs (by now older
        # than the sweeper's grace period) and must not take a single container from them.
        changed = invariants.sweeps_leave_alone(cluster, client1, [seed, web, exe])
        assert not changed, f"containers of live allocs changed while the sweeper ran: {changed}"
        invariants.final_check(cluster, "the kills", [client1], delay=longest_restart_delay([seed, web, exe]))
        port = web.current()["network"]["ports"][0]["host"]
    # The jobs stopped: zero of their resources left, and the freed host port serves a new alloc.
    invariants.wait_invariants(cluster, "the jobs stopped", [client1])
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as again:
        reused = again.current()["network"]["ports"][0]["host"]
        assert reused == port, f"the new alloc got host port {reused}, not the freed {port}: reuse not tested"
        invariants.wait_invariants(cluster, "a new alloc after the stop", [client1])
    invariants.wait_invariants(cluster, "the last job stopped", [client1])


def restart_pending(agent: Agent, alloc_id: str, since: float) -> None:
    """Wait until the agent has decided to restart the alloc's killed task on a timer ("Restarting")."""

    def pending() -> tuple[bool | None, str]:
        types = [e["type"] for e in agent.events(alloc_id) if float(e["time"]) >= since]
        return (True if "Restarting" in types else None), f"events since the kill: {types}"

    wait_until(pending, timeout=FAULT_EFFECT, what=f"{agent.node.name}: alloc {alloc_id[:8]} restart pending")
