"""A group's count against the client's max_count and a job's total against Nomad's job_max_count:
refused at submission, naming what Nomad would do instead (agent.jobspec.limits)."""

from __future__ import annotations

import json

import pytest

from agent.jobspec import JobspecError, Limits, parse_jobspec
from agent.jobspec.limits import JOB_MAX_COUNT


def _hcl(*counts: int) -> str:
    groups = "".join(
        f'  group "g{i}" {{\n    count = {n}\n    task "t" {{\n      driver = "exec"\n'
        '      config { command = "/bin/true" }\n    }\n  }\n'
        for i, n in enumerate(counts)
    )
    return f'job "j" {{\n{groups}}}\n'


def _problems(text: str, limits: Limits) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        parse_jobspec(text, source="j.hcl", limits=limits)
    return info.value.problems


def test_a_count_above_max_count_is_refused_naming_nomads_queued_placement() -> None:
    ((path, reason),) = _problems(_hcl(5, 101), Limits(max_count=100))
    assert path == "job.j.group.g1.count"
    assert reason.startswith("count 101 is more than the client's max_count (100): ")
    assert "Nomad's scheduler would place what fits" in reason and "blocked evaluation" in reason
    assert "FailedTGAllocs" in reason and "raise max_count" in reason


def test_a_count_of_max_count_is_taken() -> None:
    job = parse_jobspec(_hcl(100, 100), source="j.hcl", limits=Limits(max_count=100)).job
    assert [g.count for g in job.groups] == [100, 100]


def test_the_api_json_count_is_checked_alike() -> None:
    group = {"Name": "g", "Count": 7, "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "/x"}}]}
    text = json.dumps({"Job": {"ID": "j", "TaskGroups": [group]}})
    ((path, reason),) = _problems(text, Limits(max_count=6))
    assert path == "job.j.group.g.count" and "Nomad's scheduler would place what fits" in reason


def test_a_total_above_nomads_job_max_count_is_refused_with_nomads_text() -> None:
    half = JOB_MAX_COUNT // 2
    limits = Limits(max_count=JOB_MAX_COUNT)
    assert [g.count for g in parse_jobspec(_hcl(half, half), source="j.hcl", limits=limits).job.groups] == [
        half,
        half,
    ]
    ((path, reason),) = _problems(_hcl(half, half, 1), limits)
    assert path == "job.j"
    assert reason == f"total count was greater than configured job_max_count: {JOB_MAX_COUNT + 1} > 50000"
