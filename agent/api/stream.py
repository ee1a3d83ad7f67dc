"""An upgraded API connection carrying an interactive exec session (agent.drivers.execframes), on the
API's event loop.

Two directions, each with a thread of its own so a blocking read or write never holds the loop:
the command's output is read in a session thread and written to the client as frames (at most
OUT_QUEUE frames wait to go out, so a client that stops reading stops the reading, not the
agent's memory); the client's frames are read on the loop and handed, in order, to one writer
thread (stdin, end of stdin, terminal size). The session ends when the command has ended and its
output is read (an EXIT frame with its code goes last), or when the client goes away or breaks
the format, or the server stops: then the command is killed. Either way it is killed and reaped
before the connection closes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from agent.drivers import execframes as ef
from agent.drivers.session import ExecSession

log = logging.getLogger(__name__)

OUT_QUEUE = 64  # frames of output waiting for the client
EXIT_WAIT = 10.0  # seconds to wait for the exit code once the command's output has ended
KILL_WAIT = 10.0  # seconds for a killed command's session threads to finish
PUT_SLICE = 1.0  # seconds an output frame waits for room before it looks whether the session ended


class Codec(Protocol):
    """How a session's messages look on the wire: the agent's own frames (agent.drivers.execframes), or
    Nomad's websocket messages (agent.nomadapi.wsexec)."""

    def output(self, kind: bytes, data: bytes) -> Iterable[bytes]:
        """What to send for a piece of the command's output."""

    def exit(self, code: int, error: str | None = None) -> bytes:
        """What to send last: the exit code, or why there is none."""

    async def receive(self) -> tuple[bytes, bytes] | None:
        """The client's next (STDIN | CLOSE_STDIN | RESIZE, payload); None when it closed."""


class Reader(Protocol):
    """What a codec reads the client's bytes from."""

    async def read(self, n: int = -1) -> bytes: ...

    async def readexactly(self, n: int) -> bytes: ...


class Prefixed:
    """An upgraded connection's reader: first what the client sent right after its request (read
    already, with the request), then the connection."""

    def __init__(self, first: bytes, reader: asyncio.StreamReader) -> None:
        self._first, self._reader = first, reader

    async def read(self, n: int = -1) -> bytes:
        if self._first:
            got, self._first = (self._first, b"") if n < 0 else (self._first[:n], self._first[n:])
            return got
        return await self._reader.read(n)

    async def readexactly(self, n: int) -> bytes:
        got, self._first = self._first[:n], self._first[n:]
        return got + (await self._reader.readexactly(n - len(got)) if len(got) < n else b"")


class FrameCodec:
    """The agent's own session frames (`Upgrade: fieldlab-exec`)."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def output(self, kind: bytes, data: bytes) -> Iterable[bytes]:
        return ef.chunks(kind, data)

    def exit(self, code: int, error: str | None = None) -> bytes:
        return ef.exit_frame(code, error)

    async def receive(self) -> tuple[bytes, bytes] | None:
        raw = await self.reader.readexactly(ef.HEADER.size)
        kind, length = ef.header(raw, ef.FROM_CLIENT)
        return kind, (await self.reader.readexactly(length) if length else b"")


class Changes(Protocol):
    """What an idle stream waits on (agent.state.changes.ChangeIndex)."""

    def current(self, kinds: Collection[str] = ()) -> int: ...

    def wait(self, after: int, timeout: float, kinds: Collection[str] = ()) -> int: ...


@dataclass(frozen=True)
class Idle:
    """A stream's word that it has nothing to send for `seconds`, or until `changes` pass `after`
    (when given): the server waits on its loop, with no thread, then pulls the next chunk. A
    stream yields it only when a server pulls it (agent.api.handler.pulled()); pulled in a test's
    own thread, a stream sleeps or waits instead."""

    seconds: float
    changes: Changes | None = None
    after: int = 0

    def wait(self) -> None:
        """In the stream's own thread (not pulled by a server): the same wait, blocking."""
        if self.changes is None:
            time.sleep(self.seconds)
        else:
            self.changes.wait(self.after, self.seconds)

    def waited(self, served: bool) -> Iterator[Idle]:
        """In a stream, `yield from idle.waited(served)`: handed to the server that pulls it
        (`served`), else waited out in this thread."""
        if served:
            yield self
        else:
            self.wait()


@dataclass
class Streamed:
    """An answer whose body is made as it goes (a followed log, Nomad's StreamFrames): sent with
    `Transfer-Encoding: chunked`, each chunk as `chunks` yields it (in a stream thread: it may
    block, briefly). An empty chunk sends nothing but checks the client is still there; an `Idle`
    one waits on the server's loop with no thread; `close` runs when the stream ends, the client
    goes away or the server stops."""

    status: int
    content_type: str
    chunks: Iterator[bytes | Idle]
    close: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Limits:
    """What a connection may cost (agent.command.config's api_ws_max_message_bytes, api_write_buffer_bytes):
    the largest message a client may send on an upgraded one, and the most bytes left unsent to a
    client before it is dropped as not reading (a stream waits at it)."""

    max_message: int = 1024 * 1024
    write_buffer: int = 64 * 1024


@dataclass(frozen=True)
class Upgrade:
    """A protocol a stream route takes (`Upgrade: <name>`): the 101's extra headers for a request's
    headers (ValueError: a 400 saying why), and the codec of its messages (on the connection, with
    its limits)."""

    name: str
    headers: Callable[[http.client.HTTPMessage], dict[str, str]]
    codec: Callable[[Reader, asyncio.StreamWriter, Limits], Codec]


FIELDLAB_EXEC = Upgrade(ef.PROTOCOL, lambda _: {}, lambda reader, _writer, _limits: FrameCodec(reader))


async def pump(
    reader: Reader,
    writer: asyncio.StreamWriter,
    session: ExecSession,
    what: str,
    codec: Codec | None = None,
) -> None:
    await _Pump(reader, writer, session, what, codec or FrameCodec(reader)).run()


class _Pump:
    def __init__(
        self,
        reader: Reader,
        writer: asyncio.StreamWriter,
        session: ExecSession,
        what: str,
        codec: Codec,
    ) -> None:
        self.reader, self.writer, self.session, self.what = reader, writer, session, what
        self.codec = codec
        self.loop = asyncio.get_running_loop()
        self.out: asyncio.Queue[bytes | None] = asyncio.Queue(OUT_QUEUE)
        self.stopped = threading.Event()  # the session is over: output still read is dropped

    async def run(self) -> None:
        reading = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="exec-output")
        output = self.loop.run_in_executor(reading, self._read_output)
        sending = asyncio.create_task(self._send())
        receiving = asyncio.create_task(self._receive())
        ended = "the command ended"
        try:
            done, _ = await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
            if receiving in done and not sending.done():
                exc = receiving.exception()
                if isinstance(exc, ef.FrameError):
                    ended = f"the client broke the frame format ({exc})"
                    log.warning("%s: %s", self.what, ended)
                else:
                    ended = "the client went away"
                await self.loop.run_in_executor(None, self.session.kill)
            await sending
        except (OSError, asyncio.CancelledError):
            ended = "the connection ended"
            raise
        finally:
            receiving.cancel()
            sending.cancel()
            self.stopped.set()
            await self.loop.run_in_executor(None, self.session.kill)
            while not self.out.empty():  # a reader thread blocked on a full queue goes on (and ends)
                self.out.get_nowait()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(KILL_WAIT):
                    await output
            reading.shutdown(wait=False)
            log.info("%s: session over (%s)", self.what, ended)

    # -- in the output thread --------------------------------------------------------------------
    def _put(self, frame: bytes | None) -> None:
        if self.stopped.is_set():
            return
        fut = asyncio.run_coroutine_threadsafe(self.out.put(frame), self.loop)
        while not self.stopped.is_set():
            try:
                fut.result(PUT_SLICE)
                return
            except TimeoutError:  # the client is slow to read: keep waiting unless the session ends
                continue
        fut.cancel()

    def _read_output(self) -> None:
        try:
            while True:
                kind, data = self.session.read()
                if not data:
                    break
                for frame in self.codec.output(kind, data):
                    self._put(frame)
            code = self.session.wait(EXIT_WAIT)
            if code is None:
                self._put(self.codec.exit(-1, f"no exit code within {EXIT_WAIT:g} s of its output ending"))
            else:
                self._put(self.codec.exit(code))
        except Exception as exc:  # a driver error: said to the client, and the session ends
            log.warning("%s: %s", self.what, exc)
            self._put(self.codec.exit(-1, str(exc)))
        finally:
            self._put(None)

    # -- on the loop -----------------------------------------------------------------------------
    async def _send(self) -> None:
        while (frame := await self.out.get()) is not None:
            self.writer.write(frame)
            await self.writer.drain()

    async def _receive(self) -> None:
        stdin = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="exec-stdin")
        session = self.session
        try:
            while True:
                got = await self.codec.receive()
                if got is None:  # the client closed its side: as going away
                    raise EOFError("the client closed the session")
                kind, payload = got
                if kind == ef.STDIN:
                    await self.loop.run_in_executor(stdin, session.write, payload)
                elif kind == ef.CLOSE_STDIN:
                    await self.loop.run_in_executor(stdin, session.close_stdin)
                else:
                    rows, cols = ef.parse_resize(payload)
                    await self.loop.run_in_executor(stdin, session.resize, rows, cols)
        finally:
            stdin.shutdown(wait=False)
