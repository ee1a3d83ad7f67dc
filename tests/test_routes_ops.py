"""The API routes behind `fieldlab-agent job status|inspect`, `alloc logs|exec|signal|restart` and
`node status`, on the real Core and loop with a fake node (no root, no docker): what each answers,
and that every bad input is a 4xx JSON error naming what and where, never a traceback."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent import api as agent_api
from agent import routes
from agent.core import Core
from agent.drivers.base import TaskHandle
from agent.routes import build_routes
from tests.fakes import FakeNode

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

Routes = dict[tuple[str, str], Any]


class Api:
    def __init__(self, node: FakeNode, core: Core) -> None:
        self.node, self.core = node, core
        self.routes: Routes = {(m, rx): h for m, rx, h in build_routes(core)}

    def call(self, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        """As the API server calls a handler: the path's groups, the body, the query in the thread."""
        raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        path, _, agent_api._request.query = target.partition("?")
        for (m, rx), handler in self.routes.items():
            match = re.fullmatch(rx, path)
            if m == method and match:
                status, ctype, data = handler(match.groups(), raw)
                return status, json.loads(data) if ctype == "application/json" else data
        raise AssertionError(f"no route for {method} {path}")

    def submit(self, spec: str) -> list[str]:
        out = self.core.call(lambda: self.core.submit(spec, "hcl"))
        return list(out["allocs"])


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    node = FakeNode(tmp_path)
    core = node.core()
    threading.Thread(target=core.run_loop, daemon=True).start()
    yield Api(node, core)
    core.stop()


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert all(r.exc_info is None and r.levelno < logging.ERROR for r in caplog.records)


# -- GET /fieldlab/v1/job/<id>, GET /fieldlab/v1/jobs, GET /fieldlab/v1/node


def test_a_job_is_answered_with_its_groups_summary_allocs_spec_and_submission(api: Api) -> None:
    allocs = api.submit(TWO_TASKS)
    status, job = api.call("GET", "/fieldlab/v1/job/pair")
    assert status == 200
    assert (job["id"], job["type"], job["status"]) == ("pair", "batch", "running")
    assert job["groups"] == [
        {
            "name": "g",
            "count": 2,
            "tasks": [{"name": "a", "driver": "docker"}, {"name": "b", "driver": "docker"}],
        }
    ]
    assert job["summary"]["g"]["running"] == 2 and job["summary"]["g"]["failed"] == 0
    assert sorted(a["id"] for a in job["allocs"]) == sorted(allocs)
    assert job["spec"]["id"] == "pair" and job["spec"]["groups"][0]["tasks"][0]["config"] == {"image": "x"}
    assert job["submission"]["source"] == TWO_TASKS and job["submission"]["format"] == "hcl"
    assert api.call("GET", "/fieldlab/v1/jobs") == (200, [{"id": "pair", "type": "batch", "allocs": allocs}])


def test_a_stopped_job_is_dead_and_an_unknown_one_is_a_404_naming_it(api: Api) -> None:
    api.submit(ONE_TASK)
    assert api.call("DELETE", "/fieldlab/v1/job/web")[0] == 200
    assert api.call("GET", "/fieldlab/v1/job/web")[1]["status"] == "dead"
    assert api.call("GET", "/fieldlab/v1/job/nope") == (404, {"error": "no job 'nope'"})
    status, out = api.call("GET", "/fieldlab/v1/job/a%20b")  # quoted in the path
    assert status == 404 and "'a b'" in out["error"]


def test_the_node_counts_allocs_by_status_and_says_each_driver_is_healthy(api: Api) -> None:
    api.submit(ONE_TASK)
    status, node = api.call("GET", "/fieldlab/v1/node")
    assert status == 200
    assert node["allocs"] == {"pending": 0, "running": 1, "failed": 0, "complete": 0, "adopted": 0}
    assert node["jobs"] == 1 and node["datacenter"] == "dc1"
    assert set(node["drivers"]) == {"docker", "exec"}
    assert all(d["healthy"] for d in node["drivers"].values())


# -- logs


def _logs_dir(api: Api, alloc: str, task: str) -> Path:
    d = api.node.root / "data" / "alloc" / alloc / task / "logs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_logs_of_the_only_task_from_an_offset_in_chunks(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    (alloc,) = api.submit(ONE_TASK)
    logs = _logs_dir(api, alloc, "srv")
    (logs / "stdout").write_bytes(b"hello\nworld\n")
    (logs / "stderr").write_bytes(b"\xffoops\n")
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc[:8]}")
    assert status == 200
    assert (out["alloc"], out["task"], out["type"]) == (alloc, "srv", "stdout")
    assert base64.b64decode(out["data"]) == b"hello\nworld\n"
    assert (out["offset"], out["next_offset"], out["size"], out["reset"]) == (0, 12, 12, False)
    out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=srv&type=stdout&offset=6")[1]
    assert base64.b64decode(out["data"]) == b"world\n" and out["offset"] == 6
    out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=srv&type=stderr")[1]
    assert base64.b64decode(out["data"]) == b"\xffoops\n"  # bytes as written, not decoded
    out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?offset=6&origin=end")[1]
    assert base64.b64decode(out["data"]) == b"world\n" and out["offset"] == 6
    assert api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?type=stderr&plain=true") == (
        200,
        b"\xffoops\n",
    )
    monkeypatch.setattr("agent.logs.READ_LIMIT", 5)
    monkeypatch.setattr(routes, "read_log", _limited(5))
    out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=srv")[1]
    assert base64.b64decode(out["data"]) == b"hello" and out["next_offset"] == 5 and out["size"] == 12


def _limited(limit: int) -> Any:
    from agent.logs import read_log

    def read(source: Any, offset: int, **kw: Any) -> Any:
        return read_log(source, offset, limit=limit, **kw)

    return read


def test_a_follow_waits_for_new_bytes_and_answers_when_they_come(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    out_file = _logs_dir(api, alloc, "srv") / "stdout"
    out_file.write_bytes(b"one\n")

    def later() -> None:
        time.sleep(0.5)
        with out_file.open("ab") as f:
            f.write(b"two\n")

    threading.Thread(target=later, daemon=True).start()
    t0 = time.monotonic()
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=srv&offset=4&follow=true")
    assert status == 200 and base64.b64decode(out["data"]) == b"two\n"
    assert 0.3 < time.monotonic() - t0 < 4.0


def test_a_log_that_is_a_symlink_or_a_fifo_is_not_read(api: Api, tmp_path: Path) -> None:
    (alloc,) = api.submit(ONE_TASK)
    logs = _logs_dir(api, alloc, "srv")
    secret = tmp_path / "secret"
    secret.write_text("agent secret")
    (logs / "stdout").symlink_to(secret)
    os.mkfifo(logs / "stderr")
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=srv")
    assert status == 400 and "symlink" in out["error"] and "agent secret" not in json.dumps(out)
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=srv&type=stderr")
    assert status == 400 and "not a regular file" in out["error"]


def test_a_task_that_never_wrote_has_empty_logs(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?type=stderr")
    assert status == 200 and out["data"] == "" and out["size"] == 0


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("/fieldlab/v1/client/fs/logs/XYZ", 400, "alloc id 'XYZ' in the path"),
        ("/fieldlab/v1/client/fs/logs/a", 400, "at least 2"),
        ("/fieldlab/v1/client/fs/logs/--", 404, "no alloc --"),  # a 2-character prefix is looked up
        (
            "/fieldlab/v1/client/fs/logs/{alloc}?type=stdin",
            400,
            "query parameter type='stdin': stdout or stderr",
        ),
        ("/fieldlab/v1/client/fs/logs/{alloc}?offset=-1", 400, "query parameter offset='-1': a byte count"),
        ("/fieldlab/v1/client/fs/logs/{alloc}?origin=middle", 400, "origin='middle': start or end"),
        ("/fieldlab/v1/client/fs/logs/{alloc}?follow=maybe", 400, "follow='maybe': true or false"),
        (
            "/fieldlab/v1/client/fs/logs/{alloc}?tail=1",
            400,
            "unknown query parameter 'tail' (known: task, type",
        ),
        ("/fieldlab/v1/client/fs/logs/{alloc}?task=nope", 404, "has no task 'nope' (its tasks: srv)"),
        ("/fieldlab/v1/client/fs/logs/ffffffff", 404, "no alloc ffffffff"),
    ],
)
def test_bad_log_requests_are_4xx_naming_what_and_where(
    api: Api, caplog: pytest.LogCaptureFixture, path: str, status: int, needle: str
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    with caplog.at_level(logging.DEBUG, logger="agent"):
        got, out = api.call("GET", path.format(alloc=alloc))
    assert got == status and needle in out["error"], out
    _no_traceback(caplog)


def test_logs_of_a_group_of_two_tasks_need_the_task(api: Api) -> None:
    alloc = api.submit(TWO_TASKS)[0]
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}")
    assert status == 400 and "has tasks a, b: say which one" in out["error"]
    status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}?task=b")  # a fake docker: files
    assert status == 200


# -- exec


def test_exec_runs_through_the_driver_off_the_loop_and_answers_code_and_output(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    seen: list[tuple[str, list[str], float, str]] = []

    def fake_exec(
        handle: TaskHandle, argv: list[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        seen.append((handle.id, argv, timeout, threading.current_thread().name))
        return 3, "hello from the task\n"

    monkeypatch.setattr(api.node.exec, "exec", fake_exec)
    status, out = api.call(
        "POST", f"/fieldlab/v1/allocation/{alloc[:8]}/exec", {"cmd": ["cat", "/local/x"], "timeout": 7}
    )
    assert status == 200
    assert out == {
        "alloc": alloc,
        "task": "srv",
        "exit_code": 3,
        "output": "hello from the task\n",
        "truncated": False,
    }
    ((_, argv, timeout, thread),) = seen
    assert argv == ["cat", "/local/x"] and timeout == 7.0 and thread != "MainThread"


def test_exec_that_cannot_run_says_why_and_one_that_hangs_is_a_504(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    monkeypatch.setattr(api.node.exec, "exec", lambda h, argv, t, env=None: (-1, "the task's init is gone"))
    status, out = api.call("POST", f"/fieldlab/v1/allocation/{alloc}/exec", {"task": "srv", "cmd": ["ls"]})
    assert status == 200 and out["exit_code"] == -1 and out["error"] == "the task's init is gone"
    release = threading.Event()
    monkeypatch.setattr(api.node.exec, "exec", lambda h, argv, t, env=None: (release.wait(5), (0, ""))[1])
    monkeypatch.setattr(routes, "EXEC_MARGIN", 0.2)
    status, out = api.call(
        "POST", f"/fieldlab/v1/allocation/{alloc}/exec", {"cmd": ["sleep", "9"], "timeout": 0.1}
    )
    release.set()
    assert (
        status == 504 and "did not report back" in out["error"] and out["retry"] == "check the outcome first"
    )


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"[1]", 400, "JSON object"),
        ({"cmd": "ls -l"}, 400, '"cmd" must be the command as a non-empty list'),
        ({"cmd": []}, 400, '"cmd" must be'),
        ({"cmd": ["ls", 3]}, 400, '"cmd" must be'),
        ({"cmd": ["ls"], "timeout": 0}, 400, '"timeout" must be seconds'),
        ({"cmd": ["ls"], "timeout": 301}, 400, "at most 300"),
        ({"cmd": ["ls"], "timeout": True}, 400, '"timeout"'),
        ({"cmd": ["ls"], "task": 5}, 400, '"task" must be a task name'),
        ({"cmd": ["ls"], "task": "nope"}, 404, "has no task 'nope'"),
    ],
)
def test_bad_exec_requests_are_4xx(
    api: Api, caplog: pytest.LogCaptureFixture, body: Any, status: int, needle: str
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    with caplog.at_level(logging.DEBUG, logger="agent"):
        got, out = api.call("POST", f"/fieldlab/v1/allocation/{alloc}/exec", body)
    assert got == status and needle in out["error"], out
    _no_traceback(caplog)


def test_exec_in_a_task_that_is_not_running_is_a_409(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    api.call("DELETE", "/fieldlab/v1/job/web")
    status, out = api.call("POST", f"/fieldlab/v1/allocation/{alloc}/exec", {"cmd": ["ls"]})
    assert status == 409 and "is not running" in out["error"]


# -- signal and restart


def test_signal_without_a_task_reaches_every_running_task(api: Api) -> None:
    alloc = api.submit(TWO_TASKS)[0]
    status, out = api.call("POST", f"/fieldlab/v1/allocation/{alloc}/signal", {"signal": "SIGHUP"})
    assert status == 200 and out == {"signalled": ["a", "b"], "signal": "SIGHUP"}
    assert [s for _, s in api.node.docker.signals] == ["SIGHUP", "SIGHUP"]
    status, out = api.call(
        "POST", f"/fieldlab/v1/allocation/{alloc}/signal", {"signal": "SIGUSR1", "task": "b"}
    )
    assert status == 200 and out == {"signalled": "b", "signal": "SIGUSR1"}


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/fieldlab/v1/allocation/{alloc}/signal", {"signal": "HUP"}, 400, "'HUP' is not a signal name"),
        ("/fieldlab/v1/allocation/{alloc}/signal", {"signal": 1}, 400, "is not a signal name"),
        ("/fieldlab/v1/allocation/{alloc}/signal", {"signal": "SIGHUP", "task": "x"}, 404, "has no task 'x'"),
        ("/fieldlab/v1/allocation/{alloc}/restart", {"task": ["a"]}, 400, '"task" must be a task name'),
        ("/fieldlab/v1/allocation/{alloc}/restart", {"task": "x"}, 404, "has no task 'x'"),
        ("/fieldlab/v1/allocation/a/restart", {}, 400, "at least 2"),
        ("/fieldlab/v1/allocation/--/restart", {}, 404, "no alloc --"),
        ("/fieldlab/v1/allocation/NOTHEX/signal", {"signal": "SIGHUP"}, 400, "alloc id 'NOTHEX' in the path"),
    ],
)
def test_bad_signal_and_restart_requests_are_4xx(
    api: Api, caplog: pytest.LogCaptureFixture, path: str, body: Any, status: int, needle: str
) -> None:
    (alloc,) = api.submit(ONE_TASK)
    with caplog.at_level(logging.DEBUG, logger="agent"):
        got, out = api.call("POST", path.format(alloc=alloc), body)
    assert got == status and needle in out["error"], out
    _no_traceback(caplog)


def test_restart_without_a_task_restarts_every_running_task(api: Api) -> None:
    alloc = api.submit(TWO_TASKS)[0]
    before = len(api.node.docker.starts)
    status, view = api.call("POST", f"/fieldlab/v1/allocation/{alloc}/restart", {})
    assert status == 200 and view["id"] == alloc

    def restarted() -> bool:
        return api.core.call(lambda: len(api.node.docker.starts)) >= before + 2

    deadline = time.monotonic() + 5
    while not restarted() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert restarted()
    events = api.call("GET", f"/fieldlab/v1/allocation/{alloc}/events")[1]
    assert sorted(e["task"] for e in events if e["type"] == "Restart Signaled") == ["a", "b"]


def test_a_dead_alloc_has_nothing_to_signal_or_restart(api: Api) -> None:
    (alloc,) = api.submit(ONE_TASK)
    api.call("DELETE", "/fieldlab/v1/job/web")
    assert api.call("POST", f"/fieldlab/v1/allocation/{alloc}/signal", {"signal": "SIGHUP"})[0] == 409
    assert (
        api.call("POST", f"/fieldlab/v1/allocation/{alloc}/signal", {"signal": "SIGHUP", "task": "srv"})[0]
        == 409
    )
    assert api.call("POST", f"/fieldlab/v1/allocation/{alloc}/restart", {})[0] == 409


# -- adopted allocs (found running after the state database was lost: agent.runner.adopt)


def test_adopted_allocs_are_listed_by_job_and_node_read_but_never_acted_on(tmp_path: Path) -> None:
    from tests.test_adopt import CGROUPS, CONTAINERS, D, FakeNodeTasks, RecordingSweeper, _lost_state_node

    node = _lost_state_node(tmp_path)
    core = node.core()
    core.adoption.node = FakeNodeTasks(list(CONTAINERS), list(CGROUPS))
    core.sweeper = RecordingSweeper()  # type: ignore[assignment]
    core.restore()
    threading.Thread(target=core.run_loop, daemon=True).start()
    try:
        api = Api(node, core)
        status, job = api.call("GET", "/fieldlab/v1/job/batch")
        assert status == 200 and job["spec"] is None and job["submission"] is None
        assert job["status"] == "running" and [a["id"] for a in job["allocs"]] == [D]
        assert job["summary"] == {"w": {"pending": 0, "running": 0, "failed": 0, "complete": 0, "adopted": 1}}
        assert api.call("GET", "/fieldlab/v1/node")[1]["allocs"]["adopted"] == 3
        logs = node.root / "data" / "alloc" / D / "worker" / "logs"
        logs.mkdir(parents=True)
        (logs / "stdout").write_bytes(b"still here\n")
        status, out = api.call("GET", f"/fieldlab/v1/client/fs/logs/{D}")
        assert status == 200 and base64.b64decode(out["data"]) == b"still here\n" and out["task"] == "worker"
        status, out = api.call("POST", f"/fieldlab/v1/allocation/{D}/exec", {"cmd": ["ls"]})
        assert (
            status == 409 and "adopted" in out["error"] and f"fieldlab-agent alloc stop {D}" in out["error"]
        )
        assert api.call("POST", f"/fieldlab/v1/allocation/{D}/signal", {"signal": "SIGHUP"})[0] == 409
        assert api.call("POST", f"/fieldlab/v1/allocation/{D}/restart", {})[0] == 409
    finally:
        core.stop()


# -- DELETE /fieldlab/v1/job/<id>?purge=true, POST /fieldlab/v1/client/gc


def test_job_stop_purge_removes_the_job_and_its_allocs_and_client_gc_collects_terminal_ones(api: Api) -> None:
    (web,) = api.submit(ONE_TASK)
    pair = api.submit(TWO_TASKS)
    status, out = api.call("DELETE", "/fieldlab/v1/job/web?purge=true")
    assert status == 200 and out["stopped"] == [web] and out["purged"] == [web]
    assert api.node.store.get("job", "web") is None and api.node.store.get("alloc", web) is None
    assert api.call("GET", "/fieldlab/v1/job/web")[0] == 404
    assert api.call("DELETE", "/fieldlab/v1/job/pair?purge=maybe")[0] == 400  # a bad flag: nothing done
    assert api.node.store.get("job", "pair") is not None

    status, out = api.call("DELETE", "/fieldlab/v1/job/pair")  # stopped, kept: its allocs are terminal
    assert status == 200 and sorted(out["stopped"]) == sorted(pair) and "purged" not in out
    assert all(api.node.store.get("alloc", a) is not None for a in pair)
    status, out = api.call("POST", "/fieldlab/v1/client/gc")
    assert status == 200 and sorted(out["collected"]) == sorted(pair) and out["jobs_purged"] == ["pair"]
    assert all(api.node.store.get("alloc", a) is None for a in pair)
    assert api.node.store.get("job", "pair") is None


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
    runner = api.core.call(lambda: api.core.runner(alloc))
    handle = api.core.call(lambda: runner.state.handle(runner.group.tasks[0].name))
    assert handle is not None
    fake = api.node.exec if handle.driver == "exec" else api.node.docker
    fake.exit(handle.id, code)
    api.core.report_exit(alloc, handle.id)


def test_every_alloc_listed_after_an_agent_restart_is_read_with_its_tasks_and_events(tmp_path: Path) -> None:
    """A stopped, a failed and a completed alloc of the agent's last run: listed by GET
    /v1/allocations, so each is answered by GET /fieldlab/v1/allocation/<id> (by id and by prefix), its
    events, its logs and its job's view, with its task states, however often the agent restarts."""
    node = FakeNode(tmp_path)
    core = node.core()
    threading.Thread(target=core.run_loop, daemon=True).start()
    api = Api(node, core)
    (stopped,) = api.submit(ONE_TASK)
    assert api.call("DELETE", "/fieldlab/v1/job/web")[0] == 200
    (failed,) = api.submit(CRASHY)
    _exits(api, failed, 2)
    (done,) = api.submit(BATCH)
    _exits(api, done, 0)
    deadline = time.monotonic() + 5
    while len(api.call("GET", "/fieldlab/v1/allocations")[1]) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)  # the failed alloc's replacement starts on the loop's timer
    expected = {stopped: ("complete", "srv"), failed: ("failed", "t"), done: ("complete", "t")}
    for _ in range(2):  # the agent restarted, then restarted again
        core.stop()
        core = node.core()
        core.restore()
        threading.Thread(target=core.run_loop, daemon=True).start()
        api = Api(node, core)
        listed = {a["id"]: a["status"] for a in api.call("GET", "/fieldlab/v1/allocations")[1]}
        assert {a: listed.get(a) for a in expected} == {a: s for a, (s, _) in expected.items()}
        for alloc, (status, task) in expected.items():
            for ref in (alloc, alloc[:8]):
                code, view = api.call("GET", f"/fieldlab/v1/allocation/{ref}")
                assert code == 200 and (view["id"], view["status"]) == (alloc, status), view
                assert view["tasks"][task]["state"] == "dead", view
            code, events = api.call("GET", f"/fieldlab/v1/allocation/{alloc[:8]}/events")
            assert code == 200 and "Started" in [e["type"] for e in events]
            assert api.call("GET", f"/fieldlab/v1/client/fs/logs/{alloc}")[0] == 200
        assert api.call("GET", f"/fieldlab/v1/allocation/{failed}")[1]["tasks"]["t"]["failed"] is True
        completed = api.call("GET", f"/fieldlab/v1/allocation/{done}")[1]
        assert (
            completed["tasks"]["t"]["failed"] is False and completed["reason"] == "All tasks have completed"
        )
        events = api.call("GET", f"/fieldlab/v1/allocation/{done}/events")[1]
        assert ("Terminated", "Exit Code: 0") in [(e["type"], e["message"]) for e in events]
        assert [a["id"] for a in api.call("GET", "/fieldlab/v1/job/once")[1]["allocs"]] == [done]
        assert api.call("GET", "/fieldlab/v1/job/once")[1]["status"] == "dead"
        jobs = {j["id"]: j["allocs"] for j in api.call("GET", "/fieldlab/v1/jobs")[1]}
        assert jobs["web"] == [stopped] and jobs["once"] == [done] and failed in jobs["crashy"]
        assert api.call("GET", "/fieldlab/v1/node")[1]["allocs"]["complete"] == 2
        assert api.call("GET", "/fieldlab/v1/allocation/ffffffff")[0] == 404
    core.stop()
