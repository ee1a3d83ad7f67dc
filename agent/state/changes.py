"""The state's change index: Nomad's `X-Nomad-Index` and blocking queries over the agent's store.

Nomad answers every read with the Raft index of the last change to what it read, and a query with
`?index=N` waits until that index passes N. The agent has no Raft log; its index is a counter raised
by every write to the store (agent.state.watched), per kind ("job", "alloc", ...) and per record.
It starts at the wall clock in milliseconds, so that an index a client saw before the agent
restarted is below every index after it (a blocking query from before a restart answers at once,
as it should: its view is stale), and it only ever grows within a run. Changes can outrun the clock
(a burst of writes takes an index each, many per millisecond), so a run also starts past the highest
index its records kept (`highest_kept`): an alloc's CreateIndex, a variable's ModifyIndex (a
check-and-set reads it) are never above the indexes of the run that reads them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

LOG_SIZE = 4096  # the last changes kept for Nomad's event stream (a reader further behind gets a gap)


# The store's kinds whose records keep an index of the change index, and the fields that hold it
INDEXED_KINDS = ("alloc", "eval", "var")
INDEX_FIELDS = ("create_index", "modify_index")


class RecordLister(Protocol):
    def list(self, kind: str) -> Any: ...  # a LoadResult: its `.records` by key


def highest_kept(store: RecordLister, kinds: Iterable[str] = INDEXED_KINDS) -> int:
    """The highest index any stored record keeps (0 when none does)."""
    high = 0
    for kind in kinds:
        for rec in store.list(kind).records.values():
            high = max(high, *(_as_index(rec, f) for f in INDEX_FIELDS))
    return high


def _as_index(rec: Mapping[str, Any], field: str) -> int:
    value = rec.get(field) if isinstance(rec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class ChangeIndex:
    def __init__(self, clock: Callable[[], float] = time.time, *, floor: int = 0) -> None:
        """`floor`: an index already handed out (by an earlier run); this run starts past it."""
        self._cond = threading.Condition()
        self._last = max(int(clock() * 1000), floor + 1 if floor else 0)
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

    def of_each(self, records: Iterable[tuple[str, str]]) -> list[int]:
        """`of` of each (kind, key), read under the lock once (a listing checks thousands)."""
        with self._cond:
            get, start = self._by_key.get, self._start
            return [get(r, start) for r in records]

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
