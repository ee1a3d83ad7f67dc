"""Constraints as Nomad's scheduler checks them against one node (agent.decide.placement), and the version
parsers behind the `version` and `semver` operators (agent.gocompat.goversion): pure, no I/O.

Tables marked "Nomad's" or "go-version's" are copied from their tests (scheduler/feasible/feasible_test.go,
helper/constraints/semver/constraints_test.go; go-version v1.9.0 version_test.go, constraint_test.go)
so that a difference from Nomad fails here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent import __version__
from agent.decide.placement import NodeFacts, failures, meets, refusals, resolve, validate
from agent.gocompat.goversion import (
    VersionError,
    parse_semver,
    parse_version,
    semver_constraints,
    version_constraints,
)
from agent.node.nodeinfo import node_attributes
from agent.structs.model import Constraint, Group, Job, Task

NODE = NodeFacts(
    id="5f8e2d1c-0000-4000-8000-000000000001",
    name="client1",
    datacenter="dc1",
    node_class="gpu",
    pool="default",
    region="global",
    attributes={
        "kernel.name": "linux",
        "kernel.version": "6.1.0-18-amd64",
        "cpu.arch": "amd64",
        "cpu.numcores": "8",
        "load": "10.5",
        "nomad.version": "1.7.3",
        "beta.version": "1.7.0-beta.1",
        "driver.docker": "1",
        "empty": "",
    },
    meta={"rack": "r1", "zones": "a, b ,c", "tier": "gold"},
)


def c(left: str, op: str, right: str = "") -> Constraint:
    return Constraint(ltarget=left, rtarget=right, operand=op)


# --- every operator: one constraint the node meets, one it does not -----------------------------------

OPERATOR_CASES = [
    # (constraint, met)
    (c("${attr.kernel.name}", "=", "linux"), True),
    (c("${attr.kernel.name}", "=", "windows"), False),
    (c("${attr.kernel.name}", "==", "linux"), True),
    (c("${attr.kernel.name}", "==", "Linux"), False),
    (c("${attr.kernel.name}", "is", "linux"), True),
    (c("${attr.kernel.name}", "is", "darwin"), False),
    (c("${attr.cpu.arch}", "!=", "arm64"), True),
    (c("${attr.cpu.arch}", "!=", "amd64"), False),
    (c("${attr.cpu.arch}", "not", "arm64"), True),
    (c("${attr.cpu.arch}", "not", "amd64"), False),
    # as integers when both sides are: "8" < "10" (as text it is not)
    (c("${attr.cpu.numcores}", "<", "10"), True),
    (c("${attr.cpu.numcores}", "<", "8"), False),
    (c("${attr.cpu.numcores}", "<=", "8"), True),
    (c("${attr.cpu.numcores}", "<=", "7"), False),
    # as floats when both sides are: 10.5 > 9.5 (as text "1" < "9")
    (c("${attr.load}", ">", "9.5"), True),
    (c("${attr.load}", ">", "11"), False),
    # as text otherwise
    (c("${attr.kernel.version}", ">=", "6.1"), True),
    (c("${attr.kernel.version}", ">=", "6.2"), False),
    (c("${node.unique.name}", "regexp", "^client[0-9]+$"), True),
    (c("${node.unique.name}", "regexp", "^server"), False),
    (c("${node.unique.name}", "regexp", r"client1\z"), True),  # Go's \z: RE2 syntax, which Python's re lacks
    (c("${attr.nomad.version}", "version", ">= 1.6, < 2.0"), True),
    (c("${attr.nomad.version}", "version", ">= 1.8"), False),
    (c("${attr.nomad.version}", "version", "~> 1.7.0"), True),
    (c("${attr.nomad.version}", "version", "~> 1.6.0"), False),
    # go-version: a pre-release meets no constraint without one, so Debian's kernel "6.1.0-18-amd64"
    # (pre-release "18-amd64") fails `version >= 5.10` on Nomad too
    (c("${attr.kernel.version}", "version", ">= 5.10"), False),
    (c("${attr.nomad.version}", "semver", ">= 1.7.0"), True),
    (c("${attr.nomad.version}", "semver", "< 1.7.3"), False),
    # semver orders pre-releases with no pre-release check: 1.7.0-beta.1 < 1.7.0 holds there only
    (c("${attr.beta.version}", "semver", "< 1.7.0"), True),
    (c("${attr.beta.version}", "version", "< 1.7.0"), False),
    (c("${meta.zones}", "set_contains", "c,a"), True),
    (c("${meta.zones}", "set_contains", "a,d"), False),
    (c("${meta.zones}", "set_contains_all", " b , a "), True),
    (c("${meta.zones}", "set_contains_all", "b,x"), False),
    (c("${meta.zones}", "set_contains_any", "d,b"), True),
    (c("${meta.zones}", "set_contains_any", "d,e"), False),
    (c("${meta.rack}", "is_set"), True),
    (c("${meta.missing}", "is_set"), False),
    (c("${attr.empty}", "is_set"), True),  # set, to ""
    (c("${meta.missing}", "is_not_set"), True),
    (c("${meta.rack}", "is_not_set"), False),
    # distinct_* count allocs (below): one constraint alone always passes
    (c("", "distinct_hosts", "true"), True),
    (c("${meta.rack}", "distinct_property"), True),
    (c("${meta.rack}", "near", "r1"), False),  # an operand Nomad does not know fails every node
]


@pytest.mark.parametrize(("constraint", "met"), OPERATOR_CASES, ids=[str(x) for x, _ in OPERATOR_CASES])
def test_every_operator_is_met_or_not_as_nomad_checks_it(constraint: Constraint, met: bool) -> None:
    assert meets(constraint, NODE) is met


@pytest.mark.parametrize(
    ("target", "value"),
    [
        ("${node.unique.id}", "5f8e2d1c-0000-4000-8000-000000000001"),
        ("${node.unique.name}", "client1"),
        ("${node.datacenter}", "dc1"),
        ("${node.class}", "gpu"),
        ("${node.pool}", "default"),
        ("${attr.driver.docker}", "1"),
        ("${meta.tier}", "gold"),
        ("linux", "linux"),  # a literal
    ],
)
def test_each_target_resolves_to_the_nodes_value(target: str, value: str) -> None:
    assert resolve(target, NODE) == (value, True)
    assert meets(c(target, "=", value), NODE)
    assert not meets(c(target, "=", value + "x"), NODE)


@pytest.mark.parametrize(
    "target", ["${meta.missing}", "${attr.missing}", "${node.region}", "${device.model}"]
)
def test_a_target_that_resolves_to_nothing_fails_all_but_not_equal_and_is_not_set(target: str) -> None:
    """resolveTarget answers "" not found: every operator needs it found, but != compares the ""
    (and so passes against any value) and is_not_set wants it missing. ${node.region} is no target of
    Nomad's: the jobspec refuses it (below), and here it resolves to nothing."""
    assert resolve(target, NODE) == ("", False)
    for op, right in [("=", ""), ("=", "x"), ("<", "z"), (">=", ""), ("regexp", ""), ("version", ">= 0")]:
        assert not meets(c(target, op, right), NODE), op
    assert not meets(c(target, "semver", ">= 0.0.0"), NODE)
    assert not meets(c(target, "set_contains_any", "a"), NODE)
    assert not meets(c(target, "is_set"), NODE)
    assert meets(c(target, "is_not_set"), NODE)
    assert meets(c(target, "!=", "x"), NODE)
    assert not meets(c(target, "!=", "${meta.also_missing}"), NODE)  # "" != "": equal


def test_integers_compare_as_integers_before_floats() -> None:
    """Nomad's checkOrder tries ParseInt first: 2^53 + 1 and 2^53 are one float, two integers."""
    assert meets(c("9007199254740993", ">", "9007199254740992"), NODE)
    assert not meets(c("9007199254740993", "<=", "9007199254740992"), NODE)
    assert meets(c("0x1p3", ">", "7.5"), NODE)  # Go's hexadecimal float: 8
    assert not meets(c("1_000", ">", "999"), NODE)  # no float for Go (an "_" needs a base prefix): as text


def test_the_right_target_resolves_too() -> None:
    assert meets(c("gold", "=", "${meta.tier}"), NODE)
    assert meets(c("${meta.tier}", "=", "${meta.tier}"), NODE)
    assert not meets(c("${meta.rack}", "=", "${meta.missing}"), NODE)
    assert not meets(c("${attr.cpu.numcores}", "<", "${meta.missing}"), NODE)


# Nomad's TestCheckConstraint, TestCheckOrder and TestCheckRegexpConstraint, with literals for values
# (a nil there is a target that resolves to nothing: above).
NOMAD_CHECKS = [
    ("=", "foo", "foo", True),
    ("is", "foo", "foo", True),
    ("==", "foo", "foo", True),
    ("!=", "foo", "foo", False),
    ("!=", "foo", "bar", True),
    ("not", "foo", "bar", True),
    ("version", "1.2.3", "~> 1.0", True),
    ("regexp", "foobarbaz", "[\\w]+", True),
    ("<", "foo", "bar", False),
    ("set_contains", "foo,bar,baz", "foo,  bar  ", True),
    ("set_contains", "foo,bar,baz", "foo,bam", False),
    ("<", "bar", "foo", True),
    ("<=", "foo", "foo", True),
    (">", "bar", "foo", False),
    (">=", "bar", "bar", True),
    (">", "1", "foo", False),
    ("<", "10", "1", False),
    ("<", "1", "10", True),
    ("<", "10.5", "1.5", False),
    ("<", "1.5", "10.5", True),
    ("regexp", "foobar", "bar", True),
    ("regexp", "foobar", "^foo", True),
    ("regexp", "foobar", "^bar", False),
    ("regexp", "zipzap", "foo", False),
    ("set_contains_any", "a,b,c", "c,d", True),
    ("set_contains_any", "a,b,c", "d", False),
]


@pytest.mark.parametrize(("op", "left", "right", "met"), NOMAD_CHECKS)
def test_nomads_own_check_cases(op: str, left: str, right: str, met: bool) -> None:
    assert meets(c(left, op, right), NODE) is met


# --- versions: go-version's and Nomad's semver tables ---------------------------------------------------

# go-version TestVersionCompare, TestComparePreReleases
COMPARE = [
    ("1.2.3", "1.4.5", -1),
    ("1.2-beta", "1.2-beta", 0),
    ("1.2", "1.1.4", 1),
    ("1.2", "1.2-beta", 1),
    ("1.2+foo", "1.2+beta", 0),
    ("v1.2", "v1.2-beta", 1),
    ("v1.2.3.4", "v1.2.3.4", 0),
    ("v1.2.0.0", "v1.2", 0),
    ("v1.2.0.0.1", "v1.2", 1),
    ("v1.2", "v1.2.0.0.1", -1),
    ("v1.2.3.0", "v1.2.3.4", -1),
    ("1.7rc2", "1.7rc1", 1),
    ("1.7rc2", "1.7", -1),
    ("1.2.0", "1.2.0-X-1.2.0+metadata~dist", 1),
    ("1.2-beta.1", "1.2-beta.2", -1),
    ("1.2-beta.2", "1.2-beta.11", -1),
    ("3.2-alpha.1", "3.2-alpha", 1),
    ("1.2-alpha", "1.2-beta.3", -1),
    ("1.2-beta", "1.2-alpha.3", 1),
    ("3.0-alpha3", "3.0-rc1", -1),
    ("3.0-alpha.1", "3.0-alpha.beta", -1),
    ("5.4-alpha", "5.4-alpha.beta", 1),
    ("v3.2-rc.1-1-g123", "v3.2-rc.2", 1),
]


@pytest.mark.parametrize(("a", "b", "expected"), COMPARE)
def test_versions_compare_as_go_version(a: str, b: str, expected: int) -> None:
    assert parse_version(a).compare(parse_version(b)) == expected
    assert parse_version(b).compare(parse_version(a)) == -expected


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("", False),
        ("1", True),
        ("1.2.beta", False),
        ("foo", False),
        ("1.2-5", True),
        ("\n1.2", False),
        ("1.2\n", False),  # Go's $ is the end of the text, not before a last newline
        ("1.2.0-x.Y.0+metadata", True),
        ("v1.2.3", True),
        ("foo1.2.3", False),
        ("1.7rc2", True),
        ("1.0-", True),
        ("controller-v0.40.2", False),
        ("11387778780781445675529500000000000000000", False),  # a segment over int64
    ],
)
def test_versions_parse_as_go_version(text: str, ok: bool) -> None:
    if ok:
        parse_version(text)
    else:
        with pytest.raises(VersionError):
            parse_version(text)


def test_semver_is_strict_where_go_version_is_not() -> None:
    assert parse_version("1.0.2alpha").pre == "alpha"
    with pytest.raises(VersionError):
        parse_semver("1.0.2alpha")
    assert parse_semver("1.0.2-alpha").compare(parse_version("1.0.2alpha")) == 0


# go-version TestConstraintCheck
VERSION_CHECKS = [
    (">= 1.0, < 1.2", "1.1.5", True),
    ("< 1.0, < 1.2", "1.1.5", False),
    ("= 1.0", "1.1.5", False),
    ("1.0", "1.0.0", True),
    ("~> 1.0", "2.0", False),
    ("~> 1.0", "1.2.3", True),
    ("~> 1.0.0", "1.2.3", False),
    ("~> 1.0.0", "1.0.7", True),
    ("~> 1.0.7", "1.0.4", False),
    ("~> 1.0.7", "1.0.7.5", True),
    ("~> 1.0.7", "1.0.6.99", False),
    ("~> 1.0.9.5", "1.0.9.4", False),
    ("~> 1.0.9.5", "1.0.9.5.1", True),
    ("~> 2.0", "2.1.0-beta", False),
    ("~> 2.1.0-a", "2.1.0", False),
    ("~> 2.1.0-a", "2.1.0-beta", True),
    ("~> 2.1.0-a", "2.2.0-alpha", False),
    ("> 2.0", "2.1.0-beta", False),
    (">= 2.1.0-a", "2.1.0-beta", True),
    (">= 2.1.0-a", "2.1.1-beta", False),
    (">= 2.1.0-a", "2.1.1", True),
    ("<= 2.1.0-a", "2.0.0", True),
    # Nomad's TestCheckVersionConstraint
    (">= 0.6.1", "1.3.0-beta1", False),
    (">= 1.6.0-beta1", "1.7.0-alpha1", False),
    ("= 1.3.0-beta1", "1.3.0-beta1+ent", True),
]


@pytest.mark.parametrize(("constraint", "version", "met"), VERSION_CHECKS)
def test_version_constraints_check_as_go_version(constraint: str, version: str, met: bool) -> None:
    assert version_constraints(constraint).check(parse_version(version)) is met


# Nomad's helper/constraints/semver TestConstraintCheck and TestCheckSemverConstraint
SEMVER_CHECKS = [
    (">= 1.0, < 1.2", "1.1.5", True),
    ("= 1.0", "1.1.5", False),
    ("> 10", "8", False),
    ("> 2.0", "2.1.0-beta", True),
    ("> 2.1.0-a", "2.1.0-beta", True),
    ("> 2.1.0-a", "2.1.0", True),
    (">= 0.6.1", "1.3.0-beta1", True),
    ("> 1.0-beta1", "1.0-rc1", True),
    (">= 0.6.1", "1.3.0-beta1+ent", True),
    ("> 1.3.0-beta1+cgo", "1.3.0-beta1+ent", False),
    ("= 1.3.0-beta1+cgo", "1.3.0-beta1+ent", True),
    (">= 1.7.0", "1.7.0-beta", False),
    (">= 1.7.0-dev", "1.7.0", True),
    (">= 1.7.0-dev", "1.7.0-rc.1", True),
]


@pytest.mark.parametrize(("constraint", "version", "met"), SEMVER_CHECKS)
def test_semver_constraints_check_as_nomads_semver(constraint: str, version: str, met: bool) -> None:
    assert semver_constraints(constraint).check(parse_version(version)) is met


@pytest.mark.parametrize("text", [">= 1.x", "", ">= 1.2,", "11387778780781445675529500000000000000000"])
def test_malformed_version_constraints_do_not_parse(text: str) -> None:
    with pytest.raises(VersionError):
        version_constraints(text)


@pytest.mark.parametrize("text", ["~> 1.0", ">= 1.0beta1", ">= 1.x"])
def test_semver_constraints_refuse_the_pessimistic_operator_and_loose_versions(text: str) -> None:
    version_constraints(text.replace("1.x", "1.0"))  # go-version takes all but 1.x
    with pytest.raises(VersionError):
        semver_constraints(text)


# --- validation: what Nomad's server refuses -----------------------------------------------------------

VALIDATE_CASES = [
    (c("a", "near", "b"), [("operand", '"near" is not a constraint operator')]),
    (c("", "=", "linux"), [("ltarget", 'required with operator "="')]),
    (c("${attr.kernel.name}", "="), [("rtarget", 'required with operator "="')]),
    (c("${attr.x}", "regexp", "("), [("rtarget", "error parsing regexp: missing closing ): `(`")]),
    (c("${attr.x}", "version", ">= 1.x"), [("rtarget", "malformed constraint: >= 1.x")]),
    (c("${attr.x}", "semver", "~> 1.0"), [("rtarget", "Malformed constraint: ~> 1.0")]),
    (c("${attr.x}", "set_contains_any"), [("rtarget", 'required with operator "set_contains_any"')]),
    (c("${attr.x}", "is_set", "yes"), [("rtarget", 'operator "is_set" takes no value')]),
    (c("${meta.rack}", "distinct_property", "0"), [("rtarget", '"0" is not an allowed count')]),
    (c("${meta.rack}", "distinct_property", "-1"), [("rtarget", '"-1" is not an allowed count')]),
    (c("${node.region}", "=", "global"), [("ltarget", 'unsupported attribute "${node.region}"')]),
    (c("$attr.x", "=", "a"), [("ltarget", "missing an opening brace")]),
    (c("${attr.x", "=", "a"), [("ltarget", "missing a closing brace")]),
]


@pytest.mark.parametrize(("constraint", "problems"), VALIDATE_CASES, ids=[str(x) for x, _ in VALIDATE_CASES])
def test_what_nomad_refuses_in_a_constraint_is_refused_naming_the_side(
    constraint: Constraint, problems: list[tuple[str, str]]
) -> None:
    found = validate(constraint)
    assert [role for role, _ in found] == [role for role, _ in problems]
    for (_, said), (_, want) in zip(found, problems, strict=True):
        assert want in said


@pytest.mark.parametrize(
    "constraint",
    [
        c("", "distinct_hosts"),  # no attribute needed
        c("", "distinct_hosts", "true"),
        c("${meta.rack}", "distinct_property"),
        c("${meta.rack}", "distinct_property", "2"),
        c("${meta.rack}", "is_not_set"),
        c("${attr.x}", "regexp", ""),  # an empty regexp compiles
        c("${device.model}", "=", "a"),
        c("literal", "!=", "${node.region}"),  # the right side is not checked (Nomad does not)
    ],
)
def test_valid_constraints_have_no_problem(constraint: Constraint) -> None:
    assert validate(constraint) == []


def test_distinct_operators_are_refused_in_a_task() -> None:
    for op in ("distinct_hosts", "distinct_property"):
        (problem,) = validate(c("${meta.rack}", op), task_level=True)
        assert problem[0] == "operand" and "task" in problem[1]
    assert validate(c("${meta.rack}", "is_set"), task_level=True) == []


# --- per group: job, group and task constraints; allocs counted for distinct_* --------------------------


def job(
    *groups: Group, constraints: tuple[Constraint, ...] = (), datacenters: tuple[str, ...] = ("*",)
) -> Job:
    return Job(id="web", groups=groups, constraints=constraints, datacenters=datacenters)


def group(
    name: str, count: int = 1, *, own: tuple[Constraint, ...] = (), task: tuple[Constraint, ...] = ()
) -> Group:
    return Group(
        name=name, tasks=(Task(name="t", driver="docker", constraints=task),), count=count, constraints=own
    )


def test_a_group_fails_on_any_of_the_job_group_or_task_constraints_in_that_order() -> None:
    windows = c("${attr.kernel.name}", "=", "windows")
    rack = c("${meta.rack}", "=", "r2")
    gpu = c("${attr.gpu}", "is_set")
    groups = (
        group("a", own=(rack,), task=(gpu,)),
        group("b"),
        group("ok", 2, own=(c("${meta.rack}", "=", "r1"),)),
    )
    found = failures(job(*groups), NODE)
    assert list(found) == ["a"]
    assert [(f.constraint, f.level) for f in found["a"]] == [(rack, "group"), (gpu, "task t")]
    assert found["a"][0].why == '${meta.rack} is "r1"'
    assert found["a"][1].why == "${attr.gpu} is not set on this node"
    found = failures(job(*groups, constraints=(windows,)), NODE)
    assert list(found) == ["a", "b", "ok"]
    assert [(f.constraint, f.level) for f in found["a"]] == [
        (windows, "job"),
        (rack, "group"),
        (gpu, "task t"),
    ]
    assert found["b"][0].why == '${attr.kernel.name} is "linux"'
    assert [f.constraint for f in found["b"]] == [f.constraint for f in found["ok"]] == [windows]


def test_a_group_of_count_zero_places_nothing_and_fails_nothing() -> None:
    j = job(group("idle", count=0, own=(c("${attr.kernel.name}", "=", "windows"),)))
    assert failures(j, NODE) == {}


@pytest.mark.parametrize(
    ("value", "count", "fails"),
    [
        ("true", 1, False),
        ("true", 2, True),
        ("", 3, True),  # no value: on
        ("yes", 3, True),  # no Go bool: on, as Nomad falls back to enforcing it
        ("false", 3, False),
        ("0", 3, False),
    ],
)
def test_group_distinct_hosts_places_one_alloc_of_the_group(value: str, count: int, fails: bool) -> None:
    hosts = c("", "distinct_hosts", value)
    found = failures(job(group("g", count, own=(hosts,)), group("other", 3)), NODE)
    assert list(found) == (["g"] if fails else [])
    if fails:
        (f,) = found["g"]
        assert f.constraint == hosts and f.level == "group"
        assert f.message() == (
            f'constraint " distinct_hosts {value}" of the group is not met by this node (one alloc of the '
            f"group per node, and the group asks for {count}): Nomad would place 1 and leave {count - 1} "
            "pending with a placement failure"
        )


def test_job_distinct_hosts_counts_the_allocs_of_every_group() -> None:
    hosts = c("", "distinct_hosts", "true")
    assert failures(job(group("a"), group("idle", 0), constraints=(hosts,)), NODE) == {}
    found = failures(job(group("a"), group("b"), constraints=(hosts,)), NODE)
    assert list(found) == ["a", "b"]
    assert "the job asks for 2" in found["a"][0].why
    # only the first distinct_hosts counts, as Nomad's hasDistinctHostsConstraint
    off_first = (c("", "distinct_hosts", "false"), hosts)
    assert failures(job(group("a"), group("b"), constraints=off_first), NODE) == {}


def test_distinct_property_allows_its_count_per_value_and_needs_the_property() -> None:
    rack2 = c("${meta.rack}", "distinct_property", "2")
    assert failures(job(group("g", 2, own=(rack2,))), NODE) == {}
    (f,) = failures(job(group("g", 3, own=(rack2,))), NODE)["g"]
    assert f.why == '${meta.rack} is "r1" for all 3 allocs of the group, 2 allowed'
    assert f.verdict.startswith("Nomad would place 2 and leave 1 pending")
    one = c("${meta.rack}", "distinct_property")  # no value: 1
    assert list(failures(job(group("g", 2, own=(one,))), NODE)) == ["g"]
    missing = c("${meta.missing}", "distinct_property", "5")
    (f,) = failures(job(group("g", 1, own=(missing,))), NODE)["g"]
    assert f.why == "missing property ${meta.missing}"
    # at job level, the allocs of all groups share the values
    assert failures(job(group("a"), group("b"), constraints=(rack2,)), NODE) == {}
    assert list(failures(job(group("a"), group("b", 2), constraints=(rack2,)), NODE)) == ["a", "b"]


def test_refusals_name_the_datacenters_then_each_failing_constraint_of_each_group() -> None:
    windows = c("${attr.kernel.name}", "=", "windows")
    j = job(
        group("a"),
        group("b", task=(c("${meta.rack}", "is_not_set"),)),
        datacenters=("us-*",),
        constraints=(windows,),
    )
    assert refusals(j, NODE) == [
        (
            "job.web.datacenters",
            "['us-*'] does not include this client's datacenter \"dc1\" (config datacenter): "
            "Nomad would not place it here",
        ),
        (
            "job.web.group.a",
            'constraint "${attr.kernel.name} = windows" of the job is not met by this node '
            '(${attr.kernel.name} is "linux"): Nomad would not place the group here',
        ),
        (
            "job.web.group.b",
            'constraint "${attr.kernel.name} = windows" of the job is not met by this node '
            '(${attr.kernel.name} is "linux"): Nomad would not place the group here',
        ),
        (
            "job.web.group.b",
            'constraint "${meta.rack} is_not_set " of the task t is not met by this node '
            '(${meta.rack} is "r1"): Nomad would not place the group here',
        ),
    ]
    assert refusals(job(group("a"), datacenters=("dc*",)), NODE) == []


# --- the node's attributes -------------------------------------------------------------------------


def test_the_node_advertises_nomads_fingerprint_attributes() -> None:
    uname = os.uname_result(("Linux", "host-7", "6.1.0-18-amd64", "#1 SMP", "aarch64"))
    attributes = node_attributes(
        ["docker", "exec"],
        uname=uname,
        os_release='PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n# ID=debian\n',
        cpu_count=4,
        memory_bytes=8 << 30,
    )
    assert attributes == {
        "kernel.name": "linux",
        "kernel.version": "6.1.0-18-amd64",
        "kernel.arch": "aarch64",
        "cpu.arch": "arm64",  # Go's GOARCH
        "unique.hostname": "host-7",
        "nomad.version": __version__,
        "os.name": "ubuntu",
        "os.version": "22.04",
        "cpu.numcores": "4",
        "memory.totalbytes": str(8 << 30),
        "driver.docker": "1",
        "driver.exec": "1",
    }
    x86 = node_attributes([], uname=os.uname_result(("Linux", "h", "6.8.0", "#1", "x86_64")), os_release="")
    assert x86["cpu.arch"] == "amd64" and "driver.docker" not in x86 and x86["os.name"] == ""


def test_the_clients_node_class_and_meta_come_from_its_config(tmp_path: object) -> None:
    """Nomad's client `node_class` and `meta`: config -> the core's settings (NodeFacts' source);
    a meta that is not an object of strings is refused naming the key."""
    import json
    from pathlib import Path

    from agent.command.config import load_config
    from agent.command.wiring import CoreSettings
    from agent.errors import ConfigError

    p = Path(str(tmp_path)) / "config.json"
    p.write_text(json.dumps({"node_name": "n", "node_class": "edge", "node_meta": {"rack": "r1"}}))
    settings = CoreSettings.from_config(load_config(p))
    assert (settings.node_class, settings.node_meta) == ("edge", (("rack", "r1"),))
    p.write_text(json.dumps({"node_name": "n", "node_meta": {"rack": 1}}))
    with pytest.raises(ConfigError, match=r"node_meta\.rack"):
        load_config(p)
    p.write_text(json.dumps({"node_name": "n", "node_meta": ["rack"]}))
    with pytest.raises(ConfigError, match="node_meta"):
        load_config(p)


def test_a_group_whose_ephemeral_disks_do_not_fit_the_nodes_disk_is_refused_naming_it() -> None:
    from dataclasses import replace

    from agent.node.nodeinfo import disk_free_mb, storage_attributes
    from agent.structs.model import EphemeralDisk

    def job(size: int, count: int) -> Job:
        g = Group("g", (Task("t", "exec"),), count=count, ephemeral_disk=EphemeralDisk(size=size))
        return Job("j", (g,))

    small = replace(NODE, disk_mb=1000)
    assert refusals(job(500, 2), small) == []
    ((path, why),) = refusals(job(500, 3), small)
    assert path == "job.j.group.g.ephemeral_disk.size"
    assert "3 x 500 MB is more than this client's 1000 MB free" in why and 'dimension "disk"' in why
    assert refusals(job(10**9, 1), replace(NODE, disk_mb=None)) == []  # unknown: not checked
    assert refusals(job(500, 0), replace(NODE, disk_mb=0)) == []  # nothing placed
    free, attrs = disk_free_mb(Path("/")), storage_attributes(Path("/"))
    assert free is not None and free >= 0 and int(attrs["unique.storage.bytesfree"]) // 2**20 >= free - 64
