"""The target profiles (e2e/targets/*.yml): each loads and names what the harness reads on a
client; a wrong one is refused naming the file and field; the orphan observation parses a Nomad
client's node by the nomad profile's names (no role label: the pause container by its name; netns
named by the alloc id)."""

from __future__ import annotations

import pytest

from e2e.harness.checkers import parse_resources
from e2e.harness.target import TargetError, load_target, names, parse_target

LIVE = "25ae50ff-a9cc-410b-a13d-90c55bdf29c1"
DEAD = "0b7e1d2c-1111-4a0b-95c4-99111646b200"


def test_every_profile_loads_and_the_two_differ_where_a_nomad_client_differs() -> None:
    assert names() == ["fieldlab", "nomad"]
    mine, nomad = load_target("fieldlab"), load_target("nomad")
    assert (mine.unit, mine.data_dir, mine.fault_flags) == ("fieldlab-agent", "/var/lib/fieldlab-agent", True)
    assert (nomad.unit, nomad.data_dir, nomad.fault_flags) == ("nomad", "/opt/nomad/data", False)
    assert nomad.docker_alloc_label == "com.hashicorp.nomad.alloc_id" and nomad.pause_prefix == "nomad_init_"
    # The names outside the data dir are Nomad's in both (agent.structs.layout).
    assert nomad.netns_name(LIVE) == LIVE == mine.netns_name(LIVE)
    assert (
        (mine.cgroup_parent, mine.cni_network)
        == (nomad.cgroup_parent, nomad.cni_network)
        == ("nomad.slice", "nomad")
    )
    assert nomad.alloc_dir(LIVE) == f"/opt/nomad/data/alloc/{LIVE}"


def test_a_wrong_profile_is_refused_with_its_file_and_field() -> None:
    good = (load_target("nomad").__dict__).copy()
    text = "\n".join(
        f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {str(v).lower()}" for k, v in good.items()
    )
    assert parse_target(text, "x.yml") == load_target("nomad")
    with pytest.raises(TargetError, match=r"x.yml: fault_flags must be a bool"):
        parse_target(text.replace("fault_flags: false", "fault_flags: 'no'"), "x.yml")
    with pytest.raises(TargetError, match=r"x.yml: missing fields \['unit'\], unknown fields \['unti'\]"):
        parse_target(text.replace("unit:", "unti:"), "x.yml")
    with pytest.raises(TargetError, match="no target profile 'consul'"):
        load_target("consul")


def test_a_nomad_clients_node_is_read_by_the_nomad_profiles_names() -> None:
    state = f"""## containers
aaa running {LIVE} nginx-{LIVE}
bbb running {LIVE} nomad_init_{LIVE}
ccc exited {DEAD} nomad_init_{DEAD}
## netns
{DEAD}
cni-1234
## ipam
172.26.64.3 {DEAD}
"""
    got = {(r.kind, r.name): (r.owner, r.detail) for r in parse_resources(state, load_target("nomad"))}
    assert got[("container", f"nginx-{LIVE}")] == (LIVE, "task running")
    assert got[("container", f"nomad_init_{LIVE}")] == (LIVE, "pause running")
    assert got[("container", f"nomad_init_{DEAD}")] == (DEAD, "pause exited")
    assert got[("netns", DEAD)] == (DEAD, "")
    assert ("netns", "cni-1234") not in got, "a netns not named by an alloc id is not the client's"
    assert got[("ipam", "172.26.64.3")] == (DEAD, "host-local reservation in /var/run/cni/nomad")
