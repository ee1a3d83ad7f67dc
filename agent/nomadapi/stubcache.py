"""`GET /v1/allocations` encoded as it is sent: each alloc's AllocationListStub is encoded once and
kept (as JSON bytes) while nothing it is made from changed, and the array goes out in chunks.

A listing of 10,050 allocs (10,000 terminal ones of an earlier run) took 2-3 s and left the agent
at 285-299 MB: every listing built the view of every terminal alloc on the loop (three listings of
the store, decoded), read every event, shaped 10,050 stubs and joined their text into one string.
Now a listing reads on the loop only the keys of the terminal allocs and the change index of what
each stub is made from; a stub whose inputs did not change is the bytes encoded before.

What a terminal alloc of an earlier run (one without a runner) is made from, each raising the
change index when it is written (agent.state.watched): its alloc record and events (kind "alloc"),
its task records and handles ("task", "handle": `<alloc>/<task>`, the netns owner's handle), its
job (the group its tasks are read from), and its deployment status. The allocs with a runner (the
live ones, and the terminal ones of this run) and the adopted ones are shaped for every listing,
as before: they are few, and what they show changes in memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.errors import AgentError
from agent.node.gc import TERMINAL_STATUSES
from agent.nomadapi.context import Allocs, Changes, Kept
from agent.runner.state import NETNS_OWNER
from agent.state.store import Event

CHUNK = 256 * 1024  # bytes of the array sent at once; a smaller answer is sent whole
FEW = 4  # changed terminal allocs read one by one (each read lists the terminal keys); more: in one go
MANY = 1000  # allocs to shape at once past which every event is read in one query (not alloc by alloc)

Key = tuple[tuple[int, ...], Any, int]  # the records' change indexes, deployment, skipped
Shape = Callable[[Mapping[str, Any], Sequence[Event] | None], dict[str, Any]]


def encode(stub: Mapping[str, Any]) -> bytes:
    """One stub as the listing sends it (compact JSON, as agent.nomadapi.http.answer_list)."""
    return json.dumps(stub, separators=(",", ":")).encode()


class GatherPort(Changes, Kept, Allocs, Protocol):
    """What a listing gathers on the loop: the live and adopted allocs, the terminal allocs' records
    and the change indexes their kept stubs are keyed by."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A terminal alloc's encoded stub (None: one the store's views skip, unreadable or without a
    group), and what decides whether it is still right."""

    key: Key
    create: int  # its CreateIndex (the listing's order)
    records: tuple[tuple[str, str], ...]  # (kind, key) of what it is made from
    data: bytes | None  # deflated with the cache's dictionary (StubCache.pack)
    size: int = 0  # of the stub's JSON


@dataclass
class Listing:
    """What one listing read on the loop: the views to shape now (with the keys of the terminal
    ones among them), and the stubs kept from before."""

    shape: list[dict[str, Any]]
    keys: dict[str, tuple[Key, tuple[tuple[str, str], ...]]]  # a terminal view's key and inputs
    kept: dict[str, Entry]


class StubCache:
    """The encoded stubs of the terminal allocs without a runner, by `?resources=` and alloc ID."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[bool, dict[str, Entry]] = {False: {}, True: {}}
        self._zdict = b""  # the first stub kept: the others share most of its text

    def pack(self, data: bytes) -> bytes:
        """A stub deflated against the first one kept (2.2 KB -> about 0.3 KB: 22 MB of 10,000
        stubs kept in 3 MB; inflating all of them takes about 50 ms)."""
        with self._lock:
            self._zdict = self._zdict or data
        packer = zlib.compressobj(1, zdict=self._zdict)
        return packer.compress(data) + packer.flush()

    def unpack(self, packed: bytes) -> bytes:
        return zlib.decompressobj(zdict=self._zdict).decompress(packed)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(e) for e in self._entries.values())

    # -- on the loop -------------------------------------------------------------------------------
    def gather(
        self, api: GatherPort, deployment_of: Callable[[str], Any], prefix: str, resources: bool
    ) -> Listing:
        """On the loop: the live and adopted allocs' views, the terminal allocs' kept stubs where
        their key is unchanged and the views of the others."""
        runners = api.runners
        live = [r.view() for r in runners.values()] + list(api.adoption.views())
        shape = [v for v in live if str(v["id"]).startswith(prefix)]
        ids = [
            row.key
            for row in api.store.index("alloc", TERMINAL_STATUSES)
            if row.key not in runners and row.key.startswith(prefix)
        ]
        with self._lock:
            entries = self._entries[resources]
            if not prefix:  # collected allocs go (from both: the other kind is not pruned otherwise)
                wanted = set(ids)
                for flag in (False, True):
                    if len(self._entries[flag]) > len(wanted) or flag == resources:
                        self._entries[flag] = {a: e for a, e in self._entries[flag].items() if a in wanted}
                entries = self._entries[resources]
            known = [(a, entries.get(a)) for a in ids]
        changes = api.changes
        jobs_now = changes.current(("job",))
        flat = [r for _, entry in known if entry is not None for r in entry.records]
        indexes = changes.of_each(flat)  # every record's change index under the lock once
        kept: dict[str, Entry] = {}
        missing: list[str] = []
        at = 0
        for alloc_id, entry in known:
            if entry is None:
                missing.append(alloc_id)
                continue
            n = len(entry.records)
            skipped = jobs_now if entry.data is None else 0  # a group may be found once a job is registered
            now = (tuple(indexes[at : at + n]), deployment_of(alloc_id), skipped)
            at += n
            if entry.key == now:
                kept[alloc_id] = entry
            else:
                missing.append(alloc_id)
        keys: dict[str, tuple[Key, tuple[tuple[str, str], ...]]] = {}
        if missing:
            views = _views_of(api, missing)
            for alloc_id in missing:
                view = views.get(alloc_id)
                records = _records(alloc_id, view)
                skipped = jobs_now if view is None else 0
                key = (tuple(changes.of_each(records)), deployment_of(alloc_id), skipped)
                if view is None:  # not listed (as before): kept so, until something it reads changes
                    self._put(resources, alloc_id, Entry(key, 0, records, None))
                    continue
                keys[alloc_id] = (key, records)
                shape.append(view)
        return Listing(shape, keys, kept)

    # -- off the loop ------------------------------------------------------------------------------
    def encode_listing(
        self,
        listing: Listing,
        shape: Shape,
        events: Callable[[], Mapping[str, Sequence[Event]]] | None,
        one_events: Callable[[str], Sequence[Event]],
        start: int,
        resources: bool,
    ) -> tuple[list[tuple[int, str, bytes, bool]], int]:
        """(CreateIndex, ID, encoded stub, whether it is packed) of every alloc listed, unordered,
        and the size of their JSON; the newly shaped terminal ones kept for the next listing."""
        many = len(listing.shape) > MANY
        every = events() if events is not None and many else None
        out = [(e.create, a, e.data, True) for a, e in listing.kept.items() if e.data is not None]
        size = sum(e.size + 1 for e in listing.kept.values() if e.data is not None)
        fresh = []
        for view in listing.shape:
            alloc_id = str(view["id"])
            found = every.get(alloc_id, []) if every is not None else one_events(alloc_id)
            data = encode(shape(view, found))
            create = int(view.get("create_index") or 0) or start
            out.append((create, alloc_id, data, False))
            size += len(data) + 1
            if (known := listing.keys.get(alloc_id)) is not None:
                fresh.append((alloc_id, known, create, data))
        if many:  # the views and events of a cold listing are freed now: give them back
            del every, listing.shape[:]
            release_freed_memory()
        for alloc_id, (key, records), create, data in fresh:
            self._put(resources, alloc_id, Entry(key, create, records, self.pack(data), len(data)))
        return out, size

    def _put(self, resources: bool, alloc_id: str, entry: Entry) -> None:
        with self._lock:
            self._entries[resources][alloc_id] = entry


def _records(alloc_id: str, view: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """(kind, key) of the records a terminal alloc's view is made from (agent.runner.stored)."""
    job = str(view.get("job") or "") if view is not None else ""
    records = [("alloc", alloc_id), ("job", job), ("handle", f"{alloc_id}/{NETNS_OWNER}")]
    for task in (view.get("tasks") or ()) if view is not None else ():
        records += [("task", f"{alloc_id}/{task}"), ("handle", f"{alloc_id}/{task}")]
    return tuple(records)


def _views_of(api: Allocs, ids: list[str]) -> dict[str, dict[str, Any]]:
    """On the loop: the views of these terminal allocs as the store's views give them (those it
    skips are missing)."""
    wanted = set(ids)
    if len(ids) <= FEW:
        out = {}
        for alloc_id in ids:
            try:
                view = api.allocs.alloc(alloc_id).view()
            except AgentError:  # unreadable or gone: not listed, as alloc_views skips it
                continue
            out[alloc_id] = view
        return out
    return {str(v["id"]): v for v in api.allocs.views() if v["id"] in wanted}


def chunks(items: list[tuple[bytes, bool]], unpack: Callable[[bytes], bytes]) -> Iterator[bytes]:
    """The JSON array of the encoded items (inflated where packed), in pieces of about CHUNK bytes."""
    parts: list[bytes] = []
    size, first = 0, True
    for raw, packed in items:
        data = unpack(raw) if packed else raw
        parts.append(data)
        size += len(data) + 1
        if size >= CHUNK:
            yield (b"[" if first else b",") + b",".join(parts)
            parts, size, first = [], 0, False
    tail = b",".join(parts)
    if first:
        yield b"[" + tail + b"]"
    else:
        yield (b"," + tail if parts else b"") + b"]"


def release_freed_memory() -> bool:
    """glibc's malloc_trim(0): the pages freed after a listing that shaped thousands of stubs go back
    to the system instead of staying in the agent's RSS (about 30 MB after the first listing of
    10,050 allocs). False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))
