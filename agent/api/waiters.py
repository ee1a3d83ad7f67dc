"""Blocking queries parked on the API's event loop: a waiter each, no thread each.

A handler that would wait for a change (agent.nomadapi.http.blocking, Nomad's `?index=N&wait=D`)
raises `Park` instead when the server allows it (`parking()` in the handler's thread): the server
answers the handler thread at once, holds the request as a future on its loop (`Waiters.wait`) and
runs the handler again (not parking then) when a change of the query's kinds passes its index, its
wait ends, or drops it when the client goes away first. One watch thread per change index wakes
the loop after each change (it waits on the index's own condition: nothing polls); the loop settles
the waiters whose kinds changed. Thousands can wait at once; what bounds them is the connections a
client address may hold (`api_max_conns_per_client`, as Nomad's `http_max_conns_per_client`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")
WATCH_SLICE = 1.0  # seconds a watch thread waits for a change before it looks whether to stop


class ChangeSource(Protocol):
    """What a waiter reads of a change index (agent.state.changes.ChangeIndex)."""

    def current(self, kinds: Collection[str] = ()) -> int: ...

    def wait(self, after: int, timeout: float, kinds: Collection[str] = ()) -> int: ...


class Park(Exception):  # a signal to the server, not an error
    """A handler's request to be held until `changes` of `kinds` pass `after`, or `wait` seconds."""

    def __init__(self, changes: ChangeSource, kinds: Collection[str], after: int, wait: float) -> None:
        super().__init__(f"parked until a change of {sorted(kinds)} past {after}, at most {wait:g} s")
        self.changes, self.kinds, self.after, self.wait = changes, tuple(sorted(kinds)), after, wait


_parked = [0]  # waiters held now, by every server (a gauge in /v1/metrics)


def parked_now() -> int:
    return _parked[0]


class _Watch:
    """The waiters on one change index, and the thread that wakes the loop when it changes."""

    def __init__(self, changes: ChangeSource, seen: int) -> None:
        self.changes = changes
        self.waiters: dict[asyncio.Future[None], tuple[tuple[str, ...], int]] = {}
        self.seen = seen
        self.thread: threading.Thread | None = None


class Waiters:
    """The parked requests of one server, on its loop. `stop()` ends the watch threads."""

    def __init__(self) -> None:
        self._watches: dict[int, _Watch] = {}
        self._stop = threading.Event()

    def held(self) -> int:
        return sum(len(w.waiters) for w in self._watches.values())

    async def wait(self, park: Park, *, query: bool = True) -> bool:
        """Until what `park` reads changes past its index (True) or its wait ends (False). `query`:
        a blocking query (counted in parked_now), not an idle stream."""
        loop = asyncio.get_running_loop()
        changes = park.changes
        watch = self._watches.get(id(changes))
        if watch is None:
            watch = self._watches[id(changes)] = _Watch(changes, changes.current())
            watch.thread = threading.Thread(
                target=self._watching, args=(watch, loop), name="api-waiters", daemon=True
            )
            watch.thread.start()
        if changes.current(park.kinds) > park.after:  # changed since the handler looked
            return True
        fut: asyncio.Future[None] = loop.create_future()
        watch.waiters[fut] = (park.kinds, park.after)
        counted = int(query)
        _parked[0] += counted
        try:
            async with asyncio.timeout(park.wait):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            _parked[0] -= counted
            watch.waiters.pop(fut, None)

    def _wake(self, watch: _Watch) -> None:
        """On the loop: settle the waiters whose kinds changed past their index."""
        now: dict[tuple[str, ...], int] = {}
        for fut, (kinds, after) in list(watch.waiters.items()):
            if kinds not in now:
                now[kinds] = watch.changes.current(kinds)
            if now[kinds] > after and not fut.done():
                fut.set_result(None)

    # -- in a watch thread -----------------------------------------------------------------------
    def _watching(self, watch: _Watch, loop: asyncio.AbstractEventLoop) -> None:
        while not self._stop.is_set():
            index = watch.changes.wait(watch.seen, WATCH_SLICE)
            if index > watch.seen:
                watch.seen = index
                with contextlib.suppress(RuntimeError):  # the loop closed: the server stopped
                    loop.call_soon_threadsafe(self._wake, watch)

    def stop(self) -> None:
        self._stop.set()


async def hold(reader: asyncio.StreamReader, wait: Awaitable[object]) -> bool:
    """Wait for `wait` (a parked query's `Waiters.wait`, an idle stream's) with no thread: True when
    it is over, False when the client went away first (drop it). The client sends nothing more on
    its connection (one request each); what it does send is read and dropped meanwhile."""

    async def gone() -> None:
        with contextlib.suppress(OSError):
            while await reader.read(64 * 1024):
                pass

    waiting = asyncio.ensure_future(wait)
    watching = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({waiting, watching}, return_when=asyncio.FIRST_COMPLETED)
        return waiting.done()
    finally:
        waiting.cancel()
        watching.cancel()
        await asyncio.gather(waiting, watching, return_exceptions=True)


class Rereads:
    """The reads of woken queries, one per thing read: queries woken together that read the same
    (the same path and query, but for their index and wait) share one read that starts after each
    of them woke, so it sees every change that woke them. 1,000 watchers of one listing woken by
    one write cost one read, not 1,000."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], tuple[asyncio.Future[Any], threading.Event]] = {}

    @staticmethod
    def key(path: str, query: str) -> tuple[str, str]:
        params = urllib.parse.parse_qsl(query, keep_blank_values=True)
        return path, urllib.parse.urlencode(sorted(p for p in params if p[0] not in ("index", "wait")))

    async def read(
        self,
        key: tuple[str, str],
        submit: Callable[[Callable[[], _T]], concurrent.futures.Future[_T]],
        fn: Callable[[], _T],
    ) -> tuple[_T, bool]:
        """`fn`'s result, run by `submit` or shared with a read of `key` not started yet; and whether
        it was this caller's own read (a stream can be sent once only: a sharer reads again)."""
        pending = self._pending.get(key)
        if pending is not None and not pending[1].is_set():
            return await asyncio.shield(pending[0]), False
        started = threading.Event()

        def run() -> _T:
            started.set()  # from here on, a query woken later reads anew
            return fn()

        fut = asyncio.wrap_future(submit(run))
        mine = self._pending[key] = (fut, started)
        fut.add_done_callback(lambda _: self._pending.pop(key) if self._pending.get(key) is mine else None)
        return await asyncio.shield(fut), True
