"""The harness's reading of Nomad's api.Allocation and of a node's task handles
(e2e.harness.nomadview), against the agent's own Nomad view of the same alloc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

from agent.nomadapi import structs
from agent.state.store import Event
from e2e.harness.nomadview import HANDLES_SCRIPT, Handles, alloc_events, alloc_view, parse_handles
from lab.waits import wait_until

A1 = "11111111-2222-3333-4444-555555555555"
A2 = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
C = "c" * 64


def _view(tasks: dict[str, str]) -> dict[str, Any]:
    """The agent's alloc view (agent.runner.view) of a bridge alloc with a mapped port."""
    return {
        "id": A1,
        "job": "web",
        "group": "g",
        "status": "running",
        "desired": "run",
        "reason": "",
        "replaced_by": A2,
        "replaces": None,
        "created": 1700000000.25,
        "network": {
            "mode": "bridge",
            "address": "172.26.64.7",
            "ports": [{"label": "http", "host": 20001, "to": 8080}],
            "pause_container": "p" * 64,
        },
        "tasks": {
            name: {"driver": "docker", "state": state, "restarts": 2, "failed": False, "container": C}
            for name, state in tasks.items()
        },
    }


def _nomad(view: dict[str, Any], events: list[Event], *, stub: bool = False) -> dict[str, Any]:
    from agent.nomadapi.structs import events_by_task

    common: dict[str, Any] = {
        "events_by_task": events_by_task(events, list(view["tasks"])),
        "node_id": "n",
        "node_name": "client1",
        "namespace": "default",
        "create_index": 1,
        "modify_index": 2,
        "alloc_modify_index": 2,
        "modify_time": 1700000001.0,
    }
    if stub:
        return structs.alloc_stub(view, with_resources=True, **common)
    return structs.alloc_json(view, job=None, **common)


def _ev(seq: int, t: float, task: str, type_: str, msg: str = "", **details: Any) -> Event:
    return Event(seq, t, A1, task, type_, msg or type_, dict(details))


def test_the_view_the_suites_read_comes_back_from_nomads_allocation_and_the_nodes_handles() -> None:
    view = _view({"web": "running"})
    for stub in (False, True):
        a = alloc_view(_nomad(view, [], stub=stub), Handles({"web": C}, "p" * 64))
        assert a["id"] == A1 and a["job"] == "web" and a["group"] == "g"
        assert a["status"] == "running" and a["desired"] == "run" and a["replaced_by"] == A2
        assert abs(a["created"] - 1700000000.25) < 1e-6
        assert a["network"] == {
            "mode": "bridge",
            "address": "172.26.64.7",
            "ports": [{"label": "http", "host": 20001, "to": 8080}],
            "pause_container": "p" * 64,
        }, stub
        assert a["tasks"]["web"] == {
            "driver": "docker",
            "state": "running",
            "restarts": 2,
            "failed": False,
            "container": C,
        }
    # No handle on the node (the task is gone): no container, not a stale one
    assert alloc_view(_nomad(view, []))["tasks"]["web"]["container"] is None
    assert alloc_view(_nomad(view, []))["network"]["pause_container"] is None


def test_an_alloc_wide_event_is_one_event_without_a_task_again() -> None:
    view = _view({"a": "running", "b": "running"})
    events = [
        _ev(1, 10.0, "a", "Started", cause="first start"),
        _ev(2, 10.5, "b", "Started", cause="first start"),
        _ev(3, 11.0, "", "Restored", "reattached"),
        _ev(4, 12.0, "a", "Terminated", "Exit Code: 1"),
    ]
    got = alloc_events(_nomad(view, events))
    assert [(e["task"], e["type"]) for e in got] == [
        ("a", "Started"),
        ("b", "Started"),
        ("", "Restored"),
        ("a", "Terminated"),
    ]
    assert got[0]["details"] == {"cause": "first start"} and got[2]["message"] == "reattached"
    assert [round(e["time"], 3) for e in got] == [10.0, 10.5, 11.0, 12.0]
    # With one task Nomad's view cannot tell: the event stays the task's (accounting knows the type)
    one = alloc_events(_nomad(_view({"a": "running"}), [events[0], events[2]]))
    assert [(e["task"], e["type"]) for e in one] == [("a", "Started"), ("a", "Restored")]


def test_handles_are_found_by_nomads_names_and_the_task_environment() -> None:
    out = {
        "containers": [
            [C, f"web-{A1}", "running", "t"],
            ["d" * 64, f"nomad_init_{A1}", "running", "t"],
            ["e" * 64, f"fieldlab_init_{A2}", "exited", "t"],
            ["f" * 64, "some-other-container", "running", "t"],
            ["9" * 64, f"sidecar-{A2}", "exited", "t"],
        ],
        "procs": [
            [300, A2, "worker", 500],  # an `alloc exec` session, started later
            [200, A2, "worker", 100],
            [400, A1, "web", 50],  # the docker task's own process: its container wins
        ],
    }
    got = parse_handles("noise\n" + json.dumps(out))
    assert got[A1] == Handles({"web": C}, "d" * 64)
    assert got[A2] == Handles({"sidecar": "9" * 64, "worker": "200"}, "e" * 64)
    assert parse_handles("") == {} and parse_handles("not json") == {}


def test_the_handles_script_runs_and_finds_a_process_by_its_environment() -> None:
    """The task's process is a child of the group leader the driver started (exec: an `unshare`
    without the task's environment): the handle is the group, what the harness signals."""
    leader = subprocess.Popen(
        ["sh", "-c", 'env -i NOMAD_ALLOC_ID="$1" NOMAD_TASK_NAME=t sleep 30 & wait', "sh", A1],
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    try:

        def found() -> tuple[dict[str, str] | None, str]:
            got = subprocess.run(
                [sys.executable, "-c", HANDLES_SCRIPT], check=False, capture_output=True, text=True
            )
            h = parse_handles(got.stdout).get(A1)
            return (h.tasks if h else None), got.stdout[-200:]

        assert wait_until(found, timeout=10, what="the child's environment") == {"t": str(leader.pid)}
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_a_lifecycle_task_carries_its_hook_from_the_job() -> None:
    """The alloc health check reads a finished prestart task as healthy: the view says which tasks
    are lifecycle tasks (api.TaskLifecycle of the alloc's Job), and only those carry it."""
    job = {
        "TaskGroups": [
            {
                "Name": "g",
                "Tasks": [
                    {"Name": "init", "Driver": "exec", "Lifecycle": {"Hook": "prestart", "Sidecar": False}},
                    {"Name": "log", "Driver": "exec", "Lifecycle": {"Hook": "prestart", "Sidecar": True}},
                    {"Name": "web", "Driver": "exec", "Lifecycle": None},
                ],
            }
        ]
    }
    states = {"init": {"State": "dead"}, "log": {"State": "running"}, "web": {"State": "running"}}
    a = alloc_view({"ID": A1, "TaskGroup": "g", "Job": job, "TaskStates": states})
    assert a["tasks"]["init"]["lifecycle"] == {"hook": "prestart", "sidecar": False}
    assert a["tasks"]["log"]["lifecycle"] == {"hook": "prestart", "sidecar": True}
    assert "lifecycle" not in a["tasks"]["web"]
