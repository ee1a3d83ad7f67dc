"""Blocking queries (`?index=N&wait=D`) on the real mTLS API server, the real Core and a fake node:
each is held on the server's loop with no thread of its own, answered when what it reads changes
or when its wait ends, and dropped when its client goes away (agent.api.waiters)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import h11
import pytest

from agent.api.handler import Streamed
from agent.api.server import WOKEN_READS, ApiServer
from agent.api.waiters import Rereads
from agent.client.core import Core
from agent.command.config import Config, TLSConfig
from agent.nomadapi.http import JITTER_FRACTION, blocked_now, blocking
from lab.waits import wait_until
from tests.fakes import FakeNode
from tests.pki import TestCA
from tests.test_routes_ops import Api, start_api

T = TypeVar("T")
OPERATOR = "controller.operator.fieldlab"
HANDLERS = 8  # the server's handler threads: far fewer than the waiters it holds
HOLD_TIMEOUT = 30.0  # seconds for every waiter to be held (or answered) on a busy 2-core machine
WEB = """
job "web" {
  group "g" {
    task "srv" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


@dataclass
class Served:
    core: Core
    api: Api
    server: ApiServer
    ctx: ssl.SSLContext
    cfg: Config


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    core, api = start_api(FakeNode(tmp_path))
    ca = TestCA(tmp_path)
    srv, op = ca.issue("client1.agent.fieldlab", server=True), ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=0,
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
        api_max_connections=HANDLERS,
        api_max_queued_requests=512,
        api_max_conns_per_client=1000,
    )
    server = ApiServer(cfg, {}, api.table, [])
    server.start()
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    ctx.load_cert_chain(str(op.cert), str(op.key))
    yield Served(core, api, server, ctx, cfg)
    server.stop(5)
    core.stop()


Writers = asyncio.Queue[asyncio.StreamWriter]


@dataclass
class Answer:
    status: int
    index: int
    seconds: float  # from the request sent to its answer read
    body: bytes = b""


async def _get(
    port: int, ctx: ssl.SSLContext, target: str, opened: asyncio.Queue[asyncio.StreamWriter]
) -> Answer:
    """One GET over its own TLS connection (h11 as the client), its writer handed out when sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(method="GET", target=target, headers=[("Host", "client1")])
    writer.write((conn.send(request) or b"") + (conn.send(h11.EndOfMessage()) or b""))
    sent = time.monotonic()
    await opened.put(writer)
    status, index, body = 0, 0, b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                index = int(dict(event.headers).get(b"x-nomad-index", b"0"))
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return Answer(status, index, time.monotonic() - sent, body)
    finally:
        writer.close()


class Clients:
    """Blocking GETs on a loop thread of the test's own (one thread, however many requests)."""

    def __init__(self, s: Served) -> None:
        self.s = s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.writers: asyncio.Queue[asyncio.StreamWriter] = self._call(self._queue())

    async def _queue(self) -> asyncio.Queue[asyncio.StreamWriter]:
        return asyncio.Queue()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(HOLD_TIMEOUT)

    def get(self, target: str, n: int) -> list[concurrent.futures.Future[Answer]]:
        port, ctx = self.s.server.port, self.s.ctx
        return [
            asyncio.run_coroutine_threadsafe(_get(port, ctx, target, self.writers), self.loop)
            for _ in range(n)
        ]

    def drop_all(self) -> None:
        async def drop() -> None:
            while not self.writers.empty():
                self.writers.get_nowait().transport.abort()

        self._call(drop())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _held(n: int) -> None:
    wait_until(
        lambda: (True if blocked_now() == n else None, f"{blocked_now()} of {n} held"),
        timeout=HOLD_TIMEOUT,
        interval=0.05,
        what=f"{n} blocking queries held",
    )


def _ended(futs: list[concurrent.futures.Future[Answer]], what: str) -> None:
    wait_until(
        lambda: (True if all(f.done() for f in futs) else None, f"{sum(f.done() for f in futs)} ended"),
        timeout=HOLD_TIMEOUT,
        interval=0.05,
        what=what,
    )


def _answered(futs: list[concurrent.futures.Future[Answer]], what: str) -> list[Answer]:
    _ended(futs, what)
    return [f.result() for f in futs]


def test_a_hundred_and_twenty_waiters_are_held_with_no_thread_each_and_a_write_wakes_them(
    served: Served,
) -> None:
    index = served.core.changes.current(("job", "alloc", "eval"))
    clients = Clients(served)
    try:
        before = threading.active_count()
        waiters = clients.get(f"/v1/jobs?index={index}&wait=60s", 120)
        _held(120)  # today's server: at most HANDLERS wait (one thread each), the rest queue behind them
        # The handler threads, the one watch thread and the woken-reads lane: none is a waiter's own.
        assert threading.active_count() - before <= HANDLERS + 2
        assert not any(f.done() for f in waiters)  # nothing changed: none answered before its wait
        served.api.submit(WEB)
        answers = _answered(waiters, "every waiter answered after the job's register")
        assert {a.status for a in answers} == {200}
        assert all(a.index > index for a in answers)  # the index of the change that woke them
        assert blocked_now() == 0
    finally:
        clients.close()


def test_a_write_wakes_only_the_waiters_whose_kinds_changed(served: Served) -> None:
    clients = Clients(served)
    try:
        jobs = clients.get(
            f"/v1/jobs?index={served.core.changes.current(('job', 'alloc', 'eval'))}&wait=60s", 20
        )
        var_index = served.core.changes.current(("var",))
        variables = clients.get(f"/v1/vars?index={var_index}&wait=60s", 20)
        _held(40)
        served.api.call("PUT", "/v1/var/app/config", {"Items": {"k": "v"}})
        answers = _answered(variables, "the variable waiters answered after a variable's write")
        assert {a.status for a in answers} == {200} and all(a.index > var_index for a in answers)
        assert all(a.seconds < 10 for a in answers)  # woken, not answered at the end of their wait
        _held(20)  # the jobs' waiters: still held
        assert not any(f.done() for f in jobs)
    finally:
        clients.drop_all()
        clients.close()


def test_waiters_are_answered_at_their_wait_end_with_the_unchanged_index(served: Served) -> None:
    index = served.core.changes.current(("var",))
    clients = Clients(served)
    try:
        waiters = clients.get(f"/v1/vars?index={index}&wait=2s", 40)
        answers = _answered(waiters, "every waiter answered at its wait's end")
        assert {(a.status, a.index) for a in answers} == {(200, index)}  # nothing changed: its index
        # At its wait, plus Nomad's jitter (at most wait/16), plus the time it takes to answer 40 on
        # a busy machine; today's server runs HANDLERS at a time: 2 s, then 2 s more for the next...
        slowest = max(a.seconds for a in answers)
        assert all(a.seconds >= 2.0 for a in answers), sorted(a.seconds for a in answers)[:3]
        assert slowest < 2.0 + 2.0 / JITTER_FRACTION + 1.5, slowest
    finally:
        clients.close()


def test_a_client_gone_while_its_query_waits_is_dropped(served: Served) -> None:
    index = served.core.changes.current(("var",))
    clients = Clients(served)
    try:
        clients.get(f"/v1/vars?index={index}&wait=60s", 30)
        _held(30)
        clients.drop_all()
        _held(0)  # today's server: each handler thread waits its 60 s out for a client long gone
        wait_until(
            lambda: (True if served.server.unsent_bytes() == 0 else None, "bytes left for gone clients"),
            timeout=HOLD_TIMEOUT,
            what="the dropped connections closed",
        )
    finally:
        clients.close()


def test_the_watch_thread_ends_with_the_server(served: Served) -> None:
    index = served.core.changes.current(("var",))
    clients = Clients(served)
    try:
        futs = clients.get(f"/v1/vars?index={index}&wait=60s", 1)
        _held(1)
        served.server.stop(5)
        _ended(futs, "the waiter's connection ended with the server")
        wait_until(
            lambda: (
                True if not any(t.name == "api-waiters" for t in threading.enumerate()) else None,
                "api-waiters still running",
            ),
            timeout=5,
            interval=0.05,
            what="the watch thread ended",
        )
    finally:
        clients.close()


def test_queries_woken_together_share_one_read_that_starts_after_they_woke() -> None:
    """agent.api.waiters.Rereads: joining a read not started yet; a read started already is not
    joined (it may have missed the change that woke the later query)."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    gate = threading.Event()
    calls: list[int] = []

    def read() -> int:
        calls.append(len(calls))
        gate.wait(HOLD_TIMEOUT)
        return len(calls)

    async def woken_together() -> tuple[list[tuple[int, bool]], list[tuple[int, bool]]]:
        rereads = Rereads()
        key = Rereads.key("/v1/jobs", "index=7&wait=60s&prefix=web")
        assert key == Rereads.key("/v1/jobs", "prefix=web&index=9")  # the same read, whatever index
        blocker = pool.submit(gate.wait, HOLD_TIMEOUT)  # the one thread busy: the read waits to start
        first = [asyncio.ensure_future(rereads.read(key, pool.submit, read)) for _ in range(50)]
        await asyncio.sleep(0)
        gate.set()
        blocker.result(HOLD_TIMEOUT)
        done = await asyncio.gather(*first)
        gate.clear()
        started = asyncio.ensure_future(rereads.read(key, pool.submit, read))
        while not calls[1:]:  # the second read has started (it waits on the gate)
            await asyncio.sleep(0.01)
        later = asyncio.ensure_future(rereads.read(key, pool.submit, read))
        gate.set()
        return done, [await started, await later]

    try:
        done, after = asyncio.run(woken_together())
    finally:
        gate.set()
        pool.shutdown()
    assert done == [(1, True)] + [(1, False)] * 49  # 50 queries, one read, one of them its owner
    assert after == [(2, True), (3, True)] and len(calls) == 3  # started already: read anew


def test_a_woken_stream_answer_is_sent_once_and_its_sharers_read_again(served: Served) -> None:
    """A blocking read that answers a stream (a large /v1/allocations, encoded as it is sent): a
    stream can be sent once, so queries woken with it that would share its read read again."""

    def counting(groups: tuple[str, ...], body: bytes) -> Streamed:
        blocking(served.core.changes, ("var",), lambda: None)
        return Streamed(200, "text/plain", iter([b"one ", b"stream"]))

    server = ApiServer(served.cfg, {}, [("GET", r"/v1/streamed", counting)], [])
    server.start()
    clients = Clients(Served(served.core, served.api, server, served.ctx, served.cfg))
    try:
        waiters = clients.get(f"/v1/streamed?index={served.core.changes.current(('var',))}&wait=60s", 6)
        _held(6)
        gate = threading.Event()  # the woken reads' threads busy: the 6 are woken before any read
        for _ in range(WOKEN_READS):
            server._woken_pool.submit(lambda: gate.wait(HOLD_TIMEOUT))
        try:
            served.api.call("PUT", "/v1/var/app/config", {"Items": {"k": "v"}})
            _held(0)
        finally:
            gate.set()
        answers = _answered(waiters, "every stream waiter answered after a variable's write")
        assert [(a.status, a.body) for a in answers] == [(200, b"one stream")] * 6
    finally:
        clients.close()
        server.stop(5)
