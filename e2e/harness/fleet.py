"""The fleet: every client of the lab (full and light), each running a few probe allocs whose PKI
certificate a template renders, and the storms that restart their agents together.

The probe runs as an exec task (light clients have no docker): the node's python3 runs the same
probe program the fieldlab/probe image carries, installed at /usr/local/lib/fieldlab/probe.py
(workload_images, tasks_from exec_probe), in a bridge netns with its port mapped. Its certificate
lives `FLEET_TTL`, so the agents re-issue it on their own every 60-80 % of that, and every agent start
issues a new one: a storm is a burst of logins, token creations and issues on OpenBao.

Delivery accounting (`delivery_problems`, pure): for change_mode "signal", the SIGHUPs the probe got
must be exactly the agent's "Signaling" events for template changes (none lost, none extra), and no
SIGHUP may reload the certificate that was already loaded (one change delivered twice); for
"restart", the task's restarts must be exactly its "Restart Signaled" events. After each storm every
probe's LOADED certificate must be the one on disk.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent.errors import AgentError
from e2e.harness.checkers import DeliverySeen
from e2e.harness.checkers import delivery_problems as loaded_problems
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.jobs import PKI_ISSUE, PROBE_POLICY
from e2e.harness.probes import observe_delivery
from e2e.harness.remote import Remote
from e2e.harness.waits import ALLOC_RECOVERED, WaitTimeout, wait_until

TASK = "probe"
MODES = ("signal", "restart")
FLEET_TTL = "90s"  # re-issued every 54-72 s by each alloc's template runner
EXEC_PROBE = "/usr/local/lib/fieldlab/probe.py"  # workload_images_exec_probe
# SSH sessions and API calls at once from the controller (2 cores: more only queue).
PARALLEL = 16
SETUP_PARALLEL = 8  # nodes whose probes are submitted at once (16 first issues in flight at most)
CONVERGE_POLL = 1.0  # seconds between two looks at the probes not converged yet
# A change restart signalled finishing (kill, start again: 1-2 s at 100 clients) before its count is
# judged; one still in flight after this is a lost restart.
RESTART_IN_FLIGHT = 30.0

FLEET_JOB = """
job "{job}" {{
  group "g" {{
    network {{
      mode = "bridge"
      port "probe" {{ to = 8080 }}
    }}
    restart {{
      attempts = 10
      interval = "10m"
      delay    = "1s"
      mode     = "fail"
    }}
    task "probe" {{
      driver = "exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-I", "-S", "-B", "{probe}", "--port", "8080", "--cert", "/secrets/cert.pem"]
      }}
      vault {{
        policies = ["{policy}"]
      }}
      template {{
        data          = <<EOT
{{{{ with secret "{pki}" "common_name={job}.service.fieldlab" "ttl={ttl}" -}}}}
{{{{ .Data.certificate }}}}{{{{ end }}}}
EOT
        destination   = "secrets/cert.pem"
        change_mode   = "{mode}"
        change_signal = "SIGHUP"
        splay         = "0s"
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"""

T = TypeVar("T")
R = TypeVar("R")


def fleet_job(mode: str, ttl: str = FLEET_TTL) -> str:
    return FLEET_JOB.format(
        job=f"pki-fleet-{mode}", mode=mode, ttl=ttl, probe=EXEC_PROBE, pki=PKI_ISSUE, policy=PROBE_POLICY
    )


def pmap(fn: Callable[[T], R], items: Iterable[T], parallel: int = PARALLEL) -> list[R]:
    """`fn` over `items`, a few at once, results in order; the first exception is raised."""
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(fn, items))


@dataclass
class FleetProbe:
    """One probe alloc of the fleet, and what was seen of it when the storms began."""

    node: Remote
    agent: Agent
    job: str
    mode: str
    alloc_id: str
    start_sha: str = ""  # the certificate loaded at the start of the current storm
    start_signals: int = 0  # SIGHUPs the probe had then (the accounting is over the whole run)

    @property
    def key(self) -> str:
        return f"{self.node.name}/{self.job}"

    def alloc(self) -> dict[str, Any]:
        return self.agent.alloc(self.alloc_id)

    def seen(self) -> DeliverySeen:
        return observe_delivery(self.agent, self.alloc(), TASK)


@contextmanager
def fleet_probes(cluster: Cluster, nodes: Sequence[Remote]) -> Iterator[list[FleetProbe]]:
    """A signal and a restart probe job on every node of `nodes`, running; always stopped after."""
    submitted: list[FleetProbe] = []

    def submit(node: Remote) -> list[FleetProbe]:
        agent = cluster.agent(node)
        out = []
        for mode in MODES:
            allocs = agent.run_job(fleet_job(mode), f"fleet-{mode}.hcl")
            out.append(FleetProbe(node, agent, f"pki-fleet-{mode}", mode, allocs[0]))
        return out

    def running(p: FleetProbe) -> None:
        def up() -> tuple[bool | None, str]:
            status = str(p.alloc()["status"])
            return (True if status == "running" else None), status

        wait_until(up, timeout=ALLOC_RECOVERED, what=f"{p.key} running")

    def submit_and_wait(node: Remote) -> list[FleetProbe]:
        mine = submit(node)
        submitted.extend(mine)  # list.extend is atomic: the teardown stops whatever was submitted
        for p in mine:
            running(p)
        return mine

    try:
        # A few nodes at a time, each until its allocs run: a first render's Vault failure fails the
        # alloc (the agent's setup does not retry it; see docs/fleet.md), and 200 first issues at
        # once time out on a 2-core OpenBao shared with the fleet.
        pmap(submit_and_wait, nodes, parallel=SETUP_PARALLEL)
        yield submitted
    finally:

        def stop(node: Remote) -> None:
            agent = cluster.agent(node)
            for mode in MODES:
                with contextlib.suppress(AgentError):  # never submitted (a failed setup): nothing to stop
                    agent.stop_job(f"pki-fleet-{mode}")

        pmap(stop, nodes)


@dataclass
class Convergence:
    """When each probe had a NEW certificate loaded that is also the one on disk."""

    started: float
    at: dict[str, float] = field(default_factory=dict)  # probe key -> seconds after `started`
    problems: dict[str, str] = field(default_factory=dict)  # the last reason of those not converged

    @property
    def seconds(self) -> float:
        return max(self.at.values(), default=0.0)

    def curve(self) -> list[tuple[float, int]]:
        """(seconds, probes converged by then): the convergence curve."""
        return [(t, i + 1) for i, t in enumerate(sorted(self.at.values()))]


def wait_converged(probes: Sequence[FleetProbe], started: float, *, timeout: float) -> Convergence:
    """Poll every probe until each has loaded a certificate other than its `start_sha` that is the one
    on disk (every agent start issues a new one), or `timeout` seconds after `started` (monotonic).
    Those not converged by then are in `problems`, with the last reason seen."""
    conv = Convergence(started)
    left = list(probes)

    def look(p: FleetProbe) -> tuple[FleetProbe, str]:
        try:
            seen = p.seen()
        except Exception as exc:  # the agent is still starting: not converged yet
            return p, f"{p.key}: {exc}"
        why = "; ".join(loaded_problems(seen))
        if not why and seen.loaded_sha256 == p.start_sha:
            why = f"{p.key}: still the certificate of before the storm"
        return p, why

    def all_converged() -> tuple[bool | None, str]:
        nonlocal left
        now_left = []
        for p, why in pmap(look, left):
            if why:
                conv.problems[p.key] = why
                now_left.append(p)
            else:
                conv.at[p.key] = time.monotonic() - started
                conv.problems.pop(p.key, None)
        left = now_left
        return (True if not left else None), f"{len(left)} probes not converged"

    with contextlib.suppress(WaitTimeout):  # those left are reported in `problems`
        wait_until(
            all_converged,
            timeout=max(0.0, timeout - (time.monotonic() - started)),
            what="every probe converged",
            interval=CONVERGE_POLL,
        )
    return conv


def sighups(status: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [s for s in (status or {}).get("signals", []) if s.get("signal") == "SIGHUP"]


def template_signals(events: Sequence[dict[str, Any]]) -> int:
    """The agent's own count of change_mode signal deliveries of the probe task (pure)."""
    return sum(
        1
        for e in events
        if e.get("task") == TASK
        and e.get("type") == "Signaling"
        and str(e.get("message", "")).startswith("Template re-rendered")
    )


def template_restarts(events: Sequence[dict[str, Any]]) -> int:
    return sum(1 for e in events if e.get("task") == TASK and e.get("type") == "Restart Signaled")


def restarts_in_flight(events: Sequence[dict[str, Any]]) -> int:
    """Change restarts signalled whose task has not started again yet (pure): the task's restart count
    rises when it starts again, a second or two after "Restart Signaled" (kill, then start)."""
    started = sum(
        1
        for e in events
        if e.get("task") == TASK
        and e.get("type") == "Started"
        and (e.get("details") or {}).get("cause") == "change_mode restart"
    )
    return max(0, template_restarts(events) - started)


def delivery_problems(
    key: str,
    mode: str,
    events_before: Sequence[dict[str, Any]],
    status: dict[str, Any] | None,
    events_after: Sequence[dict[str, Any]],
    restarts: int,
    start_sha: str,
    start_signals: int,
) -> list[str]:
    """Exactly one delivery per change (pure). `events_before`/`events_after`: the alloc's events read
    just before and after the probe's status (a change may land in between); `restarts`: the task's
    restart count, read with `events_after`."""
    if mode == "restart":
        want = template_restarts(events_after)
        if restarts != want:
            return [f"{key}: {restarts} task restarts for {want} template changes (restart mode)"]
        return []
    got = sighups(status)
    low, high = template_signals(events_before), template_signals(events_after)
    problems = []
    if len(got) < low:
        problems.append(f"{key}: the agent sent {low} change signals, the probe got {len(got)} (lost)")
    elif len(got) > high:
        problems.append(f"{key}: the probe got {len(got)} SIGHUPs for {high} change signals (extra)")
    shas = [start_sha] + [str(s.get("cert_sha256")) for s in got[start_signals:]]
    twice = [i for i in range(1, len(shas)) if shas[i] == shas[i - 1]]
    if twice:
        problems.append(
            f"{key}: {len(twice)} SIGHUP(s) reloaded the certificate already loaded (one change "
            f"delivered twice, or a signal without a change)"
        )
    return problems


def check_deliveries(probes: Sequence[FleetProbe]) -> tuple[list[str], int]:
    """(problems, deliveries counted) over every probe, read from the agents and the probes."""

    def settled(p: FleetProbe) -> tuple[list[dict[str, Any]], int]:
        """The alloc's events and the task's restart count, read once no change restart is in flight
        (a restart that never finishes is judged as read after RESTART_IN_FLIGHT: one lost)."""

        def look() -> tuple[tuple[list[dict[str, Any]], int] | None, str]:
            events = p.agent.events(p.alloc_id)
            restarts = int(p.agent.alloc(p.alloc_id)["tasks"][TASK]["restarts"])
            flying = restarts_in_flight(events) if p.mode == "restart" else 0
            return (None if flying else (events, restarts)), f"{flying} change restart(s) in flight"

        try:
            return wait_until(look, timeout=RESTART_IN_FLIGHT, what=f"{p.key}: restarts settled")
        except WaitTimeout:
            events = p.agent.events(p.alloc_id)
            return events, int(p.agent.alloc(p.alloc_id)["tasks"][TASK]["restarts"])

    def one(p: FleetProbe) -> tuple[list[str], int]:
        before = p.agent.events(p.alloc_id)
        alloc = p.alloc()
        status = observe_delivery(p.agent, alloc, TASK).status
        after, restarts = settled(p)
        probs = delivery_problems(
            p.key, p.mode, before, status, after, restarts, p.start_sha, p.start_signals
        )
        n = restarts if p.mode == "restart" else len(sighups(status))
        return probs, n

    problems: list[str] = []
    total = 0
    for probs, n in pmap(one, probes):
        problems += probs
        total += n
    return problems, total


def replaced(probes: Sequence[FleetProbe]) -> list[str]:
    """Probes whose alloc is no longer running as the same alloc (none may be replaced by a storm)."""

    def one(p: FleetProbe) -> str:
        mine = [a for a in p.agent.allocs() if a.get("job") == p.job]
        ids = sorted(a["id"][:8] for a in mine)
        live = [a for a in mine if a.get("status") in ("running", "pending")]
        if [a["id"] for a in live] != [p.alloc_id]:
            return f"{p.key}: allocs {ids}, live {[a['id'][:8] for a in live]}, not just {p.alloc_id[:8]}"
        return ""

    return [r for r in pmap(one, probes) if r]


def restore_seconds(cluster: Cluster, nodes: Sequence[Remote]) -> dict[str, float]:
    """Each agent's own figure for its last restore (Stats["fieldlab"] of /v1/agent/self)."""

    def one(n: Remote) -> tuple[str, float | None]:
        got = cluster.agent(n).agent_stats() or {}
        return n.name, (float(got["restore_seconds"]) if got.get("restore_seconds") else None)

    return {name: s for name, s in pmap(one, nodes) if s is not None}


def waves(nodes: Sequence[Remote], fraction: float) -> list[list[Remote]]:
    """`nodes` in consecutive waves of `fraction` of them (at least one node each) (pure)."""
    size = max(1, round(len(nodes) * fraction))
    return [list(nodes[i : i + size]) for i in range(0, len(nodes), size)]
