"""The sweeper's plan: orphans go, anything a live alloc owns stays (nomad-16338)."""

from __future__ import annotations

from agent.node.sweeper import Observed, SeenChain, SeenContainer, SweepPolicy, plan_sweep

LIVE = "11111111-live"
DEAD = "22222222-dead"


def _obs() -> Observed:
    return Observed(
        containers=[
            SeenContainer("c-live-pause", "fieldlab_init_live", LIVE, "pause", 900.0),
            SeenContainer("c-live-task", "http-live", LIVE, "task", 900.0),
            SeenContainer("c-dead-task", "http-dead", DEAD, "task", 900.0),
            SeenContainer("c-young", "http-young", "33333333-unknown", "task", 5.0),
        ],
        cni_cache_ids=[LIVE, DEAD],
        reservations=[("10.0.0.2", LIVE), ("10.0.0.3", DEAD), ("10.0.0.4", "44444444-stale")],
        chains=[
            SeenChain("nat", "CNI-aaa", LIVE),
            SeenChain("nat", "CNI-bbb", "44444444-stale"),
            SeenChain("nat", "CNI-DN-ccc", None),
        ],
        alloc_dirs=[LIVE, DEAD],
    )


def test_live_alloc_resources_are_never_planned_for_removal() -> None:
    plan = plan_sweep({LIVE}, _obs())
    assert all(r.owner != LIVE for r in plan), [r for r in plan if r.owner == LIVE]


def test_orphans_are_planned_once_each() -> None:
    plan = {(r.kind, r.target) for r in plan_sweep({LIVE}, _obs())}
    assert plan == {
        ("container", "c-dead-task"),
        ("cni", DEAD),  # DEL releases the dead alloc's IPAM and chains itself
        ("ipam", "10.0.0.4"),
        ("chain", "nat/CNI-bbb"),
        ("chain", "nat/CNI-DN-ccc"),
        ("alloc_dir", DEAD),
    }


def test_young_containers_wait_for_the_grace_period() -> None:
    plan = plan_sweep({LIVE}, _obs(), SweepPolicy(grace=1.0))
    assert ("container", "c-young") in {(r.kind, r.target) for r in plan}
    assert ("container", "c-young") not in {(r.kind, r.target) for r in plan_sweep({LIVE}, _obs())}


def test_fault_sweep_untracked_pause_removes_a_live_pause_container() -> None:
    """nomad-16338 put back: the live alloc's pause container is swept."""
    plan = plan_sweep({LIVE}, _obs(), SweepPolicy(untracked_pause=True))
    assert ("container", "c-live-pause") in {(r.kind, r.target) for r in plan}


def test_agent_netns_and_exec_processes_of_dead_allocs_are_planned() -> None:
    obs = Observed(
        netns=[f"fl-{LIVE}", f"fl-{DEAD}", "someone-elses-netns"],
        task_cgroups=[(f"{LIVE}.web", [10]), (f"{DEAD}.web", [11, 12])],
    )
    plan = {(r.kind, r.target) for r in plan_sweep({LIVE}, obs)}
    assert plan == {("netns", f"fl-{DEAD}"), ("task_process", f"{DEAD}.web")}


def test_firewall_rules_of_addresses_no_live_alloc_holds_are_planned() -> None:
    """nomad-6385 family: CNI-FORWARD rules left by a DEL that never ran (they name only an address)."""
    obs = Observed(
        cni_cache_ids=[DEAD],
        reservations=[("10.0.0.2", LIVE), ("10.0.0.3", DEAD)],
        forward_ips=["10.0.0.2", "10.0.0.3", "10.0.0.9"],
    )
    plan = {(r.kind, r.target) for r in plan_sweep({LIVE}, obs)}
    # 10.0.0.2 is the live alloc's; 10.0.0.3 goes with the dead alloc's DEL; 10.0.0.9 is nobody's.
    assert plan == {("cni", DEAD), ("forward_rule", "10.0.0.9")}


def test_the_alloc_dir_of_a_terminal_alloc_with_a_record_waits_for_the_gc() -> None:
    """Its logs stay readable until the GC removes dir, record and events together; only a dir with
    no record at all is an orphan."""
    recorded = {(r.kind, r.target) for r in plan_sweep({LIVE}, _obs(), recorded={LIVE, DEAD})}
    assert ("alloc_dir", DEAD) not in recorded
    assert ("container", "c-dead-task") in recorded  # everything else of it still goes
