"""The agent's main loop: one thread runs every change to an alloc, in turn. The API's threads hand
it work (`call`), the drivers' exit watches and the offloaded steps' continuations post to it
(`post`), and timers (`schedule`) come due on it; nothing else ever touches a runner.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TypeVar

from agent.errors import InProgress, NotRun

log = logging.getLogger(__name__)
T = TypeVar("T")

LOOP_IDLE = 1.0  # the loop wakes at least this often to run due timers


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Loop:
    """The queue of work for the main loop, its timers and its turn."""

    def __init__(self) -> None:
        self._q: queue.Queue[Callable[[], None]] = queue.Queue()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        # Set once the agent stops: the loop ends, and the threads that wait on it (exit watches,
        # await_stopped) end too.
        self.stopping = threading.Event()

    def post(self, fn: Callable[[], None]) -> None:
        """From any thread: `fn` runs on the loop, in its turn (an exit report, an offload's hand-back)."""
        self._q.put(fn)

    def call(self, fn: Callable[[], T], timeout: float = 120.0) -> T:
        """Run fn on the main loop and return its result (for the API threads).

        A call the loop has not taken within `timeout` is withdrawn, never run later behind its
        caller's back: NotRun says so, and a retry is safe. One the loop has started is waited for
        (the loop never blocks on a task, so it ends); if even that takes another `timeout`,
        InProgress says its outcome is unknown yet."""
        fut: Future[T] = Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return  # withdrawn by its caller: not carried out
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                fut.set_exception(exc)

        self._q.put(run)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            if fut.cancel():
                raise NotRun(
                    f"the agent's main loop did not take the request within {timeout:g}s: "
                    "it was not carried out, retrying is safe"
                ) from None
        try:
            return fut.result(timeout)
        except FutureTimeout:
            raise InProgress(
                f"the request is still being carried out after {2 * timeout:g}s: check its outcome "
                "before retrying"
            ) from None

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        """On the loop: `fn` runs on it once `delay` seconds have passed."""
        heapq.heappush(self._timers, _Timer(time.monotonic() + delay, next(self._seq), fn))

    def run(self) -> None:
        """The loop's thread: due timers, then the next piece of work, until `stop`."""
        while not self.stopping.is_set():
            now = time.monotonic()
            while self._timers and self._timers[0].due <= now:
                _safe(heapq.heappop(self._timers).fn)
            wait = min(LOOP_IDLE, self._timers[0].due - now) if self._timers else LOOP_IDLE
            try:
                item = self._q.get(timeout=max(0.0, wait))
            except queue.Empty:
                continue
            _safe(item)

    def stop(self) -> None:
        self.stopping.set()
        self._q.put(lambda: None)  # wakes the loop to see it


def _safe(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("main loop task failed")
