"""What Nomad's clients read of the node list and the client endpoints (issue 51): `GET /v1/nodes`
with `?resources=true` and `?os=true` (api.NodeListStub's omitempty fields), the stats of a stopped
alloc, the fs endpoints' error codes, an invalid signal's text and the events of `alloc restart`.
On the real Core and loop with a fake node (no root, no docker)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeNode
from tests.test_routes_ops import ONE_TASK, Api, start_api

WAIT = 5.0  # seconds for the loop to act


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def test_the_node_list_writes_resources_and_os_only_when_asked(api: Api) -> None:
    (plain,) = api.request("GET", "/v1/nodes")
    assert not {"NodeResources", "ReservedResources", "Attributes"} & set(plain)
    (full,) = api.request("GET", "/v1/nodes?resources=true&os=true")
    assert set(full["NodeResources"]) >= {"Cpu", "Memory", "Disk", "MinDynamicPort", "MaxDynamicPort"}
    assert set(full["ReservedResources"]) == {"Cpu", "Memory", "Disk", "Networks"}
    assert list(full["Attributes"]) == ["os.name"]  # Node.Stub: the os.name attribute alone
    (one,) = api.request("GET", "/v1/nodes?resources=1")  # strconv.ParseBool's spellings
    assert "NodeResources" in one and "Attributes" not in one
    status, text = api.call("GET", "/v1/nodes?os=maybe")
    assert status == 400 and '"os"' in text, text


def test_a_stopped_allocs_stats_are_zero_until_it_is_collected(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    assert api.call("DELETE", "/v1/job/web")[0] == 200
    deadline = time.monotonic() + WAIT
    while api.request("GET", f"/v1/allocation/{alloc}")["ClientStatus"] != "complete":
        assert time.monotonic() < deadline, "the alloc did not stop"
        time.sleep(0.02)
    status, out = api.call("GET", f"/v1/client/allocation/{alloc}/stats")
    assert status == 200, out
    assert (out["Tasks"], out["Timestamp"]) == ({}, 0)
    assert (
        out["ResourceUsage"]["MemoryStats"]["RSS"] == 0 and out["ResourceUsage"]["CpuStats"]["Percent"] == 0
    )
    assert api.call("GET", f"/v1/client/allocation/{alloc}/stats?task=srv")[0] == 200
    assert api.call("PUT", f"/v1/client/allocation/{alloc}/gc")[0] == 200
    assert api.call("GET", f"/v1/client/allocation/{alloc}/stats")[0] == 404  # collected: unknown


def test_fs_errors_have_nomads_codes_route_by_route(api: Api) -> None:
    """Nomad's FileSystem.List/Stat answer a missing path 404; cat, readat and stream go through
    FileSystem.Stream, which answers every Stat error of its path 400 (a directory too)."""
    (alloc,) = api.submit(ONE_TASK)
    alloc_dir = api.node.root / "data" / "alloc" / alloc
    (alloc_dir / "alloc" / "data").mkdir(parents=True, exist_ok=True)
    (alloc_dir / "alloc" / "data" / "f.txt").write_text("hi\n")
    missing = "path=/alloc/data/nope.txt"
    assert api.call("GET", f"/v1/client/fs/ls/{alloc}?path=/alloc/nope")[0] == 404
    assert api.call("GET", f"/v1/client/fs/stat/{alloc}?{missing}")[0] == 404
    assert api.call("GET", f"/v1/client/fs/cat/{alloc}?{missing}")[0] == 400
    assert api.call("GET", f"/v1/client/fs/readat/{alloc}?{missing}&offset=0&limit=1")[0] == 400
    assert api.call("GET", f"/v1/client/fs/stream/{alloc}?{missing}&follow=false")[0] == 400
    status, text = api.call("GET", f"/v1/client/fs/stream/{alloc}?path=/alloc/data&follow=false")
    assert (status, text) == (400, 'file "/alloc/data" is a directory\n')
    assert api.call("GET", f"/v1/client/fs/stat/{alloc}") == (400, "must provide a file name\n")
    assert api.call("GET", f"/v1/client/fs/ls/{alloc}")[0] == 200  # ls: "/" when no path is given
    assert api.call("GET", f"/v1/client/fs/stream/{alloc}?path=/alloc/data/f.txt&follow=false")[0] == 200
    assert api.call("GET", "/v1/client/fs/stat/0123abcd?path=/alloc")[0] == 404  # an unknown alloc


def test_an_invalid_signal_is_refused_in_nomads_words(api: Api) -> None:
    """Nomad's docker driver: consul-template's signals.Parse error wrapped as `failed to parse
    signal: ...`; without a task, the alloc runner's multierror naming each task."""
    (alloc,) = api.submit(ONE_TASK)
    url = f"/v1/client/allocation/{alloc}/signal"
    valid = (
        '["SIGABRT" "SIGALRM" "SIGBUS" "SIGCONT" "SIGFPE" "SIGHUP" "SIGILL" "SIGINT" "SIGIO" "SIGIOT" '
        '"SIGKILL" "SIGNULL" "SIGPIPE" "SIGPROF" "SIGQUIT" "SIGSEGV" "SIGSTOP" "SIGSYS" "SIGTERM" '
        '"SIGTRAP" "SIGTSTP" "SIGTTIN" "SIGTTOU" "SIGUSR1" "SIGUSR2" "SIGWINCH" "SIGXCPU" "SIGXFSZ"]'
    )
    parsed = f"failed to parse signal: invalid signal %!q(<nil>) - valid signals are {valid}"
    status, text = api.call("POST", url, {"Signal": "INVALID-SIGNAL", "Task": "srv"})
    assert (status, text) == (400, parsed + "\n")
    status, text = api.call("POST", url, {"Signal": "INVALID-SIGNAL"})
    # the multierror's own trailing blank lines: the agent ends every error text with one newline
    assert (status, text) == (400, f"1 error occurred:\n\t* Failed to signal task: srv, err: {parsed}\n")
    assert api.call("POST", url, {"Signal": "sigusr1"}) == (200, {})  # looked up upper-cased


def _events_after_restart(api: Api, alloc: str, task: str) -> list[tuple[str, str]]:
    """The task's events from its "Restart Signaled" on, once it has started again."""
    deadline = time.monotonic() + WAIT
    while True:
        events = api.request("GET", f"/v1/allocation/{alloc}")["TaskStates"][task]["Events"]
        types = [e["Type"] for e in events]
        if "Restart Signaled" in types and types.count("Started") >= 2:
            at = types.index("Restart Signaled")
            return [(e["Type"], e["DisplayMessage"]) for e in events[at:]]
        assert time.monotonic() < deadline, types
        time.sleep(0.02)


@pytest.mark.parametrize("body", [{}, {"TaskName": "srv"}, {"AllTasks": True}])
def test_alloc_restart_tells_terminated_and_restarting_before_started(
    api: Api, body: dict[str, object]
) -> None:
    """Nomad's restartImpl: "Restart Signaled", the kill's exit as "Terminated", the restart
    tracker's triggered restart as "Restarting" (no delay), then "Started"."""
    (alloc,) = api.submit(ONE_TASK)
    assert api.call("POST", f"/v1/client/allocation/{alloc}/restart", body) == (200, {})
    told = _events_after_restart(api, alloc, "srv")
    assert [t for t, _ in told] == ["Restart Signaled", "Terminated", "Restarting", "Started"], told
    assert told[1][1].startswith("Exit Code: ") and told[2][1] == "Task restarting in 0s"
    state = api.request("GET", f"/v1/allocation/{alloc}")["TaskStates"]["srv"]
    assert (state["State"], state["Restarts"], state["FinishedAt"]) == ("running", 1, "0001-01-01T00:00:00Z")
