"""The agent's HTTP API over mTLS: who may call it, and staying up whatever a client does.

Who may call: a client must present a cert that chains to the lab's CA (the TLS handshake refuses
anything else, no cert included) and whose subject CN is one of `Config.api_allowed_identities`;
every other identity gets 403 with a JSON reason naming it. Every write (POST/PUT/DELETE) is logged
at INFO with the caller's identity, method and path. A write's Idempotency-Key is the caller's own:
its answer is kept for that identity only (agent.api.idempotency).

Staying up: one event-loop thread accepts connections and runs each one's TLS handshake and request
read under its own deadline (`api_handshake_timeout`, `api_request_timeout` for head and body
together, so a client trickling bytes cannot stretch it); HTTP/1.1 is h11's (agent.api.http11,
with `api_max_header_bytes` and `api_max_body_bytes`). A parked client (idle, slow, handshaking)
costs a socket, never the accept loop or a handler thread; at `_MAX_PARKED` of them the one parked
longest is dropped, and a client address with `api_max_conns_per_client` connections open gets
429 on one more (Nomad's http_max_conns_per_client). Only complete, authorized requests reach the
bounded pool of `api_max_connections` handler threads; at most `api_max_queued_requests` more wait
for one, and a request past that is answered `api_queue_full_status` (503, Retry-After) without
running (health and metrics have a lane of their own, so they answer while every handler waits on
the core). A bad request is answered with a 4xx JSON error and at most one WARNING line, never a
traceback (a body nested too deeply to read is a 400 too). A blocking query (a handler's `Park`)
is held on the loop with no thread until it is woken, and its read runs in a lane of WOKEN_READS
threads of its own, never refused (agent.api.waiters). One request per connection
(`Connection: close`), except a request to a stream route with `Upgrade: fieldlab-exec` (an
interactive exec session, agent.api.stream): it is answered 101 and the connection carries the
session's frames until the command ends (at most MAX_SESSIONS at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import threading
from asyncio import sslproto
from collections.abc import Awaitable, Callable
from functools import partial

from agent.api import stream as apistream
from agent.api.handler import (
    Handler,
    StreamOpener,
    current_request,
)
from agent.api.http11 import ClientError, Exchange, Request, Response, json_response
from agent.api.idempotency import Replays
from agent.api.pool import HandlerPool, QueueFull
from agent.api.stream import FIELDLAB_EXEC, Idle, Streamed, Upgrade
from agent.api.tls import peer_identity, server_ssl_context
from agent.api.waiters import Park, Rereads, Waiters, hold
from agent.command.config import Config
from agent.drivers.session import ExecSession
from agent.errors import AgentError

log = logging.getLogger(__name__)
Route = Callable[[], Response]

_MAX_PARKED = 256  # connections handshaking or being read; keeps the agent's own file descriptors safe
MAX_SESSIONS = 16  # interactive exec sessions at once (each holds two threads and a command)
MAX_STREAMS = 1024  # streamed answers open at once (an idle one holds no thread: stream.Idle)
STREAM_THREADS = 32  # threads pulling the streams' next chunks (each pull is short)
WOKEN_READS = 8  # threads running the reads of woken blocking queries (they queue without a bound)
TLS_READ_BUFFER = 32 * 1024  # bytes each TLS connection reads into (asyncio's default: 256 KiB each)
_LINGER = 1.0  # seconds to read what a client still sends after an early answer (so it sees the answer)
_METHODS = frozenset({"GET", "POST", "PUT", "DELETE"})
_WRITES = frozenset({"POST", "PUT", "DELETE"})
_TOO_DEEP = "the request is nested too deeply to handle (arrays or objects within each other)"


class ApiServer:
    """Serves `routes` (GET path -> handler) and `handlers` (method, path regex, handler) until `stop()`."""

    def __init__(
        self,
        config: Config,
        routes: dict[str, Route],
        handlers: list[tuple[str, str, Handler]] | None = None,
        streams: list[tuple[str, str, StreamOpener] | tuple[str, str, StreamOpener, Upgrade]] | None = None,
    ) -> None:
        self._config = config
        self._ctx = server_ssl_context(config)
        # asyncio gives every TLS connection a read buffer of SSLProtocol.max_size, filled with zeros:
        # 256 KiB each made 1,000 waiting clients cost 250 MB. A TLS record holds 16 KiB at most.
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
        self._allowed = frozenset(config.api_allowed_identities)
        self._routes = routes
        self._handlers = [(m, re.compile(rx), h) for m, rx, h in handlers or []]
        self._streams = [
            (st[0], re.compile(st[1]), st[2], st[3] if len(st) > 3 else FIELDLAB_EXEC) for st in streams or []
        ]
        self._sessions = 0
        self._limits = apistream.Limits(config.api_ws_max_message_bytes, config.api_write_buffer_bytes)
        self._transports: set[asyncio.WriteTransport] = set()  # open connections (unsent_bytes)
        self.replays = Replays()  # answers to writes with an Idempotency-Key: a retry acts once
        family = socket.AF_INET6 if ":" in config.bind_address else socket.AF_INET
        try:
            self._sock = socket.create_server((config.bind_address, config.port), family=family)
        except OSError as exc:
            raise AgentError(f"cannot listen on {config.bind_address}:{config.port}: {exc}") from None
        self._sock.setblocking(False)
        self._pool = HandlerPool(config.api_max_connections, config.api_max_queued_requests)
        # The agent's own GET routes (health, metrics) never wait behind handlers stuck on the core.
        self._status_pool = HandlerPool(2, config.api_max_queued_requests)
        self._stream_pool = HandlerPool(STREAM_THREADS)
        self._woken_pool = HandlerPool(WOKEN_READS)  # bounded by the waiters, each admitted already
        self._waiters = Waiters()
        self._rereads = Rereads()
        self._streaming = 0
        self._loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()
        # Connections still handshaking or being read, oldest first (the ones dropped at the cap).
        self._parked: dict[asyncio.Task[None], None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._per_client: dict[str, int] = {}  # open connections by client address
        self._thread = threading.Thread(target=self._run, name="api", daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def unsent_bytes(self) -> int:
        """The bytes the open connections hold written but not yet taken by their clients."""
        if not self._thread.is_alive():
            return 0

        async def count() -> int:
            return sum(t.get_write_buffer_size() for t in self._transports if not t.is_closing())

        return asyncio.run_coroutine_threadsafe(count(), self._loop).result(10)

    def queued_requests(self) -> int:
        """Complete requests waiting for a handler thread (at most api_max_queued_requests)."""
        return self._pool.waiting

    def start(self) -> None:
        log.info("api: client certs allowed to call: %s", ", ".join(sorted(self._allowed)) or "none")
        self._thread.start()

    def stop(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout)
        elif self._thread.ident is None:  # never started
            self._sock.close()
            self._loop.close()
        self._pool.stop()
        self._status_pool.stop()
        self._stream_pool.stop()
        self._woken_pool.stop()
        self._waiters.stop()

    def waiting(self) -> int:
        """Blocking queries held now."""
        return self._waiters.held()

    def streaming(self) -> int:
        """Streamed answers open now."""
        return self._streaming

    # -- the event loop ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        accept = asyncio.create_task(self._accept())
        await self._stopping.wait()
        accept.cancel()
        await asyncio.gather(accept, return_exceptions=True)
        self._sock.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.sleep(0)  # let the aborted transports run their connection_lost

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as exc:  # out of file descriptors and the like: wait, never stop serving
                log.warning("api: cannot accept a connection: %s", exc)
                await asyncio.sleep(0.5)
                continue
            # Small writes (the answer, then close_notify) go out at once, not after a delayed ACK.
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if len(self._parked) >= _MAX_PARKED:
                oldest = next(iter(self._parked))
                del self._parked[oldest]
                oldest.cancel()
            host = str(addr[0])
            over = self._per_client.get(host, 0) >= self._config.api_max_conns_per_client
            self._per_client[host] = self._per_client.get(host, 0) + 1
            task = asyncio.create_task(self._connection(conn, f"{host}:{addr[1]}", over))
            self._parked[task] = None
            self._tasks.add(task)
            task.add_done_callback(partial(self._forget, host))

    def _forget(self, host: str, task: asyncio.Task[None]) -> None:
        self._parked.pop(task, None)
        self._tasks.discard(task)
        left = self._per_client.pop(host, 1) - 1
        if left:
            self._per_client[host] = left

    async def _connection(self, conn: socket.socket, peer: str, over: bool = False) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                conn,
                ssl=self._ctx,
                ssl_handshake_timeout=self._config.api_handshake_timeout,
                ssl_shutdown_timeout=self._config.api_handshake_timeout,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError: no cert, wrong CA, too slow
            log.debug("api %s: no TLS session: %s", peer, exc)
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        self._transports.add(transport)
        try:
            if over:
                await self._too_many(reader, writer, peer)
            else:
                await self._exchange(reader, writer, peer)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("api %s: connection ended: %s", peer, exc or type(exc).__name__)
            transport.abort()
        except asyncio.CancelledError:  # dropped at the cap, or the server stops
            transport.abort()
            raise
        else:
            await self._close(writer)
        finally:
            self._transports.discard(transport)

    async def _too_many(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        """A client address past api_max_conns_per_client: 429 (as Nomad's agent), not read."""
        limit = self._config.api_max_conns_per_client
        reason = f"too many connections from {peer.rpartition(':')[0]}: at most {limit} at once"
        self._refused(peer, peer_identity(writer.get_extra_info("peercert")), None, 429, reason)
        await self._answer(writer, Exchange(reader, 0), json_response(429, {"error": reason}))
        await self._drain_unread(reader)

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        writer.close()
        try:
            async with asyncio.timeout(self._config.api_handshake_timeout):
                await writer.wait_closed()
        except (OSError, TimeoutError):
            writer.transport.abort()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        cfg = self._config
        identity = peer_identity(writer.get_extra_info("peercert"))
        http = Exchange(reader, cfg.api_max_header_bytes)
        head: Request | None = None
        try:
            async with asyncio.timeout(cfg.api_request_timeout):
                head = await http.request()
                self._authorize(identity)
                if head.method not in _METHODS:
                    raise ClientError(501, f"method {head.method} is not supported")
                http.check_body(head, cfg.api_max_body_bytes)
                pool = self._pool_for(head)
                if pool.full():  # answered before its body is read: a refused body costs no memory
                    raise self._busy(pool.busy())
                writer.write(http.continue_100())
                body = await http.body(cfg.api_max_body_bytes)
        except TimeoutError:
            self._refused(peer, identity, head, 408, f"request not read within {cfg.api_request_timeout:g} s")
            await self._answer(writer, http, json_response(408, {"error": "request not read in time"}))
            return
        except ClientError as exc:
            self._refused(peer, identity, head, exc.status, str(exc))
            await self._answer(writer, http, exc.response(), exc.headers)
            if head is not None and ("Content-Length" in head.headers or "Transfer-Encoding" in head.headers):
                await self._drain_unread(reader)  # a body may still be on its way
            return
        assert head is not None  # read above, or answered and returned
        task = asyncio.current_task()
        if task is not None:
            self._parked.pop(task, None)  # a complete request: no longer a candidate to drop
        if "Upgrade" in head.headers:
            await self._upgrade(reader, writer, http, head, body, identity, peer)
            return
        key = head.headers.get("Idempotency-Key") if head.method in _WRITES else None
        assert identity is not None  # authorized above
        try:
            work = pool.submit(
                partial(self._respond_with, head.method, head.path, body, key, head.query, identity)
            )
        except QueueFull as exc:
            busy = self._busy(str(exc))
            self._refused(peer, identity, head, busy.status, str(busy))
            await self._answer(writer, http, busy.response(), busy.headers)
            return
        answer, extra = await asyncio.wrap_future(work)
        if isinstance(answer, Park):
            answer, extra = await self._woken(reader, answer, head, identity)
        status = answer.status if isinstance(answer, Streamed) else answer[0]
        level = logging.INFO if head.method in _WRITES else logging.DEBUG  # every write at INFO
        log.log(level, "api %s %s by %s from %s -> %d", head.method, head.path, identity, peer, status)
        if isinstance(answer, Streamed):
            what = f"{head.method} {head.path} by {identity}"
            await self._stream(reader, writer, http, answer, extra, what)
        else:
            await self._answer(writer, http, answer, extra)

    async def _woken(
        self, reader: asyncio.StreamReader, park: Park, head: Request, identity: str
    ) -> tuple[Response | Streamed, dict[str, str]]:
        """A blocking query held until it is woken, then its handler's answer (it reads at once)."""
        if not await hold(reader, self._waiters.wait(park)):
            raise ConnectionResetError("the client went away while its query waited")
        query = head.query
        read = partial(self._respond_with, head.method, head.path, b"", None, query, identity, woken=True)
        key = Rereads.key(head.path, query)
        (answer, extra), mine = await self._rereads.read(key, self._woken_pool.submit, read)
        if isinstance(answer, Streamed) and not mine:  # sent once, to the query that read it
            answer, extra = await asyncio.wrap_future(self._woken_pool.submit(read))
        assert not isinstance(answer, Park)  # a woken handler reads at once
        return answer, extra

    def _idle(self, idle: Idle) -> Awaitable[object]:
        if idle.changes is None:
            return asyncio.sleep(idle.seconds)
        return self._waiters.wait(Park(idle.changes, (), idle.after, idle.seconds), query=False)

    def _pool_for(self, head: Request) -> HandlerPool:
        """The agent's own GET routes (health, metrics) have a lane of their own."""
        return self._status_pool if head.method == "GET" and head.path in self._routes else self._pool

    def _busy(self, why: str) -> ClientError:
        """A request past api_max_queued_requests: answered, never run (a retry after a second is safe)."""
        status = self._config.api_queue_full_status
        return ClientError(status, f"the agent is busy: {why}; try again", headers={"Retry-After": "1"})

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        http: Exchange,
        answer: Streamed,
        extra: dict[str, str],
        what: str,
    ) -> None:
        """Send `answer` as it is made (h11: chunked), pulling each chunk in a stream thread and
        waiting out an `Idle` one on the loop, until it ends or the client goes away; at MAX_STREAMS
        open already, 429."""
        if self._streaming >= MAX_STREAMS:
            await asyncio.wrap_future(self._stream_pool.submit(answer.close))
            message = f"{MAX_STREAMS} streams are open already: end one first\n"
            await self._answer(writer, http, (429, "text/plain; charset=utf-8", message.encode()))
            return
        self._streaming += 1
        # At most the write bound waits for a slow reader (asyncio's own for TLS is 512 KiB); one that
        # takes nothing for api_request_timeout is dropped.
        writer.transport.set_write_buffer_limits(high=self._limits.write_buffer)
        try:
            writer.write(http.stream_head(answer.status, answer.content_type, extra))
            while True:
                chunk = await asyncio.wrap_future(
                    self._stream_pool.submit(partial(next, answer.chunks, None))
                )
                if chunk is None:
                    break
                if isinstance(chunk, Idle):
                    if not await hold(reader, self._idle(chunk)):
                        raise ConnectionResetError("the client went away")
                    continue
                if chunk:
                    writer.write(http.chunk(chunk))
                if writer.is_closing():
                    raise ConnectionResetError("the client went away")
                async with asyncio.timeout(self._config.api_request_timeout):
                    await writer.drain()
            writer.write(http.end())
            async with asyncio.timeout(self._config.api_request_timeout):
                await writer.drain()
        except Exception as exc:  # the client went away, or the stream broke: end it either way
            log.debug("api stream %s ended: %s", what, exc or type(exc).__name__)
            raise OSError(f"stream {what} ended early") from exc
        finally:
            self._streaming -= 1
            await asyncio.wrap_future(self._stream_pool.submit(answer.close))

    async def _upgrade(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        http: Exchange,
        head: Request,
        body: bytes,
        identity: str | None,
        peer: str,
    ) -> None:
        """`Upgrade: <protocol>` on a stream route (the agent's fieldlab-exec, or a websocket for
        Nomad's exec): open the session in a handler thread, answer 101 and carry it
        (agent.api.stream, with the protocol's codec); anything else is answered as an error."""
        wanted = head.headers.get("Upgrade", "").strip()
        opener, upgrade = None, FIELDLAB_EXEC
        groups: tuple[str, ...] = ()
        for m, rx, o, u in self._streams:
            match = rx.fullmatch(head.path)
            if match and m == head.method:
                opener, upgrade, groups = o, u, match.groups()
        if opener is None or wanted.lower() != upgrade.name:
            reason = f"{head.method} {head.path} does not take Upgrade: {wanted[:40]!r}"
            if opener is not None:
                reason += f" (it takes {upgrade.name})"
            self._refused(peer, identity, head, 400, reason)
            await self._answer(writer, http, json_response(400, {"error": reason}))
            return
        try:
            extra = upgrade.headers(head.headers)
        except ValueError as exc:
            self._refused(peer, identity, head, 400, str(exc))
            await self._answer(writer, http, json_response(400, {"error": str(exc)}))
            return
        if self._sessions >= MAX_SESSIONS:
            reason = f"{MAX_SESSIONS} interactive sessions are open already: end one first"
            self._refused(peer, identity, head, 429, reason)
            await self._answer(writer, http, json_response(429, {"error": reason}))
            return
        self._sessions += 1
        try:
            opened = await asyncio.wrap_future(
                self._pool.submit(partial(self._open, opener, groups, body, head))
            )
            log.info("api %s %s (interactive) by %s from %s", head.method, head.path, identity, peer)
            if isinstance(opened, tuple):
                await self._answer(writer, http, opened)
                return
            switched, early = http.switch(upgrade.name, extra)
            writer.write(switched)
            # The session's output waits (drain) at half the bound: the rest is room for what the
            # codec answers itself (a websocket's pongs and close), past which the client is dropped.
            writer.transport.set_write_buffer_limits(high=self._limits.write_buffer // 2)
            sent = apistream.Prefixed(early, reader)  # what the client sent right after its request
            codec = upgrade.codec(sent, writer, self._limits)
            await apistream.pump(sent, writer, opened, f"exec session {head.path} by {identity}", codec)
        finally:
            self._sessions -= 1

    @staticmethod
    def _open(
        opener: StreamOpener, groups: tuple[str, ...], body: bytes, head: Request
    ) -> Response | ExecSession:
        current_request.query = head.query  # query_params() in the opener (Nomad's exec: task, tty, command)
        current_request.park = None
        try:
            return opener(groups, body)
        except RecursionError:
            log.warning("api %s %s: 400 %s", head.method, head.path, _TOO_DEEP)
            return json_response(400, {"error": _TOO_DEEP})
        except Exception:
            log.exception("opening a session for %s %s failed", head.method, head.path)
            return json_response(500, {"error": "internal error, see agent log"})

    def _authorize(self, identity: str | None) -> None:
        if identity is None:
            raise ClientError(403, "the client cert has no single subject CN to authorize", identity=None)
        if identity not in self._allowed:
            raise ClientError(
                403, f"client identity {identity!r} may not call this agent's API", identity=identity
            )

    @staticmethod
    def _refused(peer: str, identity: str | None, head: Request | None, status: int, reason: str) -> None:
        method, path = (head.method, head.path) if head else ("-", "-")
        log.warning("api %s %s from %s (identity %r): %d %s", method, path, peer, identity, status, reason)

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        http: Exchange,
        response: Response,
        extra: dict[str, str] | None = None,
    ) -> None:
        writer.write(http.response(response, extra))
        async with asyncio.timeout(self._config.api_request_timeout):
            await writer.drain()

    @staticmethod
    async def _drain_unread(reader: asyncio.StreamReader) -> None:
        """Read (and drop) what the client still sends for a moment, so that closing does not reset
        the connection before it has read the answer."""
        try:
            async with asyncio.timeout(_LINGER):
                while await reader.read(64 * 1024):
                    pass
        except (OSError, TimeoutError):
            pass

    # -- in a handler thread -----------------------------------------------------------------
    def _respond_with(
        self,
        method: str,
        path: str,
        body: bytes,
        key: str | None,
        query: str,
        caller: str,
        *,
        woken: bool = False,
    ) -> tuple[Response | Streamed | Park, dict[str, str]]:
        """The handler's answer and the headers it set (agent.api.response_header), or its Park (a
        blocking query to hold; `woken`: held already, it reads now)."""
        current_request.out_headers = {}
        current_request.park = not woken
        try:
            answer = self._respond(method, path, body, key, query, caller)
        except Park as park:
            return park, {}
        return answer, dict(current_request.out_headers)

    def _respond(
        self, method: str, path: str, body: bytes, key: str | None = None, query: str = "", caller: str = ""
    ) -> Response | Streamed:
        """The handler's answer; a write with an Idempotency-Key is answered once per key of `caller`
        (the client cert identity authorized for it): a retry gets the first answer, another caller's
        key is not this caller's (agent.api.idempotency)."""
        current_request.query = query
        try:
            if key is None:
                return self._route(method, path, body)
            fingerprint = Replays.fingerprint(method, f"{path}?{query}", body)
            try:
                response, replayed = self.replays.answer(
                    key, fingerprint, partial(self._route_whole, method, path, body), caller=caller
                )
            except ValueError as exc:
                return json_response(422, {"error": str(exc)})
            if replayed:
                log.info(
                    "api %s %s by %s: a retry (Idempotency-Key %s) answered as the first time",
                    method,
                    path,
                    caller,
                    key,
                )
            return response
        except Park:
            raise
        except RecursionError:  # a body nested deeper than the handler's reading of it can go
            log.warning("api %s %s: 400 %s", method, path, _TOO_DEEP)
            return json_response(400, {"error": _TOO_DEEP})
        except Exception:
            log.exception("handler for %s %s failed", method, path)
            return json_response(500, {"error": "internal error, see agent log"})

    def _route_whole(self, method: str, path: str, body: bytes) -> Response:
        """A write's answer, kept for its Idempotency-Key: whole, never a stream."""
        answer = self._route(method, path, body)
        if isinstance(answer, Streamed):
            answer.close()
            return json_response(500, {"error": f"{method} {path} answered a stream to a write"})
        return answer

    def _route(self, method: str, path: str, body: bytes) -> Response | Streamed:
        route = self._routes.get(path) if method == "GET" else None
        if route is not None:
            return route()
        for m, rx, handler in self._handlers:
            match = rx.fullmatch(path)
            if match and m == method:
                return handler(match.groups(), body)
        return json_response(404, {"error": f"no route {method} {path}"})
