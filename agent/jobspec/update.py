"""A job's and a group's `update` blocks -> agent.model.UpdateStrategy of each group, as Nomad
canonicalises them (api/tasks.go TaskGroup.Canonicalize: the group's fields over the job's, Nomad's
defaults under both) and checks them (nomad/structs UpdateStrategy.Validate, its texts).

What one node does with them (agent.nomadapi.deploywatch): a service job's version gets a
deployment unless `max_parallel` is 0; an alloc's health is judged as Nomad's client does with
`health_check = "task_states"` (`min_healthy_time`, `healthy_deadline`; `"manual"`: only the
operator's word), the deployment fails past `progress_deadline`. `max_parallel` and `stagger` pace
a rollout across nodes: one node replaces a version's allocs at once (agent.jobupdate).
`auto_revert`: a failed deployment registers the job's newest stable version again, as Nomad's
watcher rolls back. `auto_promote` and `canary` are warned about (fields.UNIMPLEMENTED)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.jobspec.durations import format_duration
from agent.jobspec.tree import Body, join
from agent.model import UpdateStrategy

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
    return out
