"""The API's HTTP/1.1 (h11) limits as configuration, over real mTLS to the real ApiServer: a bodyless
POST or PUT is an empty body (as Nomad's agent takes `curl --request POST`), a head over
`api_max_header_bytes` is a 431, a client address past `api_max_conns_per_client` gets 429, and a
request past `api_max_queued_requests` waiting for busy handlers is answered (503 or 429, as
configured) without running, never queued without bound; health answers throughout.

What a bug would break: a bodyless write refused, a limit that is not the configured one, requests
(and their bodies) piling up in memory behind busy handlers, a refused request run anyway."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.api.client import ApiClient, ApiError
from agent.api.handler import Response, Streamed, json_response
from agent.api.server import ApiServer
from agent.command.config import Config, TLSConfig
from agent.drivers import execframes as ef
from agent.drivers.session import ExecSession, ProcessSession
from lab.waits import wait_until
from tests.pki import TestCA
from tests.test_agent_api import OPERATOR, Served, serve

__all__ = ["serve"]  # the fixture, from the API's tests (re-exported so it is used)

WAIT = 10.0  # seconds for requests to reach the state a test sets up


def _answer(tls: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the answer on `tls`, read as far as its Content-Length."""
    resp = http.client.HTTPResponse(tls)
    resp.begin()
    return resp.status, dict(resp.getheaders()), resp.read()


def test_a_bodyless_post_or_put_is_an_empty_body(serve: Callable[..., Served]) -> None:
    got: list[bytes] = []

    def put(groups: tuple[str, ...], body: bytes) -> Response:
        got.append(body)
        return json_response(200, {"bytes": len(body)})

    api = serve([("PUT", r"/v1/echo", put)])
    assert api.raw(b"POST /v1/echo HTTP/1.1\r\nHost: x\r\n\r\n") == (200, {"bytes": 0})
    assert api.raw(b"PUT /v1/echo HTTP/1.1\r\nHost: x\r\n\r\n") == (200, {"bytes": 0})
    assert api.calls == [("echo", b"")] and got == [b""]


def test_a_head_over_the_configured_size_is_a_431_and_one_under_it_is_answered(
    serve: Callable[..., Served],
) -> None:
    api = serve(api_max_header_bytes=4096)
    pad = "X-Pad: " + "a" * 6000
    status, body = api.raw(f"GET /v1/agent/health HTTP/1.1\r\nHost: x\r\n{pad}\r\n\r\n".encode())
    assert status == 431 and "4096" in body["error"], body
    small = "X-Pad: " + "a" * 2000
    assert api.raw(f"GET /v1/agent/health HTTP/1.1\r\nHost: x\r\n{small}\r\n\r\n".encode())[0] == 200


def test_a_client_address_past_its_connections_gets_429_and_one_closed_makes_room(
    serve: Callable[..., Served],
) -> None:
    api = serve(api_max_conns_per_client=3, api_handshake_timeout=30.0, api_request_timeout=30.0)
    held = [api.tls() for _ in range(3)]  # TLS done, no request: each holds its place
    try:
        with api.tls() as extra:
            extra.sendall(b"GET /v1/agent/health HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body = _answer(extra)
        assert status == 429, body
        assert "too many connections from 127.0.0.1: at most 3" in json.loads(body)["error"]
        held.pop().close()

        def answered() -> tuple[int | None, str]:
            status = api.request("GET", "/v1/agent/health")[0]
            return (status if status == 200 else None), f"answered {status}"

        wait_until(answered, timeout=WAIT, what="a request once a connection closed", interval=0.1)
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("full_status", [503, 429])
def test_requests_past_the_queue_bound_are_answered_without_running(
    serve: Callable[..., Served], full_status: int
) -> None:
    release = threading.Event()
    ran: list[bytes] = []

    def slow(groups: tuple[str, ...], body: bytes) -> Response:
        ran.append(body)
        release.wait(WAIT)
        return json_response(200, {})

    api = serve(
        [("POST", r"/v1/slow", slow)],
        api_max_connections=1,
        api_max_queued_requests=2,
        api_queue_full_status=full_status,
    )
    answers: list[int] = []
    clients = [
        threading.Thread(target=lambda i=i: answers.append(api.request("POST", "/v1/slow", b"%d" % i)[0]))
        for i in range(3)
    ]
    try:
        for t in clients:
            t.start()
        wait_until(
            lambda: (
                True if len(ran) == 1 and api.server.queued_requests() == 2 else None,
                f"{len(ran)} running",
            ),
            timeout=WAIT,
            what="one request running and two waiting",
            interval=0.05,
        )
        with api.tls() as tls:
            tls.sendall(b"POST /v1/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nlast")
            status, headers, body = _answer(tls)
        assert status == full_status and headers.get("Retry-After") == "1", (status, headers)
        assert "1 busy handlers" in json.loads(body)["error"]
        t0 = time.monotonic()
        assert api.request("GET", "/v1/agent/health")[0] == 200  # the status lane is not queued
        assert time.monotonic() - t0 < 2.0
    finally:
        release.set()
        for t in clients:
            t.join(WAIT)
    assert sorted(answers) == [200, 200, 200]
    assert b"last" not in ran and len(ran) == 3


def test_1mib_bodies_past_the_queue_bound_are_refused_before_they_are_read(
    serve: Callable[..., Served],
) -> None:
    """40 writes of 1 MiB each behind a busy handler: the agent holds none of their bodies (it held
    every one, 341 MB for 200 in the audit)."""
    release = threading.Event()
    ran: list[bytes] = []

    def slow(groups: tuple[str, ...], body: bytes) -> Response:
        ran.append(body)
        release.wait(WAIT)
        return json_response(200, {})

    api = serve([("POST", r"/v1/slow", slow)], api_max_connections=1, api_max_queued_requests=2)
    first = [threading.Thread(target=api.request, args=("POST", "/v1/slow", b"{}")) for _ in range(3)]
    size = 1024 * 1024
    request = b"POST /v1/slow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size
    statuses: list[int] = []

    def write(n: int) -> None:
        for _ in range(n):
            try:
                with api.tls(timeout=5) as tls:
                    tls.sendall(request)
                    statuses.append(_answer(tls)[0])
            except OSError as exc:  # not answered in time: queued (or read and held)
                statuses.append(0)
                print(f"write not answered: {exc!r}")

    try:
        for t in first:
            t.start()
        wait_until(
            lambda: (
                True if len(ran) == 1 and api.server.queued_requests() == 2 else None,
                f"{len(ran)} running",
            ),
            timeout=WAIT,
            what="one request running and two waiting",
            interval=0.05,
        )
        tracemalloc.start()
        writers = [threading.Thread(target=write, args=(5,)) for _ in range(8)]
        for t in writers:
            t.start()
        for t in writers:
            t.join(60)
        held, _ = tracemalloc.get_traced_memory()  # what the writes left allocated (the agent's)
        tracemalloc.stop()
        print(
            f"\n40 writes of 1 MiB behind a busy handler: the agent holds {held / 1024 / 1024:.1f} MiB more"
        )
        assert statuses == [503] * 40, statuses
        assert held < 8 * 1024 * 1024, f"the agent holds {held} bytes more"
    finally:
        release.set()
        for t in first:
            t.join(WAIT)
    assert len(ran) == 3


def test_the_agents_client_opens_a_session_on_h11_and_reads_a_refusal(tmp_path: Path) -> None:
    """`ApiClient.upgrade` (fieldlab-exec): the 101 and the session's frames after it, or the
    agent's refusal as an ApiError with its status and JSON."""
    ca = TestCA(tmp_path)
    srv, op = ca.issue("client1.agent.fieldlab", server=True), ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=0,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
    )

    def opener(groups: tuple[str, ...], body: bytes) -> Response | ExecSession:
        if json.loads(body)["cmd"] == ["refuse"]:
            return json_response(409, {"error": "task web is not running"})
        return ProcessSession(["/bin/sh", "-c", "printf hi; exit 3"], None, "/", tty=False)

    server = ApiServer(cfg, {}, [], [("POST", r"/v1/exec", opener)])
    server.start()
    try:
        client = ApiClient(
            f"https://127.0.0.1:{server.port}", str(ca.ca_file), str(op.cert), str(op.key), 10, 1, "localhost"
        )
        sock, got = client.upgrade("/v1/exec", {"cmd": ["sh"]}, ef.PROTOCOL)
        frames: list[tuple[bytes, bytes]] = []
        with sock:
            sock.settimeout(WAIT)
            while not frames or frames[-1][0] != ef.EXIT:
                while (
                    len(got) < ef.HEADER.size
                    or len(got) < ef.HEADER.size + ef.header(got[: ef.HEADER.size], ef.FROM_AGENT)[1]
                ):
                    more = sock.recv(65536)
                    assert more, f"closed after {frames}"
                    got += more
                kind, length = ef.header(got[: ef.HEADER.size], ef.FROM_AGENT)
                frames.append((kind, got[ef.HEADER.size : ef.HEADER.size + length]))
                got = got[ef.HEADER.size + length :]
        assert b"".join(p for k, p in frames if k == ef.STDOUT) == b"hi"
        assert ef.parse_exit(frames[-1][1]) == (3, None)
        with pytest.raises(ApiError) as refused:
            client.upgrade("/v1/exec", {"cmd": ["refuse"]}, ef.PROTOCOL)
        assert (refused.value.status, refused.value.body) == (409, {"error": "task web is not running"})
    finally:
        server.stop(5)


def test_a_stream_to_a_client_that_does_not_read_ends_at_the_request_timeout_with_little_unsent(
    serve: Callable[..., Served],
) -> None:
    closed = threading.Event()
    made = [0]

    def chunks() -> Iterator[bytes]:
        while True:
            made[0] += 1
            yield b"x" * 65536

    def follow(groups: tuple[str, ...], body: bytes) -> Streamed:
        return Streamed(200, "application/json", chunks(), closed.set)

    api = serve([("GET", r"/v1/follow", follow)], api_request_timeout=1.0)
    unsent = 0
    with api.tls() as tls:
        tls.sendall(b"GET /v1/follow HTTP/1.1\r\nHost: x\r\n\r\n")  # and never reads
        deadline = time.monotonic() + WAIT
        while not closed.is_set() and time.monotonic() < deadline:
            unsent = max(unsent, api.server.unsent_bytes())
            closed.wait(0.05)
    assert closed.is_set(), f"the stream still runs after {WAIT:g} s ({made[0]} chunks made)"
    assert unsent <= 4 * 65536, f"{unsent} bytes unsent to a client that does not read"
