"""What registering a new version of a running job does to its allocs, as Nomad's scheduler decides
it for one node (pure: plain data in, a plan out; the core carries it out).

Per task group, comparing the running version with the new one:
- unchanged but for `count` and constraints: allocs are added (count up) or the newest stopped (count
  down), the others keep running untouched (Nomad's in-place update);
- changed in anything else (a task's config, env, templates, resources, the network, the restart
  policy, services), or the job's own meta, type or datacenters changed (its constraints may): every
  live alloc of the group is stopped and `count` new ones placed (Nomad's destructive update), each
  new one linked to the alloc it replaces (PreviousAllocation / NextAllocation);
- a group that is gone: its allocs are stopped; a new group: `count` allocs are placed.
The old allocs are stopped before the new ones start, so a static port is free again when its new
alloc binds it (a one-node cluster cannot place them side by side).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.structs.model import Group, Job


@dataclass(frozen=True)
class UpdatePlan:
    stop: tuple[str, ...]  # live alloc ids to stop first
    start: Mapping[str, int]  # group name -> new allocs to place after the stops
    replaces: Mapping[str, tuple[str, ...]]  # group name -> the stopped allocs the new ones replace, in order
    destructive: tuple[str, ...]  # groups whose allocs are replaced

    @property
    def noop(self) -> bool:
        return not self.stop and not any(self.start.values())


def _job_level(job: Job) -> tuple[object, ...]:
    return (job.type, dict(job.meta), job.name, job.datacenters)


def _same_but_count(old: Group, new: Group, bugs: Bugs = NO_BUGS) -> bool:
    if bugs.volume_change_in_place:  # nomad-13008: volumes are not compared
        old, new = _without_volumes(old), _without_volumes(new)
    if bugs.cni_args_change_in_place:  # nomad-23764: the network's `cni { args }` are not compared
        old, new = _without_cni_args(old), _without_cni_args(new)
    return _placed(replace(old, count=new.count)) == _placed(new)


def _without_cni_args(g: Group) -> Group:
    return replace(g, network=replace(g.network, cni_args=())) if g.network is not None else g


def _without_volumes(g: Group) -> Group:
    return replace(g, volumes=(), tasks=tuple(replace(t, volume_mounts=()) for t in g.tasks))


def _placed(g: Group) -> Group:
    """The group without its own and its tasks' constraints, which Nomad's tasksUpdated does not compare:
    an alloc whose node still meets them is updated in place (the core refuses a job whose constraints
    this node does not meet)."""
    return replace(g, constraints=(), tasks=tuple(replace(t, constraints=()) for t in g.tasks))


def plan_job_update(
    old: Job, new: Job, live: Mapping[str, Sequence[str]], bugs: Bugs = NO_BUGS
) -> UpdatePlan:
    """`live`: per group of the running version, its live alloc ids oldest first.
    `volume-change-in-place` is nomad-13008: a group whose host volumes or mounts changed is updated
    in place, so its allocs keep running without the new volume. `cni-args-change-in-place` is
    nomad-23764: a group whose network's `cni { args }` changed is updated in place, so its allocs keep
    the network the old CNI_ARGS made (CNI_ARGS reach the plugins only at the ADD of a new alloc)."""
    job_changed = _job_level(old) != _job_level(new)
    old_groups = {g.name: g for g in old.groups}
    stop: list[str] = []
    start: dict[str, int] = {}
    replaces: dict[str, tuple[str, ...]] = {}
    destructive: list[str] = []
    for g in new.groups:
        running = list(live.get(g.name, ()))
        before = old_groups.get(g.name)
        if before is None:
            start[g.name] = g.count
            continue
        if job_changed or not _same_but_count(before, g, bugs):
            destructive.append(g.name)
            stop.extend(running)
            start[g.name] = g.count
            replaces[g.name] = tuple(running[: g.count])
            continue
        if len(running) > g.count:
            stop.extend(running[g.count :])  # the newest go first, as Nomad picks the highest indexes
        else:
            start[g.name] = g.count - len(running)
    for name, ids in live.items():
        if name not in {g.name for g in new.groups}:
            stop.extend(ids)
    return UpdatePlan(tuple(stop), start, replaces, tuple(destructive))


# Nomad's api.DesiredUpdates, in its order: what a plan says the scheduler would do to a group.
DESIRED_UPDATES = (
    "Ignore",
    "Place",
    "Migrate",
    "Stop",
    "InPlaceUpdate",
    "DestructiveUpdate",
    "Canary",
    "Preemptions",
    "Disconnect",
    "Reconnect",
    "RescheduleNow",
    "RescheduleLater",
)


def desired_updates(
    old: Job | None, new: Job, live: Mapping[str, Sequence[str]], plan: UpdatePlan | None
) -> dict[str, dict[str, int]]:
    """Nomad's PlanAnnotations.DesiredTGUpdates for registering `new` (`nomad job plan`): per group,
    the allocs placed, stopped, replaced (destructive) and kept. `plan` is plan_job_update's for a
    job that runs (None: nothing runs, every group places its count). A kept alloc is an in-place
    update when the job changed at all (its allocs take the new version), else ignored."""
    out: dict[str, dict[str, int]] = {}

    def group(name: str, **counts: int) -> None:
        out[name] = {k: counts.get(k, 0) for k in DESIRED_UPDATES}

    if plan is None:
        for g in new.groups:
            group(g.name, Place=g.count)
        return out
    old_names = {g.name for g in old.groups} if old is not None else set()
    for g in new.groups:
        running = len(live.get(g.name, ()))
        place, stop, kept = max(0, g.count - running), max(0, running - g.count), min(running, g.count)
        if g.name not in old_names:
            group(g.name, Place=g.count)
        elif g.name in plan.destructive:
            group(g.name, Place=place, Stop=stop, DestructiveUpdate=kept)
        elif old == new:
            group(g.name, Place=place, Stop=stop, Ignore=kept)
        else:
            group(g.name, Place=place, Stop=stop, InPlaceUpdate=kept)
    for name, ids in live.items():
        if name not in {g.name for g in new.groups}:
            group(name, Stop=len(ids))
    return out


TRACKED_VERSIONS = 6  # Nomad's job_tracked_versions default: the versions a job keeps


def earlier_versions(before: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The job record's `history` once `before` (the record being replaced) is superseded: its own
    version first, then its history, at most TRACKED_VERSIONS - 1 of them (with the new one: 6)."""
    if before is None or "canonical" not in before:
        return []
    kept = {k: before.get(k) for k in ("version", "submit_time", "canonical")}
    older = [h for h in before.get("history") or [] if isinstance(h, dict)]
    return [kept, *older][: TRACKED_VERSIONS - 1]
