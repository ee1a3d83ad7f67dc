"""Adoption after the state database was lost (agent.runner.adopt): the pure plan over plain node
listings, the sweeper keeping adopted allocs' resources, and the core's restore, API listing, events
and stop with a fake node (no root, no docker)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.client.core import Core
from agent.drivers.base import LABEL_ALLOC, LABEL_GROUP, LABEL_JOB, LABEL_MANAGED, LABEL_ROLE, LABEL_TASK
from agent.node.sweeper import Observed, SeenChain, SeenContainer, SweepReport, plan_sweep
from agent.runner.adopt import (
    EVENT_ADOPTED,
    KIND_ADOPTED,
    STATUS_ADOPTED,
    AdoptedAlloc,
    NodeCgroup,
    NodeContainer,
    plan_adoption,
)
from tests.agent_lab import NomadRoutes, alloc_events
from tests.fakes import FakeNode

A = "aaaaaaaa-0000-4000-8000-000000000001"  # docker tasks, still running: adopted
B = "bbbbbbbb-0000-4000-8000-000000000002"  # known to the agent (restored): never adopted
C = "cccccccc-0000-4000-8000-000000000003"  # only a stopped container: nothing to adopt
D = "dddddddd-0000-4000-8000-000000000004"  # an exec task's cgroup with processes: adopted
E = "eeeeeeee-0000-4000-8000-000000000005"  # an empty cgroup: nothing to adopt
LOST = "/var/lib/fieldlab-agent/state/state.db.corrupt-20260101T000000Z"


def _container(cid: str, alloc: str, task: str, role: str = "task", running: bool = True) -> NodeContainer:
    labels = {
        LABEL_MANAGED: "true",
        LABEL_ALLOC: alloc,
        LABEL_JOB: "web",
        LABEL_GROUP: "g",
        LABEL_TASK: task,
        LABEL_ROLE: role,
    }
    return NodeContainer(cid, f"{task}-{alloc}", labels, running)


CONTAINERS = [
    _container("c-a-web", A, "web"),
    _container("c-a-side", A, "side", running=False),
    _container("c-a-pause", A, "", role="pause"),
    _container("c-b-web", B, "web"),
    _container("c-c-web", C, "web", running=False),
]
CGROUPS = [
    NodeCgroup(f"{D}.worker", (4242, 4243), {"NOMAD_JOB_ID": "batch", "NOMAD_GROUP_NAME": "w"}),
    NodeCgroup(f"{E}.idle", ()),
]


# --- the plan (pure)


def test_what_still_runs_unowned_is_adopted_with_all_of_it_when_the_state_was_lost() -> None:
    adopted, gone = plan_adoption({B}, CONTAINERS, CGROUPS, adopted={}, lost_state=LOST, now=100.0)
    assert gone == []
    by_id = {a.id: a for a in adopted}
    assert set(by_id) == {A, D}
    a = by_id[A]
    assert (a.job, a.group, a.lost_state, a.adopted_at) == ("web", "g", LOST, 100.0)
    # Every container of the alloc, the stopped one too; the pause container last.
    assert [(t.task, t.target, t.role, t.running) for t in a.tasks] == [
        ("side", "c-a-side", "task", False),
        ("web", "c-a-web", "task", True),
        ("", "c-a-pause", "pause", True),
    ]
    d = by_id[D]
    assert (d.job, d.group) == ("batch", "w")  # from the process's NOMAD_* environment
    assert [(t.task, t.kind, t.target) for t in d.tasks] == [("worker", "cgroup", f"{D}.worker")]


def test_nothing_new_is_adopted_without_a_lost_state_and_gone_adoptions_are_forgotten() -> None:
    assert plan_adoption(set(), CONTAINERS, CGROUPS, adopted={}, lost_state="", now=1.0) == ([], [])
    before = AdoptedAlloc(A, "web", "g", (), 50.0, LOST)
    vanished = AdoptedAlloc("ffffffff-0000-4000-8000-000000000006", "old", "g", (), 50.0, LOST)
    kept, gone = plan_adoption(
        {B}, CONTAINERS, CGROUPS, adopted={A: before, vanished.id: vanished}, lost_state="", now=999.0
    )
    assert [k.id for k in kept] == [A] and gone == [vanished.id]
    assert kept[0].adopted_at == 50.0 and len(kept[0].tasks) == 3  # what is on the node now


def test_an_adopted_alloc_round_trips_through_its_record_and_its_view_says_adopted() -> None:
    (a,) = [
        x for x in plan_adoption((), CONTAINERS, (), adopted={}, lost_state=LOST, now=7.0)[0] if x.id == A
    ]
    assert AdoptedAlloc.from_record(json.loads(json.dumps(a.to_record()))) == a
    view = a.view()
    assert view["status"] == STATUS_ADOPTED and view["job"] == "web"
    assert set(view["tasks"]) == {"web", "side"} and view["tasks"]["web"]["container"] == "c-a-web"
    assert view["network"]["pause_container"] == "c-a-pause" and view["adopted"]["state_db"] == LOST
    assert LOST in view["reason"]


# --- the sweeper keeps an adopted alloc's resources as a live one's


def test_the_sweeper_plans_nothing_of_an_adopted_alloc() -> None:
    obs = Observed(
        containers=[
            SeenContainer("c-a-web", "web-a", A, "task", 1e6),
            SeenContainer("c-a-pause", "pause-a", A, "pause", 1e6),
            SeenContainer("c-c-web", "web-c", C, "task", 1e6),
        ],
        cni_cache_ids=[A, C],
        reservations=[("10.0.0.2", A), ("10.0.0.3", C)],
        chains=[SeenChain("nat", "CNI-a", A), SeenChain("nat", "CNI-c", C)],
        alloc_dirs=[A, C, D],
        netns=[f"fl-{D}"],
        task_cgroups=[(f"{D}.worker", [4242])],
        forward_ips=["10.0.0.2"],
    )
    without = {(r.kind, r.owner) for r in plan_sweep(set(), obs)}
    assert ("container", A) in without and ("task_process", D) in without  # not adopted: swept
    plan = plan_sweep(set(), obs, adopted={A, D})
    assert {r.owner for r in plan} <= {C, "?"}, plan
    assert {(r.kind, r.target) for r in plan} == {
        ("container", "c-c-web"),
        ("cni", C),  # its DEL takes C's chain and reservation along
        ("alloc_dir", C),
    }


# --- the core: restore adopts, the API lists, an operator stops


class FakeNodeTasks:
    def __init__(self, containers: list[NodeContainer], cgroups: list[NodeCgroup]) -> None:
        self.containers = containers
        self.cgroups = cgroups
        self.stopped: list[str] = []
        self.fail_list = False

    def list(self) -> tuple[list[NodeContainer], list[NodeCgroup]]:
        if self.fail_list:
            raise OSError("docker is not answering")
        return list(self.containers), list(self.cgroups)

    def stop_container(self, container_id: str, timeout: float) -> None:
        self.stopped.append(container_id)
        self.containers = [c for c in self.containers if c.id != container_id]

    def stop_cgroup(self, name: str, timeout: float) -> None:
        self.stopped.append(name)
        self.cgroups = [g for g in self.cgroups if g.name != name]


class RecordingSweeper:
    def __init__(self) -> None:
        self.calls: list[tuple[set[str], set[str]]] = []

    def sweep(self, live: Any, adopted: Any = (), recorded: Any = ()) -> SweepReport:
        self.calls.append((set(live), set(adopted)))
        return SweepReport()


def _lost_state_node(tmp_path: Path) -> FakeNode:
    """A FakeNode whose state file was garbage: its store starts fresh, the file moved aside."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "state.db").write_bytes(b"\x00garbage, not a database" * 200)
    node = FakeNode(tmp_path)
    assert node.store.recovered_from
    return node


def _core(node: FakeNode, tasks: FakeNodeTasks, sweeper: RecordingSweeper) -> Core:
    core = node.core()
    core.adoption.node = tasks
    core.sweeper = sweeper  # type: ignore[assignment]
    return core


@pytest.fixture
def looping() -> Iterator[list[Core]]:
    cores: list[Core] = []
    yield cores
    for c in cores:
        c.stop()


def _serve(core: Core, looping: list[Core]) -> NomadRoutes:
    threading.Thread(target=core.loop.run, daemon=True).start()
    looping.append(core)
    return NomadRoutes(core)


def test_restore_after_a_lost_state_adopts_lists_and_stops_on_request(
    tmp_path: Path, looping: list[Core]
) -> None:
    node = _lost_state_node(tmp_path)
    moved = node.store.recovered_from
    tasks = FakeNodeTasks(list(CONTAINERS), list(CGROUPS))
    sweeper = RecordingSweeper()
    core = _core(node, tasks, sweeper)
    core.restorer.restore()
    assert core.adoption.ids() == {A, B, D}  # B is unknown to this fresh store too
    assert sweeper.calls == [(set(), {A, B, D})]  # swept after adoption, keeping the adopted
    assert tasks.stopped == []

    api = _serve(core, looping)
    status, allocs = api.call("GET", "/v1/allocations")
    # Nomad's view: an adopted alloc's tasks run (ClientStatus running); the adoption is its
    # ClientDescription, naming where the lost state database went.
    assert status == 200 and {a["ID"]: (a["ClientStatus"], a["JobID"]) for a in allocs} == {
        A: ("running", "web"),
        B: ("running", "web"),
        D: ("running", "batch"),
    }
    assert all("adopted" in a["ClientDescription"] and moved in a["ClientDescription"] for a in allocs)
    status, one = api.call("GET", f"/v1/allocation/{A[:8]}")
    assert status == 200 and one["ID"] == A and one["TaskStates"]["web"]["State"] == "running"
    assert one["TaskStates"]["side"]["State"] == "dead"
    (ev,) = alloc_events(one)  # an alloc-wide event: in each task's list, one event
    assert [e["Type"] for e in one["TaskStates"]["side"]["Events"]] == [EVENT_ADOPTED]
    assert (
        ev["Type"] == EVENT_ADOPTED and moved in ev["DisplayMessage"] and ev["Details"]["state_db"] == moved
    )
    assert "not restarted, replaced" in ev["DisplayMessage"]
    assert "fieldlab-agent job stop web" in ev["DisplayMessage"]

    # The operator stops the job (`nomad job stop web`): its adopted allocs' tasks are stopped (tasks
    # before the pause container) and they are gone from the listing, the store, and the sweeper's
    # keep list.
    status, out = api.call("DELETE", "/v1/job/web")
    assert status == 200 and out["EvalID"]
    assert tasks.stopped[:3] == ["c-a-side", "c-a-web", "c-a-pause"] and "c-b-web" in tasks.stopped
    assert core.call(core.adoption.ids) == {D}
    assert node.store.get(KIND_ADOPTED, A) is None and node.store.events(A) == []
    assert core.call(lambda: sweeper.calls[-1]) == (set(), {D})  # a sweep for their leftovers
    assert api.request("GET", f"/v1/evaluation/{out['EvalID']}")["TriggeredBy"] == "job-deregister"

    # D (an exec task, job known only from its environment) is stopped as an alloc.
    status, out = api.call("POST", f"/v1/allocation/{D}/stop")
    assert status == 200 and out["EvalID"] and tasks.stopped[-1] == f"{D}.worker"
    status, allocs = api.call("GET", "/v1/allocations")
    assert allocs == []
    assert api.call("DELETE", "/v1/job/web") == (404, "job not found\n")  # nothing of it left


def test_a_later_restart_adopts_the_same_allocs_again_and_forgets_gone_ones(tmp_path: Path) -> None:
    node = _lost_state_node(tmp_path)
    tasks = FakeNodeTasks(list(CONTAINERS), list(CGROUPS))
    first = _core(node, tasks, RecordingSweeper())
    first.restorer.restore()
    adopted_at = first.adoption.allocs[A].adopted_at

    node.store.recovered_from = ""  # the next start finds a healthy file
    tasks.cgroups = []  # D's task exited meanwhile
    sweeper = RecordingSweeper()
    second = _core(node, tasks, sweeper)
    second.restorer.restore()
    assert second.adoption.ids() == {A, B}
    assert second.adoption.allocs[A].adopted_at == adopted_at
    assert sweeper.calls == [(set(), {A, B})]
    assert [e.type for e in node.store.events(A)] == [EVENT_ADOPTED]  # said once, not per start
    assert node.store.get(KIND_ADOPTED, D) is None


def test_no_sweep_while_the_lost_state_could_not_be_matched_against_the_node(tmp_path: Path) -> None:
    node = _lost_state_node(tmp_path)
    tasks = FakeNodeTasks(list(CONTAINERS), [])
    tasks.fail_list = True
    sweeper = RecordingSweeper()
    core = _core(node, tasks, sweeper)
    core.restorer.restore()
    assert sweeper.calls == [] and core.adoption.pending
    tasks.fail_list = False
    core.sweep()
    assert not core.adoption.pending and sweeper.calls == [(set(), {A, B})]


def test_a_healthy_store_adopts_nothing_and_a_managed_alloc_is_not_stopped_as_one(tmp_path: Path) -> None:
    from agent.errors import Conflict

    node = FakeNode(tmp_path)
    tasks = FakeNodeTasks(list(CONTAINERS), list(CGROUPS))
    tasks.fail_list = True  # proves the node is not even listed
    sweeper = RecordingSweeper()
    core = _core(node, tasks, sweeper)
    core.restorer.restore()
    assert core.adoption.ids() == set() and not core.adoption.pending
    assert sweeper.calls == [(set(), set())]  # the usual sweep: what runs unowned is the sweeper's
    spec = """
job "web" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "x"
      }
    }
  }
}
"""
    (alloc,) = core.job_registry.submit(spec, "hcl")["allocs"]
    with pytest.raises(Conflict, match="fieldlab-agent job stop web"):
        core.allocs.stop_alloc(alloc)
