"""The invariants every suite checks after each heal: probes observe, checkers judge, the history
records the verdict.

On every client: no orphans (each listed with its owner), one live set of containers per alloc, every
alloc running or replaced (none half-alive, none stuck pending), and every running bridge alloc
reachable from another client, with the address the agent reports, reaching Vault from its netns.
"""

from __future__ import annotations

import time
from typing import Any

from e2e.harness import checkers, history, probes
from e2e.harness.cluster import Cluster
from e2e.harness.remote import Remote
from e2e.harness.waits import ALLOC_RECOVERED, WaitTimeout, wait_until
from lab.errors import LabError

_seen_events: set[tuple[str, str, float, str]] = set()
_event_log: list[dict[str, Any]] = []  # every task event seen this run, with "node" and "alloc" added


def client_problems(
    cluster: Cluster, node: Remote, *, network: bool = True
) -> tuple[list[str], dict[str, int]]:
    """(problems, counts) for one client, from one observation."""
    try:
        allocs = cluster.agent(node).allocs()
    except LabError as exc:
        return [str(exc)], {}
    except Exception as exc:  # the agent API: AgentError
        return [f"{node.name}: agent API does not answer: {exc}"], {}
    resources = probes.observe_resources(node)
    orphans = checkers.orphan_problems(resources, allocs, node.name)
    problems = orphans + checkers.container_set_problems(resources, allocs, node.name)
    problems += checkers.chain_set_problems(resources, allocs, node.name)
    names = probes.container_names(node)
    problems += checkers.alloc_health_problems(node.name, allocs, resources, names)
    running = [a for a in allocs if a.get("status") == "running" and a["network"].get("mode") == "bridge"]
    if network:  # also beside other problems: the address check names the cause of a "stray" rule
        for a in running:
            problems += checkers.network_problems(probes.observe_network(cluster, node, a))
    counts = {
        "allocs checked": len(allocs),
        "resources checked": len(resources),
        "orphans found": len(orphans),
    }
    return problems, counts


def check(
    cluster: Cluster, nodes: list[Remote] | None = None, *, network: bool = True, record: bool = True
) -> list[str]:
    """One pass over the clients; records a CHECK per client (unless `record` is False: a poll)."""
    out = []
    for node in nodes or cluster.clients:
        problems, counts = client_problems(cluster, node, network=network)
        if record:
            history.check("invariants", problems, node=node.name, counts=counts)
        out += problems
    return out


def wait_invariants(
    cluster: Cluster, what: str, nodes: list[Remote] | None = None, *, timeout: float = ALLOC_RECOVERED
) -> float:
    """Poll until every invariant holds; return the seconds it took. On timeout: AssertionError with
    every problem last seen."""
    t0 = time.monotonic()

    def holds() -> tuple[bool | None, str]:
        problems = check(cluster, nodes, record=False)  # polls are not checks; the verdict below is
        return (True if not problems else None), "\n  ".join(problems)

    try:
        wait_until(holds, timeout=timeout, what=f"invariants after {what}", interval=2.0)
    except WaitTimeout as exc:
        check(cluster, nodes)  # the failing observation, recorded
        raise AssertionError(f"after {what}, within {timeout:.0f}s:\n  {exc.last}") from None
    else:
        check(cluster, nodes)
    finally:
        record_events(cluster)
    return time.monotonic() - t0


def record_events(cluster: Cluster) -> list[dict[str, Any]]:
    """Copy the agents' task events into the history (once each), for the report's timeline."""
    new: list[dict[str, Any]] = []
    h = history.current()
    since = h.started if h is not None else 0.0
    for node in cluster.clients:
        agent = cluster.agent(node)
        allocs = agent.try_get("/v1/allocations") or []
        for a in allocs:
            for e in agent.try_get(f"/v1/allocation/{a['id']}/events") or []:
                key = (node.name, a["id"], float(e["time"]), e["type"])
                if key in _seen_events or float(e["time"]) < since:
                    continue
                _seen_events.add(key)
                new.append(e)
                _event_log.append({**e, "node": node.name, "alloc": a["id"]})
                history.record(
                    history.EVENT,
                    e["type"],
                    node=node.name,
                    detail=e.get("message", ""),
                    at=float(e["time"]),
                    alloc=a["id"],
                    task=e["task"],
                )
    return new


def events_seen(cluster: Cluster, since: float = 0.0) -> list[dict[str, Any]]:
    """Every task event of this run so far (also of allocs the agent has forgotten since)."""
    record_events(cluster)
    return [e for e in _event_log if float(e["time"]) >= since]


def sweeps_leave_alone(cluster: Cluster, node: Remote, jobs: list[Any]) -> list[str]:
    """nomad-16338: watch two orphan sweeps over the jobs' live allocs (restored ones included) and
    return what changed: the containers of every alloc must be the very same afterwards."""
    from e2e.harness.faults import alloc_containers, wait_sweeps

    before = {j.job: alloc_containers(node, j.current()["id"]) for j in jobs}
    sweeps = wait_sweeps(cluster.agent(node), 2)
    wait_invariants(cluster, f"{sweeps} orphan sweeps", [node])
    after = {j.job: alloc_containers(node, j.current()["id"]) for j in jobs}
    changed = [f"{job}: {before[job]} -> {after[job]}" for job in before if before[job] != after[job]]
    return history.check(
        "sweeper left live allocs alone", changed, node=node.name, counts={"sweeps watched": sweeps}
    )
