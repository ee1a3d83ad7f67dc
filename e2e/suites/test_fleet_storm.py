"""Restart storms on a fleet (seeds/template-change-mode-after-restart: "every time we restart a large
fleet of clients some allocations..." lose their signal, and Vault sees a burst of re-issues).

Narrative: every client of the lab (full and light, `--fleet N`: the first N) runs two probe allocs,
an exec task whose PKI certificate a template renders (change_mode "signal" and "restart", a 90 s
TTL, so the agents also re-issue on their own). Then three storms: every agent at once with SIGTERM,
every agent at once with SIGKILL, and waves of 10 % (SIGTERM or SIGKILL as the run's seed says).
Every agent start issues a new certificate. After each storm, within STORM_CONVERGED seconds of the
last agent answering, every probe has LOADED a new certificate that is the one on disk; every change
was delivered exactly once (the probe's SIGHUPs are the agent's change signals, none reloading a
certificate already loaded; restarts are the change restarts); no alloc was replaced; no orphan on
any client; every task start is explained by one decision. Measured and reported: OpenBao requests per
second over the storm and their latency p50/p99 (its audit log), the time to converge with the
convergence curve, and each agent's restore time (p50, p99, max).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import pytest

from e2e.harness import fleet, history, invariants, vaultload
from e2e.harness.cluster import Cluster
from e2e.harness.faults import AgentRestart
from e2e.harness.remote import Remote
from e2e.harness.waits import ALLOC_RECOVERED, STORM_AGENT

STORM_CONVERGED = 60.0  # seconds from the last agent answering to every probe converged (the issue's)


@dataclass(frozen=True)
class Storm:
    name: str
    waves: list[list[tuple[Remote, str]]]  # each wave: (node, signal), restarted together


def storms(nodes: list[Remote], seed: int) -> list[Storm]:
    rng = random.Random(seed)
    return [
        Storm("all at once, SIGTERM", [[(n, "SIGTERM") for n in nodes]]),
        Storm("all at once, SIGKILL", [[(n, "SIGKILL") for n in nodes]]),
        Storm(
            "waves of 10%",
            [[(n, rng.choice(["SIGTERM", "SIGKILL"])) for n in w] for w in fleet.waves(nodes, 0.10)],
        ),
    ]


def restart_wave(cluster: Cluster, wave: list[tuple[Remote, str]]) -> None:
    """Every agent of the wave killed, and only then every one started again (a storm, not a loop)."""
    faults = [
        AgentRestart(cluster, node, signal=sig, exit_timeout=STORM_AGENT, healthy_timeout=STORM_AGENT)
        for node, sig in wave
    ]
    # One SSH session per agent, all at once: with fewer, a hundred kills spread over minutes.
    together = max(fleet.PARALLEL, len(faults))
    try:
        fleet.pmap(lambda f: f.inject(), faults, parallel=together)
    finally:
        # Even when the kills failed or the test's timeout struck between kill and start: a wave
        # left down would fail every later run on this lab ("connection refused").
        fleet.pmap(lambda f: f.heal(), faults, parallel=together)


def spread(values: list[float]) -> str:
    q = vaultload.quantile
    return f"p50 {q(values, 0.5):.2f}s, p99 {q(values, 0.99):.2f}s, max {max(values, default=0):.2f}s"


@pytest.mark.destructive
def test_restart_storms_deliver_every_change_once_and_replace_nothing(
    cluster: Cluster, fleet_size: int, seed: int
) -> None:
    nodes = cluster.fleet[:fleet_size] if fleet_size else cluster.fleet
    if fleet_size and len(nodes) < fleet_size:
        pytest.fail(
            f"--fleet {fleet_size}: lab {cluster.name} has {len(nodes)} clients "
            f"(make lab-up CLIENTS={fleet_size})",
            pytrace=False,
        )
    server = cluster.servers[0]
    print(
        f"\n[fleet] {len(nodes)} clients ({len([n for n in nodes if n in cluster.light])} light), seed {seed}"
    )
    with fleet.fleet_probes(cluster, nodes) as probes:
        t_setup = time.monotonic()
        first = fleet.wait_converged(probes, t_setup, timeout=ALLOC_RECOVERED)
        assert not first.problems, "probes never loaded their first certificate:\n  " + "\n  ".join(
            sorted(first.problems.values())
        )
        summary = []
        for storm in storms(nodes, seed):
            for p in probes:  # what each probe has loaded now: the storm must replace it
                seen = p.seen()
                p.start_sha = str(seen.loaded_sha256)
                p.start_signals = len(fleet.sighups(seen.status))
            offset = vaultload.audit_size(server)
            wall0, t0 = time.time(), time.monotonic()
            with history.span(
                history.FAULT,
                f"storm: {storm.name}",
                detail=f"{len(nodes)} agents",
                heals=history.HEALS_ITSELF,
            ):
                for wave in storm.waves:
                    restart_wave(cluster, wave)
            agents_back = time.monotonic() - t0
            conv = fleet.wait_converged(probes, t0, timeout=agents_back + STORM_CONVERGED)
            wall_end = time.time()
            restore = list(fleet.restore_seconds(cluster, nodes).values())
            load = vaultload.load_figures(vaultload.requests_since(server, offset), wall0, wall_end)

            history.measure(f"storm {storm.name}: agents back", agents_back)
            history.measure(
                f"storm {storm.name}: converged", conv.seconds, target=agents_back + STORM_CONVERGED
            )
            line = (
                f"{len(nodes)} agents back in {agents_back:.1f}s, "
                f"{len(conv.at)}/{len(probes)} probes converged in {conv.seconds:.1f}s; "
                f"restore {spread(restore)}; OpenBao {load.line()}"
            )
            history.record(
                history.NOTE,
                f"storm {storm.name}",
                detail=line,
                series={"requests per second": load.series, "probes converged": conv.curve()},
                restore_seconds=restore,
                openbao={
                    "p50": load.p50,
                    "p99": load.p99,
                    "peak_rps": load.peak_rps,
                    "requests": load.requests,
                },
            )
            summary.append(f"storm {storm.name}: {line}")

            late = sorted(conv.problems.values())
            history.check(f"storm {storm.name}: every probe loaded the new certificate", late)
            assert not late, (
                f"after storm {storm.name}: {len(late)} probes without the new certificate within "
                f"{STORM_CONVERGED:.0f}s of the last agent answering:\n  " + "\n  ".join(late)
            )
            gone = history.check(f"storm {storm.name}: no alloc replaced", fleet.replaced(probes))
            assert not gone, f"after storm {storm.name}:\n  " + "\n  ".join(gone)
            wrong, delivered = fleet.check_deliveries(probes)
            history.check(
                f"storm {storm.name}: exactly one delivery per change",
                wrong,
                counts={"deliveries": delivered},
            )
            assert not wrong, f"after storm {storm.name}:\n  " + "\n  ".join(wrong)
            orphans = fleet.pmap(lambda n: invariants.client_problems(cluster, n, network=False)[0], nodes)
            found = [p for per in orphans for p in per]
            history.check(f"storm {storm.name}: no orphans, every alloc healthy", found)
            assert not found, f"after storm {storm.name}:\n  " + "\n  ".join(found)
            invariants.check_starts(cluster, f"storm {storm.name}", nodes)
        history.record(history.NOTE, "fleet storms", detail="\n".join(summary))
