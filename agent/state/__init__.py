"""Durable agent state: the `StateStore` interface, its SQLite implementation and a faulty one for tests."""

from __future__ import annotations

from agent.state.schema import SCHEMA_VERSION
from agent.state.sqlite import SqliteStore
from agent.state.store import (
    ALLOC_KINDS,
    KINDS,
    CorruptRecord,
    CorruptRecordError,
    Event,
    IndexRow,
    LoadResult,
    Record,
    SchemaTooNewError,
    StateError,
    StateStore,
    drop_alloc,
    record_key,
)

__all__ = [
    "ALLOC_KINDS",
    "KINDS",
    "SCHEMA_VERSION",
    "CorruptRecord",
    "CorruptRecordError",
    "Event",
    "IndexRow",
    "LoadResult",
    "Record",
    "SchemaTooNewError",
    "SqliteStore",
    "StateError",
    "StateStore",
    "drop_alloc",
    "record_key",
]
