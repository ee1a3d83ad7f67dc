"""Pure decisions of the agent: (desired, persisted, observed) -> what to do. No I/O here, so every
branch is unit-tested without docker, CNI or a clock (the time is an argument)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from agent.model import RestartPolicy


class RestoreAction(Enum):
    REATTACH = "reattach"  # everything is as recorded: touch nothing
    RESTART_TASKS = "restart-tasks"  # network fine, some tasks exited while the agent was down
    RECREATE_NETWORK = "recreate-network"  # DEL, ADD again, restart the group's tasks
    REPLACE = "replace"  # cannot be restored: mark failed, start a replacement alloc


@dataclass(frozen=True)
class ObservedAlloc:
    """What the agent sees of one alloc on start, before it changes anything."""

    alloc_dir_exists: bool
    bridge: bool  # the group uses bridge networking (a pause container owns the netns)
    pause_running: bool = True
    pause_same_start: bool = True  # the pause container is the very one the agent started
    tasks_running: Sequence[bool] = ()
    tasks_share_pause_netns: Sequence[bool] = ()
    network_diffs: Sequence[str] = ()  # the agent's own verification (and CNI CHECK where supported)
    has_cni_result: bool = True


@dataclass(frozen=True)
class RestorePlan:
    action: RestoreAction
    reason: str


def network_problem(obs: ObservedAlloc) -> str | None:
    """Why a bridge alloc's network cannot be trusted after a restart, or None when it can."""
    if not obs.has_cni_result:
        return "no CNI result recorded for the alloc"
    if not obs.pause_running:
        return "pause container is not running"
    if not obs.pause_same_start:
        return "pause container was restarted by docker (new, empty network namespace)"
    split = sum(
        1
        for run, same in zip(obs.tasks_running, obs.tasks_share_pause_netns, strict=True)
        if run and not same
    )
    if split:
        return f"{split} running task(s) are in another network namespace than the pause container"
    if obs.network_diffs:
        return "network verification failed: " + "; ".join(obs.network_diffs)
    return None


def plan_restore(
    obs: ObservedAlloc, *, check_network: bool = True, check_alloc_dir: bool = True
) -> RestorePlan:
    """Decide how to restore an alloc after an agent restart or a host reboot.

    `check_network=False` is the nomad-24292 behaviour (the `no-network-check-on-restore` fault):
    a running pause container is taken at its word and the network is never verified.
    `check_alloc_dir=False` is the nomad-27933 behaviour (the `restore-missing-alloc-dir` fault):
    restore goes on as if the alloc directory were there.
    """
    if not obs.alloc_dir_exists and check_alloc_dir:
        return RestorePlan(RestoreAction.REPLACE, "alloc directory is missing (nomad-27933)")
    problem = network_problem(obs) if obs.bridge and check_network else None
    if problem:
        return RestorePlan(RestoreAction.RECREATE_NETWORK, problem)
    if all(obs.tasks_running):
        why = "all tasks running, network verified" if obs.bridge and check_network else "all tasks running"
        return RestorePlan(RestoreAction.REATTACH, why)
    return RestorePlan(RestoreAction.RESTART_TASKS, "task(s) exited while the agent was down")


def trust_recorded_tasks(obs: ObservedAlloc, recorded_running: Sequence[bool]) -> ObservedAlloc:
    """The nomad-23684/17079 behaviour (the `half-alive-restore` fault): a task the state store
    records as running is believed to be running, and to be in the alloc's network namespace,
    whatever the driver says. A task whose container or process vanished while the agent was down
    is then neither restarted nor reported: the alloc stays "running" with no live task."""
    rows = list(zip(obs.tasks_running, obs.tasks_share_pause_netns, recorded_running, strict=True))
    return replace(
        obs,
        tasks_running=[live or rec for live, _, rec in rows],
        # A live task keeps what was observed of its netns; a vanished one is assumed in place.
        tasks_share_pause_netns=[same if live else rec for live, same, rec in rows],
    )


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay: float
    reason: str


def plan_task_restart(policy: RestartPolicy, recent_restarts: Sequence[float], now: float) -> RestartDecision:
    """Nomad's restart stanza: `attempts` restarts within `interval`; then fail (mode fail) or wait
    out the rest of the interval (mode delay)."""
    window = [t for t in recent_restarts if now - t < policy.interval]
    if len(window) < policy.attempts:
        return RestartDecision(
            True, policy.delay, f"restart {len(window) + 1} of {policy.attempts} in {policy.interval:.0f}s"
        )
    if policy.mode == "delay":
        wait = policy.interval - (now - min(window)) if window else policy.delay
        return RestartDecision(
            True, max(policy.delay, wait), "attempts exhausted; delaying until the interval ends"
        )
    return RestartDecision(False, 0.0, f"exceeded {policy.attempts} restart(s) in {policy.interval:.0f}s")
