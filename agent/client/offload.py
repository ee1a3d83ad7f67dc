"""Blocking steps off the main loop, one alloc's operations still in order.

A task stop waits up to its kill_timeout, a change script up to its timeout: the main loop never
waits for either. The step runs in a worker thread (`Offload`) and its continuation comes back to
the main loop; meanwhile whatever else arrives for the same alloc (a task exit, a restart timer, an
operator's stop) waits in order behind it (`Serial`), so no two changes to one alloc overlap while
every other alloc goes on. Tests pass `run_inline`: the same continuations, called at once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

# A blocking step's continuation: its result, or the exception it raised (never both).
Then = Callable[[object, Exception | None], None]


class Offload(Protocol):
    def __call__(self, what: str, blocking: Callable[[], object], then: Then) -> None: ...


def run_inline(what: str, blocking: Callable[[], object], then: Then) -> None:
    """The step and its continuation at once, on the caller's thread (the fakes' tests)."""
    try:
        result = blocking()
    except Exception as exc:  # handed to the continuation, as the threaded offload does
        then(None, exc)
        return
    then(result, None)


class _Threaded:
    """Each step in its own daemon thread, its continuation `post`ed to the main loop."""

    def __init__(self, post: Callable[[Callable[[], None]], None]) -> None:
        self.post = post

    def __call__(self, what: str, blocking: Callable[[], object], then: Then) -> None:
        post = self.post

        def work() -> None:
            try:
                result = blocking()
            except Exception as exc:
                failed = exc  # `exc` is unbound once the except block ends
                post(lambda: then(None, failed))
                return
            post(lambda: then(result, None))

        threading.Thread(target=work, name=f"offload-{what}", daemon=True).start()


def threaded(post: Callable[[Callable[[], None]], None]) -> Offload:
    """Run each step in its own daemon thread and `post` its continuation to the main loop."""
    return _Threaded(post)


def loop_post(offload: Offload) -> Callable[[Callable[[], None]], None]:
    """How a step still running off the loop hands something to the main loop as it happens (an
    image pull's events): the threaded offload's post; under `run_inline` the step runs on the
    caller's thread, so at once (another offload: through it, a step that does nothing)."""
    if isinstance(offload, _Threaded):
        return offload.post
    return lambda fn: offload("post", lambda: None, lambda _r, _e: fn())


class Serial:
    """One alloc's operations, in order: `run` does an operation now unless a blocking step of the
    alloc is still off the loop, then it waits for the step's continuation (and those queued before
    it)."""

    def __init__(self, offload: Offload, name: str) -> None:
        self._offload = offload
        self._name = name
        self._waiting: deque[Callable[[], None]] = deque()
        self.busy = ""  # what is off the loop now ("" when nothing)

    def run(self, op: Callable[[], None]) -> None:
        if self.busy:
            self._waiting.append(op)
            return
        op()

    def off_loop(self, what: str, blocking: Callable[[], object], then: Then) -> None:
        """Start `blocking` off the loop; `then` runs on the loop when it is done, and after it
        whatever waited. Call it last in an operation: the operation goes on in `then`."""
        if self.busy:
            raise RuntimeError(f"{self._name}: {what} started while {self.busy} is still off the loop")
        self.busy = what

        def done(result: object, exc: Exception | None) -> None:
            self.busy = ""
            then(result, exc)  # a kill point's exception (tests) ends here: nothing more runs
            self._drain()

        self._offload(what, blocking, done)

    def _drain(self) -> None:
        while self._waiting and not self.busy:
            op = self._waiting.popleft()
            try:
                op()
            except Exception:
                log.exception("%s: an operation that waited failed", self._name)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
