"""Script checks as Nomad runs them (its script check hook): read as Nomad's validation reads them (a
group service's check names its task, on the check or the service; a nomad service takes none), then
run by a real Core on a fake node: the command in the named task through its driver's exec, the
result sent to a Consul (a fake one on loopback) as the TTL check the service was registered with,
check_restart applied."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.client.core import Core
from agent.consul.catalog import ConsulClient, registrations
from agent.drivers.base import TaskHandle
from agent.fieldbugs.faults import Faults
from agent.jobspec import JobspecError, parse_jobspec
from agent.runner.checks_script import consul_check_id, script_status
from agent.structs.model import Check, Service
from tests.fakes import FakeNode

DEADLINE = 20.0  # seconds a result may take to reach the fake Consul

JOB = """
job "sc" {
  group "g" {
    service {
      name = "web"
      task = "%(service_task)s"
      check {
        name     = "alive"
        type     = "script"
        %(check_task)s
        command  = "/bin/check"
        args     = ["${NOMAD_TASK_NAME}", "x"]
        interval = "1s"
        timeout  = "1s"
        %(restart)s
      }
    }
    task "side" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


def _job(service_task: str = "t", check_task: str = "", restart: str = "", provider: str = "") -> str:
    text = JOB % {
        "service_task": service_task,
        "check_task": f'task = "{check_task}"' if check_task else "",
        "restart": restart,
    }
    if not service_task:
        text = text.replace('      task = ""\n', "")
    if provider:
        text = text.replace('name = "web"', f'name = "web"\n      provider = "{provider}"')
    return text


# -- what is read ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("service_task", "check_task"), [("t", ""), ("", "t"), ("side", "t")])
def test_a_group_script_check_runs_in_the_task_its_check_or_service_names(
    service_task: str, check_task: str
) -> None:
    parsed = parse_jobspec(_job(service_task, check_task), source="sc.hcl")
    (check,) = parsed.job.groups[0].services[0].checks
    assert (check.type, check.task, check.command) == ("script", "t", "/bin/check")
    assert not any("task" in w for w in parsed.warnings), parsed.warnings


def test_a_group_script_check_naming_no_task_is_refused_with_nomads_text() -> None:
    with pytest.raises(JobspecError) as info:
        parse_jobspec(_job(service_task=""), source="sc.hcl")
    assert info.value.problems == [
        ("job.sc.group.g.service[0].check[0]", "Service [g]->web or Check alive must specify task parameter")
    ]


def test_a_nomad_service_takes_no_script_check_as_nomad() -> None:
    with pytest.raises(JobspecError) as info:
        parse_jobspec(_job(provider="nomad"), source="sc.hcl")
    assert (
        "job.sc.group.g.service[0].check[0].type",
        'invalid check type ("script"), must be one of tcp, http',
    ) in info.value.problems


def test_a_service_naming_a_task_the_group_lacks_is_refused() -> None:
    with pytest.raises(JobspecError, match='the group has no task "nope"'):
        parse_jobspec(_job(service_task="nope"), source="sc.hcl")


def test_the_ttl_check_id_is_the_one_consul_gives_the_registered_check() -> None:
    one = Service("web", checks=(Check("a", "script", command="/x"),))
    two = Service("web", checks=(Check("h", "http", path="/"), Check("a", "script", command="/x")))
    (reg,) = registrations("A1", "", [one], "10.0.0.1", [])
    assert consul_check_id("A1", "", one, 0) == f"service:{reg['ID']}" and "TTL" in reg["Checks"][0]
    (reg,) = registrations("A1", "t", [two], "10.0.0.1", [])
    assert consul_check_id("A1", "t", two, 1) == f"service:{reg['ID']}:2"


def test_exit_codes_are_nomads_states() -> None:
    assert [script_status(c, "out")[0] for c in (0, 1, 2, 127, -1)] == [
        "passing",
        "warning",
        "critical",
        "critical",
        "critical",
    ]


# -- what runs -------------------------------------------------------------------------------------


class FakeConsul:
    """Consul's agent endpoints the agent calls: registrations and TTL updates, recorded."""

    def __init__(self) -> None:
        self.registered: list[dict[str, Any]] = []
        self.updates: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"null")
                if self.path == "/v1/agent/service/register":
                    outer.registered.append(body)
                elif self.path.startswith("/v1/agent/check/update/"):
                    outer.updates.append((self.path.rsplit("/", 1)[-1], body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def consul() -> Iterator[FakeConsul]:
    c = FakeConsul()
    yield c
    c.httpd.shutdown()
    c.httpd.server_close()


def _running_core(tmp_path: Path, consul: FakeConsul, codes: list[int]) -> tuple[Core, FakeNode, list[Any]]:
    """A Core on a fake node whose exec driver answers script runs with `codes` in turn (then 0)."""
    node = FakeNode(tmp_path)
    ran: list[tuple[str, list[str], Mapping[str, str] | None]] = []

    def exec_(
        handle: TaskHandle, argv: list[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        ran.append((handle.id, list(argv), env))
        return (codes.pop(0) if codes else 0), f"run {len(ran)}"

    node.exec.exec = exec_  # type: ignore[method-assign]
    core = Core(
        node.store,
        node.registry,
        node.network,
        data_dir=tmp_path / "data",
        faults=Faults(),
        task_dirs=node.dirs,
        consul=ConsulClient(consul.address),
    )
    threading.Thread(target=core.loop.run, daemon=True).start()
    return core, node, ran


def _wait(what: str, ok: Any) -> None:
    deadline = time.monotonic() + DEADLINE
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_group_script_check_runs_in_its_task_and_reports_to_consuls_ttl_check(
    tmp_path: Path, consul: FakeConsul
) -> None:
    core, _, ran = _running_core(tmp_path, consul, [1, 0])
    try:
        (alloc,) = core.call(lambda: core.job_registry.submit(_job(), "hcl"))["allocs"]
        check_id = f"service:_fieldlab-{alloc}-group-web"
        _wait("two TTL updates", lambda: len(consul.updates) >= 2)
        (reg,) = [r for r in consul.registered if r["Name"] == "web"]
        assert reg["Checks"] == [{"Name": "alive", "Interval": "1s", "Timeout": "1s", "TTL": "3s"}]
        first, second = consul.updates[:2]
        assert first == (check_id, {"Status": "warning", "Output": "run 1"})
        assert second == (check_id, {"Status": "passing", "Output": "run 2"})
        handle, argv, env = ran[0]
        assert handle.startswith("exec-t-"), "run in the task the check names, not in side"
        assert argv == ["/bin/check", "t", "x"], "the task's ${...} interpolated"
        assert env is not None and env.get("NOMAD_TASK_NAME") == "t"
        assert all(h.startswith("exec-t-") for h, _, _ in ran)
    finally:
        core.stop()


def test_a_failing_script_check_with_check_restart_restarts_its_task(
    tmp_path: Path, consul: FakeConsul
) -> None:
    restart = "check_restart {\n          limit = 1\n        }"
    core, _, _ = _running_core(tmp_path, consul, [2, 2, 2])  # the first within check_restart's 1s grace
    try:
        (alloc,) = core.call(lambda: core.job_registry.submit(_job(restart=restart), "hcl"))["allocs"]

        def signaled() -> bool:
            events = core.call(lambda: core.store.events(alloc, "t"))
            return any(e.type == "Restart Signaled" for e in events)

        _wait("the task restarted by its check", signaled)
        events = core.call(lambda: core.store.events(alloc, "t"))
        assert any(e.message == 'healthcheck: check "alive" unhealthy' for e in events)
        assert consul.updates[0][1]["Status"] == "critical"
        side = core.call(lambda: core.store.events(alloc, "side"))
        assert not any(e.type == "Restart Signaled" for e in side)
    finally:
        core.stop()


TASK_JOB = """
job "st" {
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
      service {
        name = "own"
        check {
          name     = "ready"
          type     = "script"
          command  = "/bin/ready"
          interval = "10s"
          timeout  = "1s"
        }
      }
    }
  }
}
"""


def test_a_task_script_check_runs_in_its_task_and_reports_to_consul(
    tmp_path: Path, consul: FakeConsul
) -> None:
    core, _, ran = _running_core(tmp_path, consul, [0])
    try:
        (alloc,) = core.call(lambda: core.job_registry.submit(TASK_JOB, "hcl"))["allocs"]
        _wait("a TTL update", lambda: len(consul.updates) >= 1)
        assert consul.updates[0] == (
            f"service:_fieldlab-{alloc}-t-own",
            {"Status": "passing", "Output": "run 1"},
        )
        assert ran[0][0].startswith("exec-t-") and ran[0][1] == ["/bin/ready"]
    finally:
        core.stop()
