"""The API's handler threads: at most `size` of them, started as needed; more requests wait in the
queue, at most `max_queued` of them (past it `submit` raises QueueFull: the server answers it
without running the request). A handler's exception is handed to its future (the handlers answer
500 themselves: this only keeps the thread alive)."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_Work = tuple[Callable[[], Any], concurrent.futures.Future[Any]]


_R = TypeVar("_R")


class QueueFull(Exception):
    """Every handler is busy and `max_queued` requests wait already."""


class HandlerPool:
    """At most `size` daemon threads run handlers, started as needed; more requests wait in the queue
    (at most `max_queued`; None: no bound, for work that is bounded elsewhere)."""

    def __init__(self, size: int, max_queued: int | None = None) -> None:
        self._size = size
        self._max_queued = max_queued
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._waiting = 0  # submitted, not yet taken by a thread
        self._busy = 0  # threads running a handler

    def _full(self) -> bool:
        return self._max_queued is not None and self._busy >= self._size and self._waiting >= self._max_queued

    def full(self) -> bool:
        """Every handler busy and max_queued requests waiting: one more would be QueueFull."""
        with self._lock:
            return self._full()

    def busy(self) -> str:
        """Why the pool is full, in words."""
        with self._lock:
            return f"{self._waiting} requests wait for one of {self._size} busy handlers"

    def submit(self, fn: Callable[[], _R]) -> concurrent.futures.Future[_R]:
        fut: concurrent.futures.Future[_R] = concurrent.futures.Future()
        with self._lock:
            if self._full():
                raise QueueFull(f"{self._waiting} requests wait for one of {self._size} busy handlers")
            self._waiting += 1
            self._queue.put((fn, fut))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                t = threading.Thread(
                    target=self._work, name=f"api-handler-{len(self._threads) + 1}", daemon=True
                )
                self._threads.append(t)
                t.start()
        return fut

    @property
    def waiting(self) -> int:
        """Requests submitted and not yet taken by a thread."""
        with self._lock:
            return self._waiting

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            with self._lock:
                self._waiting -= 1
                self._busy += 1
            fn, fut = item
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn())
                    except BaseException as exc:  # fn answers 500 itself; this only keeps the thread alive
                        fut.set_exception(exc)
            finally:
                with self._lock:
                    self._busy -= 1
            self._idle.release()

    def stop(self) -> None:
        with self._lock:
            for _ in self._threads:
                self._queue.put(None)
