"""`GET /v1/allocations` encoded as it is sent (agent.nomadapi.stubcache): the bytes are the ones
the listing answered before (every view shaped and encoded for each listing: the reference below)
for the same state, with and without `?prefix=`, `?reverse=true` and `?resources=true`; a kept stub
is encoded again once what it is made from changes; a collected alloc leaves the list; a long list
is a stream. On the real Core and loop with a fake node, terminal allocs of an earlier run written
through the store as `make bench-agent` writes them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.api.handler import Response, Streamed
from agent.nomadapi.context import listing_order
from agent.nomadapi.http import answer_list
from agent.nomadapi.stubcache import CHUNK
from agent.state import record_key
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, TaskRecord, TaskState
from tests.fakes import FakeNode
from tests.test_routes_ops import ONE_TASK, TWO_TASKS, Api, start_api

HISTORY = 150  # terminal allocs of an earlier run: their listing is more than one CHUNK


def _write_history(node: FakeNode, n: int) -> list[str]:
    """n terminal allocs of jobs never registered, a task record and three events each (as the bench)."""
    ids = []
    with node.store.transaction():
        for i in range(n):
            alloc = str(uuid.uuid4())
            status = AllocStatus.FAILED if i % 4 == 0 else AllocStatus.COMPLETE
            rec = AllocRecord(
                id=alloc,
                job=f"history-{i % 10}",
                group="g",
                created=time.time() - n + i,
                status=status,
                desired=DesiredStatus.STOP,
                reason="job stopped" if status is AllocStatus.COMPLETE else "task t failed",
            )
            node.store.put("alloc", alloc, rec.to_record())
            node.store.put("task", record_key(alloc, "t"), TaskRecord(TaskState.DEAD).to_record())
            for kind in ("Received", "Started", "Killed"):
                node.store.append_event(alloc, "t", kind, f"{kind} (history)", {"exit_code": i % 3})
            ids.append(alloc)
    return ids


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Api, list[str]]]:
    node = FakeNode(tmp_path)
    history = _write_history(node, HISTORY)
    core, routes = start_api(node, restore=True)
    routes.submit(ONE_TASK)
    routes.submit(TWO_TASKS)
    yield routes, history
    core.stop()


def _reference(api: Api, query: str = "") -> bytes:
    """The listing as it was answered before the cache: every alloc's view, in Nomad's order, shaped
    and encoded one by one."""
    params = dict(p.partition("=")[::2] for p in query.split("&") if p)
    nomad, core = api.nomad, api.core
    prefix = params.get("prefix", "")
    views = listing_order(
        [v for v in core.call(nomad.all_alloc_views) if str(v["id"]).startswith(prefix)],
        by_id=bool(prefix),
        reverse=params.get("reverse") == "true",
        id_of=lambda v: str(v["id"]),
        create_of=lambda v: int(v.get("create_index") or 0) or core.changes.start,
    )
    resources = params.get("resources") == "true"
    return answer_list(nomad.alloc_dicts(views, stub=True, resources=resources))[2]


def _listed(api: Api, query: str = "") -> tuple[bool, bytes]:
    """(streamed, the body's bytes) of GET /v1/allocations."""
    out = api.answer("GET", "/v1/allocations" + (f"?{query}" if query else ""))
    if isinstance(out, Streamed):
        try:
            return True, b"".join(out.chunks)
        finally:
            out.close()
    status, _, body = out
    assert status == 200, body
    return False, body


def _whole(out: Response | Streamed) -> bytes:
    assert not isinstance(out, Streamed)
    return out[2]


@pytest.mark.parametrize(
    "query", ["", "reverse=true", "resources=true", "prefix=", "reverse=true&resources=true"]
)
def test_the_listing_is_the_same_bytes_as_before_and_streamed_when_long(
    api: tuple[Api, list[str]], query: str
) -> None:
    routes, _ = api
    want = _reference(routes, query)
    for _ in range(2):  # the first listing encodes every stub, the second sends the ones kept
        streamed, got = _listed(routes, query)
        assert got == want
        assert streamed and len(got) > CHUNK


def test_a_prefix_lists_the_same_bytes_and_a_short_list_is_sent_whole(api: tuple[Api, list[str]]) -> None:
    routes, history = api
    for prefix in (history[0][:2], history[7][:4], history[3]):
        query = f"prefix={prefix}"
        assert _listed(routes, query) == (False, _reference(routes, query))
    assert _whole(routes.answer("GET", "/v1/allocations?prefix=zz")) == b"[]"


def test_a_kept_stub_is_encoded_again_when_what_it_is_made_from_changes(api: tuple[Api, list[str]]) -> None:
    routes, history = api
    core = routes.core
    _listed(routes)  # every terminal stub kept
    # an event of a terminal alloc (its TaskStates), its task record (Restarts), its record (status)
    core.call(lambda: core.store.append_event(history[1], "t", "Killed", "killed again", {"exit_code": 9}))
    core.call(
        lambda: core.store.put(
            "task", record_key(history[2], "t"), TaskRecord(TaskState.DEAD, restarts=4).to_record()
        )
    )
    rec = AllocRecord.from_record(core.store.get("alloc", history[3]) or {}, history[3])
    core.call(lambda: core.store.put("alloc", history[3], {**rec.to_record(), "status": "failed"}))
    _, got = _listed(routes)
    assert got == _reference(routes)
    assert b"killed again" in got and b'"Restarts":4' in got
    # a collected alloc leaves the list, and the kept stubs
    core.call(lambda: core.store.delete("alloc", history[4]))
    _, got = _listed(routes)
    assert got == _reference(routes) and history[4].encode() not in got
    assert history[4] not in routes.core.call(lambda: [*core.store.list("alloc").records])
