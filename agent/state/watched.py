"""A `StateStore` that tells a `ChangeIndex` about every write, so that Nomad's blocking queries
(`?index=N`) wake within moments of a change to what they read.

Every write (put, delete, delete_prefix, append_event, delete_events) raises the index once it has
landed; a write inside a transaction raises it at once too (a reader that wakes then takes the main
loop's turn after the writer's, so it reads the committed state). Reads pass through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any

from agent.state.changes import ChangeIndex
from agent.state.store import Event, EventList, IndexRows, LoadResult, Record, StateStore


class WatchedStore:
    def __init__(self, inner: StateStore, index: ChangeIndex) -> None:
        self.inner = inner
        self.changes = index

    @property
    def location(self) -> str:
        return self.inner.location

    @property
    def recovered_from(self) -> str:
        return self.inner.recovered_from

    def put(self, kind: str, key: str, value: Record) -> None:
        self.inner.put(kind, key, value)
        self.changes.bump(kind, key)

    def get(self, kind: str, key: str) -> Record | None:
        return self.inner.get(kind, key)

    def list(self, kind: str, statuses: Collection[str] | None = None, *, flag: str = "") -> LoadResult:
        return self.inner.list(kind, statuses, flag=flag)

    def index(self, kind: str, statuses: Collection[str]) -> IndexRows:
        return self.inner.index(kind, statuses)

    def delete(self, kind: str, key: str) -> bool:
        gone = self.inner.delete(kind, key)
        if gone:
            self.changes.bump(kind, key)
        return gone

    def delete_prefix(self, kind: str, key_prefix: str) -> int:
        count = self.inner.delete_prefix(kind, key_prefix)
        if count:
            self.changes.bump(kind, key_prefix)
        return count

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.transaction()

    def append_event(
        self, alloc_id: str, task: str, type: str, message: str, details: dict[str, Any] | None = None
    ) -> Event:
        event = self.inner.append_event(alloc_id, task, type, message, details)
        self.changes.bump("alloc", alloc_id)  # an alloc's events are part of its TaskStates
        return event

    def events(self, alloc_id: str, task: str | None = None) -> EventList:
        return self.inner.events(alloc_id, task)

    def events_by_alloc(self) -> dict[str, EventList]:
        return self.inner.events_by_alloc()

    def delete_events(self, alloc_id: str) -> int:
        count = self.inner.delete_events(alloc_id)
        if count:
            self.changes.bump("alloc", alloc_id)
        return count

    def close(self) -> None:
        self.inner.close()
