"""A group's `scaling` block -> agent.structs.model.Scaling, checked as Nomad checks a group's horizontal
scaling policy: its HCL parser (jobspec2: `max` required, a group's `type` only "horizontal"), the
agent's HTTP register (no `scaling` in a system job) and the server's TaskGroup.Validate
(ScalingPolicy.Validate, then the group's count between `min` and `max`), with Nomad's texts.
`min` left out is the group's count, `enabled` left out is true (api.ScalingPolicy.Canonicalize
and command/agent ApiScalingPolicyToStructs); `policy` is the Nomad Autoscaler's, opaque to Nomad:
kept as plain data (nested blocks as lists of maps, as the docker driver's config)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.jobspec.tree import Body, join
from agent.structs.model import Scaling

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

HORIZONTAL = "horizontal"  # Nomad's ScalingPolicyTypeHorizontal: the only type of a group's policy
_INVALID = "Scaling policy invalid: "  # TaskGroup.validateScalingPolicy's prefix


def read_scaling(builder: BodyReader, body: Body, path: str, *, count: int, job_type: str) -> Scaling | None:
    found = builder._single(body, "scaling", path)
    if found is None:
        return None
    sb, spath = found
    if job_type == "system":  # command/agent/job_endpoint.go, before the server sees the job
        builder.report.error(spath, "Task groups with job type system do not support scaling blocks")
    kind = builder._str(sb, "type", spath, HORIZONTAL)
    if kind != HORIZONTAL:
        builder.report.error(
            join(spath, "type"), f'task group scaling policy had invalid type: "{kind[:64]}"'
        )
    before = len(builder.report.problems)
    # the bounds are int64 in Nomad: read without a sign check, so that Validate's texts say it
    high = builder._int(sb, "max", spath, -1)
    low = builder._int(sb, "min", spath, count)
    if len(builder.report.problems) > before:
        return None
    for where, reason in _bounds(low, high, count):  # a `max` left out is -1: "must be specified"
        builder.report.error(join(spath, where), _INVALID + reason)
    policy = builder._mapping(sb, "policy", spath)
    plain = builder._plain(dict(policy), join(spath, "policy")) if policy is not None else {}
    return Scaling(
        min=low,
        max=high,
        enabled=builder._bool(sb, "enabled", spath, True),
        policy=plain if isinstance(plain, dict) else {},
    )


def _bounds(low: int, high: int, count: int) -> list[tuple[str, str]]:
    """(field, reason) of each rule of ScalingPolicy.Validate and of the group's count against the
    bounds (TaskGroup.validateScalingPolicy) that `low`..`high` break, in Nomad's order."""
    out: list[tuple[str, str]] = []
    if high < 0:
        out.append(("max", "maximum count must be specified and non-negative"))
    elif high < low:
        out.append(("max", "maximum count must not be less than minimum count"))
    if low < 0:
        out.append(("min", "minimum count must be specified and non-negative"))
    if high < count:
        out.append(("max", "task group count must not be greater than maximum count in scaling policy"))
    if count < low:
        out.append(("min", "task group count must not be less than minimum count in scaling policy"))
    return out
