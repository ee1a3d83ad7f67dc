"""A task's own `restart` block (Nomad's Task.RestartPolicy): the fields it sets over its group's
policy (api Task.Canonicalize), read at parse, kept through the job codec, shown in the job's JSON,
and the policy the task runner decides the task's exits by (on a real Core with a fake node)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.jobspec import parse_jobspec
from agent.structs.jobcodec import decode_job, encode_job
from agent.structs.model import RestartPolicy
from tests.fakes import FakeNode
from tests.test_routes_ops import Api, _exits, start_api

WAIT = 5.0  # seconds for the loop to act on an exit

TWO_POLICIES = """
job "pair" {
  group "g" {
    restart {
      attempts = 3
      interval = "10m"
      delay    = "20s"
      mode     = "delay"
    }
    task "own" {
      driver = "docker"
      config { image = "x" }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "group" {
      driver = "docker"
      config { image = "x" }
    }
  }
}
"""


def test_a_task_restart_block_overrides_the_fields_it_sets_of_its_groups_policy() -> None:
    parsed = parse_jobspec(TWO_POLICIES, source="<request>")
    own, plain = parsed.job.groups[0].tasks
    assert parsed.warnings == ()  # no "accepted but not implemented" for task.restart
    assert own.restart == RestartPolicy(attempts=0, interval=600.0, delay=20.0, mode="fail")
    assert plain.restart is None  # the group's (the task runner falls back to it)
    assert decode_job(encode_job(parsed.job)).groups[0].tasks[0].restart == own.restart


def test_the_catalogue_scenario_nomad_5883_takes_its_tasks_policy_over_the_batch_default() -> None:
    spec = Path(__file__).parent.parent / "e2e/scenarios/jobs/nomad-5883-example-restored.nomad.hcl"
    parsed = parse_jobspec(spec.read_text(), source=str(spec))
    assert parsed.warnings == ()
    (task,) = parsed.job.groups[0].tasks
    # the batch job's defaults (3 attempts in 24h, 15s delay) under the task's attempts and mode
    assert task.restart == RestartPolicy(attempts=0, interval=86400.0, delay=15.0, mode="fail")


def test_a_task_restart_value_is_checked_naming_its_path() -> None:
    bad = TWO_POLICIES.replace('mode     = "fail"', 'mode     = "sometimes"')
    with pytest.raises(Exception) as info:
        parse_jobspec(bad, source="<request>")
    assert "job.pair.group.g.task.own.restart.mode" in str(info.value)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def _until(what: str, probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while not (got := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {WAIT}s")
        time.sleep(0.01)
    return got


def _events(api: Api, alloc: str, task: str) -> list[str]:
    view = api.request("GET", f"/v1/allocation/{alloc}")
    return [e["Type"] for e in view["TaskStates"][task]["Events"]]


ONE_TASK = """
job "solo" {
  group "g" {
    restart {
      %(group)s
    }
    task "t" {
      driver = "docker"
      config { image = "x" }
      restart {
        %(task)s
      }
    }
  }
}
"""


def test_a_task_with_no_restarts_of_its_own_fails_where_its_group_would_restart_it(api: Api) -> None:
    """The group allows 3 restarts; the task's own block allows none: its first failure fails the
    alloc ("Not Restarting"), as Nomad's restart tracker built from the task's policy decides."""
    spec = ONE_TASK % {"group": 'attempts = 3\n delay = "20s"', "task": "attempts = 0"}
    (alloc,) = api.submit(spec)
    _exits(api, alloc, 2)
    _until("failed alloc", lambda: api.request("GET", f"/v1/allocation/{alloc}")["ClientStatus"] == "failed")
    events = _events(api, alloc, "t")
    assert "Not Restarting" in events and "Restarting" not in events, events


def test_a_task_with_restarts_of_its_own_restarts_where_its_group_would_fail_it(api: Api) -> None:
    """The group allows none; the task's block allows 2 with a 20s delay: its failure is a
    "Restarting" (the alloc keeps running), and the job's JSON shows the merged policy."""
    spec = ONE_TASK % {"group": 'attempts = 0\n mode = "fail"', "task": 'attempts = 2\n delay = "20s"'}
    (alloc,) = api.submit(spec)
    _exits(api, alloc, 2)
    _until("Restarting event", lambda: "Restarting" in _events(api, alloc, "t"))
    view = api.request("GET", f"/v1/allocation/{alloc}")
    assert view["ClientStatus"] == "running" and "Not Restarting" not in _events(api, alloc, "t")
    restarting = [e for e in view["TaskStates"]["t"]["Events"] if e["Type"] == "Restarting"]
    assert "20.0s" in restarting[0]["DisplayMessage"], restarting
    (task,) = api.request("GET", "/v1/job/solo")["TaskGroups"][0]["Tasks"]
    assert task["RestartPolicy"] == {
        "Attempts": 2,
        "Interval": 1800 * 10**9,  # the service job's default, from the group
        "Delay": 20 * 10**9,
        "Mode": "fail",
        "RenderTemplates": False,
    }
