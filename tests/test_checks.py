"""Nomad service checks run by the agent (agent.runner.checks) and check_restart
(agent.decide.taskdecisions.plan_check_restart): the decisions over plain data, then a real agent whose
raw_exec task serves HTTP until told to fail, the check results read through Nomad's API route and
the task restarted by its check as Nomad's check watcher restarts it."""

from __future__ import annotations

import subprocess

import pytest

from agent.decide.taskdecisions import CheckWatch, check_result, plan_check_restart
from agent.jobspec import JobspecError, parse_jobspec
from lab.waits import wait_until
from tests.agent_lab import AgentLab

WATCH = CheckWatch(interval=2.0, limit=3, grace_until=10.0)


def test_results_are_nomads_for_http_and_tcp() -> None:
    assert check_result("tcp", None, "") == ("success", "nomad: tcp ok")
    assert check_result("tcp", None, "[Errno 111] Connection refused") == (
        "failure",
        "[Errno 111] Connection refused",
    )
    assert check_result("http", 200, "", "body") == ("success", "nomad: http ok")
    assert check_result("http", 302, "", "moved") == ("success", "moved")
    assert check_result("http", 503, "", "x" * 5000) == ("failure", "x" * 3072)
    assert check_result("http", None, "timed out") == ("failure", "nomad: timed out")


def test_a_failure_within_the_grace_is_not_counted() -> None:
    assert plan_check_restart(WATCH, "failure", 9.9) == (WATCH, False)


def test_the_task_restarts_once_unhealthy_for_interval_times_limit_minus_one() -> None:
    w, restart = plan_check_restart(WATCH, "failure", 11.0)
    assert (w.unhealthy_since, restart) == (11.0, False)
    w, restart = plan_check_restart(w, "failure", 13.0)
    assert (w.unhealthy_since, restart) == (11.0, False)
    w, restart = plan_check_restart(w, "failure", 15.0)  # 11 + 2 x (3 - 1)
    assert restart and w.unhealthy_since == 0.0


def test_a_healthy_result_clears_the_count_and_limit_one_restarts_at_once() -> None:
    w, _ = plan_check_restart(WATCH, "failure", 11.0)
    w, restart = plan_check_restart(w, "success", 13.0)
    assert (w.unhealthy_since, restart) == (0.0, False)
    once = CheckWatch(interval=2.0, limit=1, grace_until=0.0)
    assert plan_check_restart(once, "failure", 1.0)[1]
    assert not plan_check_restart(CheckWatch(interval=2.0, limit=0, grace_until=0.0), "failure", 99.0)[1]
    warn = CheckWatch(interval=2.0, limit=1, grace_until=0.0, ignore_warnings=True)
    assert not plan_check_restart(warn, "warning", 1.0)[1]
    assert plan_check_restart(CheckWatch(interval=2.0, limit=1, grace_until=0.0), "warning", 1.0)[1]


SERVICE = """
job "chk" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      name     = "chk-group"
      provider = "nomad"
      port     = "http"
      check {
        name     = "group-port"
        type     = "tcp"
        interval = "1s"
        timeout  = "1s"
      }
    }
    restart {
      attempts = 3
      delay    = "1s"
      interval = "10m"
      mode     = "fail"
    }
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo start >> $NOMAD_ALLOC_DIR/data/starts; exec python3 -c \\"$WEB\\""]
      }
      env {
        WEB = <<EOT
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sick = os.path.exists(os.environ["NOMAD_ALLOC_DIR"] + "/data/sick")
        self.send_response(503 if sick else 200)
        self.end_headers()
        self.wfile.write(b"sick" if sick else b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", int(os.environ["NOMAD_PORT_http"])), H).serve_forever()
EOT
      }
      service {
        name     = "chk-web"
        provider = "nomad"
        port     = "http"
        check {
          name     = "alive"
          type     = "http"
          path     = "/health"
          interval = "1s"
          timeout  = "1s"
          check_restart {
            limit = 2
            grace = "2s"
          }
        }
        check {
          name     = "port"
          type     = "tcp"
          interval = "1s"
          timeout  = "1s"
        }
      }
    }
  }
}
"""


def test_check_restart_is_read_from_the_check_or_its_service() -> None:
    spec = SERVICE.replace(
        '        check_restart {\n            limit = 2\n            grace = "2s"\n          }\n', ""
    )
    spec = spec.replace(
        '        port     = "http"\n        check {',
        '        port     = "http"\n        check_restart {\n          limit = 4\n        }\n        check {',
        1,
    )
    job = parse_jobspec(spec, source="chk.hcl").job
    alive, port = job.groups[0].tasks[0].services[0].checks
    assert alive.restart is not None and (alive.restart.limit, alive.restart.grace) == (4, 1.0)
    assert port.restart == alive.restart, "every check of the service inherits its check_restart"
    with pytest.raises(JobspecError, match=r"check_restart.limit"):
        parse_jobspec(SERVICE.replace("limit = 2", "limit = -1"), source="chk.hcl")


def _own_address() -> str:
    """This host's first global IPv4 address: the node's address, as its advertise_address would be
    (the checks' traffic stays on this host)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], check=False, capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        return line.split()[3].split("/")[0]
    pytest.skip("this host has no global IPv4 address to advertise")


@pytest.mark.root
def test_an_unhealthy_check_restarts_its_task_and_the_results_are_nomads(lab: AgentLab) -> None:
    # host-mode checks go to the node's address, never to loopback (agent.client.checktarget)
    agent = lab.start_agent(raw_exec_enabled=True, advertise_address=_own_address())
    try:
        (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(SERVICE, None, source="test"))[
            "allocs"
        ]
        data = lab.data_dir / "alloc" / alloc / "alloc" / "data"
        results = agent.core.deps.check_results

        def both_pass() -> tuple[dict[str, str] | None, str]:
            got = {r["Check"]: r["Status"] for r in results.of(alloc).values()}
            want = {"alive": "success", "port": "success", "group-port": "success"}
            return (got if got == want else None), str(got)

        wait_until(both_pass, timeout=60, what="both checks passing")
        alive = next(r for r in results.of(alloc).values() if r["Check"] == "alive")
        assert (alive["Output"], alive["StatusCode"], alive["Task"], alive["Service"]) == (
            "nomad: http ok",
            200,
            "web",
            "chk-web",
        )
        group = next(r for r in results.of(alloc).values() if r["Check"] == "group-port")
        assert (group["Task"], group["Service"], group["Output"]) == ("", "chk-group", "nomad: tcp ok"), group
        (data / "sick").write_text("")

        def restarted() -> tuple[list[str] | None, str]:
            starts = (data / "starts").read_text().split()
            return (starts if len(starts) >= 2 else None), f"{len(starts)} start(s)"

        wait_until(restarted, timeout=60, what="the task restarted by its unhealthy check")
        (data / "sick").unlink()
        events = [(e.type, e.message) for e in agent.core.call(lambda: agent.core.store.events(alloc, "web"))]
        assert ("Restart Signaled", 'healthcheck: check "alive" unhealthy') in events, events
        record = agent.core.call(lambda: agent.core.allocs.runner(alloc).state.task("web"))
        assert record.restarts >= 1 and len(record.restart_times) >= 1, "the restart policy counted it"
        wait_until(both_pass, timeout=60, what="both checks passing again after the restart")
        agent.stop_job("chk")
        assert results.of(alloc) == {}, "a stopped alloc's results go with it"
    finally:
        agent.stop()
