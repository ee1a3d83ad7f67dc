"""The exec websocket's framing (RFC 6455, on wsproto) against hostile clients, over a real mTLS socket
to the real ApiServer on the real Core with a fake node: a client that floods PINGs and never reads
is dropped with the agent's unsent bytes bounded and /v1/agent/health still quick; a control frame
over 125 bytes and a message over the configured size are refused with their close codes, and the
session's command dies with the session.

What a bug would break: pongs queued without bound for a client that does not read (the agent's
memory grows with the flood, health slows), control frames of any size accepted, messages of any
size joined in memory, a refused session whose command runs on."""

from __future__ import annotations

import dataclasses
import json
import socket
import ssl
import statistics
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.api.handler import json_response
from agent.api.server import ApiServer
from agent.command.config import Config, TLSConfig, load_config
from agent.drivers.base import TaskHandle
from agent.drivers.session import ProcessSession
from agent.errors import ConfigError
from agent.nomadapi.wsexec import exec_stream
from lab.waits import wait_until
from tests.fakes import FakeNode
from tests.pki import TestCA
from tests.test_routes_ops import ONE_TASK, OPERATOR, Api, start_api
from tests.wsclient import WsClient

MiB = 1024 * 1024
FLOOD_BYTES = 48 * MiB  # the most a flood sends before the test calls it not dropped
FLOOD_TIMEOUT = 20.0  # seconds a flood goes on before the test calls it not dropped
HEALTH_SLOW = 1.0  # seconds: health answering slower than this (median) during a flood: a stalled agent
HEALTH_STALL = 3.0  # seconds: any one health answer slower than this (the machine may be busy)
RSS_GROWTH = 24 * MiB  # the most the agent (this process) may grow during a flood
CLOSE_TIMEOUT = 10.0  # seconds for a refused session's close frame and its command's end
PING, CLOSE, PONG = 0x9, 0x8, 0xA


@dataclasses.dataclass
class Served:
    server: ApiServer
    ctx: ssl.SSLContext
    alloc: str
    commands: list[ProcessSession]

    def open(self) -> WsClient:
        query = urllib.parse.urlencode({"command": json.dumps(["sleep", "120"]), "task": "srv"})
        ws = WsClient(
            "127.0.0.1", self.server.port, f"/v1/client/allocation/{self.alloc}/exec?{query}", self.ctx
        )
        assert ws.accepted, (ws.head, ws.body)
        return ws

    def health(self) -> float:
        """Seconds for GET /v1/agent/health to be answered 200 on a connection of its own."""
        start = time.monotonic()
        raw = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        with raw, self.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /v1/agent/health HTTP/1.1\r\nHost: agent\r\n\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 "), got[:200]
        return time.monotonic() - start


def _serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **limits: Any) -> Iterator[Served]:
    core, api = start_api(FakeNode(tmp_path))
    ca = TestCA(tmp_path)
    srv, op = ca.issue("client1.agent.fieldlab", server=True), ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=0,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        api_handshake_timeout=2.0,
        **limits,
    )
    commands: list[ProcessSession] = []

    def session(
        h: TaskHandle,
        argv: list[str],
        *,
        tty: bool,
        rows: int = 24,
        cols: int = 80,
        env: Mapping[str, str] | None = None,
    ) -> ProcessSession:
        commands.append(ProcessSession(argv, None, "/", tty=tty))
        return commands[-1]

    monkeypatch.setattr(api.node.exec, "exec_session", session)
    health = {"/v1/agent/health": lambda: json_response(200, {"client": {"ok": True}})}
    server = ApiServer(cfg, health, api.table, [exec_stream(api.nomad)])
    server.start()
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    ctx.load_cert_chain(str(op.cert), str(op.key))
    (alloc,) = Api.submit(api, ONE_TASK)
    try:
        yield Served(server, ctx, alloc, commands)
    finally:
        server.stop(5)
        for c in commands:
            c.kill()
        core.stop()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    yield from _serve(tmp_path, monkeypatch)


@pytest.fixture
def served_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """Limits set small: 64 KiB unsent per connection, messages of at most 4 KiB."""
    yield from _serve(tmp_path, monkeypatch, api_write_buffer_bytes=64 * 1024, api_ws_max_message_bytes=4096)


def _client_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """A masked client frame (mask key 0: the payload goes as it is, a valid masking)."""
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", (0x80 if fin else 0) | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", (0x80 if fin else 0) | opcode, 0x80 | 126, n)
    else:
        head = struct.pack(">BBQ", (0x80 if fin else 0) | opcode, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


def _rss() -> int:
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


@dataclasses.dataclass
class Flood:
    sent: int = 0
    ended: str = ""


def _flood(ws: WsClient, frame: bytes) -> Flood:
    """Send `frame` again and again, never reading, until the agent drops the connection (or the
    flood's bounds are reached: FLOOD_BYTES, FLOOD_TIMEOUT)."""
    out = Flood()
    ws.sock.settimeout(FLOOD_TIMEOUT)
    deadline = time.monotonic() + FLOOD_TIMEOUT
    try:
        while out.sent < FLOOD_BYTES and time.monotonic() < deadline:
            ws.sock.sendall(frame)
            out.sent += len(frame)
    except (OSError, ssl.SSLError) as exc:
        out.ended = f"dropped: {exc!r}"
    return out


def _flood_while_probing(served: Served, ws: WsClient, frame: bytes) -> tuple[Flood, list[float], int, int]:
    """The flood in a thread; meanwhile health latencies and the agent's largest unsent backlog."""
    result: list[Flood] = []
    flooder = threading.Thread(target=lambda: result.append(_flood(ws, frame)), daemon=True)
    rss0 = _rss()
    flooder.start()
    latencies: list[float] = []
    unsent = 0
    while flooder.is_alive():
        unsent = max(unsent, served.server.unsent_bytes())
        latencies.append(served.health())
        flooder.join(0.2)
    flooder.join()
    return result[0], latencies, unsent, _rss() - rss0


def _quick(latencies: list[float]) -> None:
    assert latencies, "health was never asked"
    assert statistics.median(latencies) < HEALTH_SLOW and max(latencies) < HEALTH_STALL, latencies


def _close_code(ws: WsClient) -> int:
    """The code of the agent's close frame (frames before it skipped)."""
    ws.sock.settimeout(CLOSE_TIMEOUT)
    while True:
        opcode, payload = ws.recv()
        if opcode == CLOSE:
            return int(struct.unpack(">H", payload[:2])[0])
        assert opcode != PONG, f"an answer to a refused frame: {opcode:#x} of {len(payload)} bytes"


def _killed(served: Served) -> None:
    wait_until(
        lambda: (True if all(c._proc.poll() is not None for c in served.commands) else None, "running"),
        timeout=CLOSE_TIMEOUT,
        what="the session's command to be killed",
        interval=0.1,
    )


def test_a_flood_of_1mib_pings_from_a_client_that_never_reads_is_dropped_and_health_stays_quick(
    served: Served,
) -> None:
    ws = served.open()
    flood, latencies, unsent, growth = _flood_while_probing(served, ws, _client_frame(PING, b"p" * MiB))
    assert flood.ended.startswith("dropped"), f"not dropped after {flood.sent} bytes in {FLOOD_TIMEOUT:g} s"
    assert flood.sent < 16 * MiB, f"{flood.sent} bytes taken before the drop"
    assert unsent <= 64 * 1024, f"the agent held {unsent} bytes unsent for the client"
    assert growth < RSS_GROWTH, f"the agent grew by {growth} bytes"
    _quick(latencies)
    _killed(served)


def test_a_flood_of_small_pings_from_a_client_that_never_reads_is_dropped_at_the_write_bound(
    served_small: Served,
) -> None:
    ws = served_small.open()
    frame = _client_frame(PING, b"p" * 125) * 512  # 64 KiB of the largest PINGs RFC 6455 allows
    flood, latencies, unsent, growth = _flood_while_probing(served_small, ws, frame)
    assert flood.ended.startswith("dropped"), f"not dropped after {flood.sent} bytes in {FLOOD_TIMEOUT:g} s"
    # The bound, plus what one read of the client's pings answers at once.
    assert unsent <= 64 * 1024 + 64 * 1024, f"the agent held {unsent} bytes unsent for the client"
    assert growth < RSS_GROWTH, f"the agent grew by {growth} bytes"
    _quick(latencies)
    _killed(served_small)


def test_a_control_frame_over_125_bytes_is_refused_with_1002_and_ends_the_session(served: Served) -> None:
    ws = served.open()
    ws.sock.sendall(_client_frame(PING, b"p" * 126))
    assert _close_code(ws) == 1002
    _killed(served)


def test_a_message_over_the_configured_size_is_refused_with_1009(served_small: Served) -> None:
    ws = served_small.open()
    stdin = json.dumps({"stdin": {"data": "QUFB" * 1024}}).encode()  # over 4 KiB, in two fragments
    ws.sock.sendall(_client_frame(0x1, stdin[:3000], fin=False) + _client_frame(0x0, stdin[3000:]))
    assert _close_code(ws) == 1009
    _killed(served_small)


def test_a_ping_is_answered_and_the_session_goes_on(served: Served) -> None:
    ws = served.open()
    ws.sock.sendall(_client_frame(PING, b"are you there"))
    assert ws.recv() == (PONG, b"are you there")
    ws.sock.sendall(_client_frame(0x1, b'{"stdin": {"close": true}}'))
    (command,) = served.commands
    assert command._proc.poll() is None, "the session ended on a ping"


def test_the_websocket_limits_are_configuration_with_bad_values_refused(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(
        json.dumps({"node_name": "c", "api_ws_max_message_bytes": 4096, "api_write_buffer_bytes": 8192})
    )
    c = load_config(p)
    assert (c.api_ws_max_message_bytes, c.api_write_buffer_bytes) == (4096, 8192)
    assert (Config("c").api_ws_max_message_bytes, Config("c").api_write_buffer_bytes) == (MiB, 64 * 1024)
    for key, value, why in (
        ("api_ws_max_message_bytes", 0, "must be a whole number >= 1"),
        ("api_write_buffer_bytes", 1024, "must be a whole number >= 4096"),
        ("api_write_buffer_bytes", "64k", "must be a whole number"),
    ):
        p.write_text(json.dumps({"node_name": "c", key: value}))
        with pytest.raises(ConfigError, match=f"{key}: {why}"):
            load_config(p)


def test_frames_sent_with_the_upgrade_request_are_read_as_the_sessions_first(served: Served) -> None:
    """A client that does not wait for the 101: h11 has read its first frame with the request."""
    query = urllib.parse.urlencode({"command": json.dumps(["sleep", "120"]), "task": "srv"})
    raw = socket.create_connection(("127.0.0.1", served.server.port), timeout=CLOSE_TIMEOUT)
    with raw, served.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(
            f"GET /v1/client/allocation/{served.alloc}/exec?{query} HTTP/1.1\r\nHost: agent\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
            + _client_frame(PING, b"early")
        )
        got = b""
        while b"\r\n\r\n" not in got:
            got += tls.recv(65536)
        head, _, rest = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ") and b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head, head
        while len(rest) < 7:
            rest += tls.recv(65536)
        assert rest[:7] == bytes([0x80 | PONG, 5]) + b"early"
