"""The node layout (agent.structs.layout): this project's names or a Nomad client's, chosen in the config,
bound by the daemon, read by the netns owner, the process drivers' cgroups and the sweeper; the lab
role's layouts say the same as the harness's target profiles; `lab up --layout nomad` tells both the
roles and the harness; and the harness pins every job to its client with a constraint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.command.config import Config, load_config
from agent.drivers.cgroups import Cgroups, task_cgroup_name
from agent.errors import ConfigError
from agent.network.owner import netns_name
from agent.node.names import seen_names
from agent.node.sweeper import Observed, plan_sweep
from agent.structs import layout
from agent.structs.layout import FIELDLAB, NOMAD, NodeLayout, SeenNames, netns_alloc, unrecorded_layout
from agent.structs.records import AllocRecord, RecordError
from e2e.harness.nomadview import pinned
from e2e.harness.target import load_target
from lab.config import LabPaths, LabSpec
from lab.errors import ConfigError as LabConfigError
from lab.inventory import inventory_data
from lab.providers.base import LabRecord, Node

ROOT = Path(__file__).resolve().parent.parent
LIVE = "25ae50ff-a9cc-410b-a13d-90c55bdf29c1"
DEAD = "0b7e1d2c-1111-4a0b-95c4-99111646b200"


@pytest.fixture
def bound() -> Iterator[None]:
    yield
    layout.bind(NOMAD)


def test_a_netns_name_belongs_to_an_alloc_only_under_the_layouts_prefix() -> None:
    assert netns_alloc(f"fl-{LIVE}", "fl-") == LIVE
    assert netns_alloc(LIVE, "fl-") is None  # Nomad's name is not this layout's
    assert netns_alloc(LIVE, "") == LIVE
    # With no prefix only an alloc id's shape tells: another tool's netns is never the agent's.
    assert netns_alloc("cni-1234", "") is None and netns_alloc(f"fl-{LIVE}", "") is None
    assert netns_alloc("fl-", "fl-") is None


def test_a_layout_refuses_names_that_are_not_one_path_component() -> None:
    with pytest.raises(ValueError, match="cgroup_parent"):
        NodeLayout(cgroup_parent="../escape")
    with pytest.raises(ValueError, match="cgroup_parent"):
        NodeLayout(cgroup_parent="a/b")
    with pytest.raises(ValueError, match="netns_prefix"):
        NodeLayout(netns_prefix="x/")


def test_the_bound_layout_names_the_netns_and_the_task_cgroups(bound: None, tmp_path: Path) -> None:
    assert layout.current() == NOMAD and netns_name(LIVE) == LIVE  # Nomad's names by default
    layout.bind(FIELDLAB)
    assert netns_name(LIVE) == f"fl-{LIVE}"
    layout.bind(NOMAD)
    (tmp_path / "cgroup.controllers").write_text("memory cpu\n")  # a v2 hierarchy
    cg = Cgroups.of_task(LIVE, "web", tmp_path)
    assert cg.dirs == [tmp_path / "nomad.slice" / f"{LIVE}.web"]
    (tmp_path / "nomad.slice" / f"{LIVE}.web").mkdir(parents=True)
    (tmp_path / "fieldlab" / f"{DEAD}.web").mkdir(parents=True)  # an earlier layout's: still the agent's
    (tmp_path / "system.slice" / "docker.service").mkdir(parents=True)  # nobody's of the agent
    assert Cgroups.names(tmp_path) == sorted([f"{LIVE}.web", f"{DEAD}.web"])
    assert Cgroups.found(f"{DEAD}.web", tmp_path).dirs == [tmp_path / "fieldlab" / f"{DEAD}.web"]
    assert task_cgroup_name([f"0::/nomad.slice/{LIVE}.web"]) == f"{LIVE}.web"
    assert task_cgroup_name([f"0::/fieldlab/{LIVE}.web"]) == f"{LIVE}.web"
    assert task_cgroup_name(["0::/system.slice/docker.service"]) is None


def test_an_alloc_pinned_to_an_earlier_layout_keeps_its_names(bound: None, tmp_path: Path) -> None:
    layout.pin(DEAD, FIELDLAB)
    layout.pin(LIVE, NOMAD)  # the bound layout's: nothing to pin
    assert layout.for_alloc(DEAD) == FIELDLAB and layout.for_alloc(LIVE) == NOMAD
    assert netns_name(DEAD) == f"fl-{DEAD}" and netns_name(LIVE) == LIVE
    (tmp_path / "cgroup.controllers").write_text("memory cpu\n")
    assert Cgroups.of_task(DEAD, "web", tmp_path).dirs == [tmp_path / "fieldlab" / f"{DEAD}.web"]
    assert Cgroups.of_task(LIVE, "web", tmp_path).dirs == [tmp_path / "nomad.slice" / f"{LIVE}.web"]
    other = NodeLayout("x-", "x.slice", "x")
    layout.pin(LIVE, other)
    assert layout.recognised() == (NOMAD, FIELDLAB, other)
    layout.bind(NOMAD)  # a new agent process: no pins
    assert layout.for_alloc(DEAD) == NOMAD and layout.recognised() == (NOMAD, FIELDLAB)


def test_the_sweeper_removes_a_dead_allocs_netns_by_every_recognised_layouts_names() -> None:
    nomad = Observed(netns=[LIVE, DEAD, "cni-other", f"fl-{DEAD}"], netns_prefixes=("",))
    assert [(r.kind, r.target, r.owner) for r in plan_sweep({LIVE}, nomad)] == [("netns", DEAD, DEAD)]
    both = Observed(netns=[f"fl-{LIVE}", f"fl-{DEAD}", DEAD, "cni-other"])  # the default: "" and "fl-"
    plan = [(r.kind, r.target, r.owner) for r in plan_sweep({LIVE}, both)]
    assert plan == [("netns", f"fl-{DEAD}", DEAD), ("netns", DEAD, DEAD)]


def test_an_earlier_agents_record_gets_the_names_found_on_the_node() -> None:
    cands = (NOMAD, FIELDLAB)
    # Found under the earlier layout's names: those, each one.
    seen = SeenNames(frozenset({"fl-"}), frozenset({"fieldlab"}), frozenset({"fieldlab"}))
    assert unrecorded_layout(seen, cands) == FIELDLAB
    # Only a netns found (a docker-less exec group whose cgroups are gone): the rest follow its layout.
    assert unrecorded_layout(SeenNames(netns_prefixes=frozenset({"fl-"})), cands) == FIELDLAB
    # A docker group: its netns is docker's, its network tells.
    assert unrecorded_layout(SeenNames(cni_networks=frozenset({"nomad"})), cands) == NOMAD
    # Nothing found (a host reboot cleared /run and the cgroups): the former default's names.
    assert unrecorded_layout(SeenNames(), cands) == FIELDLAB
    # Found under both (never made so, but each name is what is there).
    mixed = SeenNames(frozenset({""}), frozenset({"fieldlab"}), frozenset({"fieldlab"}))
    assert unrecorded_layout(mixed, cands) == NodeLayout("", "fieldlab", "fieldlab")


def test_an_alloc_record_keeps_its_layout_and_reads_an_earlier_one_without(tmp_path: Path) -> None:
    rec = AllocRecord(LIVE, "j", "g", layout=FIELDLAB)
    assert AllocRecord.from_record(rec.to_record()).layout == FIELDLAB
    old = rec.to_record()
    del old["layout"]  # as the agents before this one wrote it
    assert AllocRecord.from_record(old).layout is None
    bad = {**rec.to_record(), "layout": {"netns_prefix": "", "cgroup_parent": "../x", "cni_network": "n"}}
    with pytest.raises(RecordError, match=r"state alloc/.*cgroup_parent '../x'"):
        AllocRecord.from_record(bad)
    with pytest.raises(RecordError, match="layout has no cni_network"):
        AllocRecord.from_record({**rec.to_record(), "layout": {"netns_prefix": "", "cgroup_parent": "p"}})


def test_what_an_earlier_agents_alloc_left_on_the_node_is_seen_by_its_names(tmp_path: Path) -> None:
    cgroups, cache = tmp_path / "cg", tmp_path / "cni"
    (cgroups / "cgroup.controllers").parent.mkdir()
    (cgroups / "fieldlab" / f"{DEAD}.web").mkdir(parents=True)
    cache.mkdir()
    (cache / f"fieldlab:{DEAD}:eth0.json").write_text("{}")
    (cache / f"nomad:{LIVE}:eth0.json").write_text("{}")
    seen = seen_names(DEAD, (NOMAD, FIELDLAB), cache, cgroups)
    assert (seen.cgroup_parents, seen.cni_networks) == ({"fieldlab"}, {"fieldlab"})
    assert seen_names(LIVE, (NOMAD, FIELDLAB), cache, cgroups).cni_networks == {"nomad"}


def test_the_config_takes_a_layout_and_refuses_a_bad_one_naming_the_key(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"node_name": "n", "netns_prefix": "", "cgroup_parent": "nomad.slice"}))
    cfg = load_config(p)
    assert (cfg.netns_prefix, cfg.cgroup_parent) == ("", "nomad.slice")
    default = load_config_default(tmp_path)
    assert (default.netns_prefix, default.cgroup_parent, default.cni_network) == ("", "nomad.slice", "nomad")
    p.write_text(json.dumps({"node_name": "n", "cgroup_parent": "../../etc"}))
    with pytest.raises(ConfigError, match=r"cgroup_parent.*one path component"):
        load_config(p)
    p.write_text(json.dumps({"node_name": "n", "netns_prefix": 3}))
    with pytest.raises(ConfigError, match="netns_prefix"):
        load_config(p)


def load_config_default(tmp_path: Path) -> Config:
    p = tmp_path / "default.json"
    p.write_text(json.dumps({"node_name": "n"}))
    return load_config(p)


def test_the_roles_layouts_name_what_the_harness_profiles_read() -> None:
    role_vars = yaml.safe_load((ROOT / "lab/roles/fieldlab_agent/vars/main.yml").read_text())
    layouts = role_vars["_fieldlab_agent_layouts"]
    assert set(layouts) == {"fieldlab", "nomad"}
    for name, names in layouts.items():
        target = load_target(name)
        agent = NOMAD  # both lay out what is outside the data dir as Nomad's client
        assert names["unit"] == target.unit and names["data_dir"] == target.data_dir, name
        assert names["config_dir"] == target.config_dir and names["cni_network"] == target.cni_network, name
        assert names["netns_prefix"] == target.netns_prefix == agent.netns_prefix, name
        assert names["cgroup_parent"] == target.cgroup_parent == agent.cgroup_parent, name
        assert target.ipam_dir == f"/var/run/cni/{names['cni_network']}", name
    # The agent's config carries them from the role's variables.
    config = role_vars["fieldlab_agent_config"]
    assert {"cni_network", "netns_prefix", "cgroup_parent"} <= set(config)


def test_a_nomad_layout_lab_tells_the_roles_and_the_harness(tmp_path: Path) -> None:
    paths = LabPaths("x", home=tmp_path)
    nodes = [Node("server1", "server", "172.30.99.10"), Node("client1", "client", "172.30.99.11")]
    plain = inventory_data(LabRecord("x", "docker", nodes), paths)["all"]["vars"]
    assert "fieldlab_layout" not in plain and "fieldlab_target" not in plain
    nomad = inventory_data(LabRecord("x", "docker", nodes, layout="nomad"), paths)["all"]["vars"]
    assert (nomad["fieldlab_layout"], nomad["fieldlab_target"]) == ("nomad", "nomad")
    with pytest.raises(LabConfigError, match="--layout 'consul'"):
        LabSpec(layout="consul")
    # A Nomad cluster's own clients: only on the user's hosts, and nothing of this agent deployed.
    with pytest.raises(LabConfigError, match="--target nomad: the clients of a running nomad cluster"):
        LabSpec(target="nomad")
    with pytest.raises(LabConfigError, match="--layout does not apply"):
        LabSpec(provider="static", static_inventory=Path("x"), target="nomad", layout="nomad")
    theirs = inventory_data(LabRecord("x", "static", nodes, target="nomad"), paths)["all"]["vars"]
    assert theirs["fieldlab_target"] == "nomad" and "fieldlab_layout" not in theirs


def test_the_harness_pins_a_job_to_its_client_keeping_the_jobs_own_constraints() -> None:
    own = {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}
    other_pin = {"LTarget": "${node.unique.name}", "RTarget": "client9", "Operand": "="}
    job = {"ID": "j", "Constraints": [own, other_pin]}
    out = pinned(job, "client1")
    pin = {"LTarget": "${node.unique.name}", "RTarget": "client1", "Operand": "="}
    assert out["Constraints"] == [own, pin]
    assert job["Constraints"] == [own, other_pin]  # the caller's job is not changed
    assert pinned({"ID": "j", "Constraints": None}, "c")["Constraints"][0]["RTarget"] == "c"


def test_a_missing_approle_file_fails_this_agents_smoke_but_not_a_nomad_clients() -> None:
    from e2e.harness.checkers import AppRoleSeen, approle_problems

    assert approle_problems(AppRoleSeen("c1", {"login": "absent"})) == ["c1: no AppRole credentials file"]
    assert approle_problems(AppRoleSeen("c1", {"login": "absent"}, required=False)) == []
    # Present but failing is a problem on either target.
    assert approle_problems(AppRoleSeen("c1", {"login": "failed"}, required=False))
