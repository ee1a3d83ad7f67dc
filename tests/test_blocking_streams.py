"""Followed streams (Nomad's event stream, a followed log) on the real mTLS API server, the real Core
and a fake node: an idle one waits on the server's loop with no thread of its own (stream.Idle), so
a hundred are served at once, each gets what happens next, and one whose client goes away is
dropped."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest

from agent.api.server import STREAM_THREADS, ApiServer
from agent.command.config import Config, TLSConfig
from agent.nomadapi.http import blocked_now
from lab.waits import wait_until
from tests.fakes import FakeNode
from tests.pki import TestCA
from tests.test_routes_ops import ONE_TASK, Api, start_api

OPERATOR = "controller.operator.fieldlab"
STREAMS = 100
DEADLINE = 30.0  # seconds for every stream to be open, or to get its line, on a busy 2-core machine


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Api, ApiServer, ssl.SSLContext]]:
    core, api = start_api(FakeNode(tmp_path))
    ca = TestCA(tmp_path)
    srv, op = ca.issue("client1.agent.fieldlab", server=True), ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=0,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        api_max_queued_requests=512,
        api_max_conns_per_client=1000,
    )
    server = ApiServer(cfg, {}, api.table, [])
    server.start()
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    ctx.load_cert_chain(str(op.cert), str(op.key))
    yield api, server, ctx
    server.stop(5)
    core.stop()


class Stream:
    """A followed GET on the test's own loop: its status, and the lines it has sent so far."""

    def __init__(self) -> None:
        self.status = 0
        self.lines: list[bytes] = []
        self.writer: asyncio.StreamWriter | None = None

    async def follow(self, port: int, ctx: ssl.SSLContext, target: str) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        conn = h11.Connection(h11.CLIENT)
        request = h11.Request(method="GET", target=target, headers=[("Host", "client1")])
        self.writer.write((conn.send(request) or b"") + (conn.send(h11.EndOfMessage()) or b""))
        pending = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                self.status = event.status_code
            elif isinstance(event, h11.Data):
                *done, pending = (pending + bytes(event.data)).split(b"\n")
                self.lines += done
            else:  # the end of the answer, or of the connection
                return


def _streams(port: int, ctx: ssl.SSLContext, target: str) -> tuple[asyncio.AbstractEventLoop, list[Stream]]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    streams = [Stream() for _ in range(STREAMS)]
    for s in streams:
        asyncio.run_coroutine_threadsafe(s.follow(port, ctx, target), loop)
    return loop, streams


def _drop(loop: asyncio.AbstractEventLoop, streams: list[Stream]) -> None:
    async def drop() -> None:
        for s in streams:
            if s.writer is not None:
                s.writer.transport.abort()

    asyncio.run_coroutine_threadsafe(drop(), loop).result(DEADLINE)
    loop.call_soon_threadsafe(loop.stop)


def test_a_hundred_event_streams_are_served_with_no_thread_each_and_get_the_next_event(
    served: tuple[Api, ApiServer, ssl.SSLContext],
) -> None:
    api, server, ctx = served
    before = threading.active_count()
    loop, streams = _streams(server.port, ctx, "/v1/event/stream?topic=Job")
    try:
        wait_until(
            lambda: (True if server.streaming() == STREAMS else None, f"{server.streaming()} open"),
            timeout=DEADLINE,
            interval=0.05,
            what=f"{STREAMS} event streams open",
        )  # today's server: 32 at most (a stream thread each), the rest answered 429
        assert {s.status for s in streams} == {200}
        assert blocked_now() == 0  # idle streams are not blocking queries (the metrics' gauge)
        # The handler threads and at most STREAM_THREADS pulling chunks: none is a stream's own.
        assert threading.active_count() - before <= STREAM_THREADS + 10 < STREAMS
        api.submit(ONE_TASK)

        def delivered() -> tuple[bool | None, str]:
            got = [any(b"JobRegistered" in line for line in s.lines) for s in streams]
            return (True if all(got) else None), f"{sum(got)} of {STREAMS} got the JobRegistered line"

        wait_until(delivered, timeout=DEADLINE, interval=0.05, what="every stream's JobRegistered event")
        events = json.loads(next(line for line in streams[0].lines if b"JobRegistered" in line))["Events"]
        assert [(e["Topic"], e["Type"], e["Key"]) for e in events] == [("Job", "JobRegistered", "web")]
    finally:
        _drop(loop, streams)


def test_an_idle_stream_whose_client_goes_away_is_dropped(
    served: tuple[Api, ApiServer, ssl.SSLContext],
) -> None:
    _, server, ctx = served
    loop, streams = _streams(server.port, ctx, "/v1/event/stream?topic=Job")
    wait_until(
        lambda: (True if server.streaming() == STREAMS else None, f"{server.streaming()} open"),
        timeout=DEADLINE,
        interval=0.05,
        what=f"{STREAMS} event streams open",
    )
    _drop(loop, streams)
    # Nothing is written to them (no event, the heartbeat 10 s away): the server sees the close.
    wait_until(
        lambda: (True if server.streaming() == 0 else None, f"{server.streaming()} still open"),
        timeout=5,
        interval=0.05,
        what="the streams of gone clients dropped",
    )


def test_a_stream_called_outside_a_server_still_waits_in_its_own_thread(
    served: tuple[Api, ApiServer, ssl.SSLContext],
) -> None:
    api, _, _ = served
    out = api.answer("GET", "/v1/event/stream?topic=Job")
    assert not isinstance(out, tuple)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(next, out.chunks)
        api.submit(ONE_TASK)
        line = first.result(DEADLINE)
    assert isinstance(line, bytes) and b"JobRegistered" in line  # no Idle handed to a plain caller
    out.close()
