"""The state's change index: Nomad's `X-Nomad-Index` and blocking queries over the agent's store.

Nomad answers every read with the Raft index of the last change to what it read, and a query with
`?index=N` waits until that index passes N. The agent has no Raft log; its index is a counter raised
by every write to the store (agent.state.watched), per kind ("job", "alloc", ...) and per record.
It starts at the wall clock in milliseconds, so that an index a client saw before the agent
restarted is below every index after it (a blocking query from before a restart answers at once,
as it should: its view is stale), and it only ever grows within a run.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection

LOG_SIZE = 4096  # the last changes kept for Nomad's event stream (a reader further behind gets a gap)


class ChangeIndex:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._cond = threading.Condition()
        self._last = int(clock() * 1000)
        self._start = self._last
        self._by_kind: dict[str, int] = {}
        self._by_key: dict[tuple[str, str], int] = {}
        self._log: deque[tuple[int, str, str]] = deque(maxlen=LOG_SIZE)

    @property
    def start(self) -> int:
        """The index the run began at: what a record unchanged since the agent started reads as."""
        return self._start

    def bump(self, kind: str, key: str) -> int:
        with self._cond:
            self._last += 1
            self._by_kind[kind] = self._last
            self._by_key[(kind, key)] = self._last
            self._log.append((self._last, kind, key))
            self._cond.notify_all()
            return self._last

    def current(self, kinds: Collection[str] = ()) -> int:
        """The last change of any of `kinds` (of anything, when empty); the start when none yet."""
        with self._cond:
            return self._current(kinds)

    def _current(self, kinds: Collection[str]) -> int:
        if not kinds:
            return self._last
        return max((self._by_kind.get(k, self._start) for k in kinds), default=self._start)

    def of(self, kind: str, key: str) -> int:
        """The last change of one record (the start when it has not changed in this run)."""
        with self._cond:
            return self._by_key.get((kind, key), self._start)

    def wait(self, after: int, timeout: float, kinds: Collection[str] = ()) -> int:
        """Block until a change of `kinds` is past `after`, or `timeout` seconds; the index then."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (now := self._current(kinds)) <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return now

    def since(self, after: int) -> list[tuple[int, str, str]]:
        """The changes past `after` still in the log, oldest first: (index, kind, key)."""
        with self._cond:
            return [c for c in self._log if c[0] > after]
