"""Whether Nomad's scheduler would place a job's groups on this node: its datacenters and its `constraint`
blocks, decided as Nomad's scheduler decides them for one node (scheduler/feasible/feasible.go). Pure:
the node's facts in, the failures out.

A group is placed on a node only if the node meets every constraint of the job, of the group and of each
of its tasks (`checkConstraint`); a target is a literal, or one of `${node.unique.id}`,
`${node.unique.name}`, `${node.datacenter}`, `${node.class}`, `${node.pool}`, `${attr.<key>}`,
`${meta.<key>}` (`resolveTarget`); one that resolves to nothing is "" and not found, which fails every
operator but `!=`/`not` (Nomad compares "" with the other side) and `is_not_set`. `${node.region}` is no
constraint target in Nomad: the jobspec refuses it (`validate`).

`distinct_hosts` and `distinct_property` count allocs: on one node, `distinct_hosts` lets one alloc of the
group (of the job, at job level) be placed, and `distinct_property` as many as its value allows (default
1) per value of the property, which the node must have. A group asking for more fails: Nomad would place
what fits and leave the rest pending; this agent refuses the job at register instead (agent.client.core).
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from agent.gocompat import goregex
from agent.gocompat.goversion import (
    Constraints,
    VersionError,
    go_parse_int,
    parse_version,
    semver_constraints,
    version_constraints,
)
from agent.node.hostnetworks import HostNetwork, NodeNetwork, alias_addresses, parse_port_ranges
from agent.structs.model import Constraint, Group, Job

DISTINCT_HOSTS = "distinct_hosts"
DISTINCT_PROPERTY = "distinct_property"
_EQUAL = ("=", "==", "is")
_NOT_EQUAL = ("!=", "not")
_ORDER_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_ORDER = tuple(_ORDER_OPS)
_SET = ("set_contains", "set_contains_all", "set_contains_any")
_IS_SET = ("is_set", "is_not_set")
OPERANDS = (
    *_EQUAL,
    *_NOT_EQUAL,
    *_ORDER,
    "regexp",
    "version",
    "semver",
    *_SET,
    *_IS_SET,
    DISTINCT_HOSTS,
    DISTINCT_PROPERTY,
)
_EXACT_TARGETS = (
    "${node.unique.id}",
    "${node.datacenter}",
    "${node.unique.name}",
    "${node.class}",
    "${node.pool}",
)
_PREFIX_TARGETS = ("${attr.", "${device.", "${meta.")
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_FLOAT_TEXT = frozenset("0123456789+-.eExXpPaAbBcCdDfF")


@dataclass(frozen=True)
class NodeFacts:
    """What a constraint can look at on this node: Nomad's node fields and its fingerprinted
    attributes and meta (the same /v1/node/:id shows)."""

    id: str
    name: str
    datacenter: str
    node_class: str = ""
    pool: str = "default"
    region: str = "global"
    attributes: Mapping[str, str] = field(default_factory=dict)
    meta: Mapping[str, str] = field(default_factory=dict)
    disk_mb: int | None = None  # free MB in the data dir at start (Nomad's node disk); None: unknown
    host_volumes: Mapping[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (path, read_only)
    # the client's host networks besides "default" that have an address on this node (Nomad's client
    # `host_network` blocks, fingerprinted: agent.node.hostnetworks), and the node's networks
    # (NodeResources.NodeNetworks: each address's alias and reserved ports)
    host_networks: frozenset[str] = frozenset()
    node_networks: tuple[NodeNetwork, ...] = ()
    host_network_config: tuple[HostNetwork, ...] = ()  # the blocks as configured (Node.HostNetworks)


@dataclass(frozen=True)
class Failure:
    """A constraint this node fails for a group: `level` is where it is written ("job", "group",
    "task <name>"), `why` what the node has instead."""

    constraint: Constraint
    level: str
    why: str
    verdict: str = "Nomad would not place the group here"

    def message(self) -> str:
        """As the core's refusal says it: the constraint by Nomad's String() of it."""
        said = f'constraint "{self.constraint}" of the {self.level} is not met by this node'
        return f"{said} ({self.why}): {self.verdict}"


# --- validation: Nomad's Constraint.Validate --------------------------------------------------------


def validate(c: Constraint, *, task_level: bool = False) -> list[tuple[str, str]]:
    """What Nomad's server refuses in a constraint, as ("ltarget" | "rtarget" | "operand", reason)."""
    out: list[tuple[str, str]] = []
    op, rtarget = c.operand, c.rtarget
    if op not in OPERANDS:
        out.append(("operand", f'"{op}" is not a constraint operator: one of {", ".join(OPERANDS)}'))
        return out
    if task_level and op in (DISTINCT_HOSTS, DISTINCT_PROPERTY):
        out.append(("operand", f"{op} is not allowed in a task's constraint (only a job's or a group's)"))
    if reason := _rtarget_problem(op, rtarget):
        out.append(("rtarget", reason))
    if op != DISTINCT_HOSTS:
        if not c.ltarget:
            out.append(("ltarget", f'required with operator "{op}"'))
        elif reason := _target_problem(c.ltarget):
            out.append(("ltarget", reason))
    return out


def _rtarget_problem(op: str, rtarget: str) -> str:  # noqa: PLR0911 - one answer per operator
    if op in _SET and not rtarget:
        return f'required with operator "{op}": the values the set must contain'
    if op == "regexp":
        try:
            goregex.compile(rtarget)
        except goregex.GoRegexError as e:
            return f"the regular expression does not compile: {e}"
    elif op in ("version", "semver"):
        try:
            (version_constraints if op == "version" else semver_constraints)(rtarget)
        except VersionError as e:
            return f"the {op} constraint is invalid: {e}"
    elif op == DISTINCT_PROPERTY and rtarget and _allowed_count(rtarget) < 1:
        return f'"{rtarget}" is not an allowed count of allocs per value (1 or more)'
    elif op in _IS_SET and rtarget:
        return f'operator "{op}" takes no value'
    elif op in (*_EQUAL, *_NOT_EQUAL, *_ORDER) and not rtarget:
        return f'required with operator "{op}"'
    return ""


def _target_problem(target: str) -> str:
    """Nomad's validateConstraintAttribute: a literal, or a target resolveTarget knows."""
    if not target.startswith("$"):
        return ""
    if not target.startswith("${"):
        return f'"{target}" is missing an opening brace'
    if not target.endswith("}"):
        return f'"{target}" is missing a closing brace'
    if target in _EXACT_TARGETS or target.startswith(_PREFIX_TARGETS):
        return ""
    known = ", ".join((*_EXACT_TARGETS, *(f"{p}<key>}}" for p in _PREFIX_TARGETS)))
    return f'unsupported attribute "{target}": Nomad resolves {known}'


def _allowed_count(text: str) -> int:
    """Go's strconv.ParseUint of a distinct_property value, 0 when it is none."""
    return int(text) if text.isascii() and text.isdigit() and int(text) < 1 << 64 else 0


# --- evaluation: Nomad's resolveTarget and checkConstraint ----------------------------------------


def resolve(target: str, node: NodeFacts) -> tuple[str, bool]:
    """The target's value on the node and whether it was found (a literal always is)."""
    if not target.startswith("${"):
        return target, True
    exact = {
        "${node.unique.id}": node.id,
        "${node.datacenter}": node.datacenter,
        "${node.unique.name}": node.name,
        "${node.class}": node.node_class,
        "${node.pool}": node.pool,
    }
    if target in exact:
        return exact[target], True
    for prefix, table in (("${attr.", node.attributes), ("${meta.", node.meta)):
        if target.startswith(prefix):
            key = target.removeprefix(prefix).removesuffix("}")
            return (table[key], True) if key in table else ("", False)
    return "", False


def meets(c: Constraint, node: NodeFacts) -> bool:
    """Nomad's checkConstraint: distinct_hosts and distinct_property always pass here (they count
    allocs: `failures`)."""
    op = c.operand
    if op in (DISTINCT_HOSTS, DISTINCT_PROPERTY):
        return True
    left, l_found = resolve(c.ltarget, node)
    right, r_found = resolve(c.rtarget, node)
    if op in _NOT_EQUAL:
        return left != right
    if op == "is_set":
        return l_found
    if op == "is_not_set":
        return not l_found
    if not (l_found and r_found):
        return False
    return _check_found(op, left, right)


def _check_found(op: str, left: str, right: str) -> bool:
    """An operator over two targets that were found (an operand Nomad does not know fails)."""
    if op in _EQUAL:
        return left == right
    if op in _ORDER:
        return _order(op, left, right)
    check = _FOUND_CHECKS.get(op)
    return check is not None and check(left, right)


def _regexp(left: str, right: str) -> bool:
    try:
        return goregex.compile(right).match(left)
    except goregex.GoRegexError:
        return False


def _set(text: str) -> set[str]:
    return {part.strip() for part in text.split(",")}


def _order(op: str, left: str, right: str) -> bool:
    """Nomad's checkOrder: as integers when both are, else as floats when both are, else as text."""
    (a, a_ok), (b, b_ok) = go_parse_int(left), go_parse_int(right)
    if a_ok and b_ok:
        return bool(_ORDER_OPS[op](a, b))
    fa, fb = _go_float(left), _go_float(right)
    if fa is not None and fb is not None:
        return bool(_ORDER_OPS[op](fa, fb))
    return bool(_ORDER_OPS[op](left.encode(), right.encode()))  # Go compares strings bytewise


def _go_float(text: str) -> float | None:
    """Go's strconv.ParseFloat(text, 64), None where it fails (out of range too)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if body.lower() in ("inf", "infinity"):
        return float("-inf") if text.startswith("-") else float("inf")
    if text.lower() == "nan":
        return float("nan")
    hexadecimal = body[:2].lower() == "0x"
    if not body or not set(text) <= _FLOAT_TEXT or (hexadecimal and "p" not in body.lower()):
        return None  # Go's hexadecimal floats need their p exponent; "_" only between hex digits
    try:
        value = float.fromhex(text) if hexadecimal else float(text)
    except ValueError:
        return None
    return None if value in (float("inf"), float("-inf")) else value


def _version_match(op: str, left: str, right: str) -> bool:
    try:
        version = parse_version(left)
        bounds: Constraints = (version_constraints if op == "version" else semver_constraints)(right)
    except VersionError:
        return False
    return bounds.check(version)


_FOUND_CHECKS: dict[str, Callable[[str, str], bool]] = {
    "version": lambda left, right: _version_match("version", left, right),
    "semver": lambda left, right: _version_match("semver", left, right),
    "regexp": _regexp,
    "set_contains": lambda left, right: _set(right) <= _set(left),
    "set_contains_all": lambda left, right: _set(right) <= _set(left),
    "set_contains_any": lambda left, right: bool(_set(right) & _set(left)),
}


def _describe(c: Constraint, node: NodeFacts) -> str:
    """What the node has for the constraint's targets."""
    said = []
    for target in dict.fromkeys((c.ltarget, c.rtarget)):
        if target.startswith("${"):
            value, found = resolve(target, node)
            said.append(f'{target} is "{value}"' if found else f"{target} is not set on this node")
    return "; ".join(said) or "both sides are literals"


# --- per group --------------------------------------------------------------------------------------


def _levels(job: Job, group: Group) -> Iterable[tuple[str, Constraint]]:
    yield from (("job", c) for c in job.constraints)
    yield from (("group", c) for c in group.constraints)
    for task in group.tasks:
        yield from ((f"task {task.name}", c) for c in task.constraints)


def _distinct_hosts_on(constraints: Iterable[Constraint]) -> Constraint | None:
    """The first distinct_hosts constraint, when it is on (Nomad: a value that is no Go bool is on)."""
    for c in constraints:
        if c.operand == DISTINCT_HOSTS:
            return None if c.rtarget in _GO_FALSE else c
    return None


def _distinct(job: Job, group: Group, node: NodeFacts) -> list[Failure]:
    total = sum(g.count for g in job.groups)
    out = []
    for level, constraints, allocs in (
        ("job", job.constraints, total),
        ("group", group.constraints, group.count),
    ):
        hosts = _distinct_hosts_on(constraints)
        if hosts is not None and allocs > 1:
            why = f"one alloc of the {level} per node, and the {level} asks for {allocs}"
            out.append(Failure(hosts, level, why, _pending(1, allocs)))
        for c in (c for c in constraints if c.operand == DISTINCT_PROPERTY):
            value, found = resolve(c.ltarget, node)
            allowed = _allowed_count(c.rtarget) if c.rtarget else 1
            if not found:
                out.append(Failure(c, level, f"missing property {c.ltarget}"))
            elif allocs > allowed:
                why = f'{c.ltarget} is "{value}" for all {allocs} allocs of the {level}, {allowed} allowed'
                out.append(Failure(c, level, why, _pending(allowed, allocs)))
    return out


def _pending(placed: int, asked: int) -> str:
    return f"Nomad would place {placed} and leave {asked - placed} pending with a placement failure"


def group_failures(job: Job, group: Group, node: NodeFacts) -> list[Failure]:
    """The constraints of the job, the group and its tasks that this node fails for the group, in
    that order (none for a group of count 0: nothing to place)."""
    if group.count < 1:
        return []
    out = [Failure(c, level, _describe(c, node)) for level, c in _levels(job, group) if not meets(c, node)]
    return out + _distinct(job, group, node)


def failures(job: Job, node: NodeFacts) -> dict[str, list[Failure]]:
    """Group name -> the constraints this node fails for it; groups it does not fail are left out."""
    out = {g.name: group_failures(job, g, node) for g in job.groups}
    return {name: found for name, found in out.items() if found}


def refusals(job: Job, node: NodeFacts) -> list[tuple[str, str]]:
    """(path, reason) of each reason Nomad would not place the job's groups on this node: the job's
    datacenters, each group's failing constraints, a group whose allocs' ephemeral disks do not fit
    the node's disk, and a host volume the node does not have (Nomad's HostVolumeChecker)."""
    out = []
    if not any(fnmatch.fnmatchcase(node.datacenter, dc) for dc in job.datacenters):
        out.append(
            (
                f"job.{job.id}.datacenters",
                f"{list(job.datacenters)} does not include this client's datacenter "
                f'"{node.datacenter}" (config datacenter): Nomad would not place it here',
            )
        )
    for name, found in failures(job, node).items():
        out += [(f"job.{job.id}.group.{name}", f.message()) for f in found]
    for g in job.groups:
        if node.disk_mb is not None and g.count and g.ephemeral_disk.size * g.count > node.disk_mb:
            out.append(
                (
                    f"job.{job.id}.group.{g.name}.ephemeral_disk.size",
                    f"{g.count} x {g.ephemeral_disk.size} MB is more than this client's {node.disk_mb} MB"
                    ' free in its data dir: Nomad would not place it here (dimension "disk" exhausted)',
                )
            )
        out += _port_refusals(job, g, node)
        for v in g.volumes:
            if v.source not in node.host_volumes:
                have = ", ".join(sorted(node.host_volumes)) or "none"
                out.append(
                    (
                        f"job.{job.id}.group.{g.name}.volume.{v.alias}.source",
                        f'this client has no host volume "{v.source}" (config host_volumes: {have}):'
                        " Nomad would not place it here (missing compatible host volumes)",
                    )
                )
    return out


def _port_refusals(job: Job, g: Group, node: NodeFacts) -> list[tuple[str, str]]:
    """A port naming a host network this node does not have (Nomad's NetworkChecker: "missing host
    network"), and a static port among its host network's reserved_ports on every address of it
    (Nomad's AssignPorts: "reserved port collision")."""
    out = []
    aliases = alias_addresses(node.node_networks)
    for p in g.network.ports if g.network else ():
        where = f"job.{job.id}.group.{g.name}.network.port.{p.label}"
        if p.host_network != "default" and p.host_network not in node.host_networks:
            have = ", ".join(f'"{n}"' for n in sorted(node.host_networks))
            has = f'the host networks "default", {have}' if have else 'only the "default" host network'
            out.append(
                (
                    f"{where}.host_network",
                    f'missing host network "{p.host_network}" for port "{p.label}": this client has'
                    f" {has}; Nomad would not place it here",
                )
            )
            continue
        addresses = aliases.get(p.host_network, [])
        if p.static and addresses and all(p.static in parse_port_ranges(a.reserved_ports) for a in addresses):
            out.append(
                (
                    f"{where}.static",
                    f"reserved port collision {p.label}={p.static}: port {p.static} is in the"
                    f' reserved_ports "{addresses[0].reserved_ports}" of host network "{p.host_network}";'
                    " Nomad would not place it here",
                )
            )
    return out
