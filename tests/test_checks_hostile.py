"""A hostile jobspec's Nomad service checks (issue 51): a check names a port the alloc never
reserved, or a literal port, or a reserved static port that is a host service's, and the agent's
default `advertise_address = ""` sent it to the host's loopback (a stub there saw
`DELETE /v1/kv/?recurse`). Checks go only to the alloc's own reserved ports and addresses, never
to loopback (agent.client.checktarget), and such a jobspec is refused at submission as Nomad refuses it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from agent.jobspec import JobspecError, parse_jobspec
from agent.runner.checkresults import CheckResults
from agent.runner.checks import CheckPorts, ChecksHook
from agent.structs.model import Check, Group, Network, Service, Task
from agent.structs.records import PortAlloc


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def _any(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(200)
        self.end_headers()

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback_stub() -> Iterator[tuple[int, list[str]]]:
    """A stand-in for a host service on loopback (Consul's 127.0.0.1:8500): every request it gets."""
    seen: list[str] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class _Deps:
    advertise_address: str = ""
    node_address: str = ""  # fingerprinted (agent.client.checktarget.fingerprinted_address)
    check_results: CheckResults = field(default_factory=CheckResults)
    bugs: Any = None
    queue: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from agent.fieldbugs.bugs import NO_BUGS

        self.bugs = NO_BUGS

    def clock(self) -> float:
        return 100.0

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.queue.append(fn)

    def offload(
        self, name: str, blocking: Callable[[], object], done: Callable[[object, Exception | None], None]
    ) -> None:
        try:
            got, exc = blocking(), None
        except Exception as e:
            got, exc = None, e
        done(got, exc)


def _run_checks(
    check: Check, *, ports: tuple[PortAlloc, ...], address: str = "", advertise: str = "", node: str = ""
) -> _Deps:
    """Run a task's check hook over plain fakes (its callbacks inline, three rounds) for a nomad
    service with `check`; the results are in the returned deps."""
    svc = Service(name="web", port=check.port, checks=(check,), provider="nomad")
    task = Task(name="t", driver="raw_exec", services=(svc,))
    group = Group(name="g", tasks=(task,), network=Network(mode="host" if not address else "bridge"))
    deps = _Deps(advertise_address=advertise, node_address=node)
    handle = SimpleNamespace(id="h1")
    ar = SimpleNamespace(
        id="a1b2c3d4-0000-4000-8000-000000000001",
        group=group,
        job=SimpleNamespace(id="j"),
        rec=SimpleNamespace(ports=ports, address=address),
        alloc_running=lambda: True,
    )
    lifecycle = SimpleNamespace(handle=lambda: handle, event=lambda *a: None)
    ports = CheckPorts(
        task=task,
        alloc=ar,  # type: ignore[arg-type]
        lifecycle=lifecycle,  # type: ignore[arg-type]
        stop_task=lambda h, timeout, sig: None,
        mark_failed=lambda: None,
        results=deps.check_results,
        services=None,
        address=lambda: deps.advertise_address or deps.node_address,
        max_kill_timeout=30.0,
        bugs=deps.bugs,
        clock=deps.clock,
        schedule=deps.schedule,
        offload=deps.offload,
    )
    hook = ChecksHook(ports)
    hook.poststart(handle)  # type: ignore[arg-type]
    for _ in range(3):
        pending, deps.queue = deps.queue, []
        for fn in pending:
            fn()
    return deps


def _outputs(deps: _Deps) -> list[tuple[str, str]]:
    return [
        (str(r["Status"]), str(r["Output"]))
        for r in deps.check_results.of("a1b2c3d4-0000-4000-8000-000000000001").values()
    ]


def test_a_literal_port_check_never_reaches_the_hosts_loopback(loopback_stub: tuple[int, list[str]]) -> None:
    port, seen = loopback_stub
    hostile = Check(
        name="kv", type="http", port=str(port), method="DELETE", path="/v1/kv/?recurse", interval=1.0
    )
    deps = _run_checks(hostile, ports=())
    assert seen == [], f"the loopback stub saw {seen}"
    assert [s for s, _ in _outputs(deps)] == ["failure"], _outputs(deps)


def test_a_reserved_static_port_on_the_host_network_is_not_checked_on_loopback(
    loopback_stub: tuple[int, list[str]],
) -> None:
    """The alloc reserved the port (static), but on a node without an advertise address the check
    went to 127.0.0.1, where a host service (not the task) listens."""
    port, seen = loopback_stub
    hostile = Check(name="kv", type="http", port="c", method="DELETE", path="/v1/kv/?recurse", interval=1.0)
    deps = _run_checks(hostile, ports=(PortAlloc("c", port, port),))
    assert seen == [], f"the loopback stub saw {seen}"
    ((status, output),) = _outputs(deps)
    assert status == "failure" and "advertise_address" in output, output


def test_a_loopback_advertise_address_is_not_used_either(loopback_stub: tuple[int, list[str]]) -> None:
    port, seen = loopback_stub
    hostile = Check(name="kv", type="tcp", port="c", interval=1.0)
    deps = _run_checks(hostile, ports=(PortAlloc("c", port, port),), advertise="127.0.0.1")
    assert seen == [] and [s for s, _ in _outputs(deps)] == ["failure"], _outputs(deps)


def test_checks_go_to_the_allocs_own_address_and_reserved_ports() -> None:
    from agent.client.checktarget import CheckTarget, check_target

    ports = (PortAlloc("http", 25001, 8080),)
    bridge = {"ports": ports, "alloc_address": "172.26.64.7"}
    # host mode: the node's address and host port; a bridge alloc with no (or a loopback) node address:
    # its own address and the port inside it
    assert check_target(mode="", label="http", node_address="10.0.0.5", **bridge) == CheckTarget(
        "10.0.0.5", 25001
    )
    assert check_target(mode="host", label="http", node_address="", **bridge) == CheckTarget(
        "172.26.64.7", 8080
    )
    assert check_target(mode="", label="http", node_address="127.0.0.1", **bridge) == CheckTarget(
        "172.26.64.7", 8080
    )
    assert "not a port this alloc reserved" in str(
        check_target(mode="", label="8500", node_address="10.0.0.5", **bridge)
    )
    # alloc mode: the alloc's own address, a label's `to` or a literal port (Nomad allows one there)
    assert check_target(mode="alloc", label="http", node_address="", **bridge) == CheckTarget(
        "172.26.64.7", 8080
    )
    assert check_target(mode="alloc", label="9001", node_address="", **bridge) == CheckTarget(
        "172.26.64.7", 9001
    )
    no_netns = check_target(
        mode="alloc", label="9001", ports=ports, alloc_address="", node_address="10.0.0.5"
    )
    assert isinstance(no_netns, str) and "network namespace" in no_netns


HOSTILE = """
job "h" {
  group "g" {
    network {
      port "http" {}
    }
    %(group_service)s
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["60"]
      }
      %(task_service)s
    }
  }
}
"""


def _service(check: str, port: str = '"http"') -> str:
    return f"""service {{
        name     = "web"
        provider = "nomad"
        port     = {port}
        check {{
          type     = "http"
          path     = "/health"
          interval = "10s"
          timeout  = "2s"
          {check}
        }}
      }}"""


@pytest.mark.parametrize(
    ("where", "check", "want"),
    [
        (
            "task_service",
            'port = "8500"',
            r"task\.t\.service\[0\]\.check\[0\]\.port: check .* cannot use a numeric port 8500",
        ),
        (
            "group_service",
            "port = 8500",
            r"group\.g\.service\[0\]\.check\[0\]\.port: a numeric port \(8500\) is taken only with",
        ),
        (
            "task_service",
            'method = "PURGE"',
            r'check\[0\]\.method: method type "PURGE" not supported in Nomad http check',
        ),
        (
            "task_service",
            'address_mode = "alloc"',
            r"check\[0\]\.address_mode: only checks of a group's service",
        ),
        (
            "group_service",
            'address_mode = "driver"',
            r"check\[0\]\.address_mode: only checks of a task's service",
        ),
        (
            "task_service",
            'address_mode = "driver"',
            r'address_mode = "driver" may only be set for Consul service checks',
        ),
        (
            "task_service",
            'address_mode = "auto"',
            r'check\[0\]\.address_mode: "auto" is only valid for services',
        ),
        (
            "task_service",
            'path = "http://127.0.0.1:8500/v1/kv/"',
            r"check\[0\]\.path: http checks need a relative http path",
        ),
        ("task_service", "expose = true", r"check\[0\]\.expose: may only be set for Consul service checks"),
    ],
)
def test_a_check_outside_nomads_rules_is_refused_at_submission(where: str, check: str, want: str) -> None:
    spec = {"group_service": "", "task_service": ""}
    service = _service(check)
    spec[where] = service.replace('path     = "/health"\n', "") if check.startswith("path") else service
    with pytest.raises(JobspecError, match=want):
        parse_jobspec(HOSTILE % spec, source="h.hcl")


def test_checks_within_nomads_rules_are_taken() -> None:
    spec = {
        "group_service": _service(
            'address_mode = "alloc"\n          port = "9001"\n          method = "delete"'
        ),
        "task_service": _service('method = "HEAD"'),
    }
    job = parse_jobspec(HOSTILE % spec, source="h.hcl").job
    (grp,) = job.groups[0].services[0].checks
    assert (grp.address_mode, grp.port, grp.method) == ("alloc", "9001", "DELETE")
    assert job.groups[0].tasks[0].services[0].checks[0].method == "HEAD"
