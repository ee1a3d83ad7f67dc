"""Nomad's API routes behind `fieldlab-agent job status|inspect`, `alloc logs|exec|signal|restart` and
`node status`, on the real Core and loop with a fake node (no root, no docker): what each answers,
and that every bad input is a 4xx naming what and where, never a traceback."""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
import time
import types
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.api import handler as agent_api
from agent.api.handler import Streamed
from agent.api.server import ApiServer
from agent.client.core import Core
from agent.command.config import Config, TLSConfig
from agent.drivers.base import TaskHandle
from agent.drivers.session import ProcessSession
from agent.errors import Conflict
from agent.nomadapi import clientfs
from agent.nomadapi.wsexec import exec_stream
from agent.structs.records import DesiredStatus
from lab.waits import wait_until
from tests.agent_lab import NODE, NomadRoutes, alloc_events, run_job, stream_frames
from tests.fakes import FakeNode
from tests.pki import TestCA
from tests.wsclient import WsClient

ONE_TASK = """
job "web" {
  group "g" {
    task "srv" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""

TWO_TASKS = """
job "pair" {
  type = "batch"
  group "g" {
    count = 2
    task "a" {
      driver = "docker"
      config { image = "x" }
    }
    task "b" {
      driver = "docker"
      config { image = "x" }
    }
  }
}
"""

OPERATOR = "controller.operator.fieldlab"


class Api(NomadRoutes):
    def __init__(self, node: FakeNode, core: Core) -> None:
        super().__init__(core)
        self.node = node

    def submit(self, spec: str) -> list[str]:
        out = self.core.call(lambda: self.core.job_registry.submit(spec, "hcl"))
        return list(out["allocs"])

    def alloc_ids(self, target: str) -> list[str]:
        status, out = self.call("GET", target)
        assert status == 200, out
        return sorted(a["ID"] for a in out)


def start_api(node: FakeNode, *, restore: bool = False) -> tuple[Core, Api]:
    """The node's Core on a loop thread of its own (restored first when asked) and its routes."""
    core = node.core()
    if restore:
        core.restorer.restore()
    threading.Thread(target=core.loop.run, daemon=True).start()
    return core, Api(node, core)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    core, routes = start_api(FakeNode(tmp_path))
    yield routes
    core.stop()


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert all(r.exc_info is None and r.levelno < logging.ERROR for r in caplog.records)


# -- GET /v1/job/<id> (+ /summary, /allocations, /submission), /v1/jobs, /v1/node/<id>


def test_a_job_is_answered_with_its_groups_summary_allocs_spec_and_submission(api: Api) -> None:
    allocs = api.submit(TWO_TASKS)
    status, job = api.call("GET", "/v1/job/pair")
    assert status == 200
    assert (job["ID"], job["Type"], job["Status"]) == ("pair", "batch", "running")
    assert [(g["Name"], g["Count"]) for g in job["TaskGroups"]] == [("g", 2)]
    tasks = job["TaskGroups"][0]["Tasks"]
    assert [(t["Name"], t["Driver"]) for t in tasks] == [("a", "docker"), ("b", "docker")]
    assert tasks[0]["Config"] == {"image": "x"}
    summary = api.request("GET", "/v1/job/pair/summary")["Summary"]
    assert summary["g"]["Running"] == 2 and summary["g"]["Failed"] == 0
    assert api.alloc_ids("/v1/job/pair/allocations") == sorted(allocs)
    submission = api.request("GET", "/v1/job/pair/submission?version=0")
    assert submission["Source"] == TWO_TASKS and submission["Format"] == "hcl2"
    assert api.call("GET", "/v1/job/pair/submission?version=1") == (404, "job source not found\n")
    assert api.call("GET", "/v1/job/pair/submission")[0] == 400  # Nomad's: the version is required
    listed = api.request("GET", "/v1/jobs")
    assert [(j["ID"], j["Type"], j["JobSummary"]["Summary"]["g"]["Running"]) for j in listed] == [
        ("pair", "batch", 2)
    ]


def test_a_registers_evaluation_lists_the_allocs_it_placed_however_late_it_was_made(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI's fleet storm: the eval was made seconds after its allocs and listed none (chosen by time).
    It lists what it placed; the same job again places nothing, as Nomad's no-op evaluation."""
    from agent.nomadapi import node as nomad_node

    real = time.time
    late = types.SimpleNamespace(time=lambda: real() + 5.0)  # the node module's clock only
    monkeypatch.setattr(nomad_node, "time", late)  # the eval made 5 s after its allocs
    placed = run_job(api.request, TWO_TASKS)
    assert len(placed) == 2 and sorted(placed) == api.alloc_ids("/v1/job/pair/allocations")
    assert run_job(api.request, TWO_TASKS) == [], "the same job again placed nothing"


def test_a_stopped_job_is_dead_and_an_unknown_one_is_a_404(api: Api) -> None:
    api.submit(ONE_TASK)
    assert api.call("DELETE", "/v1/job/web")[0] == 200
    assert api.request("GET", "/v1/job/web")["Status"] == "dead"
    assert api.call("GET", "/v1/job/nope") == (404, "job not found\n")
    assert api.call("DELETE", "/v1/job/nope") == (404, "job not found\n")
    assert api.request("GET", "/v1/job/w%65b")["ID"] == "web"  # quoted in the path: read unquoted


def test_the_node_lists_its_allocs_and_says_each_driver_is_healthy(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    status, node = api.call("GET", f"/v1/node/{NODE.id}")
    assert status == 200
    assert node["Datacenter"] == "dc1" and node["Status"] == "ready"
    assert set(node["Drivers"]) == {"docker", "exec"}
    assert all(d["Healthy"] for d in node["Drivers"].values())
    on_node = api.request("GET", f"/v1/node/{NODE.id}/allocations")
    assert [(a["ID"], a["ClientStatus"]) for a in on_node] == [(alloc, "running")]
    assert len(api.request("GET", "/v1/jobs")) == 1


# -- logs: GET /v1/client/fs/logs/<alloc>?task=&type= (StreamFrames, or the bytes with plain=true)


def _logs_dir(api: Api, alloc: str) -> Path:
    """alloc/<id>/alloc/logs, where a process task's logmon writes <task>.<stream>.N"""
    d = api.node.root / "data" / "alloc" / alloc / "alloc" / "logs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _log_frames(api: Api, alloc: str, query: str) -> list[dict[str, Any]]:
    status, data = api.call("GET", f"/v1/client/fs/logs/{alloc}?{query}")
    assert status == 200, data
    return stream_frames(data)


def test_logs_of_a_task_from_an_offset_in_frames(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    (alloc,) = api.submit(ONE_TASK)
    logs = _logs_dir(api, alloc)
    (logs / "srv.stdout.0").write_bytes(b"hello\nworld\n")
    (logs / "srv.stderr.0").write_bytes(b"\xffoops\n")
    (frame,) = _log_frames(api, alloc[:8], "task=srv&type=stdout")
    assert frame["Data"] == b"hello\nworld\n" and frame["File"] == "alloc/logs/srv.stdout.0"
    assert frame["Offset"] == 12  # where the data ends in its file, as Nomad's streamFile sends it
    (frame,) = _log_frames(api, alloc, "task=srv&type=stdout&offset=6")
    assert frame["Data"] == b"world\n"
    (frame,) = _log_frames(api, alloc, "task=srv&type=stderr")
    assert frame["Data"] == b"\xffoops\n"  # bytes as written, not decoded
    (frame,) = _log_frames(api, alloc, "task=srv&type=stdout&offset=6&origin=end")
    assert frame["Data"] == b"world\n"
    assert api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stderr&plain=true") == (
        200,
        b"\xffoops\n",
    )
    monkeypatch.setattr(clientfs, "FRAME_BYTES", 5)
    frames = _log_frames(api, alloc, "task=srv&type=stdout")
    assert [f["Data"] for f in frames] == [b"hello", b"\nworl", b"d\n"]


def test_a_follow_sends_new_bytes_as_they_come(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    out_file = _logs_dir(api, alloc) / "srv.stdout.0"
    out_file.write_bytes(b"one\n")

    def later() -> None:
        time.sleep(0.5)
        with out_file.open("ab") as f:
            f.write(b"two\n")

    answer = api.answer("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stdout&offset=4&follow=true")
    assert isinstance(answer, Streamed) and answer.status == 200
    threading.Thread(target=later, daemon=True).start()
    t0 = time.monotonic()
    try:
        got = next(c for c in answer.chunks if c != b"{}")  # heartbeats until the bytes come
    finally:
        answer.close()
    assert stream_frames(got)[0]["Data"] == b"two\n"
    assert 0.3 < time.monotonic() - t0 < 4.0


def test_rotated_files_read_as_one_log_as_nomads_client_reads_them(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    logs = _logs_dir(api, alloc)
    for idx, data in ((3, b"aaaa\n"), (4, b"bbbb\n"), (5, b"cc\n")):  # 0-2 purged by the rotation
        (logs / f"srv.stdout.{idx}").write_bytes(data)
    frames = _log_frames(api, alloc, "task=srv&type=stdout")
    assert [(f["File"], f["Data"], f["Offset"]) for f in frames] == [
        ("alloc/logs/srv.stdout.3", b"aaaa\n", 5),
        ("alloc/logs/srv.stdout.4", b"bbbb\n", 5),
        ("alloc/logs/srv.stdout.5", b"cc\n", 3),
    ]
    # an offset from the start counts over the files present; back from the end, too
    assert [f["Data"] for f in _log_frames(api, alloc, "task=srv&type=stdout&offset=7")] == [b"bb\n", b"cc\n"]
    assert [f["Data"] for f in _log_frames(api, alloc, "task=srv&type=stdout&origin=end&offset=5")] == [
        b"b\n",
        b"cc\n",
    ]
    plain = api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stdout&plain=true")
    assert plain == (200, b"aaaa\nbbbb\ncc\n")
    (logs / "web.stdout.9").write_bytes(b"another task's\n")  # not this task's: never read
    assert b"another" not in api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stdout&plain=true")[1]


def test_a_follow_goes_on_into_the_next_file_when_logmon_rotates(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    logs = _logs_dir(api, alloc)
    (logs / "srv.stdout.0").write_bytes(b"first\n")

    def rotate() -> None:
        time.sleep(0.5)
        (logs / "srv.stdout.1").write_bytes(b"second\n")

    answer = api.answer("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stdout&follow=true")
    assert isinstance(answer, Streamed) and answer.status == 200
    threading.Thread(target=rotate, daemon=True).start()
    try:
        chunks = (c for c in answer.chunks if c != b"{}")
        got = [stream_frames(next(chunks))[0], stream_frames(next(chunks))[0]]
    finally:
        answer.close()
    assert [(f["File"], f["Data"]) for f in got] == [
        ("alloc/logs/srv.stdout.0", b"first\n"),
        ("alloc/logs/srv.stdout.1", b"second\n"),
    ]


def test_a_log_that_is_a_symlink_or_a_fifo_is_not_read(api: Api, tmp_path: Path) -> None:
    (alloc,) = api.submit(ONE_TASK)
    logs = _logs_dir(api, alloc)
    secret = tmp_path / "secret"
    secret.write_text("agent secret")
    (logs / "srv.stdout.0").symlink_to(secret)  # a task can write alloc/logs: its links are not ours
    os.mkfifo(logs / "srv.stderr.0")
    status, out = api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stdout")
    assert (status, out) == (200, b"")
    status, out = api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stderr&plain=true")
    assert (status, out) == (200, b"")  # and nothing blocked on the FIFO
    # the logs dir itself swapped for a link: refused, naming why
    os.rename(logs, logs.with_name("moved"))
    logs.symlink_to(tmp_path)
    status, out = api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stdout")
    assert status == 400 and "symlink" in out and "agent secret" not in out


def test_a_task_that_never_wrote_has_empty_logs(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    assert api.call("GET", f"/v1/client/fs/logs/{alloc}?task=srv&type=stderr") == (200, b"")


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("/v1/client/fs/logs/XYZ?task=srv&type=stdout", 404, "alloc not found"),
        ("/v1/client/fs/logs/a?task=srv&type=stdout", 400, "at least 2"),
        ("/v1/client/fs/logs/--?task=srv&type=stdout", 404, "alloc not found"),  # a 2-character prefix
        ("/v1/client/fs/logs/{alloc}?type=stdout", 400, "must include task name"),
        ("/v1/client/fs/logs/{alloc}?task=srv", 400, "must include type as stdout or stderr"),
        ("/v1/client/fs/logs/{alloc}?task=srv&type=stdin", 400, "type='stdin': stdout or stderr"),
        ("/v1/client/fs/logs/{alloc}?task=srv&type=stdout&offset=-1", 400, "offset=-1: a byte count"),
        ("/v1/client/fs/logs/{alloc}?task=srv&type=stdout&offset=x", 400, "offset='x': a whole number"),
        ("/v1/client/fs/logs/{alloc}?task=srv&type=stdout&origin=middle", 400, "origin='middle'"),
        ("/v1/client/fs/logs/{alloc}?task=srv&type=stdout&follow=maybe", 400, "follow='maybe': true or"),
        ("/v1/client/fs/logs/{alloc}?task=nope&type=stdout", 400, 'unknown task name "nope"'),
        ("/v1/client/fs/logs/ffffffff?task=srv&type=stdout", 404, "alloc not found"),
    ],
)
def test_bad_log_requests_are_4xx_naming_what_and_where(
    api: Api, caplog: pytest.LogCaptureFixture, path: str, status: int, needle: str
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    with caplog.at_level(logging.DEBUG, logger="agent"):
        got, out = api.call("GET", path.format(alloc=alloc))
    assert got == status and needle in out, out
    _no_traceback(caplog)


def test_logs_of_a_group_of_two_tasks_are_each_tasks_own(api: Api) -> None:
    alloc = api.submit(TWO_TASKS)[0]
    assert api.call("GET", f"/v1/client/fs/logs/{alloc}?type=stdout")[0] == 400  # which task: Nomad asks
    assert api.call("GET", f"/v1/client/fs/logs/{alloc}?task=b&type=stdout") == (200, b"")  # fake docker


# -- exec: `nomad alloc exec` over a websocket (GET /v1/client/allocation/<id>/exec)


@pytest.fixture
def served(api: Api, tmp_path: Path) -> Iterator[Callable[[str], WsClient]]:
    """The routes and the exec stream on an mTLS API server; opens a websocket at a path."""
    ca = TestCA(tmp_path)
    srv, op = ca.issue("client1.agent.fieldlab", server=True), ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=0,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
    )
    server = ApiServer(cfg, {}, api.table, [exec_stream(api.nomad)])
    server.start()
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    ctx.load_cert_chain(str(op.cert), str(op.key))
    sockets: list[WsClient] = []

    def open_ws(path: str) -> WsClient:
        ws = WsClient("127.0.0.1", server.port, path, ctx, timeout=10)
        sockets.append(ws)
        return ws

    yield open_ws
    for ws in sockets:
        ws.close()
    server.stop(5)


def _exec_path(alloc: str, command: Any, task: str | None = "srv") -> str:
    query = {"command": command if isinstance(command, str) else json.dumps(command), "tty": "false"}
    if task is not None:
        query["task"] = task
    return f"/v1/client/allocation/{alloc}/exec?{urllib.parse.urlencode(query)}"


def test_exec_runs_through_the_driver_off_the_loop_and_answers_code_and_output(
    api: Api, served: Callable[[str], WsClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    loop = api.core.call(threading.get_ident)
    handle = api.core.call(lambda: api.core.allocs.runner(alloc).state.handle("srv"))
    seen: list[tuple[str, list[str], int, dict[str, str]]] = []

    def session(
        h: TaskHandle,
        argv: list[str],
        *,
        tty: bool,
        rows: int = 24,
        cols: int = 80,
        env: Mapping[str, str] | None = None,
    ) -> ProcessSession:
        seen.append((h.id, argv, threading.get_ident(), dict(env or {})))
        script = 'printf "hello from the task\\n"; echo "$0" >&2; exit 3'
        return ProcessSession(["/bin/sh", "-c", script, argv[-1]], None, "/", tty=tty)

    monkeypatch.setattr(api.node.exec, "exec_session", session)
    ws = served(_exec_path(alloc[:8], ["cat", "/local/x"]))
    assert ws.accepted, (ws.head, ws.body)
    got = ws.messages()
    out = b"".join(base64.b64decode(m["stdout"]["data"]) for m in got if "stdout" in m)
    err = b"".join(base64.b64decode(m["stderr"]["data"]) for m in got if "stderr" in m)
    assert (out, err) == (b"hello from the task\n", b"/local/x\n")
    assert got[-1] == {"exited": True, "result": {"exit_code": 3}}
    ((handle_id, argv, thread, env),) = seen
    assert handle is not None and handle_id == handle.id
    assert argv == ["cat", "/local/x"] and thread != loop, "the command started on the main loop"
    assert env.get("NOMAD_ALLOC_ID") == alloc and env.get("NOMAD_TASK_NAME") == "srv", env


def test_exec_that_cannot_start_is_refused_saying_why(api: Api, served: Callable[[str], WsClient]) -> None:
    (alloc,) = api.submit(ONE_TASK)
    ws = served(_exec_path(alloc, ["ls"]))  # the fake driver's session cannot start a command
    assert ws.status == 409 and b"the fake driver runs no commands" in ws.body, (ws.head, ws.body)


@pytest.mark.parametrize(
    ("command", "task", "status", "needle"),
    [
        ("ls -l", "srv", 400, "command must be a JSON list of strings"),
        ([], "srv", 400, "command must be a JSON list"),
        (["ls", 3], "srv", 400, "command must be a JSON list"),
        (["ls", ""], "srv", 400, "command must be a JSON list"),
        ({"cmd": ["ls"]}, "srv", 400, "command must be a JSON list"),
        (["ls"], None, 400, "missing task name"),
        (["ls"], "nope", 404, "task 'nope' not found in alloc"),
    ],
)
def test_bad_exec_requests_are_4xx(
    api: Api,
    served: Callable[[str], WsClient],
    caplog: pytest.LogCaptureFixture,
    command: Any,
    task: str | None,
    status: int,
    needle: str,
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    with caplog.at_level(logging.DEBUG, logger="agent"):
        ws = served(_exec_path(alloc, command, task))
    assert ws.status == status and needle in ws.body.decode(), (ws.head, ws.body)
    _no_traceback(caplog)


def test_exec_in_a_task_that_is_not_running_is_a_409(api: Api, served: Callable[[str], WsClient]) -> None:
    (alloc,) = api.submit(ONE_TASK)
    api.call("DELETE", "/v1/job/web")
    ws = served(_exec_path(alloc, ["ls"]))
    assert ws.status == 409 and b"is not running" in ws.body, (ws.head, ws.body)


# -- signal and restart: POST /v1/client/allocation/<id>/signal|restart


def test_signal_without_a_task_reaches_every_running_task(api: Api) -> None:
    alloc = api.submit(TWO_TASKS)[0]
    status, out = api.call("POST", f"/v1/client/allocation/{alloc}/signal", {"Signal": "SIGHUP"})
    assert status == 200 and out == {}
    assert [s for _, s in api.node.docker.signals] == ["SIGHUP", "SIGHUP"]
    handle_b = api.core.call(lambda: api.core.allocs.runner(alloc).state.handle("b"))
    status, out = api.call(
        "POST", f"/v1/client/allocation/{alloc}/signal", {"Signal": "SIGUSR1", "Task": "b"}
    )
    assert status == 200 and handle_b is not None
    assert api.node.docker.signals[2:] == [(handle_b.id, "SIGUSR1")]


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/client/allocation/{alloc}/signal", {"Signal": "HUP"}, 400, "invalid signal %!q(<nil>)"),
        ("/v1/client/allocation/{alloc}/signal", {"Signal": 1}, 400, "is not a signal name"),
        ("/v1/client/allocation/{alloc}/signal", {"Signal": "SIGHUP", "Task": 5}, 400, '"Task" must be'),
        ("/v1/client/allocation/{alloc}/signal", {"Signal": "SIGHUP", "Task": "x"}, 404, "'x' not found"),
        ("/v1/client/allocation/{alloc}/signal", b"[1]", 400, "JSON object"),
        ("/v1/client/allocation/{alloc}/restart", {"TaskName": ["a"]}, 400, '"TaskName" must be a task'),
        ("/v1/client/allocation/{alloc}/restart", {"TaskName": "x"}, 404, "task not found in alloc"),
        ("/v1/client/allocation/{alloc}/restart", {"AllTasks": "yes"}, 400, '"AllTasks" must be true or'),
        (
            "/v1/client/allocation/{alloc}/restart",
            {"AllTasks": True, "TaskName": "srv"},
            400,
            "task name cannot be set when restarting all tasks",
        ),
        ("/v1/client/allocation/a/restart", {}, 400, "at least 2"),
        ("/v1/client/allocation/--/restart", {}, 404, "alloc not found"),
        ("/v1/client/allocation/NOTHEX/signal", {"Signal": "SIGHUP"}, 404, "alloc not found"),
    ],
)
def test_bad_signal_and_restart_requests_are_4xx(
    api: Api, caplog: pytest.LogCaptureFixture, path: str, body: Any, status: int, needle: str
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    with caplog.at_level(logging.DEBUG, logger="agent"):
        got, out = api.call("POST", path.format(alloc=alloc), body)
    assert got == status and needle in out, out
    _no_traceback(caplog)


def test_restart_without_a_task_restarts_every_running_task(api: Api) -> None:
    alloc = api.submit(TWO_TASKS)[0]
    before = len(api.node.docker.starts)
    assert api.call("POST", f"/v1/client/allocation/{alloc}/restart", {}) == (200, {})

    def restarted() -> bool:
        return api.core.call(lambda: len(api.node.docker.starts)) >= before + 2

    deadline = time.monotonic() + 5
    while not restarted() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert restarted()
    states = api.request("GET", f"/v1/allocation/{alloc}")["TaskStates"]
    signaled = [
        [e["DisplayMessage"] for e in states[t]["Events"] if e["Type"] == "Restart Signaled"] for t in "ab"
    ]
    assert signaled == [["User requested running tasks to restart"]] * 2, states


STATIC = """
job "JOB" {
  group "g" {
    network {
      port "http" { static = 8088 }
    }
    task "srv" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


def test_a_static_port_held_by_another_alloc_is_refused_naming_the_holder(api: Api) -> None:
    (alloc,) = api.submit(STATIC.replace("JOB", "first"))
    with pytest.raises(Conflict, match=rf"static port 8088 held by alloc {alloc[:8]} of job first"):
        api.submit(STATIC.replace("JOB", "second"))
    # a stop in progress: desired "stop" recorded, its tasks still being killed
    api.core.call(lambda: api.core.allocs.runner(alloc).state.save(desired=DesiredStatus.STOP))
    with pytest.raises(
        Conflict, match=rf"held by alloc {alloc[:8]}, which is stopping: run the job again once"
    ):
        api.submit(STATIC.replace("JOB", "second"))


def test_checks_of_an_alloc_without_nomad_checks_are_empty_and_an_unknown_alloc_is_404(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    assert api.call("GET", f"/v1/client/allocation/{alloc}/checks") == (200, {})
    assert api.call("GET", "/v1/client/allocation/0123abcd/checks")[0] == 404


def test_a_dead_alloc_has_nothing_to_signal_or_restart(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    api.call("DELETE", "/v1/job/web")
    signal = f"/v1/client/allocation/{alloc}/signal"
    assert api.call("POST", signal, {"Signal": "SIGHUP"})[0] == 409
    assert api.call("POST", signal, {"Signal": "SIGHUP", "Task": "srv"})[0] == 409
    assert api.call("POST", f"/v1/client/allocation/{alloc}/restart", {})[0] == 409
    assert api.call("POST", f"/v1/client/allocation/{alloc}/restart", {"AllTasks": True})[0] == 409


# -- adopted allocs (found running after the state database was lost: agent.runner.adopt)


def test_adopted_allocs_are_listed_by_job_and_node_read_but_never_acted_on(tmp_path: Path) -> None:
    from tests.test_adopt import CGROUPS, CONTAINERS, D, FakeNodeTasks, RecordingSweeper, _lost_state_node

    node = _lost_state_node(tmp_path)
    core = node.core()
    core.adoption.node = FakeNodeTasks(list(CONTAINERS), list(CGROUPS))
    core.sweeper = RecordingSweeper()  # type: ignore[assignment]
    core.restorer.restore()
    threading.Thread(target=core.loop.run, daemon=True).start()
    try:
        api = Api(node, core)
        (stub,) = api.request("GET", "/v1/job/batch/allocations")
        assert (stub["ID"], stub["ClientStatus"], stub["TaskGroup"]) == (D, "running", "w")
        assert (
            "adopted" in stub["ClientDescription"] and node.store.recovered_from in stub["ClientDescription"]
        )
        # its jobspec went with the lost state database: the job itself is not known, its allocs are
        assert api.call("GET", "/v1/job/batch")[0] == 404
        on_node = api.request("GET", f"/v1/node/{NODE.id}/allocations")
        assert len(on_node) == 3 and {a["ClientStatus"] for a in on_node} == {"running"}
        logs = node.root / "data" / "alloc" / D / "alloc" / "logs"
        logs.mkdir(parents=True)
        (logs / "worker.stdout.0").write_bytes(b"still here\n")
        assert api.call("GET", f"/v1/client/fs/logs/{D}?task=worker&type=stdout&plain=true") == (
            200,
            b"still here\n",
        )
        opener = exec_stream(api.nomad)[2]
        agent_api.current_request.query = "task=worker&command=%5B%22ls%22%5D"  # as the server sets it
        refused = opener((D,), b"")
        assert isinstance(refused, tuple), refused
        status, _, body = refused
        assert status == 409 and b"adopted" in body and f"fieldlab-agent alloc stop {D}".encode() in body
        assert api.call("POST", f"/v1/client/allocation/{D}/signal", {"Signal": "SIGHUP"})[0] == 409
        assert api.call("POST", f"/v1/client/allocation/{D}/restart", {})[0] == 409
    finally:
        core.stop()


# -- DELETE /v1/job/<id>?purge=true, POST /v1/client/gc


def test_job_stop_purge_removes_the_job_and_its_allocs_and_client_gc_collects_terminal_ones(api: Api) -> None:
    (web,) = api.submit(ONE_TASK)
    pair = api.submit(TWO_TASKS)
    status, out = api.call("DELETE", "/v1/job/web?purge=true")
    assert status == 200 and out["EvalID"]
    assert api.node.store.get("job", "web") is None and api.node.store.get("alloc", web) is None
    assert api.call("GET", "/v1/job/web")[0] == 404
    assert api.alloc_ids("/v1/job/web/allocations") == []
    status, out = api.call("DELETE", "/v1/job/pair?purge=maybe")  # a bad flag: nothing done
    assert status == 400 and "purge" in out
    assert api.node.store.get("job", "pair") is not None
    assert {a["DesiredStatus"] for a in api.request("GET", "/v1/job/pair/allocations")} == {"run"}

    assert api.call("DELETE", "/v1/job/pair")[0] == 200  # the stop decided; kept: its allocs end
    stubs = api.request("GET", "/v1/job/pair/allocations")
    assert sorted(a["ID"] for a in stubs) == sorted(pair)
    assert {a["DesiredStatus"] for a in stubs} == {"stop"}, "the answer comes with the stop decided"

    def ended() -> tuple[bool | None, str]:
        seen = {a["ClientStatus"] for a in api.request("GET", "/v1/job/pair/allocations")}
        return (True if seen == {"complete"} else None), str(seen)

    wait_until(ended, timeout=10, what="the stopped job's allocs to complete")
    assert all(api.node.store.get("alloc", a) is not None for a in pair)
    assert api.call("POST", "/v1/client/gc") == (200, {})
    assert all(api.node.store.get("alloc", a) is None for a in pair)
    assert api.node.store.get("job", "pair") is None and api.call("GET", "/v1/job/pair")[0] == 404


# -- terminal allocs after an agent restart: every alloc listed is readable

CRASHY = """
job "crashy" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "docker"
      config { image = "x" }
    }
  }
}
"""

BATCH = """
job "once" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}
"""


def _exits(api: Api, alloc: str, code: int) -> None:
    """The alloc's only task exits with `code`, reported as a driver reports it."""
    runner = api.core.call(lambda: api.core.allocs.runner(alloc))
    handle = api.core.call(lambda: runner.state.handle(runner.group.tasks[0].name))
    assert handle is not None
    fake = api.node.exec if handle.driver == "exec" else api.node.docker
    fake.exit(handle.id, code)
    api.core.allocs.report_exit(alloc, handle.id)


def test_every_alloc_listed_after_an_agent_restart_is_read_with_its_tasks_and_events(tmp_path: Path) -> None:
    """A stopped, a failed and a completed alloc of the agent's last run: listed by GET
    /v1/allocations, so each is answered by GET /v1/allocation/<id> (by id and by prefix) with its
    task states and events, its logs and its job's allocations, however often the agent restarts."""
    node = FakeNode(tmp_path)
    core = node.core()
    threading.Thread(target=core.loop.run, daemon=True).start()
    api = Api(node, core)
    (stopped,) = api.submit(ONE_TASK)
    assert api.call("DELETE", "/v1/job/web")[0] == 200
    (failed,) = api.submit(CRASHY)
    _exits(api, failed, 2)
    (done,) = api.submit(BATCH)
    _exits(api, done, 0)
    # (the failed alloc's replacement is owed after its reschedule delay, 30 s: not within this test)
    expected = {stopped: ("complete", "srv"), failed: ("failed", "t"), done: ("complete", "t")}
    for _ in range(2):  # the agent restarted, then restarted again
        core.stop()
        core = node.core()
        core.restorer.restore()
        threading.Thread(target=core.loop.run, daemon=True).start()
        api = Api(node, core)
        listed = {a["ID"]: a["ClientStatus"] for a in api.request("GET", "/v1/allocations")}
        assert {a: listed.get(a) for a in expected} == {a: s for a, (s, _) in expected.items()}
        for alloc, (status, task) in expected.items():
            for ref in (alloc, alloc[:8]):
                code, view = api.call("GET", f"/v1/allocation/{ref}")
                assert code == 200 and (view["ID"], view["ClientStatus"]) == (alloc, status), view
                assert view["TaskStates"][task]["State"] == "dead", view
                assert "Started" in [e["Type"] for e in view["TaskStates"][task]["Events"]]
            assert api.call("GET", f"/v1/client/fs/logs/{alloc}?task={task}&type=stdout")[0] == 200
        assert api.request("GET", f"/v1/allocation/{failed}")["TaskStates"]["t"]["Failed"] is True
        completed = api.request("GET", f"/v1/allocation/{done}")
        assert completed["TaskStates"]["t"]["Failed"] is False
        assert completed["ClientDescription"] == "All tasks have completed"
        events = [(e["Type"], e["DisplayMessage"]) for e in alloc_events(completed)]
        assert ("Terminated", "Exit Code: 0") in events
        assert api.alloc_ids("/v1/job/once/allocations") == [done]
        assert api.request("GET", "/v1/job/once")["Status"] == "dead"
        assert api.alloc_ids("/v1/job/web/allocations") == [stopped]
        assert failed in api.alloc_ids("/v1/job/crashy/allocations")
        on_node = api.request("GET", f"/v1/node/{NODE.id}/allocations")
        assert sum(a["ClientStatus"] == "complete" for a in on_node) == 2
        assert api.call("GET", "/v1/allocation/ffffffff") == (404, "alloc not found\n")
    core.stop()


# -- PUT /v1/system/gc, /v1/system/reconcile/summaries (python-nomad's system.*)


def test_system_gc_collects_as_a_one_node_cluster_and_reconcile_answers(api: Api) -> None:
    pair = api.submit(TWO_TASKS)
    assert api.call("DELETE", "/v1/job/pair")[0] == 200

    def ended() -> tuple[bool | None, str]:
        seen = {a["ClientStatus"] for a in api.request("GET", "/v1/job/pair/allocations")}
        return (True if seen == {"complete"} else None), str(seen)

    wait_until(ended, timeout=10, what="the stopped job's allocs to complete")
    status, _ = api.call("PUT", "/v1/system/gc")
    assert status == 200
    assert all(api.node.store.get("alloc", a) is None for a in pair)
    assert api.call("GET", "/v1/job/pair")[0] == 404
    assert api.call("PUT", "/v1/system/reconcile/summaries")[0] == 200
    assert api.call("PUT", "/v1/system/gc?region=elsewhere")[0] == 400


def test_a_register_under_another_jobs_path_is_refused_with_nomads_text(api: Api) -> None:
    """python-nomad's dispatch test registers job "example-batch" under /v1/job/example-batch-idempotent:
    Nomad's agent answers 400 "Job ID does not match name" (command/agent/job_endpoint.go)."""
    api.submit(ONE_TASK)
    job = api.request("GET", "/v1/job/web")
    status, out = api.call("POST", "/v1/job/other", {"Job": job})
    assert (status, out.strip()) == (400, "Job ID does not match name")
    assert api.call("GET", "/v1/job/other")[0] == 404
