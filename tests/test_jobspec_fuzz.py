"""Fuzzing the jobspec parser: mutations of valid jobspecs (type swaps, deletions, duplication, nesting,
huge values, unicode) never raise anything but JobspecError, and the builder never raises at all.

Deterministic (`derandomize=True`) so that `make unit` is stable; about ten seconds in all.
"""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.jobspec import JobspecError, parse_jobspec
from agent.jobspec.build import Builder
from agent.jobspec.hcl import parse_hcl
from agent.jobspec.tree import Block, Report

SPECS = Path(__file__).parent / "jobspecs"
HCL_SEEDS = (
    "cni-check-on-restore.hcl",
    "exec-bridge.hcl",
    "template-change-mode.hcl",
    "pause-container-orphans.hcl",
)
FUZZ = settings(
    derandomize=True,
    deadline=None,
    max_examples=250,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_ODD_STRINGS = st.sampled_from(
    ["", "0", "-1", "65536", "1e400", "9" * 40, "${NOMAD_ALLOC_ID}", "a-b", "\u202e\u0000", "é🚀", "{{", "5s"]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.sampled_from([0, -1, 1 << 63, 10**30, -(10**30)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | _ODD_STRINGS
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _to_hcl_json(value: object) -> object:
    """A builder body as HCL's JSON syntax (blocks become objects keyed by their labels)."""
    if isinstance(value, list) and value and all(isinstance(v, Block) for v in value):
        out: dict[str, Any] = {}
        for block in value:
            assert isinstance(block, Block)
            body = _to_hcl_json(block.body)
            if not block.labels:
                return [_to_hcl_json(b.body) for b in value if isinstance(b, Block)]
            out.setdefault(block.labels[0], body)
        return out
    if isinstance(value, dict):
        return {k: _to_hcl_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_hcl_json(v) for v in value]
    return value


def _hcl_bodies() -> list[dict[str, object]]:
    bodies = []
    for name in HCL_SEEDS:
        report = Report()
        body = parse_hcl((SPECS / name).read_text(), report)
        assert body is not None and not report.problems, report.problems
        bodies.append(dict(body))
    return bodies


def _json_seeds() -> list[Any]:
    seeds: list[Any] = [json.loads((SPECS / "pause-container-example.json").read_text())]
    seeds += [_to_hcl_json(body) for body in _hcl_bodies()]
    return seeds


@pytest.fixture(scope="module")
def json_seeds() -> list[Any]:
    return _json_seeds()


@pytest.fixture(scope="module")
def hcl_bodies() -> list[dict[str, object]]:
    return _hcl_bodies()


def _slots(tree: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a tree of dicts, lists and blocks (a block's body counts as a dict)."""
    out: list[tuple[Any, Any]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Block):
            node = node.body
        if isinstance(node, dict):
            for key, child in node.items():
                out.append((node, key))
                stack.append(child)
        elif isinstance(node, list):
            for i, child in enumerate(node):
                out.append((node, i))
                stack.append(child)
    return out


def _mutate(tree: Any, data: st.DataObject) -> Any:
    tree = _thaw(copy.deepcopy(tree))
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        slots = _slots(tree)
        if not slots:
            break
        container, key = slots[data.draw(st.integers(0, len(slots) - 1), label="slot")]
        op = data.draw(st.sampled_from(["replace", "delete", "duplicate", "wrap-list", "wrap-dict", "nest"]))
        value = container[key]
        if op == "replace":
            container[key] = data.draw(_VALUES, label="value")
        elif op == "delete":
            del container[key]
        elif op == "duplicate" and isinstance(container, list):
            container.append(copy.deepcopy(value))
        elif op == "duplicate":
            container[f"{key}_copy"] = copy.deepcopy(value)
            container[key] = [value, copy.deepcopy(value)]
        elif op == "wrap-list":
            container[key] = [value]
        elif op == "wrap-dict":
            container[key] = {data.draw(st.text(max_size=4), label="key"): value}
        else:
            for _ in range(data.draw(st.integers(1, 80), label="depth")):
                value = [value] if data.draw(st.booleans(), label="list") else {"x": value}
            container[key] = value
    return tree


def _thaw(tree: Any) -> Any:
    """Blocks (frozen) as mutable copies: a block's body becomes a dict the mutations can change."""
    if isinstance(tree, Block):
        return Block(tree.labels, {k: _thaw(v) for k, v in tree.body.items()})
    if isinstance(tree, dict):
        return {k: _thaw(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_thaw(v) for v in tree]
    return tree


@FUZZ
@given(data=st.data())
def test_mutated_json_jobspecs_raise_only_jobspec_errors(json_seeds: list[Any], data: st.DataObject) -> None:
    seed = json_seeds[data.draw(st.integers(0, len(json_seeds) - 1), label="seed")]
    text = json.dumps(_mutate(seed, data), ensure_ascii=data.draw(st.booleans(), label="ascii"))
    with contextlib.suppress(JobspecError):
        parse_jobspec(text, source="<fuzz>", fmt="json")


@FUZZ
@given(data=st.data())
def test_the_builder_never_raises_on_mutated_hcl_bodies(
    hcl_bodies: list[dict[str, object]], data: st.DataObject
) -> None:
    body = hcl_bodies[data.draw(st.integers(0, len(hcl_bodies) - 1), label="seed")]
    report = Report()
    job = Builder(report).job(_mutate(body, data))
    assert job is not None or report.problems
    assert not any("could not be read" in reason for _, reason in report.problems), report.problems


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    data=st.data(),
    literal=st.sampled_from(
        ['""', "[]", "{}", "-1", "0", "1e400", "9" * 30, '"\u00e9\U0001f680"', "true", "null"]
    ),
)
def test_hcl_jobspecs_with_swapped_values_raise_only_jobspec_errors(
    data: st.DataObject, literal: str
) -> None:
    text = (SPECS / data.draw(st.sampled_from(HCL_SEEDS), label="seed")).read_text()
    lines = [
        i for i, line in enumerate(text.splitlines()) if " = " in line and not line.strip().startswith("#")
    ]
    lines_of = text.splitlines()
    i = lines[data.draw(st.integers(0, len(lines) - 1), label="line")]
    name = lines_of[i].split(" = ", 1)[0]
    lines_of[i] = f"{name} = {literal}"
    with contextlib.suppress(JobspecError):
        parse_jobspec("\n".join(lines_of), source="<fuzz>", fmt="hcl")


def _big_api_job(target: int) -> str:
    """An API JSON job of about `target` bytes: groups with many env entries."""
    env = {f"VAR_{i}": "x" * 40 for i in range(200)}
    group = {
        "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "/bin/true"}, "Env": env}],
    }
    one = len(json.dumps(group)) + 20
    groups = [{"Name": f"g{i}", **group} for i in range(max(1, target // one))]
    return json.dumps({"Job": {"ID": "big", "TaskGroups": groups}})


def test_a_one_mib_jobspec_parses() -> None:
    # Timed by scripts/bench_jobspec.py (no timed assertion here: machines differ).
    text = _big_api_job(1 << 20)
    assert 900_000 < len(text) <= 1 << 20
    job = parse_jobspec(text, source="<big>").job
    assert len(job.groups) > 10
