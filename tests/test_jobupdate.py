"""plan_job_update: what a new version of a running job does to its allocs (pure)."""

from __future__ import annotations

from dataclasses import replace

from agent.decide.decisions import Bugs
from agent.decide.jobupdate import DESIRED_UPDATES, desired_updates, plan_job_update
from agent.structs.model import Group, HostVolume, Job, Network, Port, Task, VolumeMount


def _job(count: int = 2, image: str = "a", meta: dict[str, str] | None = None) -> Job:
    web = Group("web", (Task("t", "docker", {"image": image}),), count=count)
    db = Group("db", (Task("d", "docker", {"image": "db"}),), count=1)
    return Job("j", (web, db), meta=meta or {})


LIVE = {"web": ["w1", "w2"], "db": ["d1"]}


def test_the_same_job_again_is_no_change() -> None:
    plan = plan_job_update(_job(), _job(), LIVE)
    assert plan.noop and plan.destructive == ()


def test_count_up_adds_allocs_and_touches_none() -> None:
    plan = plan_job_update(_job(), _job(count=4), LIVE)
    assert plan.stop == () and dict(plan.start) == {"web": 2, "db": 0} and plan.destructive == ()


def test_count_down_stops_the_newest() -> None:
    plan = plan_job_update(_job(count=2), _job(count=1), LIVE)
    assert plan.stop == ("w2",) and not any(plan.start.values())


def test_a_changed_task_replaces_its_groups_allocs_one_for_one() -> None:
    plan = plan_job_update(_job(), _job(image="b"), LIVE)
    assert plan.stop == ("w1", "w2") and dict(plan.start) == {"web": 2, "db": 0}
    assert plan.replaces["web"] == ("w1", "w2") and plan.destructive == ("web",)


def test_a_changed_task_with_a_smaller_count_replaces_as_many_as_are_wanted() -> None:
    plan = plan_job_update(_job(), _job(count=1, image="b"), LIVE)
    assert plan.stop == ("w1", "w2") and plan.start["web"] == 1 and plan.replaces["web"] == ("w1",)


def test_job_meta_is_destructive_for_every_group() -> None:
    plan = plan_job_update(_job(), _job(meta={"v": "2"}), LIVE)
    assert set(plan.destructive) == {"web", "db"} and set(plan.stop) == {"w1", "w2", "d1"}


def test_a_network_change_is_destructive() -> None:
    old = _job()
    net = Network("bridge", (Port("http", to=8080),))
    new = replace(old, groups=(replace(old.groups[0], network=net), old.groups[1]))
    assert plan_job_update(old, new, LIVE).destructive == ("web",)


def test_nomad_13008_a_volume_change_is_destructive_unless_the_flag_is_on() -> None:
    """Fixed: adding a host volume and its mount replaces the group's allocs. With
    `volume-change-in-place` (nomad-13008) they are updated in place and never get the mount."""
    old = _job()
    web = old.groups[0]
    mounted = replace(web.tasks[0], volume_mounts=(VolumeMount("scratch", "/scratch"),))
    new_web = replace(web, volumes=(HostVolume("scratch", "scratch"),), tasks=(mounted,))
    new = replace(old, groups=(new_web, old.groups[1]))
    assert plan_job_update(old, new, LIVE).destructive == ("web",)
    in_place = plan_job_update(old, new, LIVE, Bugs(volume_change_in_place=True))
    assert in_place.noop and in_place.destructive == ()


def test_a_removed_group_stops_and_a_new_group_starts() -> None:
    old = _job()
    cache = Group("cache", (Task("c", "docker", {"image": "c"}),), count=3)
    new = replace(old, groups=(old.groups[0], cache))
    plan = plan_job_update(old, new, LIVE)
    assert plan.stop == ("d1",) and plan.start["cache"] == 3 and "db" not in plan.start


def test_a_job_keeps_its_last_versions_newest_first_at_most_six_with_the_current() -> None:
    from agent.decide.jobupdate import TRACKED_VERSIONS, earlier_versions

    record: dict[str, object] | None = None
    for v in range(9):
        record = {
            "version": v,
            "submit_time": float(v),
            "canonical": {"v": v},
            "history": earlier_versions(record),
        }
    assert record is not None
    kept = [h["version"] for h in record["history"]]  # type: ignore[union-attr,index]
    assert kept == [7, 6, 5, 4, 3] and len(kept) == TRACKED_VERSIONS - 1
    assert earlier_versions(None) == [] and earlier_versions({"version": 0}) == []


def _desired(old: Job | None, new: Job, live: dict[str, list[str]] = LIVE) -> dict[str, dict[str, int]]:
    plan = plan_job_update(old, new, live) if old is not None and live else None
    return {g: {k: n for k, n in d.items() if n} for g, d in desired_updates(old, new, live, plan).items()}


def test_a_plan_says_per_group_what_the_register_would_do_as_nomads_desired_updates() -> None:
    assert _desired(None, _job()) == {"web": {"Place": 2}, "db": {"Place": 1}}
    assert _desired(_job(), _job(), {}) == {"web": {"Place": 2}, "db": {"Place": 1}}, "nothing runs"
    assert _desired(_job(), _job()) == {"web": {"Ignore": 2}, "db": {"Ignore": 1}}
    # A count change alone: the job changed, so the kept allocs take its new version in place.
    assert _desired(_job(), _job(count=3)) == {
        "web": {"Place": 1, "InPlaceUpdate": 2},
        "db": {"InPlaceUpdate": 1},
    }
    assert _desired(_job(), _job(count=1)) == {
        "web": {"Stop": 1, "InPlaceUpdate": 1},
        "db": {"InPlaceUpdate": 1},
    }
    assert _desired(_job(), _job(count=1, image="b"))["web"] == {"Stop": 1, "DestructiveUpdate": 1}
    old = _job()
    cache = Group("cache", (Task("c", "docker", {"image": "c"}),), count=3)
    moved = _desired(old, replace(old, groups=(old.groups[0], cache)))
    assert moved == {"web": {"InPlaceUpdate": 2}, "cache": {"Place": 3}, "db": {"Stop": 1}}
    assert list(desired_updates(None, _job(), {}, None)["web"]) == list(DESIRED_UPDATES), "every field"
