"""Hostile jobspecs against a stop (issue 51): `shutdown_delay = "87600h"` made a stop sleep ten years,
so the task outlived `job stop` and GC and purge waited behind it (kill_timeout is capped at the
client's max_kill_timeout, shutdown_delay was capped at nothing). Now the client's
`max_shutdown_delay` (30 s; Nomad's client has no such limit, docs/task-lifecycle.md says why this
one) refuses a longer delay at submission, group or task, HCL or API JSON, naming the jobspec path,
the value, the limit and the config key; and the runner caps what a record stored before the change
asks for, so that record is neither lost nor refused at a restore."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.cli.validate import REFUSED, validate_text
from agent.command.config import load_config
from agent.errors import ConfigError
from agent.identity.claims import DEFAULT_IDENTITY_TTL
from agent.jobspec import JobspecError, Limits, parse_jobspec
from agent.jobspec.limits import DEFAULT_MAX_SHUTDOWN_DELAY, stored_limits
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, RestartPolicy, Task
from agent.structs.records import AllocRecord, AllocStatus
from tests.fakes import FakeNode

TEN_YEARS = 87600 * 3600.0


def _config(tmp_path: Path, **extra: Any) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"node_name": "client1", **extra}))
    return p


# --- the client's limit -------------------------------------------------------------------------


def test_max_shutdown_delay_is_a_client_setting_beside_max_kill_timeout(tmp_path: Path) -> None:
    assert load_config(_config(tmp_path)).max_shutdown_delay == DEFAULT_MAX_SHUTDOWN_DELAY == 30.0
    assert load_config(_config(tmp_path, max_shutdown_delay=600)).max_shutdown_delay == 600.0
    assert load_config(_config(tmp_path, max_shutdown_delay=0)).max_shutdown_delay == 0.0


@pytest.mark.parametrize("bad", [-1, "30s", True, None, [30]])
def test_a_bad_max_shutdown_delay_is_an_error_naming_the_key(tmp_path: Path, bad: object) -> None:
    p = _config(tmp_path, max_shutdown_delay=bad)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value).startswith(f"{p}: max_shutdown_delay: {bad!r} is not a number of seconds >= 0")


def test_an_infinite_max_shutdown_delay_is_no_limit_and_refused(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text('{"node_name": "c", "max_shutdown_delay": Infinity}')  # Python's json reads it
    with pytest.raises(ConfigError, match="max_shutdown_delay: inf is not a number of seconds >= 0"):
        load_config(p)


# --- refused at submission ----------------------------------------------------------------------

GROUP_DELAY = """
job "j" {
  group "g" {
    shutdown_delay = "87600h"
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""

TASK_DELAY = """
job "j" {
  group "g" {
    task "t" {
      driver = "exec"
      shutdown_delay = "87600h"
      config { command = "/bin/sleep" }
    }
  }
}
"""

LIMIT = (
    "87600h is more than the client's max_shutdown_delay (30s): a stop would wait that long before "
    "its kill (the agent's config max_shutdown_delay raises the limit)"
)


@pytest.mark.parametrize(
    ("text", "where"),
    [(GROUP_DELAY, "job.j.group.g.shutdown_delay"), (TASK_DELAY, "job.j.group.g.task.t.shutdown_delay")],
)
def test_a_ten_year_shutdown_delay_is_refused_at_submission(text: str, where: str) -> None:
    with pytest.raises(JobspecError) as exc:
        parse_jobspec(text, source="t")
    assert f"{where}: {LIMIT}" in str(exc.value)


def test_api_json_is_refused_the_same_way() -> None:
    ns = int(TEN_YEARS * 1e9)
    task = {"Name": "t", "Driver": "exec", "Config": {"command": "/bin/sleep"}, "ShutdownDelay": ns}
    body = {"Job": {"ID": "j", "TaskGroups": [{"Name": "g", "ShutdownDelay": ns, "Tasks": [task]}]}}
    with pytest.raises(JobspecError) as exc:
        parse_jobspec(json.dumps(body), source="t", fmt="json")
    problems = str(exc.value)
    assert "shutdown_delay: " + LIMIT in problems
    assert problems.count("max_shutdown_delay (30s)") == 2  # the group's and the task's


def test_the_offline_validator_refuses_it_too() -> None:
    result = validate_text(TASK_DELAY, source="t.hcl", fmt="hcl")
    assert result.status == REFUSED
    assert any("max_shutdown_delay" in reason for _, reason in result.problems)


def test_a_delay_within_the_limit_is_taken_and_the_limit_is_the_clients() -> None:
    inside = TASK_DELAY.replace("87600h", "30s")
    assert parse_jobspec(inside, source="t").job.groups[0].tasks[0].shutdown_delay == 30.0
    raised = Limits(max_shutdown_delay=TEN_YEARS)
    assert (
        parse_jobspec(TASK_DELAY, source="t", limits=raised).job.groups[0].tasks[0].shutdown_delay
        == TEN_YEARS
    )
    with pytest.raises(JobspecError, match="max_shutdown_delay"):
        parse_jobspec(inside, source="t", limits=Limits(max_shutdown_delay=0.0))


def test_a_job_stored_before_the_limit_is_read_again_not_refused() -> None:
    """A restore parses an old record's source (no canonical form) with the stored limits: what
    was accepted once is kept; the runner caps it at the stop."""
    job = parse_jobspec(GROUP_DELAY, source="state:job/j", limits=stored_limits(Limits())).job
    assert job.groups[0].shutdown_delay == TEN_YEARS


# --- capped by the runner (defence in depth: records stored before) ------------------------------


def _stored(
    tmp_path: Path, group_delay: float, task_delay: float, **deps: Any
) -> tuple[FakeNode, AllocRunner]:
    node = FakeNode(tmp_path)
    task = Task(name="t", driver="docker", config={"image": "x"}, shutdown_delay=task_delay)
    group = Group(
        name="g",
        tasks=(task,),
        network=None,
        restart=RestartPolicy(attempts=0, mode="fail"),
        shutdown_delay=group_delay,
    )
    job = Job(id="j", groups=(group,))
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-0000000000d1", job="j", group="g")
    r = AllocRunner(replace(node.deps(), **deps), rec, job, group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    node.timers.clear()
    return node, r


def test_a_stored_groups_ten_year_delay_is_capped_at_the_stop(tmp_path: Path) -> None:
    node, r = _stored(tmp_path, TEN_YEARS, 0.0)
    r.stop()
    assert [d for d, _ in node.timers] == [DEFAULT_MAX_SHUTDOWN_DELAY], "the group's delay is not capped"
    shown = [e.message for e in node.store.events(r.id) if e.type == "Shutdown Delay"]
    assert shown == [
        "services deregistered: killing the tasks in 30s (87600h capped at the client's max_shutdown_delay)"
    ]
    node.run_timers()
    assert r.rec.status is AllocStatus.COMPLETE and len(node.docker.stops) == 1


def test_a_stored_tasks_ten_year_delay_is_capped_at_the_stop(tmp_path: Path) -> None:
    node, r = _stored(tmp_path, 0.0, TEN_YEARS)
    r.stop()
    assert node.slept == [DEFAULT_MAX_SHUTDOWN_DELAY], "the task's delay is not capped"
    waits = [e.message for e in node.store.events(r.id, "t") if e.type == "Waiting for shutdown delay"]
    assert waits == [
        "Waiting for shutdown_delay of 30s before killing the task "
        "(87600h capped at the client's max_shutdown_delay)."
    ]
    assert r.rec.status is AllocStatus.COMPLETE


def test_the_cap_is_the_clients_setting(tmp_path: Path) -> None:
    node, r = _stored(tmp_path, 0.0, TEN_YEARS, max_shutdown_delay=5.0)
    r.stop()
    assert node.slept == [5.0]


def test_a_stored_alloc_with_a_ten_year_delay_is_restored_not_lost(tmp_path: Path) -> None:
    """A record written before the limit (here by an agent whose limit allowed it), without its
    canonical form, so that the restore parses its source: the job and its alloc are kept; its
    stop then waits the client's cap, not ten years. (Passes on the old code, which had no limit;
    it fails when the restore reads the record with the submission's limits.)"""
    from agent.client.offload import run_inline
    from tests.test_jobcodec import FakeSweeper

    fake = FakeNode(tmp_path)
    before = fake.core(
        sweeper=FakeSweeper(fake), offload=run_inline, limits=Limits(max_shutdown_delay=TEN_YEARS)
    )
    spec = TASK_DELAY.replace('driver = "exec"', 'driver = "docker"').replace(
        'config { command = "/bin/sleep" }', 'config { image = "x" }'
    )
    (alloc,) = before.job_registry.submit(spec, "hcl")["allocs"]
    record = fake.store.get("job", "j") or {}
    fake.store.put("job", "j", {k: v for k, v in record.items() if k != "canonical"})

    after = fake.core(sweeper=FakeSweeper(fake), offload=run_inline)  # today's limit: 30 s
    after.restorer.restore()
    assert "j" in after.jobs, "the stored job was lost at the restore"
    assert after.jobs["j"].groups[0].tasks[0].shutdown_delay == TEN_YEARS
    assert after.runners[alloc].rec.live
    # its stop waits the client's cap (the runner's, from the limits: tests above show the wait)
    assert (before.deps.max_shutdown_delay, after.deps.max_shutdown_delay) == (TEN_YEARS, 30.0)


def test_the_lab_role_sets_the_new_limits_and_the_agent_takes_them(tmp_path: Path) -> None:
    """The fieldlab_agent role renders both client limits of issue 51 (max_shutdown_delay here,
    identity_default_ttl: tests/test_hostile_identities.py) and the agent reads them back."""
    from tests.test_role_hardening import _agent_config, _lab_inventory

    _, inventory = _lab_inventory(tmp_path, raw_exec=False)
    config = _agent_config(tmp_path, inventory, "client1")
    want = {"max_shutdown_delay": DEFAULT_MAX_SHUTDOWN_DELAY, "identity_default_ttl": DEFAULT_IDENTITY_TTL}
    assert {k: config.get(k) for k in want} == want
    path = tmp_path / "client1.json"
    path.write_text(json.dumps(config))
    loaded = load_config(path)
    assert {k: getattr(loaded, k) for k in want} == want
