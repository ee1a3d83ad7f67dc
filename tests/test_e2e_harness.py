"""The e2e harness's pure parts, without a lab: what each checker makes of an observation (one case
that passes, one a bug would break), the repro symptoms matching the checkers' words, the chaos
schedule's reproducibility, the event checks, the history's check records, the fault classes, the
repro catalogue's coverage, and the harness's rules (no suite imported, no copied labels, no sleeps)."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from agent.fieldbugs.catalogue import IMPLEMENTED_FAULTS
from e2e.drivers import repro
from e2e.harness import faults, history
from e2e.harness.chaos import KINDS, schedule
from e2e.harness.checkers import (
    AgentSeen,
    AppRoleSeen,
    CniSeen,
    DeliverySeen,
    DockerRunSeen,
    NetworkSeen,
    NodeSeen,
    PortSeen,
    SystemdSeen,
    VaultSeen,
    agent_problems,
    alloc_health_problems,
    approle_problems,
    chain_set_problems,
    cni_problems,
    container_set_problems,
    delivery_problems,
    docker_problems,
    network_problems,
    node_problems,
    orphan_problems,
    parse_container_names,
    parse_resources,
    process_set_problems,
    systemd_problems,
    vault_problems,
)
from e2e.suites.test_template_restarts import fired_while_down

LIVE = "25ae50ff-a9cc-410b-a13d-90c55bdf29c1"
DEAD = "0b7e1d2c-1111-4a0b-95c4-99111646b200"
COMMENT = '-m comment --comment "name: \\"nomad\\" id: \\"{}\\""'
# What the observation script prints on a client with one live alloc and the leftovers of a dead one
# (the iptables lines as iptables-save prints them on the lab's nodes).
NODE_STATE = f"""## containers
aaa running {LIVE} task nginx-{LIVE}
bbb running {LIVE} pause fieldlab_init_{LIVE}
ccc exited {DEAD} pause fieldlab_init_{DEAD}
## netns
{DEAD} (id: 3)
## ipam
172.26.64.2 {LIVE}
172.26.64.3 {DEAD}
## cache
nomad:{LIVE}:eth0.json
nomad:{DEAD}:eth0.json
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
    """The dead alloc is still listed (complete, not collected): its dir waits for the GC, the rest
    of what it held is an orphan; once it is no longer listed its dir is one too."""
    problems = orphan_problems(parse_resources(NODE_STATE), ALLOCS, "client1")
    kinds = sorted(re.search(r"orphan (\w+)", p).group(1) for p in problems)  # type: ignore[union-attr]
    assert kinds == sorted(
        ["container", "netns", "ipam", "cni_cache", "task_process", "cni_chain", "cni_rule"]
    ), problems
    assert all(DEAD in p or "172.26.64.3" in p for p in problems), problems
    collected = orphan_problems(parse_resources(NODE_STATE), ALLOCS[:1], "client1")
    assert any(f"orphan alloc_dir {DEAD}" in p for p in collected), collected


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
    suites = repro.SUITES
    for bug in repro.CATALOGUE:
        assert bug.flag in IMPLEMENTED_FAULTS, f"{bug.bug}: unknown flag {bug.flag}"
        re.compile(bug.symptom)
        for test in bug.tests:
            path, _, name = test.partition("::")
            src = (suites / path).read_text()
            assert f"def {name.split('[')[0]}(" in src, f"{bug.bug}: no test {test}"
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


# --- the checkers of a node of its role ----------------------------------------------------------
def test_systemd_running_with_no_failed_unit_passes_and_a_failed_unit_is_named() -> None:
    assert systemd_problems(SystemdSeen("client1", "running", [])) == []
    assert systemd_problems(SystemdSeen("client1", "degraded", ["docker.service"])) == [
        "client1: systemd state is 'degraded', not 'running'",
        "client1: failed units: ['docker.service']",
    ]


def test_docker_run_must_print_the_marker() -> None:
    assert docker_problems(DockerRunSeen("client1", 0, "fieldlab-ok\n", "")) == []
    problems = docker_problems(DockerRunSeen("client1", 125, "", "Unable to find image\n"))
    assert problems == [
        "client1: `docker run fieldlab/busybox:latest` gave rc=125 out='' err='Unable to find image'"
    ]
    assert docker_problems(DockerRunSeen("client1", 0, "something else", "")), "rc 0 alone is not enough"


def test_cni_needs_loopback_then_bridge_with_portmap_and_every_plugin() -> None:
    chain = ["loopback", "bridge", "portmap", "firewall"]
    assert cni_problems(CniSeen("client1", None, chain, [])) == []
    assert cni_problems(CniSeen("client1", None, ["bridge", "loopback", "portmap"], [])) == [
        "client1: conflist plugin chain is ['bridge', 'loopback', 'portmap']"
    ]
    assert cni_problems(CniSeen("client1", None, chain, ["portmap"])) == [
        "client1: CNI plugins missing from /usr/lib/cni: ['portmap']"
    ]
    assert cni_problems(CniSeen("client1", "jq: error")) == [
        "client1: /etc/cni/net.d/nomad.conflist missing or not JSON (jq: error)"
    ]


def test_vault_must_answer_initialised_and_unsealed() -> None:
    assert vault_problems(VaultSeen("server1", 0, {"initialized": True, "sealed": False})) == []
    sealed = vault_problems(
        VaultSeen("server1", 0, {"initialized": True, "sealed": True, "progress": 1, "t": 3})
    )
    assert sealed == ["server1: OpenBao is sealed (1/3 keys given)"]
    assert vault_problems(VaultSeen("server1", 7)) == [
        "server1: OpenBao does not answer on :8200 (curl rc=7)"
    ]


APPROLE_OK = {
    "login": "ok",
    "own_agent": "200",
    "task_token": "200",
    "workload": "403",
    "kv": "403",
    "other_agent": "403",
    "sys_mounts": "403",
    "root_ca": "400",
    "plain_token": "403",
    "wide_token": "400",
}


def test_approle_is_allowed_its_own_and_refused_the_rest() -> None:
    assert approle_problems(AppRoleSeen("client1", APPROLE_OK)) == []
    too_wide = approle_problems(AppRoleSeen("client1", {**APPROLE_OK, "other_agent": "200"}))
    assert too_wide == ["client1: approle policy allowed other_agent (HTTP 200), expected a refusal"]
    reads = approle_problems(AppRoleSeen("client1", {**APPROLE_OK, "kv": "200", "workload": "200"}))
    assert reads == [
        "client1: approle policy allowed workload (HTTP 200), expected a refusal",
        "client1: approle policy allowed kv (HTTP 200), expected a refusal",
    ]
    no_login = approle_problems(AppRoleSeen("client1", {"login": "failed"}))
    assert no_login[0] == "client1: approle login gave 'failed', expected 'ok'"
    assert len(no_login) == 10, "nothing answered: every expectation is unmet"


def _seen_body(node: str, vault: str | None = "true", ok: bool = True) -> dict[str, object]:
    """What observe_agent reads: Nomad's health and agent self (with this agent's Stats["fieldlab"],
    or none: a Nomad client's)."""
    stats: dict[str, object] = {"client": {"node_id": "x"}}
    if vault is not None:
        stats["fieldlab"] = {"vault_authenticated": vault, "vault_error": "" if vault == "true" else "denied"}
    return {
        "health": {"client": {"ok": ok, "message": "ok" if ok else "degraded"}},
        "self": {"member": {"Name": node}, "stats": stats},
    }


HEALTH = _seen_body("client1")


def test_the_agent_answers_healthy_over_mtls_and_refuses_a_client_without_a_certificate() -> None:
    assert agent_problems(AgentSeen("client1", None, 200, HEALTH)) == []
    assert agent_problems(AgentSeen("client1", None, 200, _seen_body("client1", vault=None))) == [], (
        "a Nomad client has no Stats['fieldlab']: no Vault login to check"
    )
    assert agent_problems(AgentSeen("client1", None, 200, HEALTH, answered_without_cert=True)) == [
        "client1: agent answered a client that presented no certificate"
    ]
    other = _seen_body("client2", vault="false")
    assert agent_problems(AgentSeen("client1", None, 200, other)) == [
        "client1: agent health answered 200 {'client': {'ok': True, 'message': 'ok'}}, self 'client2'",
        "client1: agent is not logged in to Vault: {'vault_authenticated': 'false', 'vault_error': 'denied'}",
    ]
    sick = _seen_body("client1", ok=False)
    assert agent_problems(AgentSeen("client1", None, 500, sick)) == [
        "client1: agent health answered 500 {'client': {'ok': False, 'message': 'degraded'}}, self 'client1'"
    ]
    assert agent_problems(AgentSeen("client1", "cannot reach the agent")) == [
        "client1: agent health over mTLS failed: cannot reach the agent"
    ]


def test_a_node_is_checked_for_its_role() -> None:
    up = SystemdSeen("n", "running", [])
    assert node_problems(NodeSeen(up, vault=VaultSeen("n", 0, {"initialized": True}))) == []
    client = NodeSeen(
        up,
        docker=DockerRunSeen("n", 0, "fieldlab-ok", ""),
        cni=CniSeen("n", None, ["loopback", "bridge", "portmap"], []),
        approle=AppRoleSeen("n", APPROLE_OK),
        agent=AgentSeen("n", None, 200, _seen_body("n")),
    )
    assert node_problems(client) == []
    broken = dataclasses.replace(client, agent=AgentSeen("n", "refused"))
    assert node_problems(broken) == ["n: agent health over mTLS failed: refused"]


# --- alloc health, network, delivery ----------------------------------------------------------------
CTR = "a" * 64
NAMES = {CTR: f"nginx-{LIVE}"}


def test_container_names_are_keyed_by_full_id() -> None:
    assert parse_container_names(f"{CTR} nginx-{LIVE}\nbad line with many words\n") == NAMES


def test_a_running_alloc_with_its_task_and_dir_is_healthy() -> None:
    assert alloc_health_problems("client1", ALLOCS, parse_resources(NODE_STATE), NAMES) == []


def test_a_running_alloc_whose_task_container_is_gone_is_half_alive() -> None:
    """nomad-23684: the agent says running, nothing runs."""
    state = NODE_STATE.replace(f"aaa running {LIVE} task", f"aaa exited {LIVE} task")
    problems = alloc_health_problems("client1", ALLOCS, parse_resources(state), NAMES)
    assert problems == [
        f"client1: alloc {LIVE[:8]} is running but task nginx is running with no live container ({CTR[:12]})"
    ]


# --- exec tasks: their cgroups on v1 and v2, one instance each, processes in no cgroup, their netns ---
EXEC = "7c0ffee0-2222-4b0b-95c4-99111646b2aa"
EXEC_ALLOC = {
    "id": EXEC,
    "status": "running",
    "network": {"address": "172.26.64.4", "pause_container": None},
    "tasks": {"httpd": {"state": "running", "container": "3384"}},
}
# cgroup v1: the task cgroup below the cpu and the memory hierarchy (listed once each, merged);
# its processes as pid:process group: P (unshare, the pid the agent tracks), its init, the workload.
V1 = f"""## allocdirs
{EXEC}
## cgroups
{EXEC}.httpd 3384:3384,3385:3384,3444:3384,
{EXEC}.httpd 3384:3384,3385:3384,3444:3384,
## looseprocs
"""


def test_an_exec_task_on_cgroup_v1_is_seen_alive_once_with_its_processes() -> None:
    res = parse_resources(V1)
    (cg,) = [r for r in res if r.kind == "task_process"]
    assert (cg.name, cg.owner, cg.procs) == (
        f"{EXEC}.httpd",
        EXEC,
        ((3384, 3384), (3385, 3384), (3444, 3384)),
    )
    assert alloc_health_problems("client1", [EXEC_ALLOC], res, {}) == []
    assert process_set_problems(res, [EXEC_ALLOC], "client1") == []
    assert orphan_problems(res, [EXEC_ALLOC], "client1") == []
    v2 = V1.replace(f"{EXEC}.httpd 3384:3384,3385:3384,3444:3384,\n", "", 1)
    assert parse_resources(v2) == res, "cgroup v2 (one hierarchy) says the same"


def test_an_exec_task_whose_tracked_pid_is_not_in_its_cgroup_is_half_alive() -> None:
    """The cgroup holds processes, but not the one the agent tracks: it watches a dead process."""
    stale = {**EXEC_ALLOC, "tasks": {"httpd": {"state": "running", "container": "2999"}}}
    assert alloc_health_problems("client1", [stale], parse_resources(V1), {}) == [
        f"client1: alloc {EXEC[:8]} is running but task httpd is running with no live process (2999)"
    ]
    empty = V1.replace("3384:3384,3385:3384,3444:3384,", "")
    assert alloc_health_problems("client1", [EXEC_ALLOC], parse_resources(empty), {}) == [
        f"client1: alloc {EXEC[:8]} is running but task httpd is running with no live process (3384)"
    ]


def test_an_exec_task_running_twice_is_reported() -> None:
    """A start the agent was killed before recording left its process behind in the cgroup."""
    twice = V1.replace("3444:3384,", "3444:3384,3100:3100,3101:3100,")
    assert process_set_problems(parse_resources(twice), [EXEC_ALLOC], "client1") == [
        f"client1: alloc {EXEC[:8]} task httpd runs processes outside the process group of its pid 3384: "
        "3100 (group 3100), 3101 (group 3100) (a second instance of the task)"
    ]


def test_a_task_that_restarted_while_the_node_was_observed_is_not_a_second_instance() -> None:
    """Seen on a fleet of 100: the allocs were read with pid 3384, the restart probe restarted
    (change_mode restart), the cgroup then held only the new instance: judged on the first read it
    looked like a task running twice. The read after the observation says the task changed."""
    from e2e.harness.checkers import steady_allocs

    restarted = V1.replace("3384:3384,3385:3384,3444:3384,", "3500:3500,3501:3500,")
    res = parse_resources(restarted)
    after = {**EXEC_ALLOC, "tasks": {"httpd": {"state": "running", "container": "3500"}}}
    assert process_set_problems(res, [EXEC_ALLOC], "client1") != []  # the race, judged on one read
    assert process_set_problems(res, steady_allocs([EXEC_ALLOC], [after]), "client1") == []
    # A task that did not change is still judged: a real second instance is still found.
    twice = parse_resources(V1.replace("3444:3384,", "3444:3384,3100:3100,"))
    assert process_set_problems(twice, steady_allocs([EXEC_ALLOC], [EXEC_ALLOC]), "client1") != []
    # An alloc gone or of another status by the second read is left out; one absent from it too.
    stopped = {**EXEC_ALLOC, "status": "complete"}
    assert steady_allocs([EXEC_ALLOC], [stopped]) == [] and steady_allocs([EXEC_ALLOC], []) == []
    # Read while its restart stopped it (dead, no process), running again by the second read.
    mid = {**EXEC_ALLOC, "tasks": {"httpd": {"state": "dead", "container": "3384"}}}
    empty = parse_resources(V1.replace("3384:3384,3385:3384,3444:3384,", ""))
    assert alloc_health_problems("client1", [mid], empty, {}) != []  # judged on one read
    assert alloc_health_problems("client1", steady_allocs([mid], [after]), empty, {}) == []
    # Dead in both reads with the alloc running: still reported.
    assert alloc_health_problems("client1", steady_allocs([mid], [mid]), empty, {}) != []


def test_exec_processes_of_a_dead_alloc_are_orphans_in_a_cgroup_or_in_none() -> None:
    left = f"""## cgroups
{DEAD}.web 4242:4242,
## looseprocs
4300 {DEAD} web
4301 {EXEC} httpd
"""
    problems = orphan_problems(parse_resources(left), [EXEC_ALLOC], "client1")
    assert problems == [
        f"client1: orphan task_process {DEAD}.web (owner {DEAD}, pids 4242)",
        f"client1: orphan loose_process pid 4300 (web) (owner {DEAD}, in no task cgroup)",
    ], "a live alloc's process is no orphan"


def test_a_task_outside_its_allocs_netns_and_an_alloc_without_one_are_reported() -> None:
    """nomad-12216: the task still runs in the netns of a pause container that died."""
    same = dataclasses.replace(NET_OK, netns="4026532420", task_netns={"nginx": "4026532420"})
    assert network_problems(same) == []
    moved = dataclasses.replace(same, netns="4026532999")
    assert network_problems(moved) == [
        f"client1: alloc {LIVE[:8]} task nginx runs in netns 4026532420, not in the alloc's 4026532999"
    ]
    gone = dataclasses.replace(same, netns="")
    assert network_problems(gone) == [
        f"client1: alloc {LIVE[:8]} has no network namespace of its own any more"
    ]
    dead_task = dataclasses.replace(same, task_netns={"nginx": ""})
    assert network_problems(dead_task) == [], "a task with no process is alloc health's to report"


def test_a_running_alloc_without_its_dir_and_an_unreplaced_failed_one_are_reported() -> None:
    state = NODE_STATE.replace(f"## allocdirs\n{LIVE}\n", "## allocdirs\n")
    failed = {
        "id": DEAD,
        "status": "failed",
        "reason": "boom",
        "network": {},
        "tasks": {},
        "followup_eval_id": "e1",
    }
    problems = alloc_health_problems("client1", [ALLOCS[0], failed], parse_resources(state), NAMES)
    assert problems == [
        f"client1: alloc {LIVE[:8]} is running but its alloc dir is missing",
        f"client1: alloc {DEAD[:8]} failed (boom) and was not replaced",
    ]
    replaced = {**failed, "replaced_by": LIVE}
    assert alloc_health_problems("client1", [ALLOCS[0], replaced], parse_resources(NODE_STATE), NAMES) == []
    # its reschedule policy had no attempt left (no follow-up evaluation): owed nothing, as Nomad
    spent = {**failed, "followup_eval_id": ""}
    assert alloc_health_problems("client1", [ALLOCS[0], spent], parse_resources(NODE_STATE), NAMES) == []


ETH0 = "2: eth0    inet 172.26.64.2/24 brd 172.26.64.255 scope global eth0\\       valid_lft forever"
NET_OK = NetworkSeen(
    "client1",
    LIVE,
    "172.26.64.2",
    "client2",
    [PortSeen("http", "http://10.213.0.11:20000/", "200")],
    4242,
    ETH0,
    "http://10.213.0.10:8200",
    "200",
)


def test_a_reachable_alloc_with_the_reported_address_passes() -> None:
    assert network_problems(NET_OK) == []
    assert network_problems(dataclasses.replace(NET_OK, vault_code=None)) == [], "Vault not tried"


def test_an_alloc_with_no_network_after_a_reboot_is_reported() -> None:
    """nomad-24292: the port does not answer, the netns has no address, Vault is unreachable."""
    broken = dataclasses.replace(
        NET_OK, ports=[PortSeen("http", "http://10.213.0.11:20000/", "000")], eth0="", vault_code=""
    )
    assert network_problems(broken) == [
        f"client1: alloc {LIVE[:8]} port http (http://10.213.0.11:20000/) does not answer from client2",
        f"client1: alloc {LIVE[:8]} netns has no IPv4 address on eth0 (agent says 172.26.64.2)",
        f"client1: alloc {LIVE[:8]} cannot reach Vault at http://10.213.0.10:8200 from its netns",
    ]


def test_a_stale_reported_address_and_a_missing_container_are_reported() -> None:
    """nomad-24236: the agent reports the old address."""
    stale = dataclasses.replace(NET_OK, reported_address="172.26.64.9")
    assert network_problems(stale) == [
        f"client1: alloc {LIVE[:8]} netns has 172.26.64.2 but the agent reports 172.26.64.9"
    ]
    gone = dataclasses.replace(NET_OK, pid=None)
    assert network_problems(gone) == [f"client1: alloc {LIVE[:8]} has no running container to look into"]


SHA = "0123456789abcdef" * 4


def test_the_probe_has_loaded_the_cert_on_disk() -> None:
    ok = DeliverySeen("client1", LIVE, 20000, {"cert": {"sha256": SHA}}, SHA)
    assert delivery_problems(ok) == []
    assert ok.loaded_sha256 == SHA


def test_a_cert_on_disk_the_probe_has_not_loaded_is_a_missed_delivery() -> None:
    """nomad-24140/9636: the re-rendered cert never reached the workload."""
    old = "f" * 64
    missed = DeliverySeen("client1", LIVE, 20000, {"cert": {"sha256": old}}, SHA)
    assert delivery_problems(missed) == [
        f"client1: alloc {LIVE[:8]} probe has loaded {old[:16]} but disk has {SHA[:16]}"
    ]
    silent = dataclasses.replace(missed, status=None)
    assert delivery_problems(silent) == [f"client1: alloc {LIVE[:8]} probe does not answer on :20000"]
    unreadable = dataclasses.replace(missed, disk_sha256=None)
    assert delivery_problems(unreadable) == [f"client1: alloc {LIVE[:8]} has no readable cert on disk"]


def test_the_repro_symptoms_match_what_the_checkers_say() -> None:
    """e2e/drivers/repro.py recognises a bug by a regex over the failure: the checkers' words match it."""
    half_alive = NODE_STATE.replace(f"aaa running {LIVE} task", f"aaa exited {LIVE} task")
    no_dir = NODE_STATE.replace(f"## allocdirs\n{LIVE}\n", "## allocdirs\n")
    leaked = NODE_STATE.replace(
        f"{COMMENT.format(DEAD)} -m multiport --dports 20001",
        f"{COMMENT.format(LIVE)} -m multiport --dports 20000",
    )
    said = {
        "nomad-24292": network_problems(dataclasses.replace(NET_OK, eth0="")),
        "nomad-24236": network_problems(dataclasses.replace(NET_OK, reported_address="172.26.64.9")),
        "nomad-23684": alloc_health_problems("c", ALLOCS, parse_resources(half_alive), NAMES),
        "nomad-27933": alloc_health_problems("c", ALLOCS, parse_resources(no_dir), NAMES),
        "nomad-6385": chain_set_problems(parse_resources(leaked), ALLOCS, "c"),
        "nomad-12216-orphans": orphan_problems(parse_resources(NODE_STATE), ALLOCS, "c"),
        "nomad-16338": alloc_health_problems("c", ALLOCS, parse_resources(half_alive), NAMES),
    }
    for bug, problems in said.items():
        assert problems, bug
        assert all(re.search(repro.BUGS[bug].symptom, p) for p in problems), (bug, problems)


# --- the history's check records, the fault classes -----------------------------------------------
def test_a_check_is_recorded_with_its_verdict_and_returns_its_problems(tmp_path: Path) -> None:
    h = history.History(tmp_path, "run", 1, "lab")
    assert h.check("invariants", [], node="client1", counts={"allocs checked": 2}) == []
    assert h.check("deliveries", ["a: 1 for 2", "b: 0 for 1"]) == ["a: 1 for 2", "b: 0 for 1"]
    ok, bad = history.load(h.path)
    assert ok == {
        "t": ok["t"],
        "kind": "check",
        "name": "invariants",
        "test": "",
        "node": "client1",
        "ok": True,
        "data": {"counts": {"allocs checked": 2}},
    }
    assert bad["ok"] is False and bad["detail"] == "a: 1 for 2; b: 0 for 1" and "node" not in bad


def test_a_check_with_no_run_open_records_nothing_and_still_returns_its_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(history, "_current", None)
    assert history.check("x", ["p"]) == ["p"]


def test_every_fault_takes_its_cluster_first_and_requires_it() -> None:
    kinds = [faults.Reboot, faults.AgentRestart, faults.AgentDown, faults.DockerRestart]
    kinds += [faults.ContainerKill, faults.ProcessKill, faults.Partition, faults.VaultOutage]
    for kind in kinds:
        first, second = dataclasses.fields(kind)[:2]
        assert (first.name, second.name) == ("cluster", "node"), kind
        assert first.default is dataclasses.MISSING, f"{kind.__name__}: cluster must be required"
    with pytest.raises(TypeError):
        faults.AgentDown(node=None)  # type: ignore[call-arg,arg-type]


def test_a_kill_is_recorded_as_healing_by_itself_and_a_reboot_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report closes a kill's band at its own end (the agent's recovery is what is tested) and
    calls any other fault without a heal never healed: the datum comes from the fault's class."""
    kinds = [faults.Reboot, faults.AgentRestart, faults.AgentDown, faults.DockerRestart]
    kinds += [faults.ContainerKill, faults.ProcessKill, faults.Partition, faults.VaultOutage]
    assert {k.__name__ for k in kinds if k.heals_itself} == {"ContainerKill", "ProcessKill"}

    class Node:
        name = "client1"

    class Kill(faults.ContainerKill):
        def _inject(self) -> None:
            pass

    class Down(faults.AgentDown):
        def _inject(self) -> None:
            pass

    h = history.History(tmp_path, "run", 1, "lab")
    monkeypatch.setattr(history, "_current", h)
    Kill(None, Node(), alloc_id=LIVE, which="task").inject()  # type: ignore[arg-type]
    Down(None, Node()).inject()  # type: ignore[arg-type]
    kill, down = [r for r in history.load(h.path) if r["kind"] == history.FAULT]
    assert kill["data"] == {"heals": history.HEALS_ITSELF} and "data" not in down


def test_a_container_kill_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="pause, task or both"):
        faults.ContainerKill(None, None, alloc_id=LIVE, which="all")  # type: ignore[arg-type]


# --- the harness's rules ----------------------------------------------------------------------------
E2E = Path(repro.__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_harness_never_imports_a_suite() -> None:
    """The import contract's folders (pyproject.toml), by file: no harness module (report/ included)
    imports a suite, a driver or the conftest; and every suite is under e2e/suites/, where it covers them."""
    outside = {"e2e.suites", "e2e.drivers", "e2e.conftest"}
    for path in sorted((E2E / "harness").rglob("*.py")):
        bad = sorted(m for m in _imports(path) if ".".join(m.split(".")[:2]) in outside)
        assert not bad, f"{path.relative_to(E2E)} imports {bad}"
    strays = [str(p.relative_to(E2E)) for p in E2E.rglob("test_*.py") if p.parent != E2E / "suites"]
    assert not strays, f"suites outside e2e/suites/ escape the contract: {strays}"


@pytest.mark.parametrize("module", ["checkers.py", "accounting.py"])
def test_the_checkers_do_no_io(module: str) -> None:
    imported = _imports(E2E / "harness" / module)
    io = {"e2e.harness.remote", "e2e.harness.cluster", "e2e.harness.probes", "agent.api.client", "lab.ssh"}
    io |= {"e2e.harness.invariants", "e2e.harness.faults", "e2e.harness.history"}
    assert not {m for m in imported if m.split(".")[0] in ("subprocess", "socket", "ssl", "urllib", "os")}
    assert not imported & io, imported & io


def test_e2e_uses_the_agents_labels_and_never_sleeps() -> None:
    for path in sorted(E2E.rglob("*.py")):
        src = path.read_text()
        assert "org.fieldlab." not in src, f"{path}: copy of an agent label (use agent.drivers.base)"
        assert "time.sleep(" not in src, f"{path}: a bare sleep (wait with e2e.harness.waits.wait_until)"


def test_unchanged_problems_names_every_kind_of_change_to_a_host_file() -> None:
    from e2e.harness.checkers import FileSeen, unchanged_problems

    before = [
        FileSeen("/etc/a", "aa" * 32, "600", "0:0", "1"),
        FileSeen("/etc/b", "bb" * 32, "644", "0:0", "1"),
    ]
    assert unchanged_problems("client1", before, list(before)) == []
    after = [
        FileSeen("/etc/a", "cc" * 32, "644", "65534:65534", "2"),  # rewritten, re-moded, chowned, linked
    ]
    problems = unchanged_problems("client1", before, after)
    assert len(problems) == 2 and "client1: /etc/b is gone" in problems
    (changed,) = [p for p in problems if "/etc/a changed" in p]
    for what in ("content", "mode '600' -> '644'", "owner", "links '1' -> '2'"):
        assert what in changed, changed


def test_a_vm_node_console_tail_is_collected_even_when_the_node_does_not_answer(tmp_path: Path) -> None:
    from e2e.harness.collect import CONSOLE_LINES, collect_console

    console = tmp_path / "console.log"
    console.write_text("".join(f"line {i}\n" for i in range(CONSOLE_LINES + 5)) + "Kernel panic\n")
    dest = tmp_path / "out"
    assert collect_console(console, dest) == ["console.log"]
    kept = (dest / "console.log").read_text().splitlines()
    assert len(kept) == CONSOLE_LINES and kept[-1] == "Kernel panic"
    assert collect_console(tmp_path / "absent.log", tmp_path / "none") == []  # a container node
    assert not (tmp_path / "none").exists()


# --- lifecycle tasks: a finished prestart/poststart or a waiting poststop is part of a healthy alloc ---
def _lifecycle_alloc(**tasks: dict[str, Any]) -> dict[str, Any]:
    """EXEC_ALLOC (its main task httpd alive in V1's cgroup) with lifecycle tasks beside it."""
    return {**EXEC_ALLOC, "tasks": {**EXEC_ALLOC["tasks"], **tasks}}  # type: ignore[dict-item]


def _lc(state: str, hook: str, *, sidecar: bool = False, failed: bool = False) -> dict[str, Any]:
    return {
        "state": state,
        "failed": failed,
        "container": None,
        "lifecycle": {"hook": hook, "sidecar": sidecar},
    }


def test_a_finished_prestart_or_poststart_task_and_a_waiting_poststop_task_are_healthy() -> None:
    """Nomad's alloc health (client/allochealth/tracker.go): a non-sidecar prestart task may have
    finished, a poststart one that succeeded is skipped, a poststop one is not judged until the main
    tasks end."""
    res = parse_resources(V1)
    alloc = _lifecycle_alloc(
        init=_lc("dead", "prestart"),
        announce=_lc("dead", "poststart"),
        cleanup=_lc("pending", "poststop"),
    )
    assert alloc_health_problems("client1", [alloc], res, {}) == []


def test_a_failed_lifecycle_task_or_a_dead_sidecar_is_not_healthy() -> None:
    res = parse_resources(V1)
    failed = _lifecycle_alloc(init=_lc("dead", "prestart", failed=True))
    assert alloc_health_problems("client1", [failed], res, {}) == [
        f"client1: alloc {EXEC[:8]} is running but task init is dead (failed) with no live process (none)"
    ]
    sidecar = _lifecycle_alloc(log=_lc("dead", "prestart", sidecar=True))
    assert alloc_health_problems("client1", [sidecar], res, {}) == [
        f"client1: alloc {EXEC[:8]} is running but task log is dead with no live process (none)"
    ]
