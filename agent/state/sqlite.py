"""The real state store: one SQLite file in WAL mode, fsync'd on every commit.

Schema changes are a list of upgrade steps (version N -> N+1), all applied in one transaction when
the store is opened; a fresh file runs every step from version 0, so the upgrade path is exercised
on every start. A DB from a newer agent is refused rather than guessed at.

Rows are read back one by one: a value that is not UTF-8, not JSON or not a JSON object is reported
as a CorruptRecord and never stops the other rows from loading.

A corrupt file (SQLite's "database disk image is malformed" or "file is not a database": a bad page,
a torn write, garbage over the header) is found at open by `PRAGMA quick_check` and a read of every
row, or by the first reads before anything was written. It is never repaired in place nor deleted:
the file and its -wal/-shm are moved aside to `<name>.corrupt-<UTC time>` (0600, next to it), one
ERROR line names them, and a fresh database is created so the agent starts. `recovered_from` then
names the moved file: the agent adopts the tasks it finds running (agent.runner.adopt).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from agent.state.schema import SCHEMA_VERSION, UPGRADES, CorruptDatabase, corrupt_name, is_corruption
from agent.state.store import (
    CorruptRecord,
    CorruptRecordError,
    Event,
    EventList,
    IndexRow,
    IndexRows,
    LoadResult,
    Record,
    SchemaTooNewError,
    StateError,
    check_name,
    decode,
    encode,
    status_of,
)

log = logging.getLogger(__name__)

DB_MODE = 0o600
DIR_MODE = 0o700


def _text(raw: bytes) -> str:
    # TEXT columns never raise on bad UTF-8 (record values are read as BLOBs and checked strictly).
    return raw.decode("utf-8", "replace")


class SqliteStore:
    """`StateStore` on SQLite. One connection, guarded by a lock; a transaction holds the lock.

    The file is created 0600 and its directory is made 0700, so give the store a directory of its
    own (e.g. `<data_dir>/state/state.db`); a world-writable parent such as /tmp is refused.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        recover_corrupt: bool = True,
    ) -> None:
        self._path = Path(path)
        self._clock = clock
        self._timeout = timeout
        self._recover = recover_corrupt
        self._lock = threading.RLock()
        self._depth = 0  # transaction nesting of the thread holding the lock
        self._written = False  # a write since open: past "the first reads", corruption is not recovered
        self._conn: sqlite3.Connection | None = None
        self.recovered_from = ""  # where a corrupt file found at open was moved ("" when none was)
        self.recovery_reason = ""  # what SQLite said about it
        try:
            self._open()
        except CorruptDatabase as exc:
            self._recover_fresh(exc.reason)

    # -- opening ---------------------------------------------------------------------------------

    def _open(self) -> None:
        """Open and check the file; CorruptDatabase (files already moved aside) when it is damaged
        and recovery is on, StateError for anything else."""
        self._prepare_files()
        try:
            conn = sqlite3.connect(
                str(self._path), timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise StateError(self._path, f"cannot open: {e}") from e
        conn.text_factory = _text
        try:
            self._configure(conn, self._timeout)
            self._check_integrity(conn)
            self._upgrade(conn)
            self._chmod_files()  # -wal and -shm exist now
        except BaseException as exc:
            if self._recover and is_corruption(exc):
                reason = exc.reason if isinstance(exc, CorruptDatabase) else str(exc)
                # Moved while still open: closing then checkpoints into the moved file (through its
                # descriptor) and its -wal is no longer found by name, so nothing of it is lost.
                self._move_aside()
                conn.close()
                raise CorruptDatabase(reason) from exc
            conn.close()
            if isinstance(exc, CorruptDatabase):  # recovery is off: refuse, as for any unusable file
                raise StateError(self._path, f"not a usable SQLite database: {exc.reason}") from exc
            raise
        self._conn = conn

    def _check_integrity(self, conn: sqlite3.Connection) -> None:
        """`PRAGMA quick_check`, then a read of every row (what restore reads first): a damaged
        file raises CorruptDatabase here rather than failing the agent's first reads."""
        try:
            rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)").fetchall()]
            if rows != ["ok"]:
                raise CorruptDatabase(f"quick_check: {'; '.join(rows)[:500]}")
            tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table, col in (("records", "value"), ("events", "details"), ("meta", "value")):
                if table in tables:
                    for _ in conn.execute(f"SELECT CAST({col} AS BLOB) FROM {table}"):  # noqa: S608
                        pass
        except sqlite3.DatabaseError as e:
            if is_corruption(e):
                raise CorruptDatabase(str(e)) from e
            raise StateError(self._path, f"not a usable SQLite database: {e}") from e

    def _move_aside(self) -> Path:
        """Rename the file and its -wal/-shm to `<name>.corrupt-<UTC time>[-wal|-shm]` (0600). Never
        deletes anything."""
        target = corrupt_name(self._path, self._clock())
        try:
            for suffix in ("", "-wal", "-shm"):
                src = Path(f"{self._path}{suffix}")
                dst = Path(f"{target}{suffix}")
                try:
                    os.rename(src, dst)
                except FileNotFoundError:
                    continue
                os.chmod(dst, DB_MODE, follow_symlinks=False)
            dfd = os.open(self._path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            raise StateError(
                self._path, f"corrupt, and it cannot be moved aside to {target}: {e.strerror}"
            ) from e
        self.recovered_from = str(target)
        return target

    def _recover_fresh(self, reason: str) -> None:
        """The damaged file was moved aside (`recovered_from`): say so once, and start a fresh one."""
        self.recovery_reason = reason
        log.error(
            "state %s is corrupt (%s): moved aside to %s (kept for inspection); starting with a fresh"
            " state database: running tasks are adopted, not managed",
            self._path,
            reason,
            self.recovered_from,
        )
        moved = self.recovered_from
        try:
            self._open()
        except CorruptDatabase as exc:  # a fresh file cannot be corrupt: the disk is failing
            raise StateError(self._path, f"a fresh state database is corrupt too: {exc.reason}") from exc
        self.recovered_from = moved

    def _prepare_files(self) -> None:
        parent = self._path.parent
        try:
            parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            st = parent.stat()
            if st.st_mode & (stat.S_IWOTH | stat.S_ISVTX):
                raise StateError(
                    self._path,
                    f"directory {parent} is world-writable; the state DB needs a directory of its own",
                )
            os.chmod(parent, DIR_MODE)
            created = not self._path.exists()
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, DB_MODE)
            os.close(fd)
            self._chmod_files()
            if created:  # make the new directory entry durable too
                dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as e:
            raise StateError(self._path, f"cannot prepare the state file: {e}") from e

    def _chmod_files(self) -> None:
        for p in (self._path, Path(f"{self._path}-wal"), Path(f"{self._path}-shm")):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(p, DB_MODE, follow_symlinks=False)

    def _configure(self, conn: sqlite3.Connection, timeout: float) -> None:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.DatabaseError as e:
            if is_corruption(e):
                raise CorruptDatabase(str(e)) from e
            raise StateError(self._path, f"not a usable SQLite database: {e}") from e
        if mode.lower() != "wal":
            raise StateError(
                self._path, f"cannot switch to WAL journal mode (got {mode!r}); is it a local disk?"
            )

    def _read_version(self, conn: sqlite3.Connection) -> int:
        tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            others = sorted(tables - {"sqlite_sequence"})
            if others:
                raise StateError(self._path, f"not a fieldlab state DB: no meta table, but tables {others}")
            return 0
        row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if row is None:
            raise StateError(self._path, "meta table has no schema_version")
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise StateError(self._path, f"schema_version {row[0]!r} is not an integer") from None
        if version < 1:
            raise StateError(self._path, f"schema_version {version} is not a valid version")
        return version

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise StateError(self._path, f"cannot lock for the schema check: {e}") from e
        try:
            found = self._read_version(conn)
            if found > SCHEMA_VERSION:
                raise SchemaTooNewError(self._path, found, SCHEMA_VERSION)
            if found < SCHEMA_VERSION:
                if found:
                    log.info("state %s: upgrading schema %d -> %d", self._path, found, SCHEMA_VERSION)
                for version in range(found, SCHEMA_VERSION):
                    UPGRADES[version](conn)
                conn.execute(
                    "INSERT INTO meta (name, value) VALUES ('schema_version', ?)"
                    " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback(conn)
            raise StateError(self._path, f"schema check/upgrade failed: {e}") from e
        except BaseException:
            self._rollback(conn)
            raise

    # -- plumbing --------------------------------------------------------------------------------

    @property
    def location(self) -> str:
        return str(self._path)

    @property
    def path(self) -> Path:
        return self._path

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateError(self._path, "the state store is closed")
        return self._conn

    def _rollback(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as e:  # the connection is unusable; the next call will say so
                log.error("state %s: rollback failed: %s", self._path, e)

    def _query(
        self, what: str, sql: str, params: tuple[Any, ...], kind: str = "", key: str = ""
    ) -> list[Any]:
        with self._lock:
            conn = self._live()
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                if not (self._recover and not self._written and not self._depth and is_corruption(e)):
                    raise StateError(self._path, f"{what} failed: {e}", kind=kind, key=key) from e
                # One of the first reads (nothing written since open) found a damaged page that the
                # checks at open missed: the same recovery as at open, then the read on the fresh file.
                self._move_aside()
                self._conn = None
                conn.close()
                self._recover_fresh(str(e))
                try:
                    return self._live().execute(sql, params).fetchall()
                except sqlite3.Error as e2:
                    raise StateError(self._path, f"{what} failed: {e2}", kind=kind, key=key) from e2

    def _write(
        self, what: str, sql: str, params: tuple[Any, ...], kind: str = "", key: str = ""
    ) -> sqlite3.Cursor:
        # Outside a transaction the statement commits on its own (autocommit), fsync'd.
        with self._lock:
            conn = self._live()
            self._written = True
            try:
                return conn.execute(sql, params)
            except sqlite3.Error as e:
                raise StateError(self._path, f"{what} failed: {e}", kind=kind, key=key) from e

    # -- records ---------------------------------------------------------------------------------

    def put(self, kind: str, key: str, value: Record) -> None:
        check_name(self.location, "kind", kind)
        check_name(self.location, "key", key)
        text = encode(self.location, kind, key, value)
        self._write(
            "put",
            "INSERT INTO records (kind, key, value, updated_at, status) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,"
            " status = excluded.status",
            (kind, key, text, self._clock(), status_of(value)),
            kind,
            key,
        )

    def get(self, kind: str, key: str) -> Record | None:
        check_name(self.location, "kind", kind)
        check_name(self.location, "key", key)
        rows = self._query(
            "get",
            "SELECT CAST(value AS BLOB) FROM records WHERE kind = ? AND key = ?",
            (kind, key),
            kind,
            key,
        )
        if not rows:
            return None
        value = decode(rows[0][0])
        if isinstance(value, str):
            raise CorruptRecordError(self._path, value, kind=kind, key=key)
        return value

    def list(self, kind: str, statuses: Collection[str] | None = None, *, flag: str = "") -> LoadResult:
        check_name(self.location, "kind", kind)
        sql = "SELECT key, CAST(value AS BLOB) FROM records WHERE kind = ?"
        params: tuple[Any, ...] = (kind,)
        if statuses is not None:
            marks = ", ".join("?" * len(statuses))
            sql += f" AND (status IN ({marks}) OR status IS NULL)" if statuses else " AND status IS NULL"
            params += tuple(statuses)
        if flag:
            check_name(self.location, "flag", flag)
            # CASE, not OR: an unreadable record (NULL status) never reaches json_extract.
            sql += " AND (CASE WHEN status IS NULL THEN 1 ELSE json_extract(value, ?) END) = 1"
            params += ("$." + flag,)
        rows = self._query("list", sql + " ORDER BY key", params, kind)
        result = LoadResult()
        for key, raw in rows:
            value = decode(raw)
            if isinstance(value, str):
                log.warning("state %s: record %s/%s is unreadable: %s", self._path, kind, key, value)
                result.corrupt.append(CorruptRecord(kind, str(key), value))
            else:
                result.records[str(key)] = value
        return result

    def index(self, kind: str, statuses: Collection[str]) -> IndexRows:
        check_name(self.location, "kind", kind)
        if not statuses:
            return []
        marks = ", ".join("?" * len(statuses))
        rows = self._query(
            "index",
            f"SELECT key, status, updated_at FROM records WHERE kind = ? AND status IN ({marks})"  # noqa: S608 - placeholders only
            " ORDER BY updated_at, key",
            (kind, *statuses),
            kind,
        )
        return [IndexRow(str(k), str(st), float(t)) for k, st, t in rows]

    def delete(self, kind: str, key: str) -> bool:
        check_name(self.location, "kind", kind)
        check_name(self.location, "key", key)
        cur = self._write("delete", "DELETE FROM records WHERE kind = ? AND key = ?", (kind, key), kind, key)
        return cur.rowcount > 0

    def delete_prefix(self, kind: str, key_prefix: str) -> int:
        check_name(self.location, "kind", kind)
        check_name(self.location, "key prefix", key_prefix)
        # The range [prefix, prefix with its last character the next one) holds exactly the keys
        # that start with the prefix (UTF-8 orders as code points) and reads the primary key's
        # index: the substr test alone read every record of the kind (the GC of 10,000 allocs
        # took 35 s so); it stays as the exact test, and alone for a prefix ending in U+10FFFF.
        last = ord(key_prefix[-1])
        upper = key_prefix[:-1] + chr(last + 1) if last < 0x10FFFF else None
        if upper is None:
            sql = "DELETE FROM records WHERE kind = ? AND substr(key, 1, ?) = ?"
            args: tuple[object, ...] = (kind, len(key_prefix), key_prefix)
        else:
            sql = "DELETE FROM records WHERE kind = ? AND key >= ? AND key < ? AND substr(key, 1, ?) = ?"
            args = (kind, key_prefix, upper, len(key_prefix), key_prefix)
        cur = self._write("delete_prefix", sql, args, kind, key_prefix)
        return max(cur.rowcount, 0)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            conn = self._live()
            depth = self._depth
            savepoint = f"sp{depth}"
            self._written = True
            try:
                conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT {savepoint}")
            except sqlite3.Error as e:
                raise StateError(self._path, f"cannot begin a transaction: {e}") from e
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                self._undo(conn, depth, savepoint)
                raise
            self._depth -= 1
            try:
                conn.execute("COMMIT" if depth == 0 else f"RELEASE {savepoint}")
            except sqlite3.Error as e:
                self._undo(conn, depth, savepoint)
                raise StateError(self._path, f"commit failed, nothing written: {e}") from e

    def _undo(self, conn: sqlite3.Connection, depth: int, savepoint: str) -> None:
        if depth == 0:
            self._rollback(conn)
            return
        try:
            conn.execute(f"ROLLBACK TO {savepoint}")
            conn.execute(f"RELEASE {savepoint}")
        except sqlite3.Error as e:
            log.error("state %s: rollback to %s failed: %s", self._path, savepoint, e)

    # -- events ----------------------------------------------------------------------------------

    def append_event(
        self, alloc_id: str, task: str, type: str, message: str, details: dict[str, Any] | None = None
    ) -> Event:
        check_name(self.location, "alloc id", alloc_id)
        check_name(self.location, "event type", type)
        if not isinstance(task, str) or not isinstance(message, str):
            raise StateError(self._path, f"event task and message must be strings, got {task!r}, {message!r}")
        text = encode(self.location, "event", alloc_id, {} if details is None else details)
        now = self._clock()
        cur = self._write(
            "append_event",
            "INSERT INTO events (time, alloc_id, task, type, message, details) VALUES (?, ?, ?, ?, ?, ?)",
            (now, alloc_id, task, type, message, text),
            "event",
            alloc_id,
        )
        seq = cur.lastrowid
        assert seq is not None
        return Event(seq, now, alloc_id, task, type, message, json.loads(text))

    def events(self, alloc_id: str, task: str | None = None) -> EventList:
        check_name(self.location, "alloc id", alloc_id)
        cols = "SELECT seq, time, alloc_id, task, type, message, CAST(details AS BLOB) FROM events"
        if task is None:
            rows = self._query("events", f"{cols} WHERE alloc_id = ? ORDER BY seq", (alloc_id,))
        else:
            rows = self._query(
                "events", f"{cols} WHERE alloc_id = ? AND task = ? ORDER BY seq", (alloc_id, task)
            )
        return [self._event(row) for row in rows]

    def events_by_alloc(self) -> dict[str, EventList]:
        cols = "SELECT seq, time, alloc_id, task, type, message, CAST(details AS BLOB) FROM events"
        out: dict[str, EventList] = {}
        for row in self._query("events", f"{cols} ORDER BY seq", ()):
            out.setdefault(str(row[2]), []).append(self._event(row))
        return out

    def _event(self, row: tuple[Any, ...]) -> Event:
        seq, when, alloc, tsk, typ, msg, raw = row
        details = decode(raw)
        if isinstance(details, str):
            log.warning(
                "state %s: details of event %d of alloc %s are unreadable: %s",
                self._path,
                seq,
                alloc,
                details,
            )
            details = {"unreadable": details}
        return Event(int(seq), float(when), str(alloc), str(tsk), str(typ), str(msg), details)

    def delete_events(self, alloc_id: str) -> int:
        check_name(self.location, "alloc id", alloc_id)
        cur = self._write(
            "delete_events", "DELETE FROM events WHERE alloc_id = ?", (alloc_id,), "event", alloc_id
        )
        return max(cur.rowcount, 0)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            if self._depth:
                raise StateError(self._path, "close() inside a transaction")
            self._conn.close()
            self._conn = None

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"
