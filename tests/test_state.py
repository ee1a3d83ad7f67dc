"""The state store: durable, atomic, upgradeable, and one bad record never blocks the others."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.state import (
    SCHEMA_VERSION,
    CorruptRecordError,
    SchemaTooNewError,
    SqliteStore,
    StateError,
    StateStore,
    drop_alloc,
    record_key,
)
from agent.state.faulty import FaultyStore, SimulatedCrash
from agent.state.sqlite import UPGRADES


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "state.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(db)
    yield s
    s.close()


def _raw(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(db), isolation_level=None)


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


# -- records ---------------------------------------------------------------------------------------


def test_round_trip(store: SqliteStore) -> None:
    assert store.get("alloc", "a1") is None
    store.put("alloc", "a1", {"job": "web", "ports": [8080], "nested": {"ok": True, "none": None}})
    store.put("alloc", "a2", {"job": "db"})
    store.put("task", "a1/web", {"state": "running"})
    assert store.get("alloc", "a1") == {"job": "web", "ports": [8080], "nested": {"ok": True, "none": None}}
    store.put("alloc", "a1", {"job": "web2"})  # upsert
    assert store.get("alloc", "a1") == {"job": "web2"}
    res = store.list("alloc")
    assert res.records == {"a1": {"job": "web2"}, "a2": {"job": "db"}} and res.corrupt == []
    assert store.list("nothing").records == {}

    got = store.get("alloc", "a2")
    assert got is not None
    got["job"] = "mutated"  # callers get copies
    assert store.get("alloc", "a2") == {"job": "db"}

    assert store.delete("alloc", "a2") is True
    assert store.delete("alloc", "a2") is False
    assert store.get("alloc", "a2") is None


def test_bad_values_are_refused_with_context(store: SqliteStore) -> None:
    with pytest.raises(StateError, match=r"alloc/a1: a record must be a dict"):
        store.put("alloc", "a1", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(StateError, match=r"alloc/a1: record is not JSON-able") as e:
        store.put("alloc", "a1", {"s": {1, 2}})
    assert e.value.kind == "alloc" and e.value.key == "a1"
    with pytest.raises(StateError, match="not JSON-able"):
        store.put("alloc", "a1", {"x": float("nan")})
    with pytest.raises(StateError, match="key must be a non-empty string"):
        store.put("alloc", "", {})
    with pytest.raises(StateError, match="kind must be"):
        store.get("", "a1")
    with pytest.raises(StateError, match="key prefix must be"):
        store.delete_prefix("task", "")  # would drop a whole kind
    assert store.list("alloc").records == {}


def test_delete_prefix_and_drop_alloc(store: SqliteStore) -> None:
    for alloc in ("a1", "a10"):  # a10 starts with "a1": must survive dropping a1
        store.put("alloc", alloc, {})
        store.put("network", alloc, {"ip": "10.0.0.2"})
        store.put("handle", alloc, {"container": "pause"})
        store.put("task", record_key(alloc, "web"), {})
        store.put("handle", record_key(alloc, "web"), {"container": "c"})
        store.put("template", record_key(alloc, "web", "secrets/cert.pem"), {"hash": "x"})
        store.append_event(alloc, "web", "Started", "")
    store.put("job", "a1", {"id": "a1"})  # not an alloc record
    assert store.delete_prefix("task", "a1/") == 1
    assert drop_alloc(store, "a1") == 5 + 1  # alloc, network, 2 handles, template + 1 event
    for kind in ("alloc", "network", "handle", "task", "template"):
        assert all(not k.startswith("a1/") and k != "a1" for k in store.list(kind).records)
    assert store.events("a1") == []
    assert store.get("alloc", "a10") == {} and len(store.list("handle").records) == 2
    assert len(store.events("a10")) == 1
    assert store.get("job", "a1") == {"id": "a1"}


@pytest.mark.parametrize("prefix", ["a/", "é/", "a\U0010ffff", "\U0010ffff"])
def test_delete_prefix_removes_exactly_the_keys_that_start_with_it(store: SqliteStore, prefix: str) -> None:
    """A range of the key index (the next key after the prefix's last character) plus the exact
    test: keys around the range's ends (the prefix itself, its last character's successor, a key
    that sorts between them without the prefix) are kept, as is an ending in U+10FFFF (no
    successor: the exact test alone)."""
    inside = [prefix + "x", prefix + "\U0010ffff", prefix + "/a/b", prefix]
    outside = [prefix[:-1] or "z", prefix[:-1] + "\x01", "zz", prefix[:-1] + "~"]
    if ord(prefix[-1]) < 0x10FFFF:  # the successor of its last character, the range's end
        outside.append(prefix[:-1] + chr(ord(prefix[-1]) + 1) + "x")
    for key in inside + outside:
        store.put("task", key, {"k": key})
    store.put("handle", prefix + "x", {})  # another kind: kept
    assert store.delete_prefix("task", prefix) == len(inside)
    assert set(store.list("task").records) == set(outside)
    assert store.get("handle", prefix + "x") == {}


def test_record_key() -> None:
    assert record_key("a1", "web", "local/x.conf") == "a1/web/local/x.conf"
    with pytest.raises(ValueError, match="only the last"):
        record_key("a/1", "web")
    with pytest.raises(ValueError, match="non-empty"):
        record_key("a1", "")


# -- durability, WAL, modes --------------------------------------------------------------------------


def test_durable_across_reopen(db: Path) -> None:
    s = SqliteStore(db)
    s.put("job", "j1", {"v": 1})
    s.append_event("a1", "", "Received", "alloc received")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StateError, match="closed"):
        s.get("job", "j1")
    with SqliteStore(db) as s2:
        assert s2.get("job", "j1") == {"v": 1}
        assert [e.type for e in s2.events("a1")] == ["Received"]
        assert s2.append_event("a1", "", "Started", "").seq == 2  # seq keeps growing


def test_wal_and_full_sync(store: SqliteStore, db: Path) -> None:
    conn = store._live()  # the store's own connection: synchronous is per connection
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    raw = _raw(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    raw.close()


def test_file_modes(tmp_path: Path) -> None:
    d = tmp_path / "st"
    d.mkdir(mode=0o755)
    old = os.umask(0)
    try:
        s = SqliteStore(d / "state.db")
        s.put("job", "j", {})
    finally:
        os.umask(old)
    assert _mode(d) == 0o700
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert _mode(d / name) == 0o600, name
    s.close()
    os.chmod(d / "state.db", 0o644)
    SqliteStore(d / "state.db").close()
    assert _mode(d / "state.db") == 0o600


def test_shared_world_writable_dir_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    with pytest.raises(StateError, match="world-writable"):
        SqliteStore(d / "state.db")
    assert _mode(d) == 0o1777


def test_not_a_database_is_a_clear_error_without_recovery_and_moved_aside_with_it(tmp_path: Path) -> None:
    d = tmp_path / "st"
    d.mkdir()
    garbage = b"this is not sqlite" * 100
    (d / "state.db").write_bytes(garbage)
    with pytest.raises(StateError, match=r"state\.db: not a usable SQLite database"):
        SqliteStore(d / "state.db", recover_corrupt=False)
    assert (d / "state.db").read_bytes() == garbage
    with SqliteStore(d / "state.db") as s:  # the agent's default: moved aside, a fresh one
        moved = Path(s.recovered_from)
        assert moved.parent == d and moved.name.startswith("state.db.corrupt-")
        assert moved.read_bytes() == garbage and _mode(moved) == 0o600
        assert "not a database" in s.recovery_reason
        s.put("alloc", "a1", {"v": 1})
        assert s.get("alloc", "a1") == {"v": 1}
    other = d / "other.db"
    raw = _raw(other)
    raw.execute("CREATE TABLE t (x)")
    raw.close()
    with pytest.raises(StateError, match=r"not a fieldlab state DB.*\['t'\]"):
        SqliteStore(other)


# -- corruption ------------------------------------------------------------------------------------


def test_corrupt_rows_are_reported_and_never_block_the_others(store: SqliteStore, db: Path) -> None:
    for i in range(6):
        store.put("alloc", f"a{i}", {"i": i})
    raw = _raw(db)
    raw.execute("UPDATE records SET value = 'not json {' WHERE key = 'a1'")
    raw.execute("UPDATE records SET value = '[1, 2]' WHERE key = 'a2'")
    raw.execute("UPDATE records SET value = CAST(X'FFFE7B7D' AS TEXT) WHERE key = 'a3'")  # bad UTF-8
    raw.execute("UPDATE records SET value = X'00FF' WHERE key = 'a4'")  # a BLOB
    raw.execute(
        "INSERT INTO records (kind, key, value, updated_at) VALUES ('alloc', 'a6', ?, 0)", ("[" * 100_000,)
    )
    raw.close()

    res = store.list("alloc")
    assert res.records == {"a0": {"i": 0}, "a5": {"i": 5}}
    reasons = {c.key: c.reason for c in res.corrupt}
    assert set(reasons) == {"a1", "a2", "a3", "a4", "a6"}
    assert all(c.kind == "alloc" for c in res.corrupt)
    assert reasons["a1"].startswith("invalid JSON")
    assert reasons["a2"] == "JSON is a list, not an object"
    assert "not UTF-8" in reasons["a3"] and "not UTF-8" in reasons["a4"]
    assert reasons["a6"].startswith("invalid JSON")

    with pytest.raises(CorruptRecordError, match=r"alloc/a1: invalid JSON") as e:
        store.get("alloc", "a1")
    assert (e.value.kind, e.value.key) == ("alloc", "a1")
    assert store.get("alloc", "a0") == {"i": 0}
    # the agent replaces the bad alloc: its records can be dropped, and rewritten
    assert drop_alloc(store, "a1") == 1
    store.put("alloc", "a2", {"i": 2})
    assert sorted(store.list("alloc").records) == ["a0", "a2", "a5"]


def test_corrupt_event_details_do_not_hide_the_event(store: SqliteStore, db: Path) -> None:
    store.append_event("a1", "web", "Started", "ok", {"n": 1})
    store.append_event("a1", "web", "Terminated", "exit 1")
    raw = _raw(db)
    raw.execute("UPDATE events SET details = '{broken' WHERE seq = 1")
    raw.close()
    evs = store.events("a1")
    assert [e.type for e in evs] == ["Started", "Terminated"]
    assert "invalid JSON" in evs[0].details["unreadable"]
    assert store.events_by_alloc() == {"a1": evs}


# -- schema ----------------------------------------------------------------------------------------

V1_SCHEMA = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE records (kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    " PRIMARY KEY (kind, key))",
    "INSERT INTO meta VALUES ('schema_version', '1')",
)


def test_upgrade_from_v1_keeps_data(db: Path) -> None:
    assert SCHEMA_VERSION == len(UPGRADES) == 4
    db.parent.mkdir(mode=0o700)
    raw = _raw(db)  # a v1 file, written by hand as the v1 agent did (rollback journal, not WAL)
    for sql in V1_SCHEMA:
        raw.execute(sql)
    raw.execute("""INSERT INTO records VALUES ('alloc', 'a1', '{"job": "web"}')""")
    raw.execute("INSERT INTO records VALUES ('alloc', 'a2', 'garbage')")
    raw.close()

    with SqliteStore(db) as s:
        res = s.list("alloc")
        assert res.records == {"a1": {"job": "web"}} and [c.key for c in res.corrupt] == ["a2"]
        s.put("alloc", "a3", {})
        assert s.append_event("a1", "web", "Received", "").seq == 1  # the v2 events table
    raw = _raw(db)
    assert raw.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in raw.execute("PRAGMA table_info(records)")]
    assert cols == ["kind", "key", "value", "updated_at", "status"]
    raw.close()


# What the agent before typed records (schema 2) wrote: plain dicts, fields added over time.
V2_ALLOC = {
    "id": "a1",
    "job": "web",
    "group": "g",
    "status": "running",
    "desired": "run",
    "created": 1700000000.5,
    "ports": [{"label": "http", "host": 20001, "to": 8080}],
    "replaces": "",
    "replaced_by": "",
    "network_state": "ready",
    "address": "172.26.64.5",
}
V2_OLDER_ALLOC = {"id": "a2", "job": "web", "group": "g", "status": "pending", "desired": "run", "ports": []}
V2_TASK = {"state": "running", "restarts": 2, "restart_times": [1700000100.0, 1700000200.0], "failed": False}


def test_upgrade_from_v2_types_alloc_and_task_records(db: Path) -> None:
    from agent.structs.records import AllocRecord, AllocStatus, NetworkState, PortAlloc, TaskRecord, TaskState

    db.parent.mkdir(mode=0o700)
    raw = _raw(db)
    for step in UPGRADES[:2]:  # a v2 file, made by the v2 steps themselves
        step(raw)
    raw.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    for kind, key, value in [
        ("alloc", "a1", V2_ALLOC),
        ("alloc", "a2", V2_OLDER_ALLOC),
        ("alloc", "a3", {**V2_ALLOC, "id": "a3", "status": "zombie"}),  # does not fit: left for restore
        ("task", "a1/web", V2_TASK),
        ("job", "web", {"source": "job {}", "format": "hcl"}),  # other kinds untouched
    ]:
        raw.execute("INSERT INTO records (kind, key, value) VALUES (?, ?, ?)", (kind, key, json.dumps(value)))
    raw.commit()
    raw.close()

    with SqliteStore(db) as s:
        a1 = AllocRecord.from_record(s.get("alloc", "a1") or {})
        assert a1.status is AllocStatus.RUNNING and a1.network_state is NetworkState.READY
        assert a1.ports == (PortAlloc("http", 20001, 8080),) and a1.address == "172.26.64.5"
        assert a1.created == 1700000000.5
        stored = s.get("alloc", "a1") or {}
        assert stored["format"] == 1 and stored == a1.to_record()
        a2 = s.get("alloc", "a2") or {}
        assert a2["address"] == "" and a2["network_state"] == "" and a2["reason"] == ""  # defaults written
        assert (s.get("alloc", "a3") or {})["status"] == "zombie"
        task = TaskRecord.from_record(s.get("task", "a1/web") or {})
        assert task == TaskRecord(TaskState.RUNNING, 2, (1700000100.0, 1700000200.0), False)
        assert s.get("job", "web") == {"source": "job {}", "format": "hcl"}


def test_upgrade_from_v3_indexes_status_and_restore_reads_only_what_it_acts_on(db: Path) -> None:
    """A schema-3 file as the previous agent wrote it (typed records, no status column): the upgrade
    fills the indexed status column from each record; `list(kind, statuses)` then reads only those
    (and unreadable rows, which restore must report); `flag` narrows to records with it true."""
    db.parent.mkdir(mode=0o700)
    raw = _raw(db)
    for step in UPGRADES[:3]:
        step(raw)
    raw.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    rows = {
        "live": {"status": "running", "job": "web"},
        "pend": {"status": "pending", "job": "web"},
        "done": {"status": "complete", "job": "old"},
        "owed": {"status": "failed", "replace_pending": True, "job": "web"},
        "gone": {"status": "failed", "replace_pending": False, "job": "old"},
    }
    for key, value in rows.items():
        raw.execute(
            "INSERT INTO records (kind, key, value, updated_at) VALUES ('alloc', ?, ?, ?)",
            (key, json.dumps(value), float(len(key))),
        )
    raw.execute("INSERT INTO records (kind, key, value) VALUES ('alloc', 'bad', 'not json {')")
    raw.commit()
    raw.close()

    with SqliteStore(db) as s:
        live = s.list("alloc", ("pending", "running"))
        assert set(live.records) == {"live", "pend"} and [c.key for c in live.corrupt] == ["bad"]
        owed = s.list("alloc", ("failed",), flag="replace_pending")
        assert set(owed.records) == {"owed"} and [c.key for c in owed.corrupt] == ["bad"]
        assert set(s.list("alloc").records) == set(rows)  # nothing lost
        assert [r.key for r in s.index("alloc", ("complete", "failed"))] == ["done", "gone", "owed"]
        s.put("alloc", "live", {"status": "complete", "job": "web"})  # a put keeps the column current
        assert "live" not in s.list("alloc", ("pending", "running")).records
        assert "live" in {r.key for r in s.index("alloc", ("complete",))}
    raw = _raw(db)
    plan = " ".join(
        str(r)
        for r in raw.execute(
            "EXPLAIN QUERY PLAN SELECT key FROM records WHERE kind = 'alloc' AND status IN ('running')"
        )
    )
    assert "records_by_status" in plan, plan
    raw.close()


def test_failed_upgrade_changes_nothing(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db.parent.mkdir(mode=0o700)
    raw = _raw(db)
    for sql in V1_SCHEMA:
        raw.execute(sql)
    raw.close()

    def broken(conn: sqlite3.Connection) -> None:
        UPGRADES[1](conn)
        conn.execute("SELECT * FROM no_such_table")

    monkeypatch.setattr("agent.state.sqlite.UPGRADES", (UPGRADES[0], broken))
    with pytest.raises(StateError, match="schema check/upgrade failed"):
        SqliteStore(db)
    raw = _raw(db)
    assert raw.execute("SELECT value FROM meta").fetchone()[0] == "1"
    assert "events" not in {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    raw.close()


def test_newer_schema_is_refused(db: Path) -> None:
    SqliteStore(db).close()
    raw = _raw(db)
    raw.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    raw.close()
    with pytest.raises(SchemaTooNewError) as e:
        SqliteStore(db)
    assert isinstance(e.value, StateError)
    assert (e.value.found, e.value.known) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    msg = str(e.value)
    assert str(db) in msg and f"schema version {SCHEMA_VERSION + 1}" in msg and f"({SCHEMA_VERSION})" in msg
    raw = _raw(db)  # left as it was
    assert raw.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION + 1)
    raw.close()


# -- a corrupt file: moved aside, never deleted, a fresh store starts -------------------------------

PAGE = 4096


def _db_with_records(db: Path, n: int = 300) -> None:
    with SqliteStore(db) as s:
        for i in range(n):
            s.put("alloc", f"a{i:04d}", {"job": "web", "pad": "x" * 200, "i": i})
            s.append_event(f"a{i:04d}", "web", "Started", "started " * 10)
        assert s.recovered_from == ""


def _smash_middle_page(db: Path) -> bytes:
    """Garbage over a page in the middle of the file (not the header page); the new file bytes."""
    pages = db.stat().st_size // PAGE
    assert pages > 10, "the test needs a file of many pages"
    with db.open("r+b") as f:
        f.seek((pages // 2) * PAGE)
        f.write(bytes((i * 37 + 11) % 256 for i in range(PAGE)))
    return db.read_bytes()


def test_a_corrupt_page_is_found_at_open_moved_aside_and_a_fresh_store_works(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _db_with_records(db)
    raw = _raw(db)
    assert raw.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    raw.close()
    damaged = _smash_middle_page(db)
    raw = _raw(db)
    with contextlib.suppress(sqlite3.DatabaseError):  # quick_check reports it (or raises)
        assert raw.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    raw.close()

    with caplog.at_level("ERROR", logger="agent.state.sqlite"):
        store = SqliteStore(db)
    try:
        moved = Path(store.recovered_from)
        assert moved.parent == db.parent and moved.name.startswith("state.db.corrupt-")
        assert moved.name.endswith("Z") and len(moved.name) == len("state.db.corrupt-20260101T000000Z")
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and str(moved) in errors[0].getMessage() and str(db) in errors[0].getMessage()
        assert "malformed" in store.recovery_reason or "quick_check" in store.recovery_reason
        # Nothing deleted: the damaged file is kept as it was, 0600; its -wal/-shm (if any) beside it.
        assert moved.read_bytes() == damaged and _mode(moved) == 0o600
        for p in db.parent.iterdir():
            assert _mode(p) == 0o600, p
        # A fresh store: empty, and it works.
        assert store.list("alloc").records == {} and store.events("a0001") == []
        store.put("alloc", "new", {"v": 1})
        store.append_event("new", "", "Received", "")
        assert store.get("alloc", "new") == {"v": 1} and len(store.events("new")) == 1
    finally:
        store.close()
    with SqliteStore(db) as again:  # the fresh file is healthy: nothing more is moved
        assert again.recovered_from == "" and again.get("alloc", "new") == {"v": 1}
    assert sorted(
        p.name for p in db.parent.iterdir() if ".corrupt-" in p.name and "-" not in p.name[-5:]
    ) == [moved.name]


def test_a_second_corruption_in_the_same_second_does_not_overwrite_the_first(db: Path) -> None:
    clock = lambda: 1_800_000_000.0  # noqa: E731 - a fixed time: both move-asides get the same stamp
    names = []
    for _ in range(2):
        db.parent.mkdir(mode=0o700, exist_ok=True)
        db.write_bytes(b"garbage" * 1000)
        with SqliteStore(db, clock=clock) as s:
            names.append(Path(s.recovered_from).name)
    assert names == ["state.db.corrupt-20270115T080000Z", "state.db.corrupt-20270115T080000Z.1"]
    assert all((db.parent / n).read_bytes() == b"garbage" * 1000 for n in names)


def test_corruption_at_the_first_read_is_recovered_the_same_way(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _db_with_records(db)
    damaged = _smash_middle_page(db)
    # As if the checks at open had missed it: the first read (restore's list) meets the bad page.
    monkeypatch.setattr(SqliteStore, "_check_integrity", lambda self, conn: None)
    with SqliteStore(db) as s:
        assert s.recovered_from == ""
        assert s.list("alloc").records == {}  # read on the fresh file, after the move
        moved = Path(s.recovered_from)
        assert moved.name.startswith("state.db.corrupt-") and moved.read_bytes() == damaged
        s.put("alloc", "a1", {"v": 1})
        assert s.get("alloc", "a1") == {"v": 1}
        assert FaultyStore(s).recovered_from == str(moved)


def test_corruption_after_a_write_is_an_error_not_a_recovery(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _db_with_records(db)
    _smash_middle_page(db)
    monkeypatch.setattr(SqliteStore, "_check_integrity", lambda self, conn: None)
    with SqliteStore(db) as s:
        s.put("alloc", "zzz", {"v": 1})  # past the first reads: the agent has acted on this file
        with pytest.raises(StateError, match="malformed"):
            s.list("alloc")
        assert s.recovered_from == ""
    assert not [p for p in db.parent.iterdir() if ".corrupt-" in p.name]


def test_refusals_that_are_not_corruption_move_nothing(db: Path) -> None:
    SqliteStore(db).close()
    raw = _raw(db)
    raw.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    raw.close()
    with pytest.raises(SchemaTooNewError):
        SqliteStore(db)
    assert not [p for p in db.parent.iterdir() if ".corrupt-" in p.name]


# -- transactions ----------------------------------------------------------------------------------


def test_transaction_is_all_or_nothing(store: SqliteStore, db: Path) -> None:
    store.put("alloc", "keep", {"v": 1})
    with pytest.raises(RuntimeError), store.transaction():
        store.put("alloc", "a1", {})
        store.put("task", "a1/web", {})
        store.delete("alloc", "keep")
        store.append_event("a1", "", "Received", "")
        raise RuntimeError("boom")
    assert store.list("alloc").records == {"keep": {"v": 1}}
    assert store.list("task").records == {} and store.events("a1") == []

    with store.transaction():
        store.put("alloc", "a1", {})
        store.put("task", "a1/web", {})
    raw = _raw(db)  # committed, visible to another connection
    assert raw.execute("SELECT count(*) FROM records").fetchone()[0] == 3
    raw.close()


def test_nested_transaction_rolls_back_only_itself(store: SqliteStore) -> None:
    with store.transaction():
        store.put("alloc", "outer", {})
        with pytest.raises(KeyError), store.transaction():
            store.put("alloc", "inner", {})
            raise KeyError("x")
        store.put("alloc", "after", {})
    assert sorted(store.list("alloc").records) == ["after", "outer"]


def test_transaction_is_invisible_until_commit(store: SqliteStore, db: Path) -> None:
    raw = _raw(db)
    with store.transaction():
        store.put("alloc", "a1", {})
        assert raw.execute("SELECT count(*) FROM records").fetchone()[0] == 0
        with pytest.raises(StateError, match="inside a transaction"):
            store.close()
    assert raw.execute("SELECT count(*) FROM records").fetchone()[0] == 1
    raw.close()


# -- events ----------------------------------------------------------------------------------------


def test_events_order_and_filter(db: Path) -> None:
    ticks = iter(range(100, 200))
    with SqliteStore(db, clock=lambda: float(next(ticks))) as s:
        s.append_event("a1", "", "Received", "alloc received")
        s.append_event("a1", "web", "Task Setup", "building task dir")
        s.append_event("a2", "db", "Started", "")
        s.append_event("a1", "web", "Started", "", {"container": "c1"})
        s.append_event("a1", "sidecar", "Started", "")
        e = s.append_event("a1", "web", "Restart Signaled", "template re-rendered", {"template": "x"})
        assert e.details == {"template": "x"} and e.alloc_id == "a1" and e.task == "web"

        all_a1 = s.events("a1")
        assert [x.type for x in all_a1] == [
            "Received",
            "Task Setup",
            "Started",
            "Started",
            "Restart Signaled",
        ]
        assert [x.seq for x in all_a1] == sorted(x.seq for x in all_a1)
        assert [x.time for x in all_a1] == [100.0, 101.0, 103.0, 104.0, 105.0]
        assert [x.type for x in s.events("a1", "web")] == ["Task Setup", "Started", "Restart Signaled"]
        assert [x.type for x in s.events("a1", "")] == ["Received"]
        every = s.events_by_alloc()  # a listing's one read: each alloc's, as events() gives them
        assert every == {"a1": all_a1, "a2": s.events("a2")}
        assert s.events("a1", "web")[1].details == {"container": "c1"}
        assert s.events("a1", "web")[0].details == {}
        assert [x.task for x in s.events("a2")] == ["db"]
        assert s.events("nope") == []
        assert s.delete_events("a1") == 5 and s.events("a1") == [] and len(s.events("a2")) == 1
        with pytest.raises(StateError, match="event type"):
            s.append_event("a1", "web", "", "")
        with pytest.raises(StateError, match="not JSON-able"):
            s.append_event("a1", "web", "X", "", {"b": b"bytes"})


# -- concurrency -----------------------------------------------------------------------------------


def test_threads_share_one_store(store: SqliteStore) -> None:
    n_threads, n_items = 4, 15
    errors: list[BaseException] = []
    torn: list[str] = []
    stop = threading.Event()

    def writer(t: int) -> None:
        try:
            for i in range(n_items):
                with store.transaction():  # a pair that must always appear together
                    store.put("alloc", f"t{t}-{i}", {"t": t, "i": i})
                    store.put("task", f"t{t}-{i}/web", {"t": t})
                store.append_event(f"t{t}", "web", "Started", str(i))
        except BaseException as e:
            errors.append(e)

    def reader() -> None:
        while not stop.is_set():
            # tasks first: a pair committed before this read must then show its alloc too
            tasks = {k.split("/")[0] for k in store.list("task").records}
            allocs = set(store.list("alloc").records)
            if not tasks <= allocs:  # a task without its alloc: a torn transaction
                torn.append(str(tasks - allocs))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    r = threading.Thread(target=reader)
    r.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    r.join()
    assert errors == [] and torn == []
    assert len(store.list("alloc").records) == n_threads * n_items
    assert len(store.list("task").records) == n_threads * n_items
    for t in range(n_threads):
        assert [e.message for e in store.events(f"t{t}")] == [str(i) for i in range(n_items)]


# -- FaultyStore -----------------------------------------------------------------------------------


@pytest.fixture
def faulty(store: SqliteStore) -> FaultyStore:
    return FaultyStore(store)


def test_faulty_store_is_a_state_store(faulty: FaultyStore) -> None:
    s: StateStore = faulty  # checked by mypy where it matters; here: it works as one
    s.put("alloc", "a1", {"x": 1})
    assert s.get("alloc", "a1") == {"x": 1}
    assert s.location.startswith("faulty(") and s.location.endswith("state.db)")


def test_fail_nth_put(faulty: FaultyStore, store: SqliteStore) -> None:
    faulty.put("alloc", "a1", {})
    faulty.fail_put(2)
    faulty.put("alloc", "a2", {})
    with pytest.raises(StateError, match=r"alloc/a3: disk I/O error \(injected at put #3\)"):
        faulty.put("alloc", "a3", {})
    faulty.put("alloc", "a3", {})  # only that one
    assert sorted(store.list("alloc").records) == ["a1", "a2", "a3"]
    assert faulty.failed == [("alloc", "a3")]

    faulty.fail_put(2)
    with pytest.raises(StateError), faulty.transaction():
        faulty.put("alloc", "t1", {})
        faulty.put("alloc", "t2", {})  # fails: the whole transaction is lost
    assert "t1" not in store.list("alloc").records


def test_crash_halts_and_keeps_only_what_was_written(faulty: FaultyStore, store: SqliteStore) -> None:
    faulty.crash_after(2)
    faulty.put("alloc", "a1", {})
    faulty.append_event("a1", "", "Received", "")
    caught_by_agent = False
    with pytest.raises(SimulatedCrash):
        try:
            faulty.put("alloc", "a2", {})
        except Exception:  # the agent's own handlers must not swallow a crash
            caught_by_agent = True
    assert not caught_by_agent and faulty.crashed
    assert faulty.dropped == [("put", "alloc", "a2")]
    with pytest.raises(SimulatedCrash):
        faulty.delete("alloc", "a1")  # dead stays dead
    assert sorted(store.list("alloc").records) == ["a1"] and len(store.events("a1")) == 1


def test_crash_inside_a_transaction_loses_all_of_it(store: SqliteStore) -> None:
    for halt in (True, False):
        store.delete_prefix("alloc", "x")
        f = FaultyStore(store)
        f.crash_after(1, halt=halt)
        try:
            with f.transaction():
                f.put("alloc", "x1", {})  # lands in the transaction, which never commits
                f.put("alloc", "x2", {})
        except SimulatedCrash:
            assert halt
        assert store.list("alloc").records == {}, halt
        assert f.crashed


def test_crash_without_halt_drops_writes_silently(faulty: FaultyStore, store: SqliteStore) -> None:
    faulty.put("alloc", "a1", {"v": 1})
    faulty.crash_after(0, halt=False)
    faulty.put("alloc", "a1", {"v": 2})
    assert faulty.delete("alloc", "a1") is False
    assert faulty.delete_prefix("alloc", "a") == 0
    assert faulty.append_event("a1", "", "Received", "").seq == 0
    assert faulty.delete_events("a1") == 0
    with faulty.transaction():
        faulty.put("alloc", "a9", {})
    assert store.list("alloc").records == {"a1": {"v": 1}}
    assert [op for op, _, _ in faulty.dropped] == [
        "put",
        "delete",
        "delete_prefix",
        "append_event",
        "delete_events",
        "put",
    ]
    assert faulty.get("alloc", "a1") == {"v": 1}  # reads show what reached the disk


def test_corrupt_record_is_isolated(faulty: FaultyStore) -> None:
    for i in range(3):
        faulty.put("alloc", f"a{i}", {"i": i})
    faulty.corrupt("alloc", "a1", "bit flip")
    res = faulty.list("alloc")
    assert sorted(res.records) == ["a0", "a2"]
    assert [(c.kind, c.key, c.reason) for c in res.corrupt] == [("alloc", "a1", "bit flip")]
    with pytest.raises(CorruptRecordError, match="alloc/a1: bit flip"):
        faulty.get("alloc", "a1")
    faulty.put("alloc", "a1", {"i": 1})  # rewritten: readable again
    assert faulty.get("alloc", "a1") == {"i": 1} and faulty.list("alloc").corrupt == []
    faulty.corrupt("alloc", "a2")
    assert drop_alloc(faulty, "a2") == 1 and faulty.list("alloc").corrupt == []


def test_every_transition_is_written_before_it_is_acted_on(store: SqliteStore) -> None:
    """The pattern the FaultyStore exists to check: crash at every write, in turn, and compare what
    was done (the side effects) with what a restarted agent would find on disk."""

    def run(s: StateStore, acted: list[str]) -> None:
        for task in ("web", "db", "cache"):
            s.put("task", f"a1/{task}", {"state": "starting"})
            acted.append(task)  # e.g. docker start: only after the transition is durable
            s.append_event("a1", task, "Started", "")

    total = 6
    for crash_at in range(total + 1):
        drop_alloc(store, "a1")
        f = FaultyStore(store)
        f.crash_after(crash_at)
        acted: list[str] = []
        with contextlib.suppress(SimulatedCrash):
            run(f, acted)
        on_disk = {k.split("/")[1] for k in store.list("task").records}
        assert set(acted) <= on_disk, f"crash after {crash_at} writes: acted on {acted}, disk has {on_disk}"
        assert f.crashed == (crash_at < total)
