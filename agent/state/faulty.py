"""A fault-injecting `StateStore` for tests: wraps a real store and breaks it on demand.

- `fail_put(n)`: the n-th `put` from now raises StateError, as a disk error would; nothing is written.
- `crash_after(n)`: the next n writes land, then the "process dies": with `halt=True` (default) the
  write raises SimulatedCrash (a BaseException, so the agent's own handlers do not swallow it, and the
  code after it never runs, as after a real crash); with `halt=False` this and every later write is
  silently dropped, as if it never reached the disk. A crash inside a transaction loses the whole
  transaction. Reads keep answering from the inner store: what a restarted agent would find.
- `corrupt(kind, key)`: the record reads as unreadable (`list` reports it, `get` raises) until it is
  written again or deleted.

Writes are put, delete, delete_prefix, append_event and delete_events.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Collection, Iterator
from typing import Any

from agent.state.store import (
    CorruptRecord,
    CorruptRecordError,
    Event,
    EventList,
    IndexRows,
    LoadResult,
    Record,
    StateError,
    StateStore,
)

log = logging.getLogger(__name__)


class SimulatedCrash(BaseException):
    """FaultyStore's crash point was reached with halt=True: the agent 'died' before this write."""


class _CrashRollback(Exception):
    """Internal: roll back a transaction that a (non-halting) crash interrupted."""


class FaultyStore:
    """`StateStore` wrapper with injectable disk errors, crashes and corrupt records. Thread-safe."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._fail_at: set[int] = set()  # ordinals of put calls that fail
        self._crash_at: int | None = None  # writes that may still land before the crash
        self._halt = True
        self._corrupt: dict[tuple[str, str], str] = {}
        self.puts = 0  # put calls seen
        self.writes = 0  # writes passed on to the inner store
        self.crashed = False
        self.failed: list[tuple[str, str]] = []  # (kind, key) of puts that failed by injection
        self.dropped: list[tuple[str, str, str]] = []  # (operation, kind, key) lost to the crash

    # -- arming ----------------------------------------------------------------------------------

    def fail_put(self, n: int = 1) -> None:
        """Make the n-th put from now (1 = the next one) raise StateError."""
        if n < 1:
            raise ValueError(f"fail_put: n must be >= 1, got {n}")
        with self._lock:
            self._fail_at.add(self.puts + n)

    def crash_after(self, n: int = 0, *, halt: bool = True) -> None:
        """Let n more writes land, then crash (see the module doc). n=0 crashes at the next write."""
        if n < 0:
            raise ValueError(f"crash_after: n must be >= 0, got {n}")
        with self._lock:
            self._crash_at = self.writes + n
            self._halt = halt

    def corrupt(self, kind: str, key: str, reason: str = "injected corruption") -> None:
        """Make an existing record unreadable until it is written again or deleted."""
        with self._lock:
            self._corrupt[(kind, key)] = reason

    # -- gates -----------------------------------------------------------------------------------

    def _admit(self, op: str, kind: str, key: str) -> bool:
        """Whether a write goes through to the inner store; raises SimulatedCrash when halting."""
        with self._lock:
            if not self.crashed and self._crash_at is not None and self.writes >= self._crash_at:
                self.crashed = True
                log.warning(
                    "faulty store: simulated crash at %s %s/%s after %d writes", op, kind, key, self.writes
                )
            if self.crashed:
                self.dropped.append((op, kind, key))
                if self._halt:
                    raise SimulatedCrash(f"simulated crash before {op} {kind}/{key}")
                return False
            self.writes += 1
            return True

    def _healed(self, kind: str, key: str) -> None:
        with self._lock:
            self._corrupt.pop((kind, key), None)

    @property
    def location(self) -> str:
        return f"faulty({self.inner.location})"

    @property
    def recovered_from(self) -> str:
        return self.inner.recovered_from

    # -- StateStore ------------------------------------------------------------------------------

    def put(self, kind: str, key: str, value: Record) -> None:
        with self._lock:
            self.puts += 1
            n = self.puts
            inject = n in self._fail_at and not self.crashed
            if inject:
                self._fail_at.discard(n)
                self.failed.append((kind, key))
        if inject:
            raise StateError(self.location, f"disk I/O error (injected at put #{n})", kind=kind, key=key)
        if self._admit("put", kind, key):
            self.inner.put(kind, key, value)
            self._healed(kind, key)

    def get(self, kind: str, key: str) -> Record | None:
        value = self.inner.get(kind, key)
        with self._lock:
            reason = self._corrupt.get((kind, key))
        if value is not None and reason is not None:
            raise CorruptRecordError(self.location, reason, kind=kind, key=key)
        return value

    def list(self, kind: str, statuses: Collection[str] | None = None, *, flag: str = "") -> LoadResult:
        result = self.inner.list(kind, statuses, flag=flag)
        with self._lock:
            marked = {key: reason for (k, key), reason in self._corrupt.items() if k == kind}
        out = LoadResult(corrupt=list(result.corrupt))
        for key, value in result.records.items():
            if key in marked:
                out.corrupt.append(CorruptRecord(kind, key, marked[key]))
            else:
                out.records[key] = value
        return out

    def index(self, kind: str, statuses: Collection[str]) -> IndexRows:
        return self.inner.index(kind, statuses)

    def delete(self, kind: str, key: str) -> bool:
        if not self._admit("delete", kind, key):
            return False
        existed = self.inner.delete(kind, key)
        self._healed(kind, key)
        return existed

    def delete_prefix(self, kind: str, key_prefix: str) -> int:
        if not self._admit("delete_prefix", kind, key_prefix):
            return 0
        n = self.inner.delete_prefix(kind, key_prefix)
        with self._lock:
            for k in [k for k in self._corrupt if k[0] == kind and k[1].startswith(key_prefix)]:
                del self._corrupt[k]
        return n

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        if self.crashed:  # nothing reaches the disk any more; writes inside are dropped (or halt)
            yield
            return
        with contextlib.suppress(_CrashRollback), self.inner.transaction():
            yield
            if self.crashed:  # the crash came inside: the transaction never committed
                raise _CrashRollback

    def append_event(
        self, alloc_id: str, task: str, type: str, message: str, details: dict[str, Any] | None = None
    ) -> Event:
        if not self._admit("append_event", alloc_id, task):
            return Event(0, time.time(), alloc_id, task, type, message, dict(details or {}))
        return self.inner.append_event(alloc_id, task, type, message, details)

    def events(self, alloc_id: str, task: str | None = None) -> EventList:
        return self.inner.events(alloc_id, task)

    def events_by_alloc(self) -> dict[str, EventList]:
        return self.inner.events_by_alloc()

    def delete_events(self, alloc_id: str) -> int:
        if not self._admit("delete_events", alloc_id, ""):
            return 0
        return self.inner.delete_events(alloc_id)

    def close(self) -> None:
        self.inner.close()
