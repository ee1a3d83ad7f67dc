"""Garbage collection of terminal allocs, as Nomad's client does it: the oldest terminal allocs go
when more than gc_max_allocs are tracked or the disk (or its inodes) is over its threshold, all of
them when forced; each one's records, events and alloc dir go together, and a job none of whose
allocs is left goes too. Never a live alloc, nor a failed one whose replacement is owed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agent.client.core import Core
from agent.client.offload import run_inline
from agent.decide.decisions import GcCandidate, GcLimits, plan_gc
from agent.nomadapi.events import alloc_view
from agent.structs.records import AllocStatus
from tests.fakes import FakeNode, FakeSweeper

LIMITS = GcLimits(max_allocs=3, disk_usage_threshold=80.0, inodes_usage_threshold=70.0)
CANDIDATES = [GcCandidate("c", 30.0), GcCandidate("a", 10.0), GcCandidate("b", 20.0)]


@pytest.mark.parametrize(
    ("tracked", "disk", "inodes", "force", "want"),
    [
        (3, 10.0, 10.0, False, []),  # at the limit: nothing
        (5, 10.0, 10.0, False, ["a", "b"]),  # two over: the two oldest
        (99, 10.0, 10.0, False, ["a", "b", "c"]),  # never more than there are
        (1, 85.0, 10.0, False, ["a"]),  # disk over: one at a time, the caller measures again
        (1, 10.0, 75.0, False, ["a"]),  # inodes over
        (1, 10.0, 10.0, True, ["a", "b", "c"]),  # forced: every terminal alloc
    ],
)
def test_plan_gc(tracked: int, disk: float, inodes: float, force: bool, want: list[str]) -> None:
    assert plan_gc(CANDIDATES, tracked, LIMITS, disk_used=disk, inodes_used=inodes, force=force) == want


def spec(job: str, attempts: int = 0) -> str:
    return f"""
job "{job}" {{
  group "g" {{
    restart {{
      attempts = {attempts}
      mode     = "fail"
    }}
    task "t" {{
      driver = "docker"
      config {{ image = "x" }}
    }}
  }}
}}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _agent(fake: FakeNode) -> Core:
    """An agent on the node, its disk far from the GC thresholds."""
    core = fake.core(sweeper=FakeSweeper(fake), offload=run_inline, gc_limits=LIMITS)
    core.collector.usage = lambda: (10.0, 10.0)
    return core


@pytest.fixture
def node(tmp_path: Path) -> tuple[FakeNode, Core]:
    fake = FakeNode(tmp_path)
    fake.store._clock = Clock()  # type: ignore[attr-defined]  # each write a second later: a clear age order
    return fake, _agent(fake)


def _run_and_stop(core: Core, job: str) -> str:
    (alloc,) = core.job_registry.submit(spec(job), "hcl")["allocs"]
    core.job_registry.stop_job(job)
    assert core.runners[alloc].rec.status is AllocStatus.COMPLETE
    return str(alloc)


def test_gc_collects_the_oldest_terminal_allocs_over_max_allocs_and_their_jobs(
    node: tuple[FakeNode, Core],
) -> None:
    fake, core = node
    done = [_run_and_stop(core, f"old{i}") for i in range(4)]
    (live,) = core.job_registry.submit(spec("web"), "hcl")["allocs"]
    report = core.collector.gc()  # 5 tracked, limit 3: the two oldest terminal allocs go
    assert report.collected == done[:2]
    for alloc in done[:2]:
        assert fake.store.get("alloc", alloc) is None and fake.store.events(alloc) == []
        assert alloc not in core.runners
        assert fake.root / "data" / "alloc" / alloc in fake.dirs.removed
    assert report.jobs_purged == ["old0", "old1"]
    assert fake.store.get("job", "old0") is None and "old0" not in core.jobs
    assert fake.store.get("job", "old2") is not None, "a job whose alloc is still kept stays"
    assert core.collector.gc().collected == [], "at the limit: nothing more"
    forced = core.collector.gc(force=True)
    assert forced.collected == done[2:] and forced.jobs_purged == ["old2", "old3"]
    assert core.runners[live].rec.status is AllocStatus.RUNNING and fake.store.get("job", "web") is not None


def test_gc_never_collects_a_failed_alloc_whose_replacement_is_owed(node: tuple[FakeNode, Core]) -> None:
    fake, core = node
    (alloc,) = core.job_registry.submit(spec("crashy"), "hcl")["allocs"]
    runner = core.runners[alloc]
    runner.state.save(status=AllocStatus.FAILED, replace_pending=True)  # killed before the replacement
    assert core.collector.gc(force=True).collected == []
    assert fake.store.get("alloc", alloc) is not None


def test_a_restore_reads_no_collected_alloc_and_the_gc_finds_terminal_ones_of_earlier_runs(
    node: tuple[FakeNode, Core], tmp_path: Path
) -> None:
    fake, core = node
    done = [_run_and_stop(core, f"old{i}") for i in range(2)]
    (live,) = core.job_registry.submit(spec("web"), "hcl")["allocs"]
    again = _agent(fake)  # the agent restarted on the same node
    again.restorer.restore()
    assert set(again.runners) == {live}, "restore read terminal allocs"
    listed = {v["id"]: v["status"] for v in again.allocs.views()}
    assert listed == {live: "running", done[0]: "complete", done[1]: "complete"}, "tracked until the GC"
    assert again.allocs.recorded() == {live, *done}
    assert again.collector.gc(force=True).collected == done
    assert fake.store.get("job", "old0") is None and fake.store.get("job", "web") is not None


def test_disk_over_its_threshold_collects_until_it_is_under(node: tuple[FakeNode, Core]) -> None:
    _, core = node
    done = [_run_and_stop(core, f"old{i}") for i in range(3)]
    usage = iter([(95.0, 10.0), (90.0, 10.0), (50.0, 10.0)])
    core.collector.usage = lambda: next(usage)
    assert core.collector.gc().collected == done[:2]  # measured again after each: under after two


def test_a_terminal_alloc_of_a_group_a_later_version_dropped_stays_listed_until_the_gc(
    node: tuple[FakeNode, Core],
) -> None:
    """A job run again under the same id with another group (a report's job named "example" after
    an earlier "example"): the earlier version's terminal allocs are still listed (read with the
    version that had their group) and collected by the GC with their dirs, never left unlisted on
    disk (the e2e orphan check saw their dirs as orphans)."""
    fake, core = node
    old = _run_and_stop(core, "example")
    core.job_registry.submit(spec("example").replace('group "g"', 'group "other"'), "hcl")
    again = _agent(fake)
    again.restorer.restore()
    listed = {v["id"]: (v["group"], v["status"]) for v in again.allocs.views()}
    assert listed[old] == ("g", "complete"), listed
    assert again.allocs.alloc(old[:8]).id == old
    assert old in again.collector.gc(force=True).collected


def test_a_terminal_alloc_whose_group_no_kept_version_has_is_still_listed_until_the_gc(
    node: tuple[FakeNode, Core],
) -> None:
    """The same job id run again more times than the versions a job keeps (6), each with another
    group: the first one's terminal alloc is still listed (its group read from its own task records)
    and collected by the GC, never left unlisted on disk (the repro of the whole catalogue saw one as
    an orphan dir: its job "example" had been run by 6 reports since)."""
    fake, core = node
    old = _run_and_stop(core, "example")
    for i in range(7):
        core.job_registry.submit(spec("example").replace('group "g"', f'group "other{i}"'), "hcl")
        core.job_registry.stop_job("example")
    again = _agent(fake)
    again.restorer.restore()
    listed = {v["id"]: (v["group"], v["status"]) for v in again.allocs.views()}
    assert listed[old] == ("g", "complete"), listed
    assert old in again.collector.gc(force=True).collected


def test_a_long_backlog_is_collected_in_turns_and_the_periodic_gc_goes_on_at_once(
    node: tuple[FakeNode, Core], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn stops once its time is spent (here at once: after one alloc) and says more is owed;
    the periodic GC then goes on at the loop's next turn, not an interval later, until the pass
    ends. Collected in one go, 10,000 allocs of an earlier run held the loop (every API call)
    for as long as their deletes took."""
    fake, core = node
    done = [_run_and_stop(core, f"old{i}") for i in range(6)]
    first = core.collector.gc(turn=0.0)
    assert first.collected == done[:1] and first.more, first
    monkeypatch.setattr("agent.node.gc.GC_TURN", 0.0)
    core.collector.start_periodic_gc(3600.0)

    def gc_timer() -> Any:
        (timer,) = [t for t in core.loop._timers if "start_periodic_gc" in t.fn.__qualname__]
        core.loop._timers.remove(timer)
        return timer

    delays = []
    for _ in range(10):
        timer = gc_timer()
        delays.append(round(timer.due - time.monotonic()))
        if delays[-1] > 60 and len(delays) > 1:
            break
        timer.fn()
    assert delays == [3600, 0, 0, 3600], delays  # 5 tracked, limit 3: the other two, one per turn
    assert [a for a in done if fake.store.get("alloc", a) is not None] == done[3:]
    assert core.collector.gc().collected == [] and not core.collector.gc().more


def test_the_listed_views_of_an_earlier_runs_terminal_allocs_are_their_stored_runners_views(
    node: tuple[FakeNode, Core],
) -> None:
    """The listing reads the terminal allocs of an earlier run from three listings of the store,
    not one runner each: every view is the one the alloc's stored runner (what `alloc ID` reads)
    gives, for an alloc of the registered job, of a purged job's group as its records tell it, and
    of a failed one."""
    fake, core = node
    kept = _run_and_stop(core, "kept")
    gone = _run_and_stop(core, "gone")
    core.runners.pop(gone)
    fake.store.delete("job", "gone")  # its group now known from its task records only
    (failed,) = core.job_registry.submit(spec("crashy"), "hcl")["allocs"]
    core.runners[failed].state.save(status=AllocStatus.FAILED)
    again = _agent(fake)
    again.restorer.restore()
    listed = {v["id"]: v for v in again.allocs.views()}
    assert set(listed) == {kept, gone, failed}, listed
    for alloc in (kept, gone, failed):
        assert listed[alloc] == again.allocs.alloc(alloc).view(), alloc
    assert listed[failed]["status"] == "failed" and listed[gone]["tasks"]["t"]["driver"] == "docker"
    assert [v["id"] for v in again.allocs.views("kept")] == [kept]
    assert alloc_view(again, gone) == listed[gone]  # the event stream's lookup of one alloc
    again.collector.gc(force=True)
    assert alloc_view(again, gone) is None, "an alloc the GC collected has no view"
