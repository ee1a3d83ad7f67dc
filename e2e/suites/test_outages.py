"""Outages: Vault goes away, a client is cut off the network (nomad-28016).

Narrative: a job whose only template is `noop` renders a 10 s certificate serial from OpenBao. Vault
then refuses every connection for a while: the agent must report failed renders as task events and
keep retrying with backoff, and once Vault is back the serial on disk must change again: the template
watcher never silently dies. Then client1 is partitioned from the lab (SSH from the controller kept):
its alloc cannot be reached from client2 meanwhile, and after the heal everything holds again. After
each heal every task start is explained by one decision (start accounting), checked once more after
the job's restart delay: an outage restarts nothing.
"""

from __future__ import annotations

import pytest

from e2e.harness import checkers, history, invariants, probes
from e2e.harness.cluster import Cluster
from e2e.harness.faults import Partition, VaultOutage, injected
from e2e.harness.jobs import SEED_RESTORE, noop_job, read, running_job
from e2e.harness.waits import ALLOC_RECOVERED, FAULT_EFFECT, WaitTimeout, wait_until

# Failed renders the agent must report while Vault is away: more than a runner that gives up after
# its retries (the agent's noop-runner-dies fault: 3) would make, as a real outage of minutes does.
OUTAGE_FAILURES = 4
RESUME = 60.0  # Vault back to a new serial on disk (backoff is capped well below this)


@pytest.mark.destructive
def test_noop_templates_resume_rendering_after_a_vault_outage(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    spec = noop_job("noop-secrets", ttl="10s")
    with running_job(agent, spec, "noop-secrets") as job:
        path = f"{cluster.target.alloc_dir(job.alloc_id)}/t/secrets/serial"

        def failures() -> int:
            return sum(1 for e in agent.events(job.alloc_id) if e["type"] == "Template Failed")

        before = failures()
        with injected(VaultOutage(cluster, cluster.servers[0])):

            def failed() -> tuple[int | None, str]:
                n = failures() - before
                return (n if n >= OUTAGE_FAILURES else None), f"{n} failed renders reported"

            try:
                wait_until(
                    failed, timeout=ALLOC_RECOVERED, what=f"{OUTAGE_FAILURES} failed renders in the outage"
                )
            except WaitTimeout as exc:
                raise AssertionError(
                    f"{node.name}: the template watcher stopped retrying during the outage: {exc}"
                ) from None
            during = node.out(f"cat {path}")
        history.record(history.NOTE, f"serial during the outage {during}", node=node.name)

        def renewed() -> tuple[str | None, str]:
            now = node.out(f"cat {path}")
            return (now if now != during else None), f"serial still {now}"

        try:
            wait_until(renewed, timeout=RESUME, what="a new serial after Vault came back")
        except WaitTimeout as exc:
            raise AssertionError(
                f"{node.name}: the template watcher did not resume after the outage: {exc}"
            ) from None
        history.check(
            "renders resumed after the Vault outage",
            [],
            node=node.name,
            counts={"failed renders reported": failures() - before},
        )
        invariants.final_check(cluster, "the Vault outage", [node], delay=job.restart_delay)


@pytest.mark.destructive
def test_a_partitioned_client_comes_back_whole(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job:
        invariants.wait_invariants(cluster, "the seed job started", [node])
        alloc = job.current()
        with injected(Partition(cluster, node)):
            # The agent API is cut off too; look from the other client and from the alloc's netns.
            problems = checkers.network_problems(probes.observe_network(cluster, node, alloc))
            cut = [p for p in problems if "does not answer from" in p or "cannot reach Vault" in p]
            assert len(cut) == 2, f"the partition did not cut the alloc off both ways: {problems}"
        invariants.wait_invariants(cluster, "the partition healed", [node])
        invariants.final_check(cluster, "the partition", [node], delay=job.restart_delay)


@pytest.mark.destructive
def test_a_recovery_cut_off_by_a_docker_stop_waits_the_engine_out(cluster: Cluster) -> None:
    """Issue 12: the pause container dies and, while the agent recovers the group's network, dockerd
    stops (socket too: nothing answers). The recovery must not end in a silent 'running' alloc with
    no network, nor fail the alloc: it says it is waiting ("Network Recovery Retrying") and completes
    once docker is back. The same alloc then runs with its network, and every start is explained."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name) as job:
        invariants.wait_invariants(cluster, "the seed job started", [node])
        alloc = job.current()
        pause = alloc["network"]["pause_container"]
        seen = len(agent.events(alloc["id"]))

        def new_events(kind: str) -> tuple[list[dict[str, object]] | None, str]:
            mine = [e for e in agent.events(alloc["id"])[seen:] if e["type"] == kind]
            return (mine or None), f"no {kind!r} event yet"

        try:
            node.run(f"docker kill {pause}")
            wait_until(lambda: new_events("Restart Signaled"), timeout=FAULT_EFFECT, what="the recovery")
            node.run("systemctl stop docker.socket docker.service", timeout=120)
            history.record(history.NOTE, "dockerd stopped during the recovery", node=node.name)
            retrying = wait_until(
                lambda: new_events("Network Recovery Retrying"),
                timeout=FAULT_EFFECT,
                what="the recovery saying it waits for the engine",
            )
        finally:
            node.run(
                "systemctl reset-failed docker.service docker.socket; systemctl start docker.socket docker"
            )
        history.record(history.NOTE, "dockerd started again", node=node.name)
        wait_until(
            lambda: new_events("Network Recovered"), timeout=ALLOC_RECOVERED, what="the recovery completing"
        )
        now = job.current()
        assert now["id"] == alloc["id"], f"the alloc was replaced: {now['id']} replaces {alloc['id']}"
        failed = [e for e in agent.events(alloc["id"])[seen:] if e["type"] == "Alloc Failed"]
        assert not failed, f"the alloc failed instead of waiting for docker: {failed}"
        history.check(
            "a recovery cut off by a docker stop completed",
            [],
            node=node.name,
            counts={"Network Recovery Retrying events": len(retrying)},
        )
        invariants.wait_invariants(cluster, "docker back after the recovery", [node])
        invariants.final_check(cluster, "a docker stop during a recovery", [node], delay=job.restart_delay)
