"""`constraint` blocks of a job, a group or a task -> agent.structs.model.Constraint, as Nomad's jobspec2
decodes
them (jobspec2/hcl_conversions.go decodeConstraint), checked as Nomad's server validates them on register
(nomad/structs Constraint.Validate, agent.decide.placement.validate): a constraint Nomad refuses is a problem
naming the key it was written with (`job.web.constraint[0].operator`, `...constraint[1].regexp`).

The HCL forms: `attribute` / `value` / `operator` (default "="), and the shorthands, each setting the
operator and taking the place of `value`, applied in jobspec2's order so that a later one wins:
`version`, `semver`, `regexp`, `set_contains`, then `distinct_hosts = true|false` (the value "true" or
"false") and `distinct_property = "${meta.rack}"` (the attribute; `value` stays the allowed count).
jobspec2 also accepts `set_contains_all`, `set_contains_any`, `is_set` and `is_not_set` in a constraint
but reads none of them (it reads the first two in an `affinity` only): they are ignored here too, with a
warning saying how to write them. The API JSON form (`Constraints: [{"LTarget", "RTarget", "Operand"}]`)
arrives with these names (agent.jobspec.fields.API_RENAMES), its Operand required as Nomad's API has it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.decide.placement import DISTINCT_HOSTS, DISTINCT_PROPERTY, validate
from agent.jobspec.tree import Body, join
from agent.structs.model import Constraint

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

# jobspec2's shorthands that set the operator and the value, in the order it applies them.
SHORTHANDS = ("version", "semver", "regexp", "set_contains")
# Accepted by jobspec2 in a constraint and not read.
IGNORED = ("set_contains_all", "set_contains_any", "is_set", "is_not_set")
_IGNORED_WHY = {
    key: f"ignored, as Nomad's jobspec ignores it in a constraint{where}: write "
    + (f'operator = "{key}"' if key.startswith("is_") else f'operator = "{key}" and value = "..."')
    for key, where in (
        ("set_contains_all", " (it reads it in an affinity)"),
        ("set_contains_any", " (it reads it in an affinity)"),
        ("is_set", ""),
        ("is_not_set", ""),
    )
}


def read_constraints(
    builder: BodyReader, body: Body, path: str, *, task_level: bool = False
) -> tuple[Constraint, ...]:
    """The `constraint` blocks of `body` (a job's, a group's or a task's at `path`); every problem is
    reported to the builder's report and the constraint left out."""
    out = []
    for _, block, cpath in builder._blocks(body, "constraint", path):
        builder._keys(block, "constraint", cpath)
        constraint = _one(builder, block, cpath, task_level)
        if constraint is not None:
            out.append(constraint)
    return tuple(out)


def _one(builder: BodyReader, block: Body, path: str, task_level: bool) -> Constraint | None:
    before = len(builder.report.problems)
    keys = {"ltarget": "attribute", "rtarget": "value", "operand": "operator"}
    ltarget = builder._str(block, "attribute", path)
    rtarget = builder._str(block, "value", path)
    operand = builder._str(block, "operator", path)
    for key in SHORTHANDS:
        if given := builder._str(block, key, path):
            operand, rtarget = key, given
            keys |= {"rtarget": key, "operand": key}
    if block.get(DISTINCT_HOSTS) is not None:
        operand = DISTINCT_HOSTS
        rtarget = "true" if builder._bool(block, DISTINCT_HOSTS, path, True) else "false"
        keys |= {"rtarget": DISTINCT_HOSTS, "operand": DISTINCT_HOSTS}
    if prop := builder._str(block, DISTINCT_PROPERTY, path):
        operand, ltarget = DISTINCT_PROPERTY, prop
        keys |= {"ltarget": DISTINCT_PROPERTY, "operand": DISTINCT_PROPERTY}
    for key in IGNORED:
        if builder._str(block, key, path):
            builder.report.warn(join(path, key), _IGNORED_WHY[key])
    constraint = Constraint(ltarget=ltarget, rtarget=rtarget, operand=operand or "=")
    for role, reason in validate(constraint, task_level=task_level):
        builder.report.error(join(path, keys[role]), reason)
    return constraint if len(builder.report.problems) == before else None
