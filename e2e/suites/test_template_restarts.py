"""Template change_mode across agent restarts (seeds/template-change-mode-after-restart: nomad-24140,
9636, 15851/24051, 25861).

Narrative: on every client the probe workload runs twice, each with a PKI certificate rendered from
OpenBao by a template: once with change_mode "signal" (SIGHUP: the probe reloads the cert), once with
"restart". The agents are restarted `--loops` times (5 in `make test`, 50 nightly), SIGTERM or
SIGKILL as the run's seed decides. Every agent start issues a new certificate (dynamic secrets), so
after each restart the certificate the probe has LOADED must be the one on disk within a deadline,
and at the end every change must have been delivered exactly once: as many SIGHUPs (or task restarts)
as distinct certificates. A "script" job checks that change scripts run in restored tasks; a short-TTL
job whose task is killed checks that a change arriving while the task restarts is queued, not fired
into the dead task. After each round of agent restarts every task start is explained by one decision
(start accounting: a change_mode restart by its "Restart Signaled"), and once more after the jobs'
restart delay.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from e2e.harness import checkers, history, invariants
from e2e.harness.cluster import Cluster
from e2e.harness.faults import AgentRestart, ContainerKill, injected
from e2e.harness.jobs import RunningJob, longest_restart_delay, probe_job, running_job
from e2e.harness.probes import cert_sha256_on_disk, observe_delivery, probe_status
from e2e.harness.remote import Remote
from e2e.harness.waits import CERT_DELIVERED, WaitTimeout, wait_until

TASK = "probe"


@pytest.fixture
def probes(cluster: Cluster) -> Iterator[list[tuple[Remote, RunningJob, str]]]:
    """(client, job, change_mode) for a signal and a restart probe job on every client."""
    with ExitStack() as stack:
        out = []
        for node in cluster.clients:
            for mode in ("signal", "restart"):
                job = stack.enter_context(
                    running_job(cluster.agent(node), probe_job(f"pki-{mode}", mode), mode)
                )
                out.append((node, job, mode))
        yield out


def loaded_cert(node: Remote, job: RunningJob, what: str) -> str:
    """Wait until the probe has loaded the cert on disk; return its sha256."""

    def same() -> tuple[str | None, str]:
        seen = observe_delivery(job.agent, job.current(), TASK)
        problems = checkers.delivery_problems(seen)
        return (seen.disk_sha256 if not problems else None), "; ".join(problems)

    return wait_until(same, timeout=CERT_DELIVERED, what=f"{node.name} {job.job}: new cert loaded {what}")


def deliveries(node: Remote, job: RunningJob, mode: str) -> int:
    alloc = job.current()
    if mode == "restart":
        return int(alloc["tasks"][TASK]["restarts"])
    st = probe_status(node, int(alloc["network"]["ports"][0]["host"])) or {}
    want = "SIGHUP" if mode == "signal" else "SIGUSR1"
    return sum(1 for s in st.get("signals", []) if s.get("signal") == want)


@pytest.mark.destructive
def test_every_change_is_delivered_exactly_once_across_agent_restarts(
    cluster: Cluster, probes: list[tuple[Remote, RunningJob, str]], loops: int, seed: int
) -> None:
    rng = random.Random(seed)
    seen: dict[str, set[str]] = {}
    for node, job, _ in probes:
        seen[f"{node.name}/{job.job}"] = {loaded_cert(node, job, "at start")}
    for i in range(loops):
        for node in cluster.clients:
            signal = rng.choice(["SIGTERM", "SIGKILL"])
            with injected(AgentRestart(cluster, node, signal=signal)):
                pass
        for node, job, _ in probes:
            seen[f"{node.name}/{job.job}"].add(loaded_cert(node, job, f"after restart {i + 1}/{loops}"))
        invariants.check_starts(cluster, f"agent restarts {i + 1}/{loops}")
    problems = []
    total = 0
    for node, job, mode in probes:
        changes = len(seen[f"{node.name}/{job.job}"]) - 1
        got = deliveries(node, job, mode)
        total += got
        if got != changes:
            problems.append(
                f"{node.name} {job.job}: {got} {mode} deliveries for {changes} certificate changes"
            )
    history.check(
        "exactly-once delivery",
        problems,
        counts={"deliveries": total, "agent restarts": loops * len(cluster.clients)},
    )
    assert not problems, "\n".join(problems)
    invariants.wait_invariants(cluster, f"{loops} agent restarts")
    invariants.final_check(
        cluster, f"{loops} agent restarts", delay=longest_restart_delay(job for _, job, _ in probes)
    )


@pytest.mark.destructive
def test_change_script_runs_once_in_a_restored_task(cluster: Cluster) -> None:
    """nomad-15851/24051: the script runs inside the task after restore (it sends the probe SIGUSR1)."""
    node = cluster.clients[0]
    with running_job(cluster.agent(node), probe_job("pki-script", "script"), "script") as job:
        first = cert_sha256_on_disk(node, job.alloc_id, TASK, data_dir=job.agent.data_dir)
        for signal in ("SIGTERM", "SIGKILL"):
            before = deliveries(node, job, "script")
            with injected(AgentRestart(cluster, node, signal=signal)):
                pass

            def ran(before: int = before) -> tuple[int | None, str]:
                n = deliveries(node, job, "script")
                return (n if n > before else None), f"{n} SIGUSR1 from the change script"

            try:
                wait_until(ran, timeout=CERT_DELIVERED, what=f"change script after agent {signal}")
            except WaitTimeout as exc:
                events = [(e["type"], e["message"]) for e in cluster.agent(node).events(job.alloc_id)][-6:]
                raise AssertionError(f"{node.name}: {exc}; last events {events}") from None
            invariants.check_starts(cluster, f"agent {signal}", [node])
        assert cert_sha256_on_disk(node, job.alloc_id, TASK, data_dir=job.agent.data_dir) != first
        assert deliveries(node, job, "script") == 2, "the change script ran more than once per change"
        invariants.final_check(cluster, "the agent restarts", [node], delay=job.restart_delay)


@pytest.mark.destructive
def test_a_change_while_the_task_restarts_is_queued_not_fired_into_it(cluster: Cluster) -> None:
    """nomad-25861: with a 10 s certificate re-rendered every ~7 s and a 20 s restart delay, changes
    land while the task is down; none may be fired into the dead task, and the task that comes back
    runs with the newest certificate."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, probe_job("pki-short", "signal", ttl="10s", delay="20s"), "short-ttl") as job:
        loaded_cert(node, job, "at start")
        ContainerKill(cluster, node, alloc_id=job.alloc_id, which="task").inject()
        loaded_cert(node, job, "after the task came back")
        fired = history.check(
            "no change fired into a task that was down",
            fired_while_down(agent.events(job.alloc_id)),
            node=node.name,
        )
        assert not fired, f"{node.name}: change actions fired while the task was not running: {fired}"
        invariants.final_check(cluster, "the task kill", [node], delay=job.restart_delay)


def fired_while_down(events: list[dict[str, Any]]) -> list[str]:
    """'Signaling' events between the task's termination and its next start."""
    down, out = False, []
    for e in events:
        if e["type"] in ("Terminated", "Restarting", "Killing"):
            down = True
        elif e["type"] == "Started":
            down = False
        elif e["type"] == "Signaling" and down:
            out.append(f"{e['type']} at {e['time']:.1f}: {e['message']}")
    return out
