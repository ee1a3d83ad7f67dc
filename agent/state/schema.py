"""The state DB's schema, as a list of upgrade steps (version N -> N+1) the store applies in one
transaction at open, and what a corrupt file is (SQLite's SQLITE_CORRUPT, SQLITE_NOTADB) and where
it is moved aside (agent.state.sqlite)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.state.store import decode, status_of

log = logging.getLogger(__name__)


def _upgrade_0_to_1(conn: sqlite3.Connection) -> None:
    """Version 1: a meta table and one table of JSON records keyed by (kind, key)."""
    conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE records (kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
        " PRIMARY KEY (kind, key))"
    )


def _upgrade_1_to_2(conn: sqlite3.Connection) -> None:
    """Version 2: when each record was last written, and the task event log."""
    conn.execute("ALTER TABLE records ADD COLUMN updated_at REAL NOT NULL DEFAULT 0")
    conn.execute(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL,"
        " alloc_id TEXT NOT NULL, task TEXT NOT NULL, type TEXT NOT NULL, message TEXT NOT NULL,"
        " details TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX events_by_alloc ON events (alloc_id, task, seq)")


def _upgrade_2_to_3(conn: sqlite3.Connection) -> None:
    """Version 3: alloc and task records in the typed form of `agent.structs.records` (enum states, every
    field present, a `format` number). A record that does not fit is left as it is: restore then
    reports it as corrupt and replaces that alloc, exactly as before the upgrade."""
    from agent.structs.records import AllocRecord, RecordError, TaskRecord

    typed: dict[str, Callable[[dict[str, Any], str], Any]] = {
        "alloc": AllocRecord.from_record,
        "task": TaskRecord.from_record,
    }
    rows = conn.execute("SELECT kind, key, value FROM records WHERE kind IN ('alloc', 'task')").fetchall()
    for kind, key, raw in rows:
        value = decode(raw if isinstance(raw, bytes) else str(raw).encode())
        if isinstance(value, str):
            continue
        try:
            rec = typed[str(kind)](value, str(key))
        except RecordError as exc:
            log.warning("state upgrade: %s/%s left as it is: %s", kind, key, exc.reason)
            continue
        conn.execute(
            "UPDATE records SET value = ? WHERE kind = ? AND key = ?",
            (json.dumps(rec.to_record(), sort_keys=True), kind, key),
        )


def _upgrade_3_to_4(conn: sqlite3.Connection) -> None:
    """Version 4: each record's status in an indexed column, so that restore reads the live allocs
    and the GC finds the terminal ones without decoding everything the node ever ran."""
    conn.execute("ALTER TABLE records ADD COLUMN status TEXT")
    rows = conn.execute("SELECT kind, key, CAST(value AS BLOB) FROM records").fetchall()
    for kind, key, raw in rows:
        value = decode(raw)
        status = None if isinstance(value, str) else status_of(value)
        if status is not None:
            conn.execute("UPDATE records SET status = ? WHERE kind = ? AND key = ?", (status, kind, key))
    conn.execute("CREATE INDEX records_by_status ON records (kind, status)")


UPGRADES: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _upgrade_0_to_1,
    _upgrade_1_to_2,
    _upgrade_2_to_3,
    _upgrade_3_to_4,
)
"""UPGRADES[n] takes the schema from version n to n + 1."""

SCHEMA_VERSION = len(UPGRADES)


_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_CORRUPT_WORDS = ("malformed", "not a database", "database corruption")


def is_corruption(exc: BaseException | None) -> bool:
    """Is this (or what caused it) SQLite saying the file itself is damaged (SQLITE_CORRUPT,
    SQLITE_NOTADB)? Busy, locked, full or read-only are not: those leave the file alone."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, sqlite3.DatabaseError):
            code = getattr(exc, "sqlite_errorcode", None)
            if isinstance(code, int) and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
                return True
            if any(w in str(exc).lower() for w in _CORRUPT_WORDS):
                return True
        if isinstance(exc, CorruptDatabase):
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


class CorruptDatabase(Exception):
    """Internal: the file failed its check at open; `reason` is what SQLite said."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def corrupt_name(path: Path, when: float) -> Path:
    """Where a corrupt `path` is moved: `<name>.corrupt-<UTC time>` next to it (a counter when taken)."""
    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y%m%dT%H%M%SZ")
    base = path.with_name(f"{path.name}.corrupt-{stamp}")
    target, n = base, 1
    while any(Path(f"{target}{s}").exists() for s in ("", "-wal", "-shm")):
        target, n = base.with_name(f"{base.name}.{n}"), n + 1
    return target
