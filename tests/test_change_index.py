"""The change index starts each run past every index the store kept (the CI flake of 2026-12-07:
a burst of writes ran the index ahead of the clock, the restarted agent began below an alloc's
CreateIndex, and the alloc read back with a lower one)."""

from __future__ import annotations

import time
from pathlib import Path

from agent.state import SqliteStore
from agent.state.changes import ChangeIndex, highest_kept
from tests.fakes import FakeNode


def test_the_highest_kept_index_is_read_from_allocs_evals_and_variables(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    store.put("alloc", "a", {"create_index": 10})
    store.put("eval", "e", {"create_index": 30})
    store.put("var", "v", {"create_index": 5, "modify_index": 40})
    store.put("job", "j", {"create_index": 99})  # a job keeps none: not read
    store.put("alloc", "b", {"create_index": True, "modify_index": "77"})  # not indexes
    assert highest_kept(store) == 40
    assert highest_kept(SqliteStore(tmp_path / "empty.db")) == 0


def test_a_run_starts_past_the_floor_when_the_clock_is_behind_it() -> None:
    assert ChangeIndex(clock=lambda: 1.0, floor=5000).start == 5001
    assert ChangeIndex(clock=lambda: 9.0, floor=5000).start == 9000  # the clock is past it
    assert ChangeIndex(clock=lambda: 1.0).start == 1000


def test_a_restarted_core_begins_past_an_alloc_create_index_ahead_of_the_clock(tmp_path: Path) -> None:
    ahead = int(time.time() * 1000) + 10**6  # a burst ran the index ~17 minutes ahead of the clock
    node = FakeNode(tmp_path)
    node.store.put("alloc", "x", {"create_index": ahead})
    core = node.core()
    try:
        assert core.changes.start > ahead
        assert core.changes.bump("alloc", "y") > ahead
    finally:
        core.stop()
