"""The 22 everyday calls of a Nomad user, made with python-nomad against NOMAD_ADDR (a lab client:
`eval "$(fieldlab lab env client1)"`, or a real Nomad agent): one line per call, ok or why not,
then how many worked. Runs a small busybox job `nomad-api-calls` and purges it at the end.

    .venv/bin/python scripts/nomad_api_calls.py [--image fieldlab/busybox:latest]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import nomad
import requests

HCL = """
job "nomad-api-calls" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image   = "%s"
        command = "sh"
        args    = ["-c", "echo started; trap 'echo hup' HUP; while true; do sleep 1; done"]
      }
      template {
        data        = "hello\\n"
        destination = "local/hello.txt"
      }
      kill_timeout = "2s"
    }
  }
}
"""


def _client() -> tuple[Any, requests.Session, str]:
    addr = os.environ.get("NOMAD_ADDR", "")
    if not addr:
        sys.exit('set NOMAD_ADDR and the certs first: eval "$(.venv/bin/fieldlab lab env client1)"')
    ca = os.environ.get("NOMAD_CACERT") or True
    cert = (os.environ.get("NOMAD_CLIENT_CERT", ""), os.environ.get("NOMAD_CLIENT_KEY", ""))
    n = nomad.Nomad(address=addr, secure=addr.startswith("https"), verify=ca, cert=cert, timeout=60)
    http = requests.Session()
    http.trust_env = False
    http.verify, http.cert = ca, cert
    return n, http, addr


def _wait(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)  # polling a condition with a named deadline
    raise TimeoutError(f"{what}: not within {timeout:g}s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", default="fieldlab/busybox:latest")
    args = p.parse_args()
    n, http, addr = _client()
    state: dict[str, Any] = {}
    results: list[tuple[str, str]] = []

    def call(name: str, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        try:
            fn()
            results.append((name, f"ok ({(time.monotonic() - t0) * 1000:.0f} ms)"))
        except Exception as exc:  # report and go on: the point is the count
            results.append((name, f"FAILED: {type(exc).__name__}: {str(exc)[:160]}"))
        print(f"  {name:<28} {results[-1][1]}", flush=True)

    def alloc() -> str:
        return str(state["alloc"])

    def register() -> None:
        state["job"] = n.jobs.parse(HCL % args.image)
        n.job.register_job("nomad-api-calls", {"Job": state["job"]})
        state["alloc"] = _wait(
            "an alloc running",
            lambda: next(
                (a["ID"] for a in n.job.get_allocations("nomad-api-calls") if a["ClientStatus"] == "running"),
                None,
            ),
        )

    print(f"python-nomad against {addr}:")
    call("agent self", lambda: n.agent.get_agent()["member"])
    call("agent health", lambda: http.get(f"{addr}/v1/agent/health", timeout=10).raise_for_status())
    call("status leader", n.status.leader.get_leader)
    call("nodes", lambda: n.nodes.get_nodes()[0]["ID"])
    call("parse HCL", lambda: n.jobs.parse(HCL % args.image)["ID"])
    call(
        "validate",
        lambda: n.validate.validate_job({"Job": n.jobs.parse(HCL % args.image)}).raise_for_status(),
    )
    call("register a job", register)
    call("read the job", lambda: n.job.get_job("nomad-api-calls")["Version"])
    call("the job's allocations", lambda: n.job.get_allocations("nomad-api-calls")[0]["ID"])
    call("an alloc's TaskStates", lambda: n.allocation.get_allocation(alloc())["TaskStates"]["t"]["State"])
    call("an alloc's events", lambda: n.allocation.get_allocation(alloc())["TaskStates"]["t"]["Events"][0])
    call("logs", lambda: n.client.stream_logs.stream(alloc(), "t", "stdout", plain=True))
    call("ls the alloc dir", lambda: n.client.ls.list_files(alloc(), "/t/local"))
    call("stat a file", lambda: n.client.stat.stat_file(alloc(), "/t/local/hello.txt")["Size"])
    call("cat a file", lambda: n.client.cat.read_file(alloc(), "/t/local/hello.txt"))
    call("signal", lambda: n.client.allocation.signal_allocation(alloc(), "SIGHUP", task="t"))
    call("stats", lambda: n.client.allocation.read_allocation_stats(alloc())["Tasks"]["t"])
    call("restart", lambda: n.client.allocation.restart_allocation(alloc()))
    call("jobs list", lambda: n.jobs.get_jobs()[0]["ID"])
    call("allocations list", lambda: n.allocations.get_allocations()[0]["ID"])
    call("stop the alloc", lambda: n.allocation.stop_allocation(alloc()))
    call("deregister with purge", lambda: n.job.deregister_job("nomad-api-calls", purge=True))
    ok = sum(1 for _, r in results if r.startswith("ok"))
    print(f"{ok} of {len(results)} calls worked")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
