"""The invariants every suite checks after each heal: probes observe, checkers judge, the history
records the verdict.

On every client: no orphans (each listed with its owner: containers, exec processes in the task
cgroups of cgroup v1 or v2, processes of a task in none), one live set of containers per alloc and one
running instance per exec task, every alloc running or replaced (none half-alive, none stuck
pending), and every running bridge alloc (docker or exec) reachable from another client, with the
address the agent reports, reaching Vault from its netns, every task in the alloc's netns.

Start accounting (`check_starts`, e2e.harness.accounting): every task start since a point explained
by one decision; `settle_restarts` waits until every restart timer the events may have set is past,
and `final_check` does both before a suite's last check.
"""

from __future__ import annotations

import time
from typing import Any

from agent.errors import AgentError
from e2e.harness import accounting, checkers, history, nomadview, probes
from e2e.harness.cluster import Cluster
from e2e.harness.remote import Remote
from e2e.harness.waits import (
    ALLOC_RECOVERED,
    RESTART_MARGIN,
    RESTARTS_SETTLED,
    SETTLE_RECHECK,
    WaitTimeout,
    wait_until,
)
from lab.errors import LabError

_seen_events: set[tuple[str, str, float, str, str]] = set()
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
    resources = probes.observe_resources(node, cluster.target)
    orphans = checkers.orphan_problems(resources, allocs, node.name)
    problems = orphans + checkers.container_set_problems(resources, allocs, node.name)
    try:  # read again: a task that restarted while the node was observed is not judged on it
        after = cluster.agent(node).allocs()
    except Exception:  # the agent stopped answering: judge on the first read
        after = allocs
    steady = checkers.steady_allocs(allocs, after)
    problems += checkers.process_set_problems(resources, steady, node.name)
    problems += checkers.chain_set_problems(resources, allocs, node.name)
    names = probes.container_names(node, cluster.target)
    problems += checkers.alloc_health_problems(node.name, steady, resources, names)
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
        try:
            stubs = agent.raw_allocs()  # a stub's TaskStates hold the events: one request per node
        except AgentError:
            stubs = []
        for stub in stubs:
            alloc_id = str(stub["ID"])
            for e in nomadview.alloc_events(stub):
                key = (node.name, alloc_id, float(e["time"]), e["type"], e["task"])
                if key in _seen_events or float(e["time"]) < since:
                    continue
                _seen_events.add(key)
                new.append(e)
                _event_log.append({**e, "node": node.name, "alloc": alloc_id})
                history.record(
                    history.EVENT,
                    e["type"],
                    node=node.name,
                    detail=e.get("message", ""),
                    at=float(e["time"]),
                    alloc=alloc_id,
                    task=e["task"],
                )
    return new


def events_seen(cluster: Cluster, since: float = 0.0) -> list[dict[str, Any]]:
    """Every task event of this run so far (also of allocs the agent has forgotten since)."""
    record_events(cluster)
    return [e for e in _event_log if float(e["time"]) >= since]


def test_started() -> float:
    """When the current test began (0.0 with no run open): what its checks look at by default."""
    h = history.current()
    return h.test_started if h is not None else 0.0


def alloc_events(
    cluster: Cluster, node: Remote, since: float | None = None
) -> dict[str, list[dict[str, Any]]]:
    """{alloc id: its events in the agent's order} for every alloc of `node` with an event since
    `since` (default: the current test's start; also allocs the agent has forgotten since: the
    run's event log keeps them)."""
    since = test_started() if since is None else since
    record_events(cluster)
    out: dict[str, list[dict[str, Any]]] = {}
    for e in _event_log:
        if e["node"] == node.name:
            out.setdefault(e["alloc"], []).append(e)
    return {a: evs for a, evs in out.items() if any(float(e["time"]) >= since for e in evs)}


def node_clock(node: Remote) -> float:
    """The node's clock (the agent's event times are read from it)."""
    return float(node.out("date +%s.%N"))


def check_starts(
    cluster: Cluster,
    what: str,
    nodes: list[Remote] | None = None,
    *,
    since: float | None = None,
    overdue: bool = False,
) -> list[str]:
    """Start accounting over every alloc with an event since `since` (default: since the current
    test began; all of each such alloc's events are accounted): each task start explained by
    one decision (e2e.harness.accounting). `overdue`: also a restart the policy decided that is long
    past its time and never came (only after `settle_restarts`). Records a check per client; raises
    AssertionError with every problem."""
    problems: list[str] = []
    for node in nodes or cluster.clients:
        allocs = alloc_events(cluster, node, since)
        statuses = {
            str(a["ID"]): a.get("ClientStatus")
            for a in (cluster.agent(node).try_get("/v1/allocations") or [])
        }
        now = node_clock(node) if overdue else None
        mine: list[str] = []
        for alloc_id, events in allocs.items():
            mine += accounting.start_problems(
                events, where=f"{node.name}: alloc {alloc_id[:8]}", status=statuses.get(alloc_id), now=now
            )
        starts = sum(accounting.start_count(evs) for evs in allocs.values())
        history.check(
            "start accounting",
            mine,
            node=node.name,
            counts={"starts accounted": starts, "allocs accounted": len(allocs)},
        )
        problems += mine
    if problems:
        raise AssertionError(f"start accounting after {what}:\n  " + "\n  ".join(problems))
    return problems


def settle_restarts(
    cluster: Cluster,
    what: str,
    nodes: list[Remote] | None = None,
    *,
    delay: float,
    since: float | None = None,
    timeout: float = RESTARTS_SETTLED,
) -> float:
    """Wait until every node's clock is past every restart timer its events since `since` may have
    set: the last exit or restart decision + the longer of `delay` (the jobs' longest restart delay)
    and the decision's own + RESTART_MARGIN; return the seconds waited. A stale timer that fires
    late (after a recovery restarted the task already) does so within this wait, where the last
    check sees its start. Nothing exited: no wait."""
    t0 = time.monotonic()
    targets = nodes or cluster.clients

    def past() -> tuple[bool | None, str]:
        waiting = []
        for node in targets:
            events = [e for evs in alloc_events(cluster, node, since).values() for e in evs]
            due = accounting.restarts_settle_at(events, delay)
            if not due:
                continue
            left = due + RESTART_MARGIN - node_clock(node)
            if left > 0:
                waiting.append(f"{node.name}: {left:.0f}s until past the last restart delay")
        return (True if not waiting else None), "; ".join(waiting)

    try:
        wait_until(past, timeout=timeout, what=f"past the restart delays after {what}", interval=2.0)
    except WaitTimeout as exc:
        raise AssertionError(
            f"after {what}: tasks kept exiting, the restart delays never ran out within {timeout:.0f}s: "
            f"{exc.last}"
        ) from None
    took = time.monotonic() - t0
    history.measure(f"wait past the restart delays ({delay:.0f}s) after {what}", took)
    return took


def final_check(
    cluster: Cluster,
    what: str,
    nodes: list[Remote] | None = None,
    *,
    delay: float,
    since: float | None = None,
) -> None:
    """A suite's last check: wait past the restart delays (`settle_restarts`), then every invariant
    once more (when that wait took any time: otherwise the suite's check just before stands) and the
    start accounting, owed restarts included: no start a stale timer made late, none owed missing."""
    waited = settle_restarts(cluster, what, nodes, delay=delay, since=since)
    later = f"{what}, past the restart delays"
    if waited >= SETTLE_RECHECK:
        wait_invariants(cluster, later, nodes)
    check_starts(cluster, later, nodes, since=since, overdue=True)


def sweeps_leave_alone(cluster: Cluster, node: Remote, jobs: list[Any]) -> list[str]:
    """nomad-16338: watch two orphan sweeps over the jobs' live allocs (restored ones included) and
    return what changed: the containers of every alloc, and the processes of its exec tasks, must be
    the very same afterwards."""
    from e2e.harness.faults import alloc_containers, wait_sweeps
    from e2e.harness.jobs import task_handles

    def seen(j: Any) -> tuple[list[str], dict[str, str]]:
        return alloc_containers(node, j.current()["id"], target=cluster.target), task_handles(j)

    before = {j.job: seen(j) for j in jobs}
    sweeps = wait_sweeps(cluster.agent(node), 2)
    wait_invariants(cluster, f"{sweeps} orphan sweeps", [node])
    after = {j.job: seen(j) for j in jobs}
    changed = [f"{job}: {before[job]} -> {after[job]}" for job in before if before[job] != after[job]]
    return history.check(
        "sweeper left live allocs alone", changed, node=node.name, counts={"sweeps watched": sweeps}
    )
