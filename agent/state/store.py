"""The agent's state store: one small interface, records as JSON objects keyed by (kind, key).

Every transition the agent makes is written here *before* it is acted on, so that a restarted agent
knows what it was doing. Records are JSON-able dicts; `put` is an upsert that is durable when it
returns. Several writes land atomically inside `transaction()`. Reading a kind never fails because
of one bad record: `list` returns the good ones and reports the bad ones in `LoadResult.corrupt`, so
that restore can replace that alloc and restore the others (as the Nomad client's `client/state` does).

Key convention: everything that belongs to an alloc is keyed by the alloc id (kinds "alloc",
"network", pause "handle") or by `record_key(alloc_id, task, ...)` ("task", "handle", "template"), so
`drop_alloc` can remove all of it by prefix. Task events are an append-only log per alloc.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent.errors import AgentError

log = logging.getLogger(__name__)

Record = dict[str, Any]
"""A stored value: a JSON object."""

# The kinds the agent stores; the store itself accepts any non-empty kind.
KIND_JOB = "job"  # key: job id
KIND_ALLOC = "alloc"  # key: alloc id
KIND_TASK = "task"  # key: alloc_id/task
KIND_NETWORK = "network"  # key: alloc id; the CNI ADD result, kept for CHECK and DEL
KIND_TEMPLATE = "template"  # key: alloc_id/task/destination
KIND_HANDLE = "handle"  # key: alloc_id/task (or alloc id for the pause container): container id / pid + start
KINDS: tuple[str, ...] = (KIND_JOB, KIND_ALLOC, KIND_TASK, KIND_NETWORK, KIND_TEMPLATE, KIND_HANDLE)
ALLOC_KINDS: tuple[str, ...] = (KIND_ALLOC, KIND_TASK, KIND_NETWORK, KIND_TEMPLATE, KIND_HANDLE)

KEY_SEP = "/"


class StateError(AgentError):
    """The state store could not read or write; names the store and, where known, the record."""

    def __init__(self, location: str | Path, reason: str, *, kind: str = "", key: str = "") -> None:
        self.location = str(location)
        self.reason = reason
        self.kind = kind
        self.key = key
        where = f"{self.location}: {kind}/{key}" if kind else self.location
        super().__init__(f"{where}: {reason}")


class CorruptRecordError(StateError):
    """`get` found the record but cannot decode it (`list` reports such records instead of raising)."""


class SchemaTooNewError(StateError):
    """The state DB was written by a newer agent whose schema this code does not know."""

    def __init__(self, location: str | Path, found: int, known: int) -> None:
        self.found = found
        self.known = known
        super().__init__(
            location,
            f"schema version {found} is newer than this agent supports ({known}); "
            "run the agent version that wrote it, or move the file aside to start empty",
        )


@dataclass(frozen=True)
class CorruptRecord:
    kind: str
    key: str
    reason: str


@dataclass(frozen=True)
class LoadResult:
    """All records of one kind: the decodable ones by key, and the ones that are not."""

    records: dict[str, Record] = field(default_factory=dict)
    corrupt: list[CorruptRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Event:
    """A task event, Nomad style ("Received", "Started", "Restart Signaled", ...).

    `task` is "" for an event about the alloc as a whole. `seq` orders events across the store;
    `time` is seconds since the epoch.
    """

    seq: int
    time: float
    alloc_id: str
    task: str
    type: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexRow:
    key: str
    status: str
    updated_at: float


IndexRows = list[IndexRow]  # module-level aliases: `list` is a method name inside StateStore
EventList = list[Event]  # a module-level alias: `list` is a method name inside StateStore


class StateStore(Protocol):
    """What the agent needs from durable state. Implementations are thread-safe."""

    @property
    def location(self) -> str:
        """Where the state lives (a path), for messages."""
        ...

    @property
    def recovered_from(self) -> str:
        """Where a corrupt state file found at open was moved aside ("" when none was): the state
        was lost, and the agent adopts what it finds running rather than sweeping it."""
        ...

    def put(self, kind: str, key: str, value: Record) -> None:
        """Insert or replace one record; durable when it returns, or raises StateError."""
        ...

    def get(self, kind: str, key: str) -> Record | None:
        """One record, None if absent; CorruptRecordError if present but undecodable."""
        ...

    def list(self, kind: str, statuses: Collection[str] | None = None, *, flag: str = "") -> LoadResult:
        """Every record of a kind; undecodable ones are reported in `corrupt`, never raised.

        `statuses`: only records whose "status" field is one of them (an indexed column, so the
        cost follows what is read, not what is stored), and those without a readable status;
        `flag`: of those, only the ones whose boolean field `flag` is true."""
        ...

    def index(self, kind: str, statuses: Collection[str]) -> IndexRows:
        """Key, status and last write of the records with one of `statuses`, oldest write first,
        without reading the records themselves (the GC's candidates)."""
        ...

    def delete(self, kind: str, key: str) -> bool:
        """Remove one record (corrupt or not); False if it was absent."""
        ...

    def delete_prefix(self, kind: str, key_prefix: str) -> int:
        """Remove every record of `kind` whose key starts with `key_prefix`; returns how many."""
        ...

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """All writes inside land together or not at all (an exception inside rolls them back).

        Other threads' writes wait until it ends. Transactions nest (inner ones are savepoints).
        """
        ...

    def append_event(
        self, alloc_id: str, task: str, type: str, message: str, details: dict[str, Any] | None = None
    ) -> Event:
        """Append a task event (task "" for the alloc); durable when it returns."""
        ...

    def events(self, alloc_id: str, task: str | None = None) -> EventList:
        """An alloc's events, oldest first; with `task`, only that task's ("" = alloc-level only)."""
        ...

    def events_by_alloc(self) -> dict[str, EventList]:
        """Every alloc's events, oldest first, by alloc id, in one read (a listing of every alloc)."""
        ...

    def delete_events(self, alloc_id: str) -> int:
        """Drop an alloc's events (when the alloc is collected); returns how many."""
        ...

    def close(self) -> None:
        """Release the store; idempotent. Any later call raises StateError."""
        ...


def check_name(location: str, what: str, value: object) -> str:
    """Kinds, keys and alloc ids are non-empty strings without NUL."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise StateError(location, f"{what} must be a non-empty string without NUL, got {value!r}")
    return value


def encode(location: str, kind: str, key: str, value: object) -> str:
    """The stored form of a record: compact JSON of a dict, no NaN or infinities."""
    if not isinstance(value, dict):
        raise StateError(location, f"a record must be a dict, got {type(value).__name__}", kind=kind, key=key)
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StateError(location, f"record is not JSON-able: {e}", kind=kind, key=key) from e


def status_of(value: Record) -> str | None:
    """What the indexed status column holds for a record: its "status" field when that is a string."""
    status = value.get("status")
    return status if isinstance(status, str) else None


def decode(raw: object) -> Record | str:
    """A stored record back to a dict, or the reason it cannot be (a str)."""
    if raw is None:
        return "value is NULL"
    if isinstance(raw, str):
        text = raw
    elif isinstance(raw, bytes | bytearray | memoryview):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            return f"value is not UTF-8: {e}"
    else:
        return f"value is a {type(raw).__name__}, not JSON text"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, or nested too deeply
        return f"invalid JSON: {e}"
    if not isinstance(value, dict):
        return f"JSON is a {type(value).__name__}, not an object"
    return value


def record_key(*parts: str) -> str:
    """`alloc_id/task/...`: the key of a record that belongs to an alloc (see `drop_alloc`).

    Only the last part may contain "/" (a template destination such as "local/cert.pem").
    """
    if not parts:
        raise ValueError("record_key needs at least one part")
    for i, p in enumerate(parts):
        if not p or (KEY_SEP in p and i < len(parts) - 1):
            raise ValueError(f"key part {p!r}: must be non-empty, and only the last may contain {KEY_SEP!r}")
    return KEY_SEP.join(parts)


def drop_alloc(store: StateStore, alloc_id: str, *, kinds: Iterable[str] = ALLOC_KINDS) -> int:
    """Remove everything stored for one alloc, atomically: its records of every kind and its events.

    Removes the key `alloc_id` itself and keys under `alloc_id/`, never another alloc whose id merely
    starts with the same characters. Returns the number of records and events removed.
    """
    check_name(store.location, "alloc id", alloc_id)
    removed = 0
    with store.transaction():
        for kind in kinds:
            removed += int(store.delete(kind, alloc_id))
            removed += store.delete_prefix(kind, alloc_id + KEY_SEP)
        removed += store.delete_events(alloc_id)
    log.debug("state %s: dropped alloc %s (%d rows)", store.location, alloc_id, removed)
    return removed
