"""The agent's API over real mTLS: the operator's cert gets answers; other certs from the same CA get
403, no cert or another CA's is refused in the handshake; bad requests get a 4xx (the server's JSON, or
Nomad's plain-text reason from its routes), never a traceback; idle and slow clients never stop the
API from answering the operator."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent import cli
from agent.api import server as agent_api
from agent.api.handler import Handler, Response, json_response
from agent.api.server import ApiServer
from agent.client.allocs import ServerHooks
from agent.client.core import Core
from agent.command.config import Config, TLSConfig, VaultConfig
from agent.command.daemon import Agent
from agent.fieldbugs.bugs import NO_BUGS
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.state.changes import ChangeIndex
from tests.agent_lab import NODE, NomadRoutes
from tests.fakes import FakeNode
from tests.openbao_server import OpenBaoServer
from tests.pki import Issued, TestCA

OPERATOR = "controller.operator.fieldlab"  # the lab pki role's pki_operator_common_name


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def running_agent(tmp_path: Path) -> Iterator[tuple[Agent, TestCA, int]]:
    ca = TestCA(tmp_path)
    srv = ca.issue("client1.agent.fieldlab", server=True)
    port = _free_port()
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=port,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        jobs_enabled=False,
    )
    agent = Agent(cfg)
    agent.startup()
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    yield agent, ca, port
    agent.stop()
    t.join(5)
    agent.shutdown()


def _ctx(ca: TestCA, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def test_health_answers_the_operator_cert(running_agent: tuple[Agent, TestCA, int]) -> None:
    agent, ca, port = running_agent
    op = ca.issue(OPERATOR, server=False)
    with urllib.request.urlopen(
        f"https://127.0.0.1:{port}/v1/agent/health", context=_ctx(ca, op.cert, op.key), timeout=5
    ) as resp:
        body = json.loads(resp.read())
    assert resp.status == 200
    assert body == {"client": {"ok": True, "message": "ok"}}  # Nomad's AgentHealthResponse
    detail = agent.health_body()  # what /v1/agent/self carries in Stats["fieldlab"]
    assert detail["status"] == "ok" and detail["node"] == "client1"
    assert detail["vault"] == {"configured": False, "authenticated": False, "error": ""}


def test_metrics_are_nomads_json_or_prometheus_text(running_agent: tuple[Agent, TestCA, int]) -> None:
    """As Nomad's agent: api.MetricsSummary JSON by default, Prometheus text with
    `?format=prometheus` (dots joined with `_`); another format is a 400 naming it."""
    _, ca, port = running_agent
    op = ca.issue(OPERATOR, server=False)
    ctx = _ctx(ca, op.cert, op.key)

    def get(query: str) -> tuple[str, str]:
        url = f"https://127.0.0.1:{port}/v1/metrics{query}"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return resp.headers["Content-Type"], resp.read().decode()

    kind, text = get("?format=prometheus")
    assert kind.startswith("text/plain") and "# TYPE fieldlab_agent_up gauge\nfieldlab_agent_up 1\n" in text
    assert "\nnomad_client_allocations_running 0\n" in text, text
    kind, raw = get("")
    summary = json.loads(raw)
    assert kind == "application/json" and set(summary) == {
        "Timestamp",
        "Gauges",
        "Points",
        "Counters",
        "Samples",
    }
    gauges = {g["Name"]: g["Value"] for g in summary["Gauges"]}
    assert gauges["fieldlab.agent.up"] == 1 and gauges["nomad.client.allocations.running"] == 0, gauges
    assert all(set(g) == {"Name", "Value", "Labels"} for g in summary["Gauges"])
    with pytest.raises(urllib.error.HTTPError) as bad:
        get("?format=xml")
    assert bad.value.code == 400 and "format='xml'" in bad.value.read().decode()


def test_client_without_a_cert_is_refused_at_tls(running_agent: tuple[Agent, TestCA, int]) -> None:
    _, ca, port = running_agent
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/v1/agent/health", context=_ctx(ca), timeout=5)


def test_client_with_a_cert_from_another_ca_is_refused(
    running_agent: tuple[Agent, TestCA, int], tmp_path: Path
) -> None:
    _, ca, port = running_agent
    other = TestCA(tmp_path, cn="stranger CA")
    bad = other.issue("intruder", server=False)
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(
            f"https://127.0.0.1:{port}/v1/agent/health", context=_ctx(ca, bad.cert, bad.key), timeout=5
        )


def test_health_shows_the_start_up_vault_login_of_the_agents_one_client(
    tmp_path: Path, openbao: OpenBaoServer
) -> None:
    ca = TestCA(tmp_path)
    srv = ca.issue("client1.agent.fieldlab", server=True)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=_free_port(),
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        vault=VaultConfig(openbao.address, openbao.approle_file),
        jobs_enabled=False,
    )
    agent = Agent(cfg)
    agent.startup()
    core = FakeNode(tmp_path / "node").core()
    threading.Thread(target=core.loop.run, daemon=True).start()
    try:
        op = ca.issue(OPERATOR, server=False)
        with urllib.request.urlopen(
            f"https://127.0.0.1:{cfg.port}/v1/agent/health",
            context=_ctx(ca, op.cert, op.key),
            timeout=5,
        ) as resp:
            assert json.loads(resp.read()) == {"client": {"ok": True, "message": "ok"}}
        assert agent.health_body()["vault"] == {"configured": True, "authenticated": True, "error": ""}
        # Through Nomad's API as the daemon wires it: Stats["fieldlab"] of /v1/agent/self.
        stats = NomadRoutes(core, nomad=agent._nomad_api(core)).request("GET", "/v1/agent/self")["stats"]
        fieldlab = stats["fieldlab"]
        assert (fieldlab["vault_configured"], fieldlab["vault_authenticated"]) == ("true", "true"), fieldlab
        assert fieldlab["vault_error"] == "" and fieldlab["vault_status_state"] == "ok", fieldlab
        # One login, by the client the core would be given for templates (not a throwaway one).
        assert agent.vault_client is not None and agent.vault_client.logins == 1
    finally:
        core.stop()
        agent.shutdown()


# -- who may call, and an API that stays up: an ApiServer with a few test routes ------------------


def _agent_cert(ca: TestCA, cn: str) -> Issued:
    """A cert like the lab's fieldlab-agent role issues: server and client auth in one."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    cpath, kpath = ca.dir / f"{cn}.crt", ca.dir / f"{cn}.key"
    cpath.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    kpath.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return Issued(cpath, kpath)


@dataclass
class Served:
    ca: TestCA
    port: int
    operator: Issued
    calls: list[tuple[str, bytes]]  # what the write handlers were given
    server: ApiServer

    def ctx(self, cert: Issued | None) -> ssl.SSLContext:
        return _ctx(self.ca, cert.cert, cert.key) if cert else _ctx(self.ca)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def request(
        self, method: str, path: str, body: bytes | None = None, cert: Issued | None = None
    ) -> tuple[int, Any]:
        """(status, body): JSON decoded, a plain-text answer (Nomad's errors) as str."""
        req = urllib.request.Request(self.url(path), data=body, method=method)
        try:
            with urllib.request.urlopen(req, context=self.ctx(cert or self.operator), timeout=10) as resp:
                return resp.status, _decoded(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decoded(exc.read())

    def tls(self, cert: Issued | None = None, timeout: float = 10) -> ssl.SSLSocket:
        tcp = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.ctx(cert or self.operator).wrap_socket(tcp, server_hostname="localhost")

    def raw(self, request: bytes, cert: Issued | None = None) -> tuple[int, Any]:
        """Send `request` as it is and read the answer as a client does: (status, JSON body)."""
        with self.tls(cert) as tls:
            tls.sendall(request)
            resp = http.client.HTTPResponse(tls)
            resp.begin()
            return resp.status, json.loads(resp.read())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    servers: list[ApiServer] = []

    def start(handlers: list[tuple[str, str, Handler]] | None = None, **overrides: Any) -> Served:
        ca = TestCA(tmp_path)
        srv = ca.issue("client1.agent.fieldlab", server=True)
        calls: list[tuple[str, bytes]] = []

        def echo(groups: tuple[str, ...], body: bytes) -> Response:
            calls.append(("echo", body))
            return json_response(200, {"bytes": len(body)})

        def delete(groups: tuple[str, ...], body: bytes) -> Response:
            calls.append(("delete", body))
            return json_response(200, {"deleted": groups[0]})

        cfg = Config(
            node_name="client1",
            data_dir=tmp_path / "data",
            bind_address="127.0.0.1",
            port=_free_port(),
            tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
            **overrides,
        )
        server = ApiServer(
            cfg,
            {"/v1/agent/health": lambda: json_response(200, {"status": "ok"})},
            [("POST", r"/v1/echo", echo), ("DELETE", r"/v1/thing/([a-z]+)", delete), *(handlers or [])],
        )
        server.start()
        servers.append(server)
        return Served(ca, server.port, ca.issue(OPERATOR, server=False), calls, server)

    yield start
    for server in servers:
        server.stop(5)


def test_the_operator_may_call_and_each_write_is_logged_with_its_identity(
    serve: Callable[..., Served], caplog: pytest.LogCaptureFixture
) -> None:
    api = serve()
    with caplog.at_level(logging.INFO, logger="agent.api"):
        assert api.request("GET", "/v1/agent/health") == (200, {"status": "ok"})
        assert api.request("POST", "/v1/echo", b'{"a": 1}') == (200, {"bytes": 8})
        assert api.request("DELETE", "/v1/thing/abc") == (200, {"deleted": "abc"})
        assert api.request("POST", "/v1/nowhere", b"{}")[0] == 404
    writes = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(writes) == 3, writes  # the GET is not a write
    assert f"POST /v1/echo by {OPERATOR}" in writes[0] and writes[0].endswith("-> 200")
    assert f"DELETE /v1/thing/abc by {OPERATOR}" in writes[1]
    assert f"POST /v1/nowhere by {OPERATOR}" in writes[2] and writes[2].endswith("-> 404")


@pytest.mark.parametrize(
    ("who", "cn"),
    [("workload", "web.service.fieldlab"), ("another agent", "client2.agent.fieldlab")],
)
def test_a_cert_of_the_same_ca_with_another_identity_gets_403_naming_it(
    serve: Callable[..., Served], caplog: pytest.LogCaptureFixture, who: str, cn: str
) -> None:
    api = serve()
    cert = api.ca.issue(cn, server=False) if who == "workload" else _agent_cert(api.ca, cn)
    with caplog.at_level(logging.INFO, logger="agent.api"):
        status, body = api.request("GET", "/v1/agent/health", cert=cert)
        assert status == 403 and body["identity"] == cn and repr(cn) in body["error"]
        status, body = api.request("POST", "/v1/echo", b"{}", cert=cert)
        assert status == 403 and body["identity"] == cn
        assert api.request("DELETE", "/v1/thing/abc", cert=cert)[0] == 403
    assert api.calls == []  # refused before any handler ran
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _ in lines] == [logging.WARNING] * 3
    assert all(repr(cn) in m and "403" in m for _, m in lines)
    assert all(r.exc_info is None for r in caplog.records)


def test_no_client_cert_is_refused_in_the_tls_handshake(serve: Callable[..., Served]) -> None:
    api = serve()
    ctx = _ctx(api.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # TLS 1.2: the refusal is in the handshake itself
    with (
        socket.create_connection(("127.0.0.1", api.port), timeout=5) as tcp,
        pytest.raises(ssl.SSLError),
    ):
        ctx.wrap_socket(tcp, server_hostname="localhost")
    # TLS 1.3: the client finishes its side of the handshake first; the server's side fails and the
    # connection ends with no answer (an alert, or just the close).
    tcp = socket.create_connection(("127.0.0.1", api.port), timeout=5)
    with _ctx(api.ca).wrap_socket(tcp, server_hostname="localhost") as tls:
        assert tls.version() == "TLSv1.3"
        try:
            tls.sendall(b"GET /v1/agent/health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = tls.recv(1024)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            answer = b""
        assert answer == b""
    assert api.request("GET", "/v1/agent/health")[0] == 200


@pytest.mark.parametrize(
    "headers",
    [
        "Content-Length: -1",
        "Content-Length: abc",
        "Content-Length: 0x10",
        "Content-Length: 2\r\nContent-Length: 3",
        "Transfer-Encoding: chunked",
    ],
)
def test_a_bad_content_length_is_a_400_with_one_warning_line(
    serve: Callable[..., Served], caplog: pytest.LogCaptureFixture, headers: str
) -> None:
    api = serve()
    extra = f"{headers}\r\n" if headers else ""
    with caplog.at_level(logging.DEBUG, logger="agent.api"):
        status, body = api.raw(f"POST /v1/echo HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    assert status == 400 and isinstance(body["error"], str), body
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert all(r.exc_info is None for r in caplog.records)
    assert api.calls == []


def test_a_body_over_the_limit_is_a_413_and_one_at_the_limit_is_read(serve: Callable[..., Served]) -> None:
    api = serve(api_max_body_bytes=1024)
    status, body = api.raw(b"POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n")
    assert status == 413 and "1025" in body["error"]
    # A client that sends its whole (large) body still reads the answer.
    assert api.request("POST", "/v1/echo", b"x" * 256 * 1024)[0] == 413
    assert api.calls == []
    assert api.request("POST", "/v1/echo", b"x" * 1024) == (200, {"bytes": 1024})


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _slow_loris(api: Served, stop: threading.Event, every: float, answers: list[bytes]) -> None:
    """Send a request head one byte every `every` seconds until `stop`; keep what the server said."""
    with api.tls() as tls:
        for byte in b"GET /v1/agent/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000:
            try:
                tls.sendall(bytes([byte]))
            except OSError:  # the server closed it
                break
            if stop.wait(every):
                return
        tls.settimeout(5)
        try:
            answers.append(tls.recv(65536))
        except OSError:
            answers.append(b"")


def test_the_operator_is_answered_while_55_clients_are_parked(serve: Callable[..., Served]) -> None:
    """50 idle TCP connections (no TLS at all) and 5 slow-loris clients stay open, more than the 4
    handler threads; every operator request is still answered (bound: 5 s; it should be ~ms)."""
    api = serve(api_max_connections=4, api_handshake_timeout=60.0, api_request_timeout=60.0)
    idle = [socket.create_connection(("127.0.0.1", api.port), timeout=5) for _ in range(50)]
    stop = threading.Event()
    answers: list[bytes] = []
    loris = [threading.Thread(target=_slow_loris, args=(api, stop, 1.0, answers)) for _ in range(5)]
    try:
        for t in loris:
            t.start()
        time.sleep(1.5)  # every loris has finished its handshake and sent a byte or two
        latencies = []
        for i in range(10):
            t0 = time.monotonic()
            status, _ = (
                api.request("GET", "/v1/agent/health") if i % 2 else api.request("POST", "/v1/echo", b"{}")
            )
            latencies.append(time.monotonic() - t0)
            assert status == 200
        print(
            "\noperator latency with 55 clients parked (ms): "
            + ", ".join(f"{s * 1000:.1f}" for s in latencies)
            + f"; max {max(latencies) * 1000:.1f}"
        )
        assert max(latencies) < 5.0, latencies
        assert answers == []  # the slow clients are still parked, not answered
    finally:
        stop.set()
        for t in loris:
            t.join(10)
        for s in idle:
            s.close()


def test_parked_clients_are_dropped_at_their_deadlines(serve: Callable[..., Served]) -> None:
    """An idle TCP connection is closed after the handshake timeout; a client trickling its head a byte
    every 0.2 s gets 408 at the request deadline, which its bytes do not extend."""
    api = serve(api_handshake_timeout=0.5, api_request_timeout=1.0)
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as idle:
        t0 = time.monotonic()
        assert _closed_by_server(idle)
        idle_closed = time.monotonic() - t0
    answers: list[bytes] = []
    t0 = time.monotonic()
    _slow_loris(api, threading.Event(), 0.2, answers)
    loris_answered = time.monotonic() - t0
    print(f"\nidle closed after {idle_closed:.2f} s, slow loris answered after {loris_answered:.2f} s")
    assert idle_closed < 5.0
    assert loris_answered < 5.0 and answers and answers[0].startswith(b"HTTP/1.1 408 "), answers


def test_at_the_cap_the_client_parked_longest_is_dropped(
    serve: Callable[..., Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_api, "_MAX_PARKED", 4)
    api = serve(api_handshake_timeout=60.0)
    first = socket.create_connection(("127.0.0.1", api.port), timeout=5)
    time.sleep(0.2)
    rest = [socket.create_connection(("127.0.0.1", api.port), timeout=5) for _ in range(4)]
    try:
        assert _closed_by_server(first)  # dropped to make room
        assert api.request("GET", "/v1/agent/health")[0] == 200
    finally:
        for s in [first, *rest]:
            s.close()


def test_handlers_run_on_a_bounded_pool_and_health_does_not_wait_for_it(
    serve: Callable[..., Served],
) -> None:
    release = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def slow(groups: tuple[str, ...], body: bytes) -> Response:
        with lock:
            running[0] += 1
            running[1] = max(running)
        release.wait(10)
        with lock:
            running[0] -= 1
        return json_response(200, {})

    api = serve([("POST", r"/v1/slow", slow)], api_max_connections=2)
    clients = [threading.Thread(target=api.request, args=("POST", "/v1/slow", b"{}")) for _ in range(5)]
    for t in clients:
        t.start()
    try:
        time.sleep(1.0)
        assert running == [2, 2]  # two handler threads; three requests wait in the queue
        assert api.request("GET", "/v1/agent/health")[0] == 200  # the status lane is free
    finally:
        release.set()
        for t in clients:
            t.join(10)
    assert running == [0, 2]


def stand_in_routes() -> list[tuple[str, str, Handler]]:
    """Nomad's routes over a stand-in core with nothing but its change index (no store: evaluations
    in memory, a loop whose timers never run): enough for what a route does with a request before it
    touches the core (reading its body)."""
    never = lambda delay, fn: None  # noqa: E731
    core = SimpleNamespace(
        changes=ChangeIndex(), store=None, server=ServerHooks(), schedule=never, bugs=NO_BUGS
    )
    return build_nomad_routes(NomadApi(cast(Core, core), NODE))


@pytest.mark.parametrize(
    "route",
    [
        ("PUT", "/v1/jobs"),
        ("POST", "/v1/jobs/parse"),
        ("POST", "/v1/validate/job"),
        ("POST", "/v1/client/allocation/abcdef12/signal"),
    ],
)
@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe\x00", b"[1, 2]"])
def test_a_write_whose_body_is_no_json_object_is_a_400_not_a_traceback(
    serve: Callable[..., Served], caplog: pytest.LogCaptureFixture, route: tuple[str, str], body: bytes
) -> None:
    api = serve(stand_in_routes())
    with caplog.at_level(logging.DEBUG, logger="agent"):
        status, out = api.request(*route, body)
    assert status == 400 and "JSON" in out, out  # Nomad's error: the status and a plain-text reason
    assert all(r.exc_info is None and r.levelno < logging.ERROR for r in caplog.records)


EXAMPLE_JOB = """job "example" {
  group "g" {
    task "t" {
      driver = "docker"
      config { image = "busybox" }
    }
  }
}
"""


def test_the_cli_speaks_nomads_api_with_the_operator_cert_and_names_a_refused_identity(
    serve: Callable[..., Served],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`fieldlab-agent job|alloc` through agent.api.client (as the e2e harness does), against Nomad's
    routes over a fake node: every verb is answered by Nomad's routes alone, and does what it says."""
    node = FakeNode(tmp_path / "node")
    core = node.core()
    threading.Thread(target=core.loop.run, daemon=True).start()
    seen: list[tuple[str, str, Any]] = []

    def recorded(method: str, path: str, handler: Handler) -> tuple[str, str, Handler]:
        def record(groups: tuple[str, ...], body: bytes) -> Any:
            seen.append((method, path, json.loads(body) if body else None))
            return handler(groups, body)

        return method, path, record

    api = serve([recorded(*r) for r in NomadRoutes(core).table])
    jobspec = tmp_path / "example.hcl"
    jobspec.write_text(EXAMPLE_JOB)
    env = {
        "FIELDLAB_AGENT_ADDR": f"https://127.0.0.1:{api.port}",
        "FIELDLAB_AGENT_CACERT": str(api.ca.ca_file),
        "FIELDLAB_AGENT_CLIENT_CERT": str(api.operator.cert),
        "FIELDLAB_AGENT_CLIENT_KEY": str(api.operator.key),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        assert cli.main(["job", "run", str(jobspec)]) == 0
        alloc = core.call(lambda: next(iter(core.runners)))
        commands = [
            ["job", "list", "-json"],
            ["alloc", "list", "-json"],
            ["alloc", "status", alloc[:4], "-json"],
            ["alloc", "restart", alloc[:4], "t"],
            ["alloc", "signal", "-s", "SIGHUP", alloc[:4], "t"],
            ["job", "stop", "example"],
        ]
        for argv in commands:
            assert cli.main(argv) == 0, (argv, capsys.readouterr().err)
        calls = [(m, p) for m, p, _ in seen]
        assert ("PUT", r"/v1/jobs") in calls and ("DELETE", r"/v1/job/(.+)") in calls, calls
        assert ("POST", r"/v1/client/allocation/([^/]+)/restart") in calls, calls
        assert ("POST", r"/v1/client/allocation/([^/]+)/signal") in calls, calls
        registered = next(b for m, p, b in seen if (m, p) == ("PUT", r"/v1/jobs"))
        assert registered["Job"]["ID"] == "example" and registered["Submission"]["Source"] == EXAMPLE_JOB
        assert core.call(lambda: core.allocs.runner(alloc).rec.desired.value) == "stop"  # the job stopped
        assert [sig for _, sig in node.docker.signals] == ["SIGHUP"]
        capsys.readouterr()
        workload = api.ca.issue("web.service.fieldlab", server=False)
        monkeypatch.setenv("FIELDLAB_AGENT_CLIENT_CERT", str(workload.cert))
        monkeypatch.setenv("FIELDLAB_AGENT_CLIENT_KEY", str(workload.key))
        assert cli.main(["job", "list"]) == 2
        assert "HTTP 403: client identity 'web.service.fieldlab' may not call" in capsys.readouterr().err
    finally:
        core.stop()


def test_stop_returns_while_a_handler_still_runs_and_logs_no_error(
    serve: Callable[..., Served], caplog: pytest.LogCaptureFixture
) -> None:
    release, entered = threading.Event(), threading.Event()

    def stuck(groups: tuple[str, ...], body: bytes) -> Response:
        entered.set()
        release.wait(10)
        return json_response(200, {})

    api = serve([("POST", r"/v1/stuck", stuck)])
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(api.request("POST", "/v1/stuck", b"{}"))
        except OSError as exc:  # the server dropped the connection as it stopped
            outcome.append(exc)

    client = threading.Thread(target=call)
    client.start()
    assert entered.wait(5)
    with caplog.at_level(logging.DEBUG):
        t0 = time.monotonic()
        api.server.stop(5)
        stopped = time.monotonic() - t0
        release.set()  # the handler finishes after its loop is gone
        client.join(10)
        time.sleep(0.2)
    assert stopped < 2.0 and len(outcome) == 1 and isinstance(outcome[0], OSError), outcome
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_write_retried_with_its_idempotency_key_acts_once(serve: Callable[..., Served]) -> None:
    """The client's first try times out while the handler still runs; its retry (same key) waits
    for that answer and gets it: the handler ran once. The same key for another request is a 422;
    a 503 (not carried out) keeps no answer, so its retry runs."""
    release = threading.Event()
    runs: list[bytes] = []
    busy_once = [True]

    def slow(groups: tuple[str, ...], body: bytes) -> Response:
        runs.append(body)
        release.wait(10)
        return json_response(200, {"run": len(runs)})

    def busy(groups: tuple[str, ...], body: bytes) -> Response:
        runs.append(b"busy")
        if busy_once[0]:
            busy_once[0] = False
            return json_response(503, {"error": "not carried out"})
        return json_response(200, {"run": len(runs)})

    api = serve([("POST", r"/v1/slow", slow), ("POST", r"/v1/busy", busy)])

    def post(path: str, body: bytes, key: str, timeout: float = 10) -> tuple[int, Any]:
        req = urllib.request.Request(
            api.url(path), data=body, method="POST", headers={"Idempotency-Key": key}
        )
        try:
            with urllib.request.urlopen(req, context=api.ctx(api.operator), timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with pytest.raises((TimeoutError, urllib.error.URLError)):
        post("/v1/slow", b'{"a": 1}', "k-1", timeout=0.5)  # the caller gives up; the action goes on
    retry: list[tuple[int, Any]] = []
    t = threading.Thread(target=lambda: retry.append(post("/v1/slow", b'{"a": 1}', "k-1")))
    t.start()
    deadline = time.monotonic() + 5
    while api.server.replays.replayed == 0:  # the retry reached the agent and waits for the first
        assert time.monotonic() < deadline, "the retry did not reach the agent"
        time.sleep(0.01)
    release.set()
    t.join(10)
    assert retry == [(200, {"run": 1})]
    assert runs == [b'{"a": 1}'], "a retried request was carried out twice"

    status, body = post("/v1/slow", b'{"a": 2}', "k-1")
    assert status == 422 and "different request" in body["error"]
    assert len(runs) == 1

    assert post("/v1/busy", b"{}", "k-2")[0] == 503
    assert post("/v1/busy", b"{}", "k-2") == (200, {"run": 3})
    status, body = post("/v1/slow", b"{}", "bad key!")
    assert status == 422 and "Idempotency-Key" in body["error"]
