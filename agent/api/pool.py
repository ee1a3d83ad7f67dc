"""The API's handler threads: at most `size` of them, started as needed; more requests wait in the
queue. A handler's exception is handed to its future (the handlers answer 500 themselves: this only
keeps the thread alive)."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_Work = tuple[Callable[[], Any], concurrent.futures.Future[Any]]


_R = TypeVar("_R")


class HandlerPool:
    """At most `size` daemon threads run handlers, started as needed; more requests wait in the queue."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[[], _R]) -> concurrent.futures.Future[_R]:
        fut: concurrent.futures.Future[_R] = concurrent.futures.Future()
        self._queue.put((fn, fut))
        with self._lock:
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                t = threading.Thread(
                    target=self._work, name=f"api-handler-{len(self._threads) + 1}", daemon=True
                )
                self._threads.append(t)
                t.start()
        return fut

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, fut = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # fn answers 500 itself; this only keeps the thread alive
                    fut.set_exception(exc)
            self._idle.release()

    def stop(self) -> None:
        with self._lock:
            for _ in self._threads:
                self._queue.put(None)
