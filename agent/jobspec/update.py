"""A job's and a group's `update` blocks -> agent.structs.model.UpdateStrategy of each group, as Nomad
canonicalises them (api/tasks.go TaskGroup.Canonicalize: the group's fields over the job's, Nomad's
defaults under both) and checks them (nomad/structs UpdateStrategy.Validate, its texts).

What one node does with them (agent.nomadapi.deploywatch): a service job's version gets a
deployment unless `max_parallel` is 0; an alloc's health is judged as Nomad's client does with
`health_check = "task_states"` (`min_healthy_time`, `healthy_deadline`; `"manual"`: only the
operator's word), the deployment fails past `progress_deadline`. `max_parallel` and `stagger` pace
a rollout across nodes: one node replaces a version's allocs at once (agent.decide.jobupdate).
`auto_revert`: a failed deployment registers the job's newest stable version again, as Nomad's
watcher rolls back. `canary`: Nomad places canaries only when a new version replaces allocs,
so a job's first version runs as written; a new version that would replace the allocs of a group
with canaries is refused (`canary_refusals`: the core's plan_update), as this agent places no
canaries beside the old allocs. `auto_promote` is checked as Nomad's (it needs canaries)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agent.jobspec.durations import format_duration
from agent.jobspec.tree import Body, join
from agent.structs.model import Job, UpdateStrategy

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

HEALTH_CHECKS = ("checks", "task_states", "manual")
_DEFAULT = UpdateStrategy()
_DURATIONS = ("stagger", "min_healthy_time", "healthy_deadline", "progress_deadline")


def read_update(builder: BodyReader, body: Body, path: str) -> dict[str, Any]:
    """The fields an `update` block of `body` sets (none when it has no such block)."""
    found = builder._single(body, "update", path)
    if found is None:
        return {}
    ub, upath = found
    given: dict[str, Any] = {}
    for name in _DURATIONS:
        if ub.get(name) is not None:
            given[name] = builder._duration(ub, name, upath, getattr(_DEFAULT, name))
    if ub.get("max_parallel") is not None:
        given["max_parallel"] = builder._int(ub, "max_parallel", upath, _DEFAULT.max_parallel)
    if ub.get("canary") is not None:
        given["canary"] = builder._int(ub, "canary", upath, 0)
    if ub.get("auto_promote") is not None:
        given["auto_promote"] = builder._bool(ub, "auto_promote", upath, False)
    if ub.get("auto_revert") is not None:
        given["auto_revert"] = builder._bool(ub, "auto_revert", upath, False)
    if ub.get("health_check") is not None:
        given["health_check"] = builder._choice(
            ub, "health_check", upath, HEALTH_CHECKS, _DEFAULT.health_check
        )
    given["path"] = upath
    return given


def group_update(
    builder: BodyReader, job_given: dict[str, Any], group_given: dict[str, Any]
) -> UpdateStrategy:
    """The group's strategy: its own fields over the job's over Nomad's defaults, validated."""
    merged = {k: v for k, v in {**job_given, **group_given}.items() if k != "path"}
    strategy = UpdateStrategy(**merged)
    where = group_given.get("path") or job_given.get("path")
    if where:
        for field, reason in _invalid(strategy):
            builder.report.error(join(where, field), reason)
    return strategy


def _invalid(u: UpdateStrategy) -> list[tuple[str, str]]:
    """(field, reason) of each rule of Nomad's UpdateStrategy.Validate the strategy breaks."""
    out: list[tuple[str, str]] = []
    if u.max_parallel < 0:
        out.append(("max_parallel", f"Max parallel can not be less than zero: {u.max_parallel} < 0"))
    if u.healthy_deadline <= 0:
        out.append(("healthy_deadline", "Healthy deadline must be greater than zero: 0s"))
    if u.min_healthy_time >= u.healthy_deadline:
        shown = f"{format_duration(u.min_healthy_time)} > {format_duration(u.healthy_deadline)}"
        out.append(("min_healthy_time", f"Minimum healthy time must be less than healthy deadline: {shown}"))
    if u.progress_deadline != 0 and u.healthy_deadline >= u.progress_deadline:
        shown = f"{format_duration(u.healthy_deadline)} > {format_duration(u.progress_deadline)}"
        out.append(("healthy_deadline", f"Healthy deadline must be less than progress deadline: {shown}"))
    if u.stagger <= 0:
        out.append(("stagger", "Stagger must be greater than zero: 0s"))
    if u.canary < 0:
        out.append(("canary", f"Canary count can not be less than zero: {u.canary} < 0"))
    if u.canary == 0 and u.auto_promote:
        out.append(("auto_promote", "Auto Promote requires a Canary count greater than zero"))
    return out


CANARY_REFUSAL = (
    "refused: fieldlab-agent does not place canaries: this new version would replace the group's "
    "allocs, which Nomad does by placing {n} canary alloc(s) beside them until promoted; set "
    "canary = 0 to update them in place of the old ones, or stop the job first"
)


def canary_refusals(job: Job, destructive: Iterable[str]) -> list[tuple[str, str]]:
    """(path, why) for each group of `job` whose allocs a new version replaces while its update
    strategy asks for canaries."""
    replaced = set(destructive)
    return [
        (f"job.{job.id}.group.{g.name}.update.canary", CANARY_REFUSAL.format(n=g.update.canary))
        for g in job.groups
        if g.name in replaced and g.update is not None and g.update.canary > 0
    ]
