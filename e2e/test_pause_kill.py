"""Pause container kills (seeds/pause-container-orphans: nomad-12216, 16338, 11272, 6385).

Narrative: on client1 the reporter's job (bridge network, no port) runs beside the seed job with a
mapped port. Then, on both allocs: the pause container is killed (docker brings it back with an
empty network namespace; the agent must rebuild the group's network), then the task container, then
the pause container again followed straight away by an agent restart. After each step: one live set
of containers per alloc, the port answers from client2, zero orphans, and no alloc event says
"duplicate allocation". The orphan sweeper runs all along (every 15 s on the lab) and must never take
a container from a live alloc. Finally both jobs stop: nothing of them is left on the node, and the
freed host port works again for a new alloc.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

from e2e.harness import history, invariants
from e2e.harness.cluster import Cluster
from e2e.harness.faults import AgentRestart, ContainerKill, injected
from e2e.harness.jobs import SEED_ORPHANS, SEED_RESTORE, read, running_job

STEPS = [("pause", None), ("task", None), ("pause", "SIGKILL")]


@pytest.mark.destructive
def test_pause_and_task_kills_leave_one_working_set_and_no_orphans(cluster: Cluster) -> None:
    client1 = cluster.clients[0]
    agent = cluster.agent(client1)
    started = time.time()
    with ExitStack() as jobs:
        seed = jobs.enter_context(running_job(agent, read(SEED_ORPHANS), SEED_ORPHANS.name))
        web = jobs.enter_context(running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name))
        invariants.wait_invariants(cluster, "both jobs started", [client1])
        for which, agent_signal in STEPS:
            t0 = time.monotonic()
            for job in (seed, web):
                ContainerKill(cluster, client1, alloc_id=job.current()["id"], which=which).inject()
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
        # nomad-16338: after the agent restart, sweeps run over the restored allocs (by now older
        # than the sweeper's grace period) and must not take a single container from them.
        changed = invariants.sweeps_leave_alone(cluster, client1, [seed, web])
        assert not changed, f"containers of live allocs changed while the sweeper ran: {changed}"
        port = web.current()["network"]["ports"][0]["host"]
    # Both jobs stopped: zero of their resources left, and the freed host port serves a new alloc.
    invariants.wait_invariants(cluster, "both jobs stopped", [client1])
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as again:
        reused = again.current()["network"]["ports"][0]["host"]
        assert reused == port, f"the new alloc got host port {reused}, not the freed {port}: reuse not tested"
        invariants.wait_invariants(cluster, "a new alloc after the stop", [client1])
    invariants.wait_invariants(cluster, "the last job stopped", [client1])
