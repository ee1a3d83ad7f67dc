"""The node image bake: its inputs, staleness and the phase table of parallel phases (no docker)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab import bake
from lab.progress import Timings


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    b = tmp_path / "bao"
    b.write_bytes(b"x" * 10)
    return b


def test_the_bake_hash_covers_the_baked_roles_and_not_the_per_lab_ones(binary: Path) -> None:
    inputs = bake.bake_inputs("fieldlab-node:abc", binary)
    names = set(inputs)
    for role in ("node_base", "docker_engine", "cni", "workload_images"):
        assert any(n.startswith(f"roles/{role}/tasks/") for n in names), role
    assert "roles/fieldlab_agent/tasks/install.yml" in names
    assert "roles/openbao/tasks/install.yml" in names
    # Per-lab work is not baked: changing it must not force a bake.
    assert not any(n.startswith(("roles/pki/", "roles/consul/")) for n in names)
    assert "roles/fieldlab_agent/tasks/credentials.yml" not in names
    assert "roles/openbao/tasks/init.yml" not in names
    assert "playbooks/bake.yml" in names and "agent/workloads/probe/probe.py" in names
    # The roles' READMEs are generated from meta/argument_specs.yml, which is an input itself.
    assert "roles/node_base/meta/argument_specs.yml" in names
    assert not any(n.endswith("/README.md") for n in names)
    assert inputs["base image"] == "fieldlab-node:abc"
    assert "10 bytes" in inputs["openbao binary"]


def test_the_tag_changes_with_the_base_image_and_the_binary(binary: Path) -> None:
    one = bake.inputs_hash(bake.bake_inputs("fieldlab-node:abc", binary))
    assert one == bake.inputs_hash(bake.bake_inputs("fieldlab-node:abc", binary))
    assert one != bake.inputs_hash(bake.bake_inputs("fieldlab-node:def", binary))
    binary.write_bytes(b"y" * 11)
    assert one != bake.inputs_hash(bake.bake_inputs("fieldlab-node:abc", binary))
    assert bake.baked_tags(one) == {
        "server": f"fieldlab-node-baked:server-{one}",
        "client": f"fieldlab-node-baked:client-{one}",
    }


def test_a_stale_bake_says_which_inputs_changed() -> None:
    old = {"base image": "a", "roles/cni/tasks/main.yml": "1", "roles/gone.yml": "x"}
    new = {"base image": "a", "roles/cni/tasks/main.yml": "2", "roles/new.yml": "y"}
    assert bake.changed_inputs(old, new) == [
        "roles/cni/tasks/main.yml changed",
        "roles/new.yml added",
        "roles/gone.yml removed",
    ]
    reason = bake.stale_reason(old, new)
    assert reason.startswith("stale, inputs changed since the last bake: ")
    assert "roles/cni/tasks/main.yml changed" in reason
    assert bake.stale_reason(None, new) == "no baked image yet"
    many = {f"f{i}": "1" for i in range(10)}
    assert "and 4 more" in bake.stale_reason(many, {k: "2" for k in many})


def test_identity_wipe_covers_what_the_check_forbids() -> None:
    for path in ("/etc/ssh/ssh_host_", "/root/.ssh/authorized_keys", "/etc/docker/key.json"):
        assert path in bake.FORGET_IDENTITY
    assert ": > /etc/machine-id" in bake.FORGET_IDENTITY
    assert "/var/log/journal/" in bake.FORBIDDEN


def test_parallel_branches_are_shown_under_their_phase_and_not_added_to_the_total(tmp_path: Path) -> None:
    t = Timings("lab up")
    t.add("node image", 1.0, True)
    with t.phase("provision (in parallel)") as top:
        t.add("provision: vault", 5.0, True, "changed=3", parent="provision (in parallel)")
        t.add("provision: consul", 2.0, True, "changed=1", parent="provision (in parallel)")
        top.detail = "both"
    t.add("provision: agent", 3.0, True)
    table = t.table().splitlines()
    names = [re.split(r"\s{2,}", row.strip())[0] for row in table]
    assert names[:4] == ["node image", "provision (in parallel)", "| provision: vault", "| provision: consul"]
    assert t.total == pytest.approx(1.0 + t.phases[1].seconds + 3.0)
    out = tmp_path / "timings.json"
    t.write(out)
    phases = json.loads(out.read_text())[0]["phases"]
    assert [p.get("parent", "") for p in phases] == [
        "",
        "",
        "provision (in parallel)",
        "provision (in parallel)",
        "",
    ]


def test_the_bakes_agent_wheel_is_read_from_its_client_image_label() -> None:
    from lab.bake import BAKED_WHEEL_LABEL, baked_wheel

    class Image:
        def __init__(self, labels: dict[str, str] | None) -> None:
            self.labels = labels

    class Images:
        def __init__(self, found: dict[str, Image]) -> None:
            self.found = found

        def get(self, tag: str) -> Image:
            if tag not in self.found:
                raise LookupError(tag)  # what docker's NotFound is to this function: any error
            return self.found[tag]

    class Client:
        def __init__(self, found: dict[str, Image]) -> None:
            self.images = Images(found)

    tags = {"client": "fieldlab-node-baked:client-abc", "server": "fieldlab-node-baked:server-abc"}
    labelled = Client({tags["client"]: Image({BAKED_WHEEL_LABEL: "f00d"})})
    assert baked_wheel(labelled, tags) == "f00d"
    assert baked_wheel(Client({tags["client"]: Image({})}), tags) == ""  # a bake from before the label
    assert baked_wheel(Client({tags["client"]: Image(None)}), tags) == ""
    assert baked_wheel(Client({}), tags) == ""  # no image: the stamps are read
