"""Seeded chaos: a random schedule of every fault the harness has, for a set time, with all invariants
checked after each heal.

Narrative: every client runs the seed job (a mapped port), the reporter's pause-container job, a
probe whose certificate is delivered by SIGHUP, and an exec job (busybox httpd in a named netns, its
port mapped). Then, until `--chaos-minutes` are up, the run's seed picks a fault, a client and how
long to hold it: agent SIGTERM/SIGKILL, clean or hard reboot, docker daemon restart, pause/task/both
container kills, a kill of the exec task's processes, a network partition of the client, a Vault
outage. After each heal: no orphans (containers, exec processes), one set of containers per alloc and
one instance per exec task, none half-alive, every port reachable from the other client with the
address the agent reports, Vault reachable from every alloc, every task in its alloc's netns, the
probe's loaded certificate is the one on disk, and every task start is explained by one decision
(start accounting). The last check comes after the jobs' longest restart delay, so a restart timer a
recovery should have cancelled has fired by then if it was going to. The seed is printed at the start
and the end; `--seed` replays the same schedule (how far it gets depends on the machine's speed, the
order does not).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterable
from contextlib import ExitStack

import pytest

from e2e.harness import checkers, history, invariants, probes
from e2e.harness.chaos import STEP_NOTE, ScheduleError, Step, parse_schedule, schedule
from e2e.harness.cluster import Cluster
from e2e.harness.faults import (
    AgentRestart,
    ContainerKill,
    DockerRestart,
    Fault,
    Partition,
    ProcessKill,
    Reboot,
    VaultOutage,
    injected,
)
from e2e.harness.jobs import (
    EXEC_WEB,
    SEED_ORPHANS,
    SEED_RESTORE,
    RunningJob,
    longest_restart_delay,
    probe_job,
    read,
    running_job,
)
from e2e.harness.remote import Remote
from e2e.harness.waits import CERT_DELIVERED, wait_until

EXEC_JOB = 3  # the index of the exec job among a client's jobs (the first three are docker jobs)


def make_fault(step: Step, cluster: Cluster, node: Remote, jobs: list[RunningJob]) -> Fault:
    k = step.kind
    if k.startswith("agent-"):
        return AgentRestart(cluster, node, signal="SIGTERM" if k == "agent-sigterm" else "SIGKILL")
    if k.endswith("-reboot"):
        return Reboot(cluster, node, hard=k == "hard-reboot")
    if k == "docker-restart":
        return DockerRestart(cluster, node)
    if k == "kill-exec":
        return ProcessKill(cluster, node, alloc_id=jobs[EXEC_JOB].current()["id"])
    if k.startswith("kill-"):
        return ContainerKill(
            cluster, node, alloc_id=jobs[step.job].current()["id"], which=k.removeprefix("kill-")
        )
    if k == "partition":
        return Partition(cluster, node)
    return VaultOutage(cluster, cluster.servers[0])


@pytest.mark.nightly
@pytest.mark.destructive
@pytest.mark.reboot
def test_seeded_chaos_keeps_every_invariant(
    cluster: Cluster, seed: int, request: pytest.FixtureRequest
) -> None:
    minutes = float(request.config.getoption("--chaos-minutes"))
    explicit = request.config.getoption("--chaos-schedule")
    steps: Iterable[Step]
    if explicit:  # a given schedule (a shrink's replay, a scenario file): every step, no deadline
        try:
            steps = parse_schedule(explicit, len(cluster.clients))
        except ScheduleError as exc:
            pytest.fail(f"--chaos-schedule: {exc}", pytrace=False)
        print(f"[chaos] seed {seed}, the {len(steps)} given steps: {'; '.join(map(str, steps))}")
    else:
        steps = schedule(seed, len(cluster.clients))
        print(f"[chaos] seed {seed} for {minutes:g} min (replay: --seed {seed})")
    with ExitStack() as stack:
        jobs: dict[str, list[RunningJob]] = {}
        for node in cluster.clients:
            agent = cluster.agent(node)
            jobs[node.name] = [
                stack.enter_context(running_job(agent, read(SEED_RESTORE), SEED_RESTORE.name)),
                stack.enter_context(running_job(agent, read(SEED_ORPHANS), SEED_ORPHANS.name)),
                stack.enter_context(running_job(agent, probe_job("pki-chaos", "signal"), "pki-chaos")),
                stack.enter_context(running_job(agent, read(EXEC_WEB), EXEC_WEB.name)),
            ]
        invariants.wait_invariants(cluster, "the chaos workload started")
        deadline = float("inf") if explicit else time.monotonic() + minutes * 60
        done = 0
        for step in itertools.takewhile(lambda _: time.monotonic() < deadline, steps):
            node = cluster.clients[step.client]
            fault = make_fault(step, cluster, node, jobs[node.name])
            history.record(history.NOTE, f"{STEP_NOTE}{done + 1}: {step}", node=node.name)
            t0 = time.monotonic()
            with injected(fault):
                if step.kind in ("partition", "vault-outage"):
                    fault.hold(step.hold)
            took = invariants.wait_invariants(cluster, f"chaos step {done + 1} ({step})")
            history.measure(f"chaos {step.kind}: heal to invariants", took, node=node.name)
            history.measure(f"chaos {step.kind}: inject to recovered", time.monotonic() - t0, node=node.name)
            for n in cluster.clients:
                probe = jobs[n.name][2]
                wait_until(
                    functools.partial(_delivered, n, probe),
                    timeout=CERT_DELIVERED,
                    what=f"{n.name}: probe loaded the cert on disk after chaos step {done + 1} ({step})",
                )
            invariants.check_starts(cluster, f"chaos step {done + 1} ({step})")
            done += 1
        invariants.final_check(
            cluster, f"{done} chaos steps", delay=longest_restart_delay(j for js in jobs.values() for j in js)
        )
        history.check("chaos", [], counts={"chaos steps": done})
        print(f"[chaos] {done} steps, all invariants held; seed {seed}")
        assert done > 0, f"no chaos step ran in {minutes:g} min"


def _delivered(node: Remote, job: RunningJob) -> tuple[bool | None, str]:
    problems = checkers.delivery_problems(probes.observe_delivery(job.agent, job.current(), "probe"))
    return (True if not problems else None), "; ".join(problems)
