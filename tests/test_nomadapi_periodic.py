"""Periodic jobs on one node (issue 52): the parent places nothing, child jobs `<job>/periodic-<unix>`
are launched at its cron times in its time zone (a fake clock drives the launcher), `prohibit_overlap`
skips a launch while a child runs, a launch missed while the agent was down is made once, and `POST
/v1/job/:id/periodic/force` launches one now. On the real Core and loop with a fake node."""

from __future__ import annotations

import datetime
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.nomadapi.jobperiodic import PeriodicLauncher, launch_time, next_launch
from agent.structs.model import Periodic
from tests.fakes import FakeNode
from tests.test_nomadapi_dispatch import BATCH_HCL
from tests.test_routes_ops import Api, start_api

# Jan 1st, 09:00 in New York: never due while a test runs on the real clock (the routes' own launcher)
NIGHTLY = """
job "nightly" {
  type = "batch"
  periodic {
    cron             = "0 9 1 1 *"
    time_zone        = "America/New_York"
    prohibit_overlap = %s
  }
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""
WAIT = 5.0  # seconds for a child's alloc to run or stop
JAN_1_2027_0900_NEW_YORK = datetime.datetime(2027, 1, 1, 14, 0, tzinfo=datetime.UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def _register(api: Api, hcl: str) -> Any:
    job = api.request("POST", "/v1/jobs/parse", {"JobHCL": hcl})
    return api.request("PUT", "/v1/jobs", {"Job": job})


def _children(api: Api) -> list[str]:
    return sorted(j for j in api.core.call(lambda: list(api.core.jobs)) if j.startswith("nightly/"))


def test_next_launch_is_the_earliest_spec_in_the_jobs_time_zone() -> None:
    december = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC).timestamp()
    ny = Periodic(spec="0 9 * * *", time_zone="America/New_York")
    assert next_launch(ny, december) == datetime.datetime(2026, 12, 7, 14, 0, tzinfo=datetime.UTC).timestamp()
    utc = Periodic(spec="0 9 * * *")
    assert next_launch(utc, december) == datetime.datetime(2026, 12, 8, 9, 0, tzinfo=datetime.UTC).timestamp()
    both = Periodic(specs=("0 23 * * *", "30 12 * * *"))
    assert next_launch(both, december) == december + 1800
    assert (launch_time("a", "a/periodic-17"), launch_time("a", "ab/periodic-17")) == (17, None)


def test_a_periodic_job_places_nothing_and_shows_its_schedule(api: Api) -> None:
    out = _register(api, NIGHTLY % "false")
    assert api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations") == []
    assert list(api.core.runners) == []
    job = api.request("GET", "/v1/job/nightly")
    assert job["Status"] == "running"
    assert job["Periodic"] == {
        "Enabled": True,
        "Spec": "0 9 1 1 *",
        "Specs": None,
        "SpecType": "cron",
        "ProhibitOverlap": False,
        "TimeZone": "America/New_York",
    }
    (stub,) = api.request("GET", "/v1/jobs")
    assert stub["Periodic"] is True
    assert api.call("POST", "/v1/job/nightly/evaluate") == (500, "can't evaluate periodic job\n")
    # the job read back registers again as the same job (Periodic's API JSON is read)
    again = api.request("PUT", "/v1/jobs", {"Job": job})
    assert "eriodic" not in again["Warnings"] and list(api.core.runners) == []
    assert api.request("GET", "/v1/job/nightly")["Periodic"] == job["Periodic"]


def test_the_launcher_launches_on_the_cron_time_and_skips_an_overlap(api: Api) -> None:
    _register(api, NIGHTLY % "true")
    clock = Clock(JAN_1_2027_0900_NEW_YORK - 3600)
    launcher = PeriodicLauncher(api.nomad, clock)
    api.core.call(launcher.tick)
    assert _children(api) == []
    clock.now = JAN_1_2027_0900_NEW_YORK + 0.5
    api.core.call(launcher.tick)
    child = f"nightly/periodic-{int(JAN_1_2027_0900_NEW_YORK)}"
    assert _children(api) == [child]
    read = api.request("GET", f"/v1/job/{urllib.parse.quote(child, safe='')}")
    assert (read["ParentID"], read["Periodic"], read["Type"]) == ("nightly", None, "batch")
    (runner,) = [r for r in api.core.runners.values() if r.job.id == child]
    evals = api.request("GET", f"/v1/job/{urllib.parse.quote(child, safe='')}/evaluations")
    assert [e["TriggeredBy"] for e in evals] == ["periodic-job"]
    # a year later the child still runs: prohibit_overlap skips the launch, and the one after it is next
    clock.now = datetime.datetime(2028, 1, 1, 14, 0, 1, tzinfo=datetime.UTC).timestamp()
    api.core.call(launcher.tick)
    assert _children(api) == [child]
    assert launcher.due["nightly"] == datetime.datetime(2029, 1, 1, 14, 0, tzinfo=datetime.UTC).timestamp()
    assert runner.id in api.core.runners


def test_without_prohibit_overlap_a_launch_is_made_while_a_child_runs(api: Api) -> None:
    _register(api, NIGHTLY % "false")
    clock = Clock(JAN_1_2027_0900_NEW_YORK - 1)
    launcher = PeriodicLauncher(api.nomad, clock)
    api.core.call(launcher.tick)
    for year in (2027, 2028):
        clock.now = datetime.datetime(year, 1, 1, 14, 0, 0, tzinfo=datetime.UTC).timestamp()
        api.core.call(launcher.tick)
    assert len(_children(api)) == 2
    assert len([r for r in api.core.runners.values() if r.job.parent_id == "nightly"]) == 2


def test_a_launch_missed_while_the_agent_was_down_is_made_once(api: Api) -> None:
    _register(api, NIGHTLY % "false")
    first = PeriodicLauncher(api.nomad, Clock(JAN_1_2027_0900_NEW_YORK))
    api.core.call(lambda: first.launch(api.core.jobs["nightly"], int(JAN_1_2027_0900_NEW_YORK)))
    # the agent comes back three years later: one launch for all it missed, at the time it is made
    later = datetime.datetime(2030, 3, 1, tzinfo=datetime.UTC).timestamp()
    restarted = PeriodicLauncher(api.nomad, Clock(later))
    api.core.call(restarted.tick)
    api.core.call(restarted.tick)
    assert _children(api) == [
        f"nightly/periodic-{int(JAN_1_2027_0900_NEW_YORK)}",
        f"nightly/periodic-{int(later)}",
    ]


def test_periodic_force_launches_one_now_and_refuses_what_nomad_refuses(api: Api) -> None:
    _register(api, NIGHTLY % "true")
    before = int(time.time())
    out = api.request("POST", "/v1/job/nightly/periodic/force")
    (child,) = _children(api)
    assert before <= (launch_time("nightly", child) or 0) <= int(time.time())
    assert out["EvalCreateIndex"] == out["Index"] > 0
    placed = api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")
    assert [a["JobID"] for a in placed] == [child]
    assert api.call("POST", "/v1/job/nope/periodic/force") == (500, "job not found\n")
    _register(
        api,
        NIGHTLY.replace('job "nightly"', 'job "off"').replace("periodic {", "periodic {\n enabled = false")
        % "false",
    )
    status, text = api.call("POST", "/v1/job/off/periodic/force")
    assert status == 500 and 'can\'t force run non-tracked job "off"' in text
    assert [r.job.id for r in api.core.runners.values()] == [child]


@pytest.mark.parametrize(
    ("block", "path", "why"),
    [
        ('cron = "0 0 * * * 2027"', "periodic.cron", "6- and 7-field forms"),
        ('cron = "often"', "periodic.cron", "not a valid cron expression"),
        (
            'time_zone = "Mars/Olympus"',
            "periodic.time_zone",
            'Invalid time zone "Mars/Olympus"',
        ),
        ('cron = "@daily"\n crons = ["@hourly"]', "periodic", "Only cron or crons may be used"),
        ("prohibit_overlap = true", "periodic", "Must specify a spec"),
    ],
)
def test_a_periodic_block_nomad_refuses_is_refused_naming_it(
    api: Api, block: str, path: str, why: str
) -> None:
    kept = 'cron             = "0 9 1 1 *"\n' if "time_zone" in block else ""
    hcl = NIGHTLY.replace('time_zone        = "America/New_York"', "")
    hcl = hcl.replace('cron             = "0 9 1 1 *"', kept + block) % "false"
    status, text = api.call("POST", "/v1/jobs/parse", {"JobHCL": hcl})
    assert status == 400 and f"job.nightly.{path}: " in text and why in text, text
    service = (NIGHTLY % "false").replace('"batch"', '"service"')
    status, text = api.call("POST", "/v1/jobs/parse", {"JobHCL": service})
    assert status == 400 and 'Periodic can only be used with "batch" or "sysbatch" scheduler' in text


def test_a_launch_made_twice_in_one_second_registers_its_child_once(api: Api) -> None:
    _register(api, NIGHTLY % "false")
    launcher = PeriodicLauncher(api.nomad, Clock(JAN_1_2027_0900_NEW_YORK))
    first = api.core.call(lambda: launcher.launch(api.core.jobs["nightly"], int(JAN_1_2027_0900_NEW_YORK)))
    again = api.core.call(lambda: launcher.launch(api.core.jobs["nightly"], int(JAN_1_2027_0900_NEW_YORK)))
    assert first.id != again.id and again.placed == ()
    assert len(_children(api)) == 1 and len(api.core.runners) == 1


def test_the_parents_summary_counts_its_children_by_status(api: Api) -> None:
    _register(api, NIGHTLY % "false")
    assert api.request("GET", "/v1/job/nightly/summary")["Children"] == {
        "Pending": 0,
        "Running": 0,
        "Dead": 0,
    }
    launcher = PeriodicLauncher(api.nomad, Clock(JAN_1_2027_0900_NEW_YORK))
    for at in (JAN_1_2027_0900_NEW_YORK, JAN_1_2027_0900_NEW_YORK + 3600):
        api.core.call(lambda at=at: launcher.launch(api.core.jobs["nightly"], int(at)))
    first, second = _children(api)

    def children() -> dict[str, int]:
        return dict(api.request("GET", "/v1/job/nightly/summary")["Children"])

    deadline = time.monotonic() + WAIT
    while children() != {"Pending": 0, "Running": 2, "Dead": 0}:
        assert time.monotonic() < deadline, children()
        time.sleep(0.02)
    assert api.call("DELETE", f"/v1/job/{urllib.parse.quote(first, safe='')}")[0] == 200
    while children() != {"Pending": 0, "Running": 1, "Dead": 1}:
        assert time.monotonic() < deadline, children()
        time.sleep(0.02)
    (stub,) = [j for j in api.request("GET", "/v1/jobs") if j["ID"] == "nightly"]
    assert stub["JobSummary"]["Children"] == {"Pending": 0, "Running": 1, "Dead": 1}
    assert api.request("GET", f"/v1/job/{urllib.parse.quote(second, safe='')}/summary")["Children"] == {
        "Pending": 0,
        "Running": 0,
        "Dead": 0,
    }


def test_a_stopped_periodic_job_launches_nothing_until_it_is_registered_again(api: Api) -> None:
    _register(api, NIGHTLY % "false")
    launcher = PeriodicLauncher(api.nomad, Clock(JAN_1_2027_0900_NEW_YORK - 1))
    api.core.call(launcher.tick)
    assert api.call("DELETE", "/v1/job/nightly")[0] == 200  # `job stop`, not purged: the job is kept
    job = api.request("GET", "/v1/job/nightly")
    assert (job["Stop"], job["Status"]) == (True, "dead")
    launcher.clock = Clock(JAN_1_2027_0900_NEW_YORK + 1)
    api.core.call(launcher.tick)
    assert _children(api) == []
    status, text = api.call("POST", "/v1/job/nightly/periodic/force")
    assert status == 500 and 'can\'t force run non-tracked job "nightly"' in text
    _register(api, NIGHTLY % "false")  # registered again: Nomad's Stop goes, the launches come back
    assert api.request("GET", "/v1/job/nightly")["Stop"] is False
    api.request("POST", "/v1/job/nightly/periodic/force")
    assert len(_children(api)) == 1


def test_a_stopped_parameterized_job_is_not_dispatched(api: Api) -> None:
    assert api.request(
        "PUT", "/v1/jobs", {"Job": api.request("POST", "/v1/jobs/parse", {"JobHCL": BATCH_HCL})}
    )
    assert api.call("DELETE", "/v1/job/example-batch")[0] == 200
    status, text = api.call("POST", "/v1/job/example-batch/dispatch", {"Meta": {"time": "1"}})
    assert (status, text) == (500, 'Specified job "example-batch" is stopped\n')


def test_a_job_registered_while_the_agent_runs_makes_up_no_launch_of_its_old_children(api: Api) -> None:
    _register(api, NIGHTLY % "false")
    old = PeriodicLauncher(api.nomad, Clock(JAN_1_2027_0900_NEW_YORK))
    api.core.call(lambda: old.launch(api.core.jobs["nightly"], int(JAN_1_2027_0900_NEW_YORK)))
    parent = api.core.call(lambda: api.core.jobs.pop("nightly"))  # as if purged
    later = datetime.datetime(2030, 3, 1, tzinfo=datetime.UTC).timestamp()
    running = PeriodicLauncher(api.nomad, Clock(later))
    api.core.call(running.tick)  # the agent's start: no periodic job then
    api.core.call(lambda: api.core.jobs.update(nightly=parent))  # registered again while it runs
    api.core.call(running.tick)
    assert _children(api) == [f"nightly/periodic-{int(JAN_1_2027_0900_NEW_YORK)}"]
    assert running.due["nightly"] == datetime.datetime(2031, 1, 1, 14, 0, tzinfo=datetime.UTC).timestamp()


def test_utc_needs_no_zoneinfo_on_the_node(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    import zoneinfo

    def missing(key: str) -> zoneinfo.ZoneInfo:
        raise zoneinfo.ZoneInfoNotFoundError(f"No time zone found with key {key}")

    monkeypatch.setattr(zoneinfo, "ZoneInfo", missing)  # a node without tzdata
    december = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC).timestamp()
    assert next_launch(Periodic(spec="0 13 * * *"), december) == december + 3600
    utc = (NIGHTLY % "false").replace('time_zone        = "America/New_York"', "")
    assert api.call("POST", "/v1/jobs/parse", {"JobHCL": utc})[0] == 200
    status, text = api.call("POST", "/v1/jobs/parse", {"JobHCL": NIGHTLY % "false"})
    assert status == 400 and 'Invalid time zone "America/New_York"' in text


def test_the_launch_missed_while_the_agent_was_down_keeps_prohibit_overlap(api: Api) -> None:
    """nomad-11052 (PR #16583): the launch a restore makes is skipped while a child still runs; the
    `periodic-restore-ignores-overlap` fault makes it beside the running child."""
    from agent.fieldbugs.bugs import Bugs

    _register(api, NIGHTLY % "true")
    first = PeriodicLauncher(api.nomad, Clock(JAN_1_2027_0900_NEW_YORK))
    api.core.call(lambda: first.launch(api.core.jobs["nightly"], int(JAN_1_2027_0900_NEW_YORK)))
    (child,) = _children(api)
    assert api.core.call(lambda: first.running_children("nightly"))
    a_year_later = datetime.datetime(2028, 1, 1, 14, 0, 30, tzinfo=datetime.UTC).timestamp()
    restarted = PeriodicLauncher(api.nomad, Clock(a_year_later))
    api.core.call(restarted.tick)  # the agent's start: the 2028 launch is due, and skipped
    assert _children(api) == [child]
    faulty = PeriodicLauncher(api.nomad, Clock(a_year_later), Bugs(periodic_restore_ignores_overlap=True))
    api.core.call(faulty.tick)
    assert len(_children(api)) == 2
    api.core.call(faulty.tick)  # later looks keep the rule: no third
    assert len(_children(api)) == 2


def test_a_stopped_periodic_job_is_not_tracked_again_at_the_agents_start(api: Api) -> None:
    """nomad-3201 (PR #3201): the start of the agent leaves a stopped periodic job alone; the
    `periodic-restores-stopped-job` fault tracks it again and it launches on its schedule."""
    from agent.fieldbugs.bugs import Bugs

    _register(api, NIGHTLY % "false")
    assert api.call("DELETE", "/v1/job/nightly")[0] == 200
    for bugs, launched in ((Bugs(), 0), (Bugs(periodic_restores_stopped_job=True), 1)):
        clock = Clock(JAN_1_2027_0900_NEW_YORK - 1)
        launcher = PeriodicLauncher(api.nomad, clock, bugs)
        api.core.call(launcher.tick)  # the agent's start
        clock.now = JAN_1_2027_0900_NEW_YORK + 1
        api.core.call(launcher.tick)
        assert len(_children(api)) == launched, bugs
