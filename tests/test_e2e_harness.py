"""The e2e harness's pure parts, without a lab: what the orphan checker makes of a node's state, the
chaos schedule's reproducibility, the event checks, and the repro catalogue's coverage."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from agent.faults import IMPLEMENTED_FAULTS
from e2e import repro
from e2e.harness.checkers import chain_set_problems, container_set_problems, orphan_problems, parse_resources
from e2e.test_chaos import KINDS, schedule
from e2e.test_template_restarts import fired_while_down

LIVE = "25ae50ff-a9cc-410b-a13d-90c55bdf29c1"
DEAD = "0b7e1d2c-1111-4a0b-95c4-99111646b200"
COMMENT = '-m comment --comment "name: \\"fieldlab\\" id: \\"{}\\""'
# What the observation script prints on a client with one live alloc and the leftovers of a dead one
# (the iptables lines as iptables-save prints them on the lab's nodes).
NODE_STATE = f"""## containers
aaa running {LIVE} task nginx-{LIVE}
bbb running {LIVE} pause fieldlab_init_{LIVE}
ccc exited {DEAD} pause fieldlab_init_{DEAD}
## netns
fl-{DEAD} (id: 3)
## ipam
172.26.64.2 {LIVE}
172.26.64.3 {DEAD}
## cache
fieldlab:{LIVE}:eth0.json
fieldlab:{DEAD}:eth0.json
## allocdirs
{LIVE}
{DEAD}
## cgroups
{DEAD}.web 4242,
## iptables
*nat
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-DN-d9cadc056c50299ce4d2f - [0:0]
:CNI-d9cadc056c50299ce4d2f80f - [0:0]
:CNI-DN-0000deadbeef - [0:0]
-A POSTROUTING -s 172.26.64.2/32 {COMMENT.format(LIVE)} -j CNI-d9cadc056c50299ce4d2f80f
-A CNI-HOSTPORT-DNAT -p tcp {COMMENT.format(LIVE)} -m multiport --dports 20000 -j CNI-DN-d9cadc056c50299ce4d2f
-A CNI-HOSTPORT-DNAT -p tcp {COMMENT.format(DEAD)} -m multiport --dports 20001 -j CNI-DN-0000deadbeef
*filter
:CNI-FORWARD - [0:0]
-A CNI-FORWARD -d 172.26.64.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A CNI-FORWARD -s 172.26.64.3/32 -j ACCEPT
"""
ALLOCS = [
    {
        "id": LIVE,
        "status": "running",
        "network": {"address": "172.26.64.2"},
        "tasks": {"nginx": {"state": "running", "container": "a" * 64}},
    },
    {"id": DEAD, "status": "complete", "network": {"address": "172.26.64.3"}, "tasks": {}},
]


def test_every_leftover_of_the_dead_alloc_is_an_orphan_with_its_owner() -> None:
    problems = orphan_problems(parse_resources(NODE_STATE), ALLOCS, "client1")
    kinds = sorted(re.search(r"orphan (\w+)", p).group(1) for p in problems)  # type: ignore[union-attr]
    assert kinds == sorted(
        ["container", "netns", "ipam", "cni_cache", "alloc_dir", "task_process", "cni_chain", "cni_rule"]
    ), problems
    assert all(DEAD in p or "172.26.64.3" in p for p in problems), problems


def test_nothing_of_a_live_alloc_is_an_orphan() -> None:
    live_only = [r for r in parse_resources(NODE_STATE) if r.owner in (LIVE, "address 172.26.64.2")]
    assert len(live_only) == 8  # 2 containers, reservation, cache, dir, 2 chains, firewall rule
    assert orphan_problems(live_only, ALLOCS, "client1") == []


def test_a_chain_nothing_claims_is_an_orphan() -> None:
    state = "## iptables\n*nat\n:CNI-ffff - [0:0]\n"
    assert orphan_problems(parse_resources(state), ALLOCS, "c") == ["c: orphan cni_chain CNI-ffff (owner ?)"]


def test_two_running_pause_containers_for_one_alloc_are_reported() -> None:
    state = NODE_STATE.replace(f"ccc exited {DEAD} pause", f"ccc running {LIVE} pause")
    problems = container_set_problems(parse_resources(state), ALLOCS, "client1")
    assert problems and "2 running pause" in problems[0]
    assert container_set_problems(parse_resources(NODE_STATE), ALLOCS, "client1") == []


def test_a_second_dnat_chain_of_a_live_alloc_is_a_leak() -> None:
    """nomad-6385: the old network's DNAT chain is still there and claims the host port first."""
    leaked = NODE_STATE.replace(
        f"{COMMENT.format(DEAD)} -m multiport --dports 20001",
        f"{COMMENT.format(LIVE)} -m multiport --dports 20000",
    )
    problems = chain_set_problems(parse_resources(leaked), ALLOCS, "client1")
    assert problems and "more than one set of CNI chains" in problems[0], problems
    assert chain_set_problems(parse_resources(NODE_STATE), ALLOCS, "client1") == []


def test_the_chaos_schedule_is_the_same_for_a_seed_and_differs_between_seeds() -> None:
    first = list(itertools.islice(schedule(42, 2), 50))
    assert first == list(itertools.islice(schedule(42, 2), 50))
    assert first != list(itertools.islice(schedule(43, 2), 50))
    assert {s.kind for s in first} <= set(KINDS) and len({s.kind for s in first}) > 5


def test_a_signal_between_termination_and_start_is_caught() -> None:
    ev = [
        {"type": "Started", "time": 1.0, "message": ""},
        {"type": "Signaling", "time": 2.0, "message": "ok, running"},
        {"type": "Terminated", "time": 3.0, "message": "Exit Code: 137"},
        {"type": "Signaling", "time": 4.0, "message": "into the dead task"},
        {"type": "Started", "time": 5.0, "message": ""},
        {"type": "Signaling", "time": 6.0, "message": "ok again"},
    ]
    assert fired_while_down(ev) == ["Signaling at 4.0: into the dead task"]


def test_the_repro_catalogue_uses_real_flags_and_real_tests() -> None:
    e2e = Path(repro.__file__).parent
    for bug in repro.CATALOGUE:
        assert bug.flag in IMPLEMENTED_FAULTS, f"{bug.id}: unknown flag {bug.flag}"
        re.compile(bug.symptom)
        for test in bug.tests:
            path, _, name = test.partition("::")
            src = (e2e / path).read_text()
            assert f"def {name.split('[')[0]}(" in src, f"{bug.id}: no test {test}"
    assert {b.flag for b in repro.CATALOGUE} == set(IMPLEMENTED_FAULTS), "a fault flag has no repro scenario"


def test_every_field_bug_has_a_repro_entry() -> None:
    field_bugs = Path(__file__).resolve().parents[2] / "shared" / "FIELD-BUGS.md"
    if not field_bugs.exists():
        pytest.skip(f"{field_bugs} is not beside this checkout")
    rows = [line for line in field_bugs.read_text().splitlines() if line.startswith("| nomad-")]
    first_ids = [re.match(r"\| (nomad-\d+)", r).group(1) for r in rows]  # type: ignore[union-attr]
    missing = [i for i in first_ids if i not in repro.BUGS]
    assert not missing, f"FIELD-BUGS.md rows without a repro scenario: {missing}"


def test_repro_refuses_an_unknown_bug(capsys: pytest.CaptureFixture[str]) -> None:
    assert repro.main(["nomad-0", "--lab", "x"]) == 2
    assert "unknown bug 'nomad-0'" in capsys.readouterr().err
