"""Issue 52 item 6: a service's and a check's fields are honoured as Nomad honours them or refused
with the reason (agent.jobspec.serviceopts, agent.consul.catalog, agent.client.checktarget,
agent.runner.checks, agent.runner.services, agent.nomadapi.deploywatch). Nomad's texts come from
nomad/structs/services.go."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from agent.client.checktarget import CheckTarget, check_target, service_address
from agent.consul.catalog import ConsulError, registrations
from agent.jobspec import JobspecError, parse_jobspec
from agent.nomadapi.deploywatch import alloc_health, nomad_checks_pass
from agent.nomadapi.jobjson import parsed_job_json
from agent.runner.checks import _probe, check_mode
from agent.runner.services import alloc_registrations
from agent.structs.model import Check, Service
from agent.structs.records import DesiredStatus, PortAlloc

JOB = """
job "j" {
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    service {
      name = "web"
      port = "http"
      %(service)s
      check {
        type     = "%(type)s"
        path     = "/h"
        interval = "10s"
        timeout  = "2s"
        %(check)s
      }
    }
    task "t" {
      driver = "docker"
      config { image = "x" }
    }
  }
}
"""


def _parse(service: str = "", check: str = "", ctype: str = "http") -> Any:
    return parse_jobspec(JOB % {"service": service, "check": check, "type": ctype}, source="s.hcl")


def _service(service: str = "", check: str = "", ctype: str = "http") -> Service:
    parsed = _parse(service, check, ctype)
    assert parsed.warnings == (), parsed.warnings
    svc: Service = parsed.job.groups[0].services[0]
    return svc


def _refused(service: str = "", check: str = "", ctype: str = "http") -> list[str]:
    with pytest.raises(JobspecError) as info:
        _parse(service, check, ctype)
    return [f"{p}: {r}" for p, r in info.value.problems]


# --- the reader: every field lands in the model, with Nomad's defaults ------------------------------


def test_a_services_fields_are_read_with_nomads_defaults() -> None:
    svc = _service(
        'address = "10.9.0.1"\ncanary_tags = ["c1"]\nmeta { a = "b" }\ncanary_meta { c = "d" }\n'
        'enable_tag_override = true\ntagged_addresses { lan = "10.0.0.1:99" }\nweights { passing = 3 }\n'
        'kind = "ingress-gateway"\non_update = "ignore"'
    )
    assert (svc.address, svc.address_mode, svc.canary_tags) == ("10.9.0.1", "auto", ("c1",))
    assert (svc.meta, svc.canary_meta, svc.tagged_addresses) == (
        {"a": "b"},
        {"c": "d"},
        {"lan": "10.0.0.1:99"},
    )
    assert (svc.enable_tag_override, svc.weights, svc.kind) == (True, (3, 1), "ingress-gateway")
    # a check without its own on_update takes its service's (Nomad's api Canonicalize)
    assert (svc.on_update, svc.checks[0].on_update) == ("ignore", "ignore")


def test_a_checks_fields_are_read() -> None:
    c = _service(
        check='protocol = "https"\ntls_skip_verify = true\ntls_server_name = "web.lab"\nmethod = "POST"\n'
        'body = "{}"\nheader {\n Authorization = ["Basic x"]\n X-Two = ["a", "b"]\n}\n'
        'initial_status = "warning"\nsuccess_before_passing = 2\nfailures_before_critical = 3\n'
        'failures_before_warning = 1\non_update = "ignore_warnings"',
    ).checks[0]
    assert (c.protocol, c.tls_skip_verify, c.tls_server_name, c.method, c.body) == (
        "https",
        True,
        "web.lab",
        "POST",
        "{}",
    )
    assert c.header == {"Authorization": ("Basic x",), "X-Two": ("a", "b")}
    assert (c.initial_status, c.success_before_passing, c.failures_before_critical) == ("warning", 2, 3)
    assert (c.failures_before_warning, c.on_update) == (1, "ignore_warnings")
    g = _service(check='grpc_service = "health"\ngrpc_use_tls = true', ctype="grpc").checks[0]
    assert (g.type, g.grpc_service, g.grpc_use_tls) == ("grpc", "health", True)


def test_the_fields_survive_the_api_json_round_trip() -> None:
    parsed = _parse('address = "10.9.0.1"\nmeta { a = "b" }\nweights { warning = 2 }', 'header { A = ["1"] }')
    again = parse_jobspec(json.dumps({"Job": parsed_job_json(parsed.job)}), source="s.json")
    assert again.job.groups[0].services == parsed.job.groups[0].services


# --- Nomad's rules, with its texts -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("service", "check", "ctype", "said"),
    [
        ('address = "10.0.0.1"\naddress_mode = "host"', "", "http", 'must be "auto" if address is set'),
        ('address_mode = "nope"', "", "http", 'Service address_mode must be "auto", "host", or "driver"'),
        ('address_mode = "driver"', "", "http", 'cannot use address_mode="driver": no driver network'),
        ('on_update = "later"', "", "http", "Service on_update must be"),
        ("", 'on_update = "later"', "http", 'on_update must be "require_healthy"'),
        ("", 'initial_status = "ok"', "http", "invalid initial check state (ok)"),
        ('kind = "connect-proxy"', "", "http", "kind must be one of consul service kind or empty"),
        ('tagged_addresses { lan = "web.lab" }', "", "http", 'error parsing address "web.lab"'),
        (
            "",
            'on_update = "ignore"\ncheck_restart { limit = 2 }',
            "http",
            "not compatible with check_restart",
        ),
        ("", 'on_update = "ignore_warnings"\ncheck_restart { limit = 2 }', "http", "ignore_warnings value"),
        ("", 'notes = "%s"' % ("n" * 256), "http", "notes must not be longer than 255 characters"),
        ("", "expose = true", "http", "exposed service check g->web->"),
        ("", "expose = true", "tcp", "expose may only be set on HTTP or gRPC checks"),
        ("connect {\n native = true\n}", "", "http", "does not run Consul Connect"),
        ('identity {\n aud = ["consul.io"]\n}', "", "http", "does not log services in to Consul"),
        ('cluster = "eu"', "", "http", "'eu' is not served here"),
        ('provider = "nomad"', "", "grpc", 'invalid check type ("grpc"), must be one of tcp, http'),
        ('provider = "nomad"', 'on_update = "ignore_warnings"', "http", "only be set to ignore_warnings"),
        (
            'provider = "nomad"',
            "success_before_passing = 2",
            "http",
            "may only be set for Consul service checks",
        ),
        ("", 'protocol = "ftp"', "http", 'unsupported protocol scheme "ftp"'),
    ],
)
def test_nomads_rules_refuse_with_its_texts(service: str, check: str, ctype: str, said: str) -> None:
    problems = _refused(service, check, ctype)
    assert any(said in p for p in problems), problems


def test_thresholds_need_a_check_type_consul_counts() -> None:
    job = JOB.replace('path     = "/h"', 'command = "/x"\ntask = "t"')
    with pytest.raises(JobspecError, match='success_before_passing not supported for check of type "script"'):
        parse_jobspec(
            job % {"service": "", "check": "success_before_passing = 1", "type": "script"}, source="s"
        )


def test_fields_nomad_ignores_are_warned_about_as_ignored() -> None:
    parsed = _parse('provider = "nomad"\nmeta { a = "b" }', 'initial_status = "passing"\nadvertise = "x"')
    warned = "\n".join(parsed.warnings)
    assert "service[0].meta: only Consul's" in warned
    assert "initial_status: ignored for a Nomad service's check" in warned
    assert "advertise: ignored: Nomad's server drops it" in warned


# --- where a registration points (Nomad's GetAddress) ----------------------------------------------

PORTS = (PortAlloc("http", 20001, 8080),)


def _addr(mode: str, custom: str = "", label: str = "http") -> tuple[str, int] | str:
    return service_address(
        mode=mode,
        custom=custom,
        label=label,
        ports=PORTS,
        alloc_address="172.26.64.9",
        node_address="10.0.0.5",
    )


def test_service_addresses_are_nomads() -> None:
    assert _addr("auto") == ("10.0.0.5", 20001)
    assert _addr("host") == ("10.0.0.5", 20001)
    assert _addr("alloc") == ("172.26.64.9", 8080)
    assert _addr("auto", custom="192.0.2.7") == ("192.0.2.7", 20001)
    assert _addr("auto", custom="192.0.2.7", label="9000") == ("192.0.2.7", 9000)
    assert _addr("auto", custom="192.0.2.7", label="") == ("192.0.2.7", 0)
    assert _addr("host", custom="192.0.2.7") == 'cannot use custom advertise address with "host" address mode'
    assert _addr("alloc", label="nope") == 'invalid port "nope": port label not found or is not numeric'


def test_a_check_of_a_service_with_a_custom_address_goes_there() -> None:
    got = check_target(
        mode="", label="http", ports=PORTS, alloc_address="", node_address="10.0.0.5", custom="192.0.2.7"
    )
    assert got == CheckTarget("192.0.2.7", 20001)


def _runner(svc: Service, address: str = "172.26.64.9") -> Any:
    rec = SimpleNamespace(desired=DesiredStatus.RUN, ports=PORTS, address=address)
    group = SimpleNamespace(services=(svc,), tasks=())
    return SimpleNamespace(
        id="a1", rec=rec, group=group, job=SimpleNamespace(id="j"), alloc_running=lambda: True
    )


def test_nomad_registrations_point_where_the_address_mode_says() -> None:
    def one(svc: Service) -> list[dict[str, Any]]:
        return alloc_registrations(
            _runner(svc), advertise_address="10.0.0.5", node_id="n", datacenter="dc1", index=3
        )

    base = Service("web", port="http", provider="nomad", tags=("t",), canary_tags=("c",))
    [reg] = one(base)
    assert (reg["Address"], reg["Port"], reg["Tags"]) == ("10.0.0.5", 20001, ["t"])  # no canaries here
    [reg] = one(Service("web", port="http", provider="nomad", address_mode="alloc"))
    assert (reg["Address"], reg["Port"]) == ("172.26.64.9", 8080)
    [reg] = one(Service("web", port="http", provider="nomad", address="192.0.2.7"))
    assert (reg["Address"], reg["Port"]) == ("192.0.2.7", 20001)


# --- what Consul is given (api.AgentServiceRegistration) -------------------------------------------

PORT_RECORDS = [{"label": "http", "host": 20001, "to": 8080}]


def test_the_consul_registration_carries_the_services_fields() -> None:
    svc = Service(
        "web",
        port="http",
        tags=("v1",),
        canary_tags=("canary",),
        meta={"team": "edge"},
        canary_meta={"stage": "canary"},
        enable_tag_override=True,
        tagged_addresses={"lan": "10.0.0.1", "wan": "192.0.2.1:443"},
        weights=(5, 2),
        kind="ingress-gateway",
    )
    [reg] = registrations("a1", "", [svc], "10.0.0.5", PORT_RECORDS)
    assert (reg["Tags"], reg["Meta"]) == (["v1"], {"team": "edge", "external-source": "nomad"})
    assert (reg["Kind"], reg["EnableTagOverride"], reg["Weights"]) == (
        "ingress-gateway",
        True,
        {"Passing": 5, "Warning": 2},
    )
    assert reg["TaggedAddresses"] == {
        "lan": {"Address": "10.0.0.1", "Port": 20001},
        "wan": {"Address": "192.0.2.1", "Port": 443},
    }
    [canary] = registrations("a1", "", [svc], "10.0.0.5", PORT_RECORDS, canary=True)
    assert (canary["Tags"], canary["Meta"]) == (["canary"], {"stage": "canary", "external-source": "nomad"})


def test_the_consul_registration_points_where_the_address_mode_says() -> None:
    alloc = Service("web", port="http", address_mode="alloc")
    [reg] = registrations("a1", "", [alloc], "10.0.0.5", PORT_RECORDS, alloc_address="172.26.64.9")
    assert (reg["Address"], reg["Port"]) == ("172.26.64.9", 8080)
    custom = Service("web", port="http", address="192.0.2.7", checks=(Check("c", "tcp"),))
    [reg] = registrations("a1", "", [custom], "10.0.0.5", PORT_RECORDS)
    assert (reg["Address"], reg["Port"], reg["Checks"][0]["TCP"]) == ("192.0.2.7", 20001, "192.0.2.7:20001")
    with pytest.raises(ConsulError, match='unable to get address for service "web": cannot use address_mode'):
        registrations("a1", "", [alloc], "10.0.0.5", PORT_RECORDS)


def test_the_consul_checks_carry_the_checks_fields() -> None:
    http_check = Check(
        "h",
        "http",
        path="/health",
        method="POST",
        protocol="https",
        header={"X-A": ("1", "2")},
        body="{}",
        tls_skip_verify=True,
        tls_server_name="web.lab",
        initial_status="critical",
        success_before_passing=2,
        failures_before_critical=3,
        failures_before_warning=1,
    )
    grpc = Check("g", "grpc", grpc_service="health.v1", grpc_use_tls=True)
    [reg] = registrations(
        "a1", "", [Service("web", port="http", checks=(http_check, grpc))], "10.0.0.5", PORT_RECORDS
    )
    h, g = reg["Checks"]
    assert h == {
        "Name": "h",
        "Interval": "10s",
        "Timeout": "2s",
        "Status": "critical",
        "SuccessBeforePassing": 2,
        "FailuresBeforeCritical": 3,
        "FailuresBeforeWarning": 1,
        "HTTP": "https://10.0.0.5:20001/health",
        "Method": "POST",
        "Body": "{}",
        "Header": {"X-A": ["1", "2"]},
        "TLSSkipVerify": True,
        "TLSServerName": "web.lab",
    }
    assert (g["GRPC"], g["GRPCUseTLS"]) == ("10.0.0.5:20001/health.v1", True)


# --- the agent's own checker: what a Nomad service's http check sends ------------------------------


def _own_address() -> str:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], check=False, capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        return line.split()[3].split("/")[0]
    pytest.skip("this host has no global IPv4 address (checks never go to loopback)")


class _Seen(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, list[tuple[str, str]], bytes]]] = []

    def _any(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        self.seen.append((self.command, self.path, list(self.headers.items()), self.rfile.read(size)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = _any

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, int, int]]:
    """An http and an https server (a self-signed certificate) on this host's own address."""
    address = _own_address()
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=lab"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    plain = http.server.ThreadingHTTPServer((address, 0), _Seen)
    tls = http.server.ThreadingHTTPServer((address, 0), _Seen)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    tls.socket = context.wrap_socket(tls.socket, server_side=True)
    for s in (plain, tls):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    _Seen.seen = []
    yield address, plain.server_address[1], tls.server_address[1]
    for s in (plain, tls):
        s.shutdown()
        s.server_close()


def test_an_http_check_sends_its_method_headers_and_body(server: tuple[str, int, int]) -> None:
    address, port, _ = server
    c = Check(
        "h",
        "http",
        path="/ready?x=1",
        method="POST",
        header={"X-A": ("1", "2"), "Host": ("web.lab",)},
        body="hi",
    )
    assert _probe("http", CheckTarget(address, port), c)[:2] == (200, "")
    [(method, path, headers, body)] = _Seen.seen
    assert (method, path, body) == ("POST", "/ready?x=1", b"hi")
    assert [v for k, v in headers if k == "X-A"] == ["1", "2"]
    assert [v for k, v in headers if k.lower() == "host"] == ["web.lab"]  # one Host: the check's
    assert [v for k, v in headers if k == "User-Agent"] == ["Nomad/fieldlab-agent"]


def test_an_https_check_verifies_the_certificate_unless_told_not_to(server: tuple[str, int, int]) -> None:
    address, _, tls_port = server
    verified = Check("h", "http", path="/", protocol="https")
    code, error, _ = _probe("http", CheckTarget(address, tls_port), verified)
    assert code is None and "CERTIFICATE_VERIFY_FAILED" in error
    skipped = Check("h", "http", path="/", protocol="https", tls_skip_verify=True)
    assert _probe("http", CheckTarget(address, tls_port), skipped)[:2] == (200, "")


# --- on_update: readiness checks and deployment health ---------------------------------------------


def test_on_update_ignore_makes_a_readiness_check() -> None:
    assert check_mode(Check("c", "http", on_update="ignore")) == "readiness"
    assert check_mode(Check("c", "http")) == "healthiness"


def test_deployment_health_waits_for_the_nomad_checks_as_nomads_tracker() -> None:
    ok = {"Status": "success", "Mode": "healthiness"}
    assert nomad_checks_pass([ok, {"Status": "failure", "Mode": "readiness"}], 2)
    assert not nomad_checks_pass([ok, {"Status": "failure", "Mode": "healthiness"}], 2)
    assert not nomad_checks_pass([ok, {"Status": "pending", "Mode": "readiness"}], 2)
    assert not nomad_checks_pass([ok], 2)  # a check without a result yet
    view = {"status": "running", "created": 0.0, "tasks": {"t": {"state": "running"}}}

    def health(checks_since: float | None, now: float) -> tuple[bool, float] | None:
        return alloc_health(
            view, [], ["t"], min_healthy=10, healthy_deadline=300, now=now, checks_since=checks_since
        )

    assert health(0.0, 20) == (True, 10)  # no checks to wait for: task states only
    assert health(None, 20) is None  # checks not passing: not yet healthy
    assert health(15.0, 20) is None  # passing for 5s of the 10s min_healthy_time
    assert health(15.0, 25) == (True, 25)
    assert health(None, 300) == (False, 300)  # the healthy deadline
