"""Field bugs of Nomad's CNI network modes (issue 52 item 7), each put back by a fault flag through a
pure decision, and its data scenario (e2e/scenarios/nomad-<n>.yml) on one of the lab's cni/<name>
networks:

- nomad-23764 (`cni-args-change-in-place`): a job update that changes only `cni { args }` was an
  in-place update, so the running alloc kept the network its old CNI_ARGS made (agent.decide.jobupdate);
- nomad-7537 (`cni-unloaded-at-teardown`): the CNI config was loaded by an alloc's setup only, so the
  teardown of an alloc restored at an agent start ran no DEL and left its reservation, chains and
  kept result behind (agent.network.networks.plan_cni_teardown).

Each decision with the bug off and on; the network set with fake plugins (no root) as the agent
runs it across a restart; each scenario's jobspec parsed as the agent parses it, and its symptom
matched against the words of the checks the flag breaks.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

from agent.decide.jobupdate import plan_job_update
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.fieldbugs.catalogue import FAULTS, IMPLEMENTED_FAULTS
from agent.jobspec import load_jobspec
from agent.network.base import AttachSpec
from agent.network.networks import NetworkSet, plan_cni_teardown
from agent.structs.model import Job
from agent.structs.records import PortAlloc
from e2e.harness.scenario import SCENARIOS, Step, load
from e2e.harness.scenario_judge import SWEPT_KEY, check_problems

# A fake CNI plugin (no root): it logs each call, and its ADD answers the address its config names.
FAKE_PLUGIN = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import json, os, sys
    conf = json.load(sys.stdin)
    cmd = os.environ["CNI_COMMAND"]
    args = os.environ.get("CNI_ARGS", "")
    with open(conf["log"], "a") as f:
        f.write(json.dumps({"type": conf["type"], "cmd": cmd, "args": args}) + "\\n")
    if cmd == "ADD":
        print(json.dumps({"cniVersion": conf["cniVersion"], "ips": [
            {"version": "4", "address": conf["addr"], "interface": 0}],
            "interfaces": [{"name": "eth0", "sandbox": os.environ["CNI_NETNS"]}]}))
    """
)
HOST_NETNS = Path("/proc/self/ns/net")
ALLOC = "6b235529-8111-4bbe-520b-d639b1d2a94e"
OTHER = "0f6a4c1e-2b7d-4e3a-9c55-1d2e3f405162"


class FakeDir:
    """A client's CNI config dir, plugin dir and result cache, with the fake plugins."""

    def __init__(self, tmp: Path) -> None:
        self.conf, self.plugins, self.cache = tmp / "net.d", tmp / "plugins", tmp / "cache"
        self.log = tmp / "calls.log"
        self.conf.mkdir(parents=True)
        self.plugins.mkdir()
        for name in ("fakenet", "fakepm"):
            (self.plugins / name).write_text(FAKE_PLUGIN)
            (self.plugins / name).chmod(0o755)

    def write(self, file: str, name: str, *, portmap: bool = False, addr: str = "10.77.0.2/24") -> None:
        plugins: list[dict[str, Any]] = [{"type": "fakenet", "log": str(self.log), "addr": addr}]
        if portmap:
            pm = {
                "type": "fakepm",
                "log": str(self.log),
                "addr": addr,
                "capabilities": {"portMappings": True},
            }
            plugins.append(pm)
        (self.conf / file).write_text(json.dumps({"cniVersion": "0.4.0", "name": name, "plugins": plugins}))

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def networks(self, bugs: Bugs = NO_BUGS) -> NetworkSet:
        return NetworkSet(None, self.conf, self.plugins, self.cache, run_check=False, bugs=bugs)


def _job(file: str) -> Job:
    return load_jobspec(SCENARIOS / "jobs" / file).job


# --- nomad-23764: a change of `cni { args }` replaces the alloc ------------------------------------


def test_nomad_23764_a_cni_args_change_replaces_the_alloc_unless_the_flag_is_on() -> None:
    old = _job("nomad-23764-cni-args-v1.nomad.hcl")
    new = _job("nomad-23764-cni-args-v2.nomad.hcl")
    net_old, net_new = old.groups[0].network, new.groups[0].network
    assert net_old is not None and net_new is not None
    assert net_old.mode == net_new.mode == "cni/lab-macvlan"
    assert dict(net_old.cni_args) == {"FIELDLAB_REVISION": "1"}
    assert dict(net_new.cni_args) == {"FIELDLAB_REVISION": "2"}
    live = {"app": ["a1"]}
    fixed = plan_job_update(old, new, live)
    assert fixed.destructive == ("app",) and fixed.stop == ("a1",) and fixed.start == {"app": 1}
    assert fixed.replaces == {"app": ("a1",)}
    buggy = plan_job_update(old, new, live, Bugs(cni_args_change_in_place=True))
    assert buggy.noop and buggy.destructive == () and buggy.stop == ()


def test_nomad_23764_the_flag_leaves_every_other_network_change_destructive() -> None:
    from dataclasses import replace

    old = _job("nomad-23764-cni-args-v1.nomad.hcl")
    group = old.groups[0]
    assert group.network is not None
    moved = replace(group, network=replace(group.network, mode="cni/lab-bridge2"))
    new = replace(old, groups=(moved,))
    plan = plan_job_update(old, new, {"app": ["a1"]}, Bugs(cni_args_change_in_place=True))
    assert plan.destructive == ("app",) and plan.stop == ("a1",)
    same = plan_job_update(old, old, {"app": ["a1"]}, NO_BUGS)
    assert same.noop and same.destructive == ()


# --- nomad-7537: the teardown of a restored alloc runs its DEL ---------------------------------------


def test_nomad_7537_the_teardown_decision() -> None:
    assert plan_cni_teardown(True) and plan_cni_teardown(False)
    on = Bugs(cni_unloaded_at_teardown=True)
    assert plan_cni_teardown(True, on)
    assert not plan_cni_teardown(False, on)  # restored, no ADD on its network in this run: no DEL


def _calls(fake: FakeDir) -> list[tuple[str, str]]:
    return [(c["cmd"], c["args"]) for c in fake.calls()]


def test_nomad_7537_a_restored_cni_alloc_gets_its_del_unless_the_flag_is_on(tmp_path: Path) -> None:
    ports = [PortAlloc("http", 25000, 80)]
    spec = AttachSpec("cni/lab-net", (("IgnoreUnknown", "true"),))
    for bugs, deleted in ((NO_BUGS, True), (Bugs(cni_unloaded_at_teardown=True), False)):
        fake = FakeDir(tmp_path / str(deleted))
        fake.write("lab.conflist", "lab-net", portmap=True)
        assert fake.networks().add(ALLOC, HOST_NETNS, ports, spec=spec) == "10.77.0.2"
        fake.log.unlink()
        # an agent restart: a new network set; the alloc is restored, then stopped
        after = fake.networks(bugs)
        assert after.held_by(ALLOC) == "lab-net"
        errors = after.delete(ALLOC, HOST_NETNS, ports=ports, spec=spec)
        if deleted:
            assert errors == [] and _calls(fake) == [("DEL", ""), ("DEL", "")]  # both plugins, reversed
            assert not after.has_result(ALLOC)
        else:
            assert errors == [f"cni plugin not initialized: no DEL of alloc {ALLOC} on network lab-net"]
            assert _calls(fake) == []  # no plugin ran: the reservation and chains stay
            assert after.has_result(ALLOC)  # and the kept result (the sweeper's to find)
            assert [n.name for n in after.sweep_networks()] == ["lab-net"]


def test_nomad_7537_with_the_flag_an_add_on_the_network_in_this_run_loads_it(tmp_path: Path) -> None:
    """As Nomad 0.11's configurator: once a setup loaded the network's config, a teardown works."""
    fake = FakeDir(tmp_path)
    fake.write("lab.conflist", "lab-net")
    spec = AttachSpec("cni/lab-net")
    fake.networks().add(ALLOC, HOST_NETNS, [], spec=spec)
    after = fake.networks(Bugs(cni_unloaded_at_teardown=True))
    fake.write("lab.conflist", "lab-net", addr="10.77.0.3/24")
    assert after.add(OTHER, HOST_NETNS, [], spec=spec) == "10.77.0.3"
    fake.log.unlink()
    assert after.delete(ALLOC, HOST_NETNS, spec=spec) == []
    assert _calls(fake) == [("DEL", "")] and not after.has_result(ALLOC)


# --- the scenarios ------------------------------------------------------------------------------------


def _alloc(status: str, replaced: bool = False) -> dict[str, object]:
    return {"id": ALLOC, "status": status, "replaced_by": OTHER if replaced else None, "tasks": {}}


def test_the_scenarios_load_on_the_labs_cni_networks_and_name_their_flags() -> None:
    for bug, flag, network in (
        ("nomad-23764", "cni-args-change-in-place", "cni/lab-macvlan"),
        ("nomad-7537", "cni-unloaded-at-teardown", "cni/lab-bridge2"),
    ):
        s = load(SCENARIOS / f"{bug}.yml")
        assert s.flag == flag and flag in IMPLEMENTED_FAULTS and FAULTS[flag].bug == bug
        assert s.family == "networking" and not s.nightly
        assert s.jobspec is not None
        group = load_jobspec(s.jobspec).job.groups[0]
        assert group.network is not None and group.network.mode == network


def test_the_symptoms_match_what_the_checks_say_with_the_flag_on() -> None:
    s = load(SCENARIOS / "nomad-23764.yml")
    said = check_problems(Step("replaced", True), _alloc("running"), [])
    said += check_problems(Step("alloc", "complete"), _alloc("running"), [])
    assert said and re.search(s.symptom, said[0]), said
    assert check_problems(Step("replaced", True), _alloc("complete", replaced=True), []) == []

    s = load(SCENARIOS / "nomad-7537.yml")
    swept: dict[str, str | None] = {SWEPT_KEY: f"cni {ALLOC} {ALLOC}\nipam {ALLOC} 172.26.96.5\n"}
    said = check_problems(Step("swept", "none"), _alloc("complete"), [], swept)
    assert len(said) == 2 and all(re.search(s.symptom, p) for p in said), said
    assert check_problems(Step("swept", "none"), _alloc("complete"), [], {SWEPT_KEY: ""}) == []
    orphan = f"client1: orphan cni_cache lab-bridge2:{ALLOC}:eth0.json (owner {ALLOC})"
    assert re.search(s.symptom, orphan)
