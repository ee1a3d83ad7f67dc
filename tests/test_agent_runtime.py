"""The agent on a real dockerd with real CNI plugins (root): the seeds' jobs run and answer on their
mapped port; a killed pause container is recovered without orphans (nomad-12216); an agent restart
reattaches without touching anything; a simulated host reboot is detected and the network rebuilt
(nomad-24292); and each fault flag makes the matching check fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from agent.jobspec import load_jobspec
from lab.waits import wait_until
from tests.agent_lab import (
    AgentLab,
    AgentUnderTest,
    NomadRoutes,
    build_workload_images,
    run_job,
    why_not_ready,
)
from tests.fakes import FakeVault

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

JOBS = Path(__file__).parent / "jobspecs"
TIMEOUT = 60.0
# cni-check-on-restore.hcl runs busybox httpd serving "/": its own binary is a file it can serve.
PROBE = "/bin/busybox"


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> None:
    build_workload_images(tmp_path_factory.mktemp("images"))


@pytest.fixture
def lab(images: None, tmp_path: Path) -> Iterator[AgentLab]:
    lab = AgentLab(tmp_path / "agentlab")
    yield lab
    lab.cleanup()


def _submit(agent: AgentUnderTest, name: str, job_id: str = "", restart: str = "") -> str:
    """Submit a seed's job (`job_id`: renamed; `restart`: a restart block's body for its first group)."""
    text = (JOBS / name).read_text()
    if job_id:
        text = text.replace('job "example"', f'job "{job_id}"', 1)
    if restart:
        text = re.sub(
            r'(\n  group "[^"]+" \{\n)',
            lambda m: f"{m[1]}    restart {{\n      {restart}\n    }}\n",
            text,
            count=1,
        )
        assert "restart {" in text, name
    out = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source=name))
    assert len(out["allocs"]) == 1, out
    agent.settle()  # a task's templates render off the main loop: its setup goes on after them
    return str(out["allocs"][0])


def _view(agent: AgentUnderTest, alloc_id: str) -> dict[str, object]:
    return agent.core.call(lambda: agent.core.allocs.runner(alloc_id).view())


def _host_port(view: dict[str, object]) -> int:
    net = view["network"]
    assert isinstance(net, dict)
    return int(net["ports"][0]["host"])


def _running_containers(lab: AgentLab, alloc_id: str) -> dict[str, str]:
    return {
        c.labels["org.fieldlab.role"] + ":" + c.labels["org.fieldlab.task"]: c.id
        for c in lab.containers(alloc_id)
        if c.status == "running"
    }


def _orphans(lab: AgentLab, live: set[str]) -> list[str]:
    """Resources that no live alloc owns: containers, CNI cache entries, IPAM reservations."""
    found = [
        f"container {c.name}" for c in lab.containers() if c.labels.get("org.fieldlab.alloc") not in live
    ]
    found += [f"cni cache {k.container_id}" for k in lab_cni(lab).cached_ids() if k.container_id not in live]
    return found


def lab_cni(lab: AgentLab):  # type: ignore[no-untyped-def]
    from agent.network.cni import CniNetwork
    from tests.agent_lab import PLUGIN_DIR

    return CniNetwork(lab.conflist, PLUGIN_DIR, lab.data_dir / "cni")


def test_seed_job_runs_and_answers_on_its_mapped_port(lab: AgentLab) -> None:
    agent = lab.start_agent()
    try:
        alloc = _submit(agent, "pause-container-example.hcl")
        view = _view(agent, alloc)
        assert view["status"] == "running", view
        status, body = lab.wait_http(_host_port(view), TIMEOUT, "/index.html")
        assert (status, body) == (200, "<html>hello, world</html>")
        assert sorted(_running_containers(lab, alloc)) == ["pause:", "task:http"]
        assert len(lab.reservations()) == 1
    finally:
        agent.stop()


def test_host_mode_docker_ports_are_published_from_host_port_to_to_as_nomad(lab: AgentLab) -> None:
    """Nomad's docker driver in a host-mode group: docker's bridge, host port -> `to` published."""
    agent = lab.start_agent()
    try:
        text = (JOBS / "pause-container-example.hcl").read_text().replace('mode = "bridge"', 'mode = "host"')
        text = text.replace('port "www" {', 'port "w-w" {').replace('["www"]', '["w-w"]')
        out = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source="host-mode.hcl"))
        alloc = str(out["allocs"][0])
        agent.settle()  # its template renders off the main loop
        view = _view(agent, alloc)
        assert view["status"] == "running", view
        port = _host_port(view)

        def answered() -> tuple[str | None, str]:
            # loopback: docker's userland proxy (this sandbox's netstack hands a locally generated flow
            # that docker DNATs in OUTPUT to its egress proxy; on lab nodes the flow arrives from outside)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=3) as resp:
                    return resp.read().decode(), ""
            except OSError as exc:
                return None, str(exc)

        assert wait_until(answered, timeout=TIMEOUT, what="the published port answers") == (
            "<html>hello, world</html>"
        )
        assert sorted(_running_containers(lab, alloc)) == ["task:http"]  # no pause container in host mode
        (ctr,) = lab.containers(alloc)
        bindings = ctr.attrs["HostConfig"]["PortBindings"]
        assert bindings["8001/tcp"][0]["HostPort"] == str(port), bindings
        env = dict(e.split("=", 1) for e in ctr.attrs["Config"]["Env"])
        assert (env["NOMAD_PORT_w_w"], env["NOMAD_HOST_PORT_w_w"]) == ("8001", str(port))  # a dash cleaned
    finally:
        agent.stop()


def test_a_docker_change_script_past_its_timeout_is_killed_and_reported(lab: AgentLab) -> None:
    """Docker's exec API has no timeout: the driver kills the command (and what it started) itself."""
    from agent.drivers.base import DriverError, TaskHandle
    from agent.drivers.docker import DockerDriver

    agent = lab.start_agent()
    try:
        alloc = _submit(agent, "pause-container-example.hcl")
        task_ctr = _running_containers(lab, alloc)["task:http"]
        driver = DockerDriver()
        handle = TaskHandle("docker", task_ctr, "")
        assert driver.exec(handle, ["sh", "-c", "echo ok; exit 3"], timeout=10) == (3, "ok\n")
        t0 = time.monotonic()
        with pytest.raises(DriverError, match="ran past its 1s timeout: killed"):
            driver.exec(handle, ["sh", "-c", "sleep 300 & sleep 301"], timeout=1)
        assert time.monotonic() - t0 < 8
        ps = driver.client.containers.get(task_ctr).exec_run(["ps", "-o", "args"]).output.decode()
        assert "sleep 30" not in ps, ps  # the command and what it started are gone
    finally:
        agent.stop()


def test_agent_restart_reattaches_without_touching_the_alloc(lab: AgentLab) -> None:
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    before = _running_containers(lab, alloc)
    port = _host_port(_view(agent, alloc))
    lab.wait_http(port, TIMEOUT)
    agent.stop()
    agent = lab.start_agent()
    try:
        view = _view(agent, alloc)
        assert view["status"] == "running"
        assert _running_containers(lab, alloc) == before, "containers were replaced by a plain agent restart"
        tasks = view["tasks"]
        assert isinstance(tasks, dict) and tasks["nginx"]["restarts"] == 0
        assert lab.wait_http(port, TIMEOUT, PROBE)[0] == 200
        events = [e.type for e in agent.core.store.events(alloc)]
        assert "Restored" in events
    finally:
        agent.stop()


def _kill_pause_and_wait_recovered(lab: AgentLab, agent: AgentUnderTest, alloc: str) -> dict[str, str]:
    before = _running_containers(lab, alloc)
    lab.docker.client.containers.get(before["pause:"]).kill()

    def recovered() -> tuple[dict[str, str] | None, str]:
        now = _running_containers(lab, alloc)
        events = [e.type for e in agent.core.store.events(alloc)]
        ok = "Network Recovered" in events and len(now) == 2 and now["task:http"] != before["task:http"]
        return (now if ok else None), f"containers {sorted(now)}, events {events[-4:]}"

    return wait_until(recovered, timeout=TIMEOUT, what=f"alloc {alloc[:8]} to recover its network")


def test_killed_pause_container_is_recovered_without_orphans(lab: AgentLab) -> None:
    agent = lab.start_agent()
    try:
        alloc = _submit(agent, "pause-container-example.hcl")
        port = _host_port(_view(agent, alloc))
        lab.wait_http(port, TIMEOUT)
        _kill_pause_and_wait_recovered(lab, agent, alloc)
        assert lab.wait_http(port, TIMEOUT, "/index.html")[0] == 200
        # Then the task, then the pause again followed by an agent restart (the seed's sequence).
        task = _running_containers(lab, alloc)["task:http"]
        lab.docker.client.containers.get(task).kill()
        wait_until(
            lambda: (
                True if _running_containers(lab, alloc).get("task:http") not in (None, task) else None,
                str(_running_containers(lab, alloc)),
            ),
            timeout=TIMEOUT,
            what="task restarted by policy",
        )
        _kill_pause_and_wait_recovered(lab, agent, alloc)
        agent.stop()
        agent = lab.start_agent()
        view = _view(agent, alloc)
        assert view["status"] == "running", view
        assert len(lab.containers(alloc)) == 2, [c.name for c in lab.containers(alloc)]
        assert lab.wait_http(port, TIMEOUT, "/index.html")[0] == 200
        assert _orphans(lab, {alloc}) == []
        assert len(lab.reservations()) == 1
        messages = " ".join(e.message for e in agent.core.store.events(alloc))
        assert "duplicate allocation" not in messages
        assert "cannot join network of a non running container" not in messages
    finally:
        agent.stop()


def _simulate_reboot(lab: AgentLab, alloc: str, *, keep_ipam: bool = False) -> None:
    """What a host reboot leaves: every process gone, netns and CNI iptables rules gone, IPAM gone
    with its tmpfs (unless `keep_ipam`: a persistent dataDir, where the reservations survive);
    docker then brings back the unless-stopped pause container with a new, empty netns."""
    from agent.network import iptables
    from tests.agent_lab import NETWORK

    for c in lab.containers(alloc):
        c.kill()
    for ch in iptables.list_cni_chains():
        if ch.network == NETWORK:
            iptables.remove_chain(ch.table, ch.name)
    if not keep_ipam:
        for r in lab.reservations():
            (lab.ipam_dir / NETWORK / r).unlink()
    pause = next(c for c in lab.containers(alloc) if c.labels["org.fieldlab.role"] == "pause")
    pause.start()


def test_host_reboot_is_detected_and_the_network_rebuilt(lab: AgentLab) -> None:
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    port = _host_port(_view(agent, alloc))
    lab.wait_http(port, TIMEOUT)
    agent.stop()
    _simulate_reboot(lab, alloc)
    agent = lab.start_agent()
    try:
        view = _view(agent, alloc)
        assert view["status"] == "running", view
        assert lab.wait_http(port, TIMEOUT, PROBE)[0] == 200
        kinds = [e.type for e in agent.core.store.events(alloc)]
        assert "Restore Network" in kinds and "Network Recovered" in kinds
        assert len(lab.reservations()) == 1
    finally:
        agent.stop()


def test_fault_no_network_check_on_restore_reproduces_nomad_24292(lab: AgentLab) -> None:
    """With the flag the agent trusts the running pause container: the alloc says running, yet
    the port is dead."""
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    port = _host_port(_view(agent, alloc))
    lab.wait_http(port, TIMEOUT)
    agent.stop()
    _simulate_reboot(lab, alloc)
    agent = lab.start_agent(faults="no-network-check-on-restore")
    try:
        assert _view(agent, alloc)["status"] == "running"
        with pytest.raises(Exception, match="timed out"):
            lab.wait_http(port, 8.0)
    finally:
        agent.stop()


def _plant_orphans(lab: AgentLab) -> str:
    """What a crashed agent can leave behind for an alloc that no longer exists."""
    ghost = "99999999-0000-4000-8000-00000000dead"
    lab.docker.client.containers.run(
        "fieldlab/busybox:latest",
        ["sleep", "600"],
        name=f"ghost-{ghost}",
        detach=True,
        init=True,
        labels={
            "org.fieldlab.managed": "true",
            "org.fieldlab.alloc": ghost,
            "org.fieldlab.role": "task",
            "org.fieldlab.task": "ghost",
            "org.fieldlab.job": "ghost",
            "org.fieldlab.group": "ghost",
        },
    )
    (lab.data_dir / "alloc" / ghost / "ghost" / "local").mkdir(parents=True)
    res_dir = lab.ipam_dir / "flrun"
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / "10.213.251.200").write_text(f"{ghost}\r\neth0")
    # The firewall plugin's rules for that address (a DEL that never ran): they name no owner.
    for flag in ("-d", "-s"):
        subprocess.run(
            ["iptables", "-w", "-A", "CNI-FORWARD", flag, "10.213.251.200/32", "-j", "ACCEPT"], check=True
        )
    return ghost


def _plant_exec_orphans(ghost: str) -> int:
    """An agent-created netns and an exec task process (in its cgroup) of an alloc that is gone."""
    import subprocess as sp

    from agent.drivers.cgroups import Cgroups
    from agent.network import netns

    netns.create(f"fl-{ghost}", exist_ok=True)  # an earlier layout's name (agent.structs.layout): still swept
    cg = Cgroups(f"{ghost}.web")
    cg.create(32, 100)
    joins = "; ".join(f"echo $$ > {p}" for p in cg.procs_files())
    proc = sp.Popen(["/bin/sh", "-c", f"{joins}; exec sleep 600"], start_new_session=True)
    wait_until(
        lambda: (True if proc.pid in cg.pids() else None, str(cg.pids())), timeout=10, what="orphan in cgroup"
    )
    return proc.pid


def test_sweeper_removes_planted_orphans_and_nothing_live(lab: AgentLab) -> None:
    agent = lab.start_agent(sweep_grace=0.0)
    try:
        alloc = _submit(agent, "cni-check-on-restore.hcl")
        port = _host_port(_view(agent, alloc))
        before = _running_containers(lab, alloc)
        ghost = _plant_orphans(lab)
        orphan_pid = _plant_exec_orphans(ghost)
        exec_alloc = _submit(agent, "exec-bridge.hcl")
        exec_pid = int(agent.core.store.get("handle", f"{exec_alloc}/httpd")["id"])  # type: ignore[index]
        report = agent.core.call(agent.core.sweep)
        assert report is not None and not report.errors, report
        assert dict(report.removed) == {
            "container": 1,
            "ipam": 1,
            "alloc_dir": 1,
            "netns": 1,
            "task_process": 1,
            "forward_rule": 1,
        }, report.planned
        from agent.network import iptables

        assert "10.213.251.200" not in iptables.forward_rule_ips()
        from agent.drivers.hostproc import proc_start_time
        from agent.network import netns

        assert proc_start_time(orphan_pid) is None, "the orphaned exec process survived the sweep"
        assert not netns.exists(f"fl-{ghost}")
        assert proc_start_time(exec_pid) is not None, "the live exec task was swept"
        assert netns.exists(exec_alloc)
        assert [c.labels["org.fieldlab.alloc"] for c in lab.containers()] == [alloc, alloc]
        assert not (lab.data_dir / "alloc" / ghost).exists()
        assert _running_containers(lab, alloc) == before
        assert lab.wait_http(port, TIMEOUT, PROBE)[0] == 200
    finally:
        agent.stop()


def test_fault_sweep_untracked_pause_reproduces_nomad_16338(lab: AgentLab) -> None:
    agent = lab.start_agent(faults="sweep-untracked-pause", sweep_grace=0.0)
    try:
        alloc = _submit(agent, "cni-check-on-restore.hcl")
        agent.core.call(agent.core.sweep)
        roles = sorted(c.labels["org.fieldlab.role"] for c in lab.containers(alloc))
        assert roles == ["task"], f"the live alloc's pause container was expected to be swept, have {roles}"
    finally:
        agent.stop()


def test_fault_no_orphan_sweep_leaves_orphans(lab: AgentLab) -> None:
    agent = lab.start_agent(faults="no-orphan-sweep", sweep_grace=0.0)
    try:
        ghost = _plant_orphans(lab)
        assert agent.core.call(agent.core.sweep) is None
        assert [c.labels["org.fieldlab.alloc"] for c in lab.containers()] == [ghost]
    finally:
        agent.stop()


@pytest.mark.parametrize("fault", ["", "leak-portmap-chains"])
def test_stopping_a_job_leaves_no_chains_unless_the_leak_fault_is_on(lab: AgentLab, fault: str) -> None:
    agent = lab.start_agent(faults=fault)
    try:
        alloc = _submit(agent, "cni-check-on-restore.hcl")
        assert lab.chains(), "a running bridge alloc has CNI chains"
        agent.stop_job("example")
        assert lab.containers(alloc) == []
        assert lab.reservations() == []
        if fault:
            assert lab.chains(), "the leak fault should leave the alloc's CNI chains behind (nomad-6385)"
        else:
            assert lab.chains() == []
    finally:
        agent.stop()


def test_fault_ipam_stale_after_reboot_reproduces_duplicate_allocation(lab: AgentLab) -> None:
    """With IPAM state that survives the reboot (a persistent dataDir) and no reconcile, the alloc's
    own stale reservation makes ADD fail with host-local's "duplicate allocation" (nomad-11272)."""
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    agent.stop()
    _simulate_reboot(lab, alloc, keep_ipam=True)
    assert lab.reservations(), "the reservation survived the 'reboot' (persistent dataDir)"
    agent = lab.start_agent(faults="ipam-stale-after-reboot")
    try:
        messages = " ".join(e.message for e in agent.core.store.events(alloc))
        assert "duplicate allocation" in messages
    finally:
        agent.stop()


def test_ipam_reservation_that_survived_a_reboot_does_not_block_restore(lab: AgentLab) -> None:
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    port = _host_port(_view(agent, alloc))
    agent.stop()
    _simulate_reboot(lab, alloc, keep_ipam=True)
    agent = lab.start_agent()
    try:
        assert _view(agent, alloc)["status"] == "running"
        assert lab.wait_http(port, TIMEOUT, PROBE)[0] == 200
        messages = " ".join(e.message for e in agent.core.store.events(alloc))
        assert "duplicate allocation" not in messages
        assert len(lab.reservations()) == 1
    finally:
        agent.stop()


def _recovered_cleanly(
    lab: AgentLab, agent: AgentUnderTest, alloc: str, port: int
) -> tuple[bool | None, str]:
    """The check that guards nomad-12216: the same alloc runs, its port answers, no dead-end event."""
    view = _view(agent, alloc)
    events = agent.core.store.events(alloc)
    dead_end = [e.message for e in events if "cannot join network" in e.message]
    status, _ = lab.http_get(port, PROBE)
    ok = view["status"] == "running" and status == 200 and not dead_end
    return (True if ok else None), f"status={view['status']} http={status} dead_end={dead_end[:1]}"


def test_fault_reuse_dead_pause_reproduces_nomad_12216(lab: AgentLab) -> None:
    """With the flag, tasks are restarted into whatever the pause container now is: either docker
    has not brought it back yet ("cannot join network of a non running container") or it has, with a
    new, empty netns (the port is dead). Either way the recovery check must fail."""
    agent = lab.start_agent(faults="reuse-dead-pause")
    try:
        alloc = _submit(agent, "cni-check-on-restore.hcl")
        port = _host_port(_view(agent, alloc))
        assert lab.wait_http(port, TIMEOUT, PROBE)[0] == 200
        pause = _running_containers(lab, alloc)["pause:"]
        lab.docker.client.containers.get(pause).kill()
        wait_until(
            lambda: (
                True
                if any(
                    e.type in ("Restarting", "Driver Failure", "Started")
                    for e in agent.core.store.events(alloc)[-3:]
                )
                else None,
                "",
            ),
            timeout=TIMEOUT,
            what="the agent to react to the pause container's death",
        )
        with pytest.raises(Exception, match="timed out"):
            wait_until(
                lambda: _recovered_cleanly(lab, agent, alloc, port),
                timeout=10.0,
                what="clean recovery (must not happen with the fault)",
            )
    finally:
        agent.stop()


def test_without_the_fault_the_same_pause_kill_recovers_cleanly(lab: AgentLab) -> None:
    agent = lab.start_agent()
    try:
        alloc = _submit(agent, "cni-check-on-restore.hcl")
        port = _host_port(_view(agent, alloc))
        assert lab.wait_http(port, TIMEOUT, PROBE)[0] == 200
        lab.docker.client.containers.get(_running_containers(lab, alloc)["pause:"]).kill()
        wait_until(
            lambda: (
                _recovered_cleanly(lab, agent, alloc, port)
                if any(e.type == "Network Recovered" for e in agent.core.store.events(alloc))
                else (None, "not yet")
            ),
            timeout=TIMEOUT,
            what="clean recovery after a pause kill",
        )
    finally:
        agent.stop()


def test_the_http_api_runs_stops_and_refuses_bad_jobs(lab: AgentLab, tmp_path: Path) -> None:
    """The same flow through Nomad's API over mTLS and the CLI's client, as an operator would use it."""
    import socket

    from agent.api.client import ApiClient, ApiError
    from agent.api.server import ApiServer
    from agent.command.config import Config, TLSConfig
    from tests.pki import TestCA

    ca = TestCA(tmp_path)
    srv, op = (
        ca.issue("client1.agent.fieldlab", server=True),
        ca.issue("controller.operator.fieldlab", server=False),
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cfg = Config(
        node_name="t", bind_address="127.0.0.1", port=port, tls=TLSConfig(srv.cert, srv.key, ca.ca_file)
    )
    agent = lab.start_agent()
    server = ApiServer(cfg, {}, NomadRoutes(agent.core).table)
    server.start()
    api = ApiClient(f"https://127.0.0.1:{port}", str(ca.ca_file), str(op.cert), str(op.key))
    text = (JOBS / "cni-check-on-restore.hcl").read_text()
    try:
        (alloc,) = run_job(api.request, text)
        detail = api.request("GET", f"/v1/allocation/{alloc[:8]}")
        assert detail["ClientStatus"] == "running" and detail["TaskStates"]["nginx"]["State"] == "running"
        assert [a["ID"] for a in api.request("GET", "/v1/allocations")] == [alloc]
        # The same job again while it runs: Nomad's no-op (an evaluation), never a second alloc.
        run_job(api.request, text)
        assert [a["ID"] for a in api.request("GET", "/v1/allocations")] == [alloc]
        assert api.request("GET", "/v1/job/example")["Version"] == 0
        bad = 'job "x" {\n  group "g" {\n    task "t" {\n      driver = "rkt"\n    }\n  }\n}\n'
        with pytest.raises(ApiError) as refused:
            api.request("POST", "/v1/jobs/parse", {"JobHCL": bad})
        assert refused.value.status == 400 and "job.x.group.g.task.t.driver" in str(refused.value.body)
        # Registered as Job JSON (what a Nomad client sends), a driver the client does not run is
        # refused all the same, naming where.
        good = bad.replace('"rkt"', '"exec"\n      config { command = "/bin/true" }')
        job = api.request("POST", "/v1/jobs/parse", {"JobHCL": good})
        job["TaskGroups"][0]["Tasks"][0]["Driver"] = "rkt"
        with pytest.raises(ApiError) as refused:
            api.request("PUT", "/v1/jobs", {"Job": job})
        assert refused.value.status == 400 and "job.x.group.g.task.t.driver" in str(refused.value.body)
        with pytest.raises(ApiError) as missing:
            api.request("GET", "/v1/job/x")
        assert missing.value.status == 404
        api.request("POST", f"/v1/client/allocation/{alloc}/signal", {"Task": "nginx", "Signal": "SIGHUP"})
        events = api.request("GET", f"/v1/allocation/{alloc}")["TaskStates"]["nginx"]["Events"]
        assert "Signaling" in [e["Type"] for e in events]
        assert api.request("DELETE", "/v1/job/example")["EvalID"]  # answered once the stop is decided
        assert api.request("GET", f"/v1/allocation/{alloc}")["DesiredStatus"] == "stop"

        def complete() -> tuple[bool | None, str]:
            status = api.request("GET", f"/v1/allocation/{alloc}")["ClientStatus"]
            return (True if status == "complete" else None), status

        wait_until(complete, timeout=TIMEOUT, what="the stopped job's alloc to complete")
        wait_until(  # the containers are removed off the agent's loop: perhaps after the answer
            lambda: (True if lab.containers(alloc) == [] else None, str(lab.containers(alloc))),
            timeout=TIMEOUT,
            what="the stopped job's containers to be gone",
        )
    finally:
        server.stop(5)
        agent.stop()


VARIABLE_JOB = """
variable "page" {
  type = string
}
variable "replicas" {
  type    = number
  default = 3
}
job "vars" {
  group "g" {
    count = var.replicas - 2
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      template {
        data        = "${upper(var.page)} ${file("motd.txt")}"
        destination = "local/page"
      }
    }
  }
}
"""


def test_variables_and_cli_read_files_sent_over_the_api_survive_a_restart(
    lab: AgentLab, tmp_path: Path
) -> None:
    """An operator's `job run -var page=hi job.hcl` (variables and file() evaluated on the CLI side,
    as Nomad's CLI does): the agent runs the Job JSON it was sent, keeps the Submission (the source
    as written, its -var flags) with the job, and a restarted agent has the job the same."""
    from agent.nomadapi.jobjson import parsed_job_json

    (tmp_path / "motd.txt").write_text("from the cli")
    spec = tmp_path / "job.hcl"
    spec.write_text(VARIABLE_JOB)
    parsed = load_jobspec(spec, {"page": "hi"})
    submission = {"Source": VARIABLE_JOB, "Format": "hcl2", "VariableFlags": {"page": "hi"}}
    agent = lab.start_agent()
    try:
        api = NomadRoutes(agent.core)
        status, out = api.call(
            "PUT", "/v1/jobs", {"Job": parsed_job_json(parsed.job), "Submission": submission}
        )
        assert status == 200, out
        (alloc,) = [a["ID"] for a in api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")]
        agent.settle()  # its template renders off the main loop
        page = lab.data_dir / "alloc" / alloc / "t" / "local" / "page"
        assert page.read_text() == "HI from the cli"
        # Nomad's parse takes a variables file's text; a variable without a value is named.
        status, raw = api.call("POST", "/v1/jobs/parse", {"JobHCL": VARIABLE_JOB.replace('"vars"', '"v2"')})
        assert status == 400 and "no value given" in raw, raw
        status, raw = api.call("POST", "/v1/jobs/parse", {"JobHCL": VARIABLE_JOB, "Variables": 'page = "hi"'})
        assert status == 400 and "file functions are not available" in raw, raw  # no directory here
    finally:
        agent.stop()
    agent = lab.start_agent()
    try:
        job = agent.core.call(lambda: agent.core.jobs["vars"])
        assert job.groups[0].count == 1
        assert job.groups[0].tasks[0].templates[0].data == "HI from the cli"
        assert _view(agent, alloc)["status"] == "running"
        kept = NomadRoutes(agent.core).request("GET", "/v1/job/vars/submission?version=0")
        assert kept["Source"] == VARIABLE_JOB and kept["VariableFlags"] == {"page": "hi"}, kept
    finally:
        agent.stop()


def test_an_unreadable_alloc_record_is_replaced_while_the_others_restore(lab: AgentLab) -> None:
    import sqlite3

    agent = lab.start_agent(sweep_grace=0.0)
    keep = _submit(agent, "cni-check-on-restore.hcl")
    broken = _submit(agent, "pause-container-example.hcl", job_id="other")
    kept_containers = _running_containers(lab, keep)
    agent.stop()
    db = sqlite3.connect(lab.data_dir / "state" / "state.db")
    db.execute("UPDATE records SET value = ? WHERE kind = 'alloc' AND key = ?", (b"{not json", broken))
    db.commit()
    db.close()
    agent = lab.start_agent(sweep_grace=0.0)
    try:
        assert _view(agent, keep)["status"] == "running"
        assert _running_containers(lab, keep) == kept_containers, "a healthy alloc was disturbed"
        replacements = [r for r in agent.core.runners.values() if r.rec.replaces == broken]
        assert len(replacements) == 1 and replacements[0].alloc_running()
        assert lab.containers(broken) == [], "the unreadable alloc's containers were not swept"
        assert "Restore Failed" in [e.type for e in agent.core.store.events(broken)]
    finally:
        agent.stop()


def _exec_pid(agent: AgentUnderTest, alloc: str) -> int:
    rec = agent.core.store.get("handle", f"{alloc}/httpd")
    assert rec is not None
    return int(rec["id"])


def test_exec_task_runs_in_the_alloc_netns_with_limits_and_survives_agent_restart(lab: AgentLab) -> None:
    from agent.network import netns

    agent = lab.start_agent()
    alloc = _submit(agent, "exec-bridge.hcl")
    view = _view(agent, alloc)
    assert view["status"] == "running", view
    port = _host_port(view)
    assert lab.wait_http(port, TIMEOUT, "/index.html") == (200, "exec says hello")
    pid = _exec_pid(agent, alloc)
    assert netns.pid_netns_id(pid) == netns.netns_id(netns.netns_path(alloc))
    secrets = lab.data_dir / "alloc" / alloc / "httpd" / "secrets"
    assert os.path.ismount(secrets) and secrets.stat().st_mode & 0o777 == 0o700, (
        "secrets/ must be a 0700 tmpfs"
    )
    cg = Path(f"/sys/fs/cgroup/memory/nomad.slice/{alloc}.httpd")
    if cg.exists():  # cgroup v1 (these machines); v2 hosts put it under /sys/fs/cgroup/nomad.slice
        assert int((cg / "memory.limit_in_bytes").read_text()) == 64 * 1024 * 1024
        assert str(pid) in (cg / "cgroup.procs").read_text().split()
    agent.stop()
    agent = lab.start_agent()
    try:
        assert _exec_pid(agent, alloc) == pid, "the exec task was restarted by a plain agent restart"
        assert _view(agent, alloc)["tasks"]["httpd"]["restarts"] == 0  # type: ignore[index]
        assert lab.wait_http(port, TIMEOUT, "/index.html")[0] == 200
        # Killed behind the agent's back: the pidfd watch sees it and the restart policy restarts it.
        import signal

        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: (
                True if agent.core.store.get("handle", f"{alloc}/httpd")["id"] != str(pid) else None,
                "same pid",
            ),
            timeout=TIMEOUT,
            what="exec task restarted after SIGKILL",
        )
        assert lab.wait_http(port, TIMEOUT, "/index.html")[0] == 200
        agent.stop_job("exec-web")
        assert not netns.exists(alloc) and lab.reservations() == []
    finally:
        agent.stop()


def test_exec_alloc_is_rebuilt_after_a_simulated_reboot(lab: AgentLab) -> None:
    import signal

    from agent.network import netns

    agent = lab.start_agent()
    alloc = _submit(agent, "exec-bridge.hcl")
    port = _host_port(_view(agent, alloc))
    pid = _exec_pid(agent, alloc)
    agent.stop()
    os.killpg(pid, signal.SIGKILL)
    netns.delete(alloc)
    secrets = lab.data_dir / "alloc" / alloc / "httpd" / "secrets"
    subprocess.run(["umount", str(secrets)], check=True)  # a reboot takes the tmpfs away
    for r in lab.reservations():
        (lab.ipam_dir / "flrun" / r).unlink()
    agent = lab.start_agent()
    try:
        assert _view(agent, alloc)["status"] == "running"
        assert lab.wait_http(port, TIMEOUT, "/index.html")[0] == 200
        assert "Network Recovered" in [e.type for e in agent.core.store.events(alloc)]
        assert os.path.ismount(secrets), "secrets/ tmpfs was not mounted again after the reboot"
    finally:
        agent.stop()


def test_cni_check_is_gated_off_for_plugins_that_fail_it_spuriously(lab: AgentLab) -> None:
    """Debian's 1.1.1 plugins fail portmap CHECK on IPv4-only hosts: forcing CHECK on would make a
    plain agent restart rebuild a healthy alloc's network, which the version gate prevents."""
    from agent.network.plugins import check_supported, plugin_version
    from tests.agent_lab import PLUGIN_DIR

    assert not check_supported(plugin_version(PLUGIN_DIR)), (
        "plugins here are >= 1.3.0: this test needs old ones"
    )
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    before = _running_containers(lab, alloc)
    agent.stop()
    agent = lab.start_agent()  # gated: CHECK off
    assert _running_containers(lab, alloc) == before
    agent.stop()
    agent = lab.start_agent(cni_check=True)  # what skipping the gate does on these plugins
    try:
        events = [(e.type, e.message) for e in agent.core.store.events(alloc)]
        assert any(t == "Restore Network" and "CNI CHECK" in m for t, m in events), events[-3:]
        assert _running_containers(lab, alloc)["task:nginx"] != before["task:nginx"]
    finally:
        agent.stop()


# -- restore: missing alloc dir (nomad-27933) ------------------------------------------------------------
def _delete_alloc_dir(lab: AgentLab, alloc: str) -> Path:
    """What a wiped alloc_dir disk leaves: the directory is gone (its secrets/ tmpfs unmounted first)."""
    import shutil

    from agent.allocdir.fsutil import unmount_below

    alloc_dir = lab.data_dir / "alloc" / alloc
    unmount_below(alloc_dir)
    shutil.rmtree(alloc_dir)
    return alloc_dir


@pytest.mark.parametrize("fault", ["", "restore-missing-alloc-dir"])
def test_alloc_with_a_missing_dir_is_replaced_unless_the_fault_restores_it(lab: AgentLab, fault: str) -> None:
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    before = _running_containers(lab, alloc)
    agent.stop()
    alloc_dir = _delete_alloc_dir(lab, alloc)
    agent = lab.start_agent(faults=fault)
    try:
        view = _view(agent, alloc)
        events = [e.type for e in agent.core.store.events(alloc)]
        if fault:
            # nomad-27933: the alloc is restored as if its directory were there.
            assert view["status"] == "running", view
            assert not alloc_dir.exists()
            assert _running_containers(lab, alloc) == before
            assert "Restore Failed" not in events and "Replaced" not in events
            assert [r for r in agent.core.runners.values() if r.rec.replaces == alloc] == []
            return
        assert view["status"] == "failed", view
        assert "Restore Failed" in events

        def replaced() -> tuple[str | None, str]:
            new = [r for r in agent.core.runners.values() if r.rec.replaces == alloc]
            ok = len(new) == 1 and new[0].alloc_running()
            return (new[0].id if ok else None), f"replacements {[r.rec.status.value for r in new]}"

        new = wait_until(replaced, timeout=TIMEOUT, what=f"a replacement for alloc {alloc[:8]}")
        assert (lab.data_dir / "alloc" / new).is_dir()
        assert lab.containers(alloc) == [], "the replaced alloc's containers are left behind"
    finally:
        agent.stop()


# -- restore: a task that vanished while the agent was down (nomad-23684/17079) ---------------------------
def _keeper_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _remove_task_behind_the_agents_back(
    lab: AgentLab, agent: AgentUnderTest, alloc: str, driver: str, *, keeper_too: bool = True
) -> str:
    """`docker rm -f` of the task container, or SIGKILL of the exec task's process group, while the
    agent is down; `keeper_too`: its keeper (the record of its exit) is killed first, as a reboot
    loses it. Returns the vanished task's container id or pid."""
    import signal

    task = "nginx" if driver == "docker" else "httpd"
    handle = agent.core.store.get("handle", f"{alloc}/{task}")
    assert handle is not None
    agent.stop()
    if driver == "docker":
        lab.docker.client.containers.get(handle["id"]).remove(force=True)
    else:
        pid = int(handle["id"])
        if keeper_too:
            keeper = _keeper_of(pid)
            assert "keeper.py" in Path(f"/proc/{keeper}/cmdline").read_text(), "P's parent is its keeper"
            os.kill(keeper, signal.SIGKILL)
        os.killpg(pid, signal.SIGKILL)
    return str(handle["id"])


def _task_is_live(lab: AgentLab, driver: str, task_id: str) -> bool:
    if driver == "exec":
        from agent.drivers.hostproc import proc_start_time

        return proc_start_time(int(task_id)) is not None
    return any(c.id == task_id and c.status == "running" for c in lab.containers())


@pytest.mark.parametrize("driver", ["docker", "exec"])
@pytest.mark.parametrize("fault", ["", "half-alive-restore"])
def test_task_that_vanished_while_the_agent_was_down_is_restarted_unless_the_fault_trusts_the_record(
    lab: AgentLab, fault: str, driver: str
) -> None:
    """A removed container is started again at once, uncounted (docker would have kept the exit
    status of one that exited). An exec task found gone with its keeper (no record of its exit, as
    after a reboot) died while the agent was down with an unknown exit code, and the restart policy
    counts it as a failure (Terminated with the code unknown, restarted after the policy's delay)."""
    agent = lab.start_agent()
    exec_ = driver == "exec"
    alloc = _submit(
        agent,
        "exec-bridge.hcl" if exec_ else "cni-check-on-restore.hcl",
        restart='delay = "1s"' if exec_ else "",
    )
    task = "httpd" if exec_ else "nginx"
    port = _host_port(_view(agent, alloc))
    seen_before = len(agent.core.store.events(alloc))
    gone = _remove_task_behind_the_agents_back(lab, agent, alloc, driver)
    agent = lab.start_agent(faults=fault)
    try:
        view = _view(agent, alloc)
        tasks = view["tasks"]
        assert isinstance(tasks, dict)
        new_events = [(e.type, e.message) for e in agent.core.store.events(alloc)[seen_before:]]
        assert view["status"] == "running", view
        if fault:
            # nomad-23684/17079: reported running, recorded handle points at nothing, no event says why.
            assert tasks[task]["state"] == "running", tasks
            assert tasks[task]["container"] == gone
            assert not _task_is_live(lab, driver, gone)
            assert [t for t, _ in new_events] == ["Restored"], new_events
            with pytest.raises(Exception, match="timed out"):
                lab.wait_http(port, 5.0)
            return
        assert ("Restored", "task(s) exited while the agent was down") in new_events
        if exec_:
            assert ("Terminated", "Exit Code: unknown (the task died while the agent was down)") in new_events
            assert "Task restarting in 1.0s (restart 1 of 2 in 1800s)" in [
                m for t, m in new_events if t == "Restarting"
            ]
            assert (
                len(agent.core.call(lambda: agent.core.allocs.runner(alloc).state.task(task)).restart_times)
                == 1
            )
            wait_until(
                lambda: (True if _view(agent, alloc)["tasks"][task]["state"] == "running" else None, "dead"),  # type: ignore[index]
                timeout=TIMEOUT,
                what="the exec task restarted by its restart policy",
            )
            tasks = _view(agent, alloc)["tasks"]
            assert isinstance(tasks, dict)
        assert tasks[task]["state"] == "running", tasks
        assert tasks[task]["container"] != gone and tasks[task]["restarts"] == 1, tasks
        assert _task_is_live(lab, driver, str(tasks[task]["container"]))
        causes = [e.details.get("cause") for e in agent.core.store.events(alloc, task) if e.type == "Started"]
        assert causes == ["first start", "restart policy" if exec_ else "restore"], causes
        assert lab.wait_http(port, TIMEOUT, "/index.html" if exec_ else PROBE)[0] == 200
    finally:
        agent.stop()


def test_an_exec_task_dead_while_down_with_no_restarts_allowed_fails_its_alloc(lab: AgentLab) -> None:
    """restart { attempts = 0, mode = "fail" }: the exec task that died while the agent was down
    (its exit code unknown) ends dead and failed, its alloc failed (and replaced), never started again
    in it."""
    agent = lab.start_agent()
    alloc = _submit(agent, "exec-bridge.hcl", restart='attempts = 0\n      mode = "fail"')
    gone = _remove_task_behind_the_agents_back(lab, agent, alloc, "exec")
    agent = lab.start_agent()
    try:
        view = _view(agent, alloc)
        tasks = view["tasks"]
        assert isinstance(tasks, dict)
        assert view["status"] == "failed", view
        assert (tasks["httpd"]["state"], tasks["httpd"]["failed"], tasks["httpd"]["restarts"]) == (
            "dead",
            True,
            0,
        )
        assert "exit code unknown (the task died while the agent was down)" in str(view["reason"])
        events = [(e.type, e.message) for e in agent.core.store.events(alloc, "httpd")]
        assert ("Terminated", "Exit Code: unknown (the task died while the agent was down)") in events
        assert [t for t, _ in events].count("Started") == 1, events
        assert not _task_is_live(lab, "exec", gone)
        replacement = str(view["replaced_by"]) or wait_until(
            lambda: (str(_view(agent, alloc)["replaced_by"]) or None, "no replacement yet"),
            timeout=TIMEOUT,
            what="the failed alloc replaced",
        )
        assert _view(agent, replacement)["replaces"] == alloc
    finally:
        agent.stop()


def test_an_exec_task_killed_while_the_agent_was_down_is_judged_by_the_code_its_keeper_kept(
    lab: AgentLab,
) -> None:
    """Nomad's executor: the task's parent outlives the agent, so the exit of a task that died
    while the agent was down is known (SIGKILL: 137) and the policy judges it by that code."""
    agent = lab.start_agent()
    alloc = _submit(agent, "exec-bridge.hcl", restart='attempts = 0\n      mode = "fail"')
    _remove_task_behind_the_agents_back(lab, agent, alloc, "exec", keeper_too=False)
    agent = lab.start_agent()
    try:
        view = _view(agent, alloc)
        assert view["status"] == "failed" and "failed with exit code 137" in str(view["reason"]), view
        events = [(e.type, e.message) for e in agent.core.store.events(alloc, "httpd")]
        assert ("Terminated", "Exit Code: 137") in events, events
    finally:
        agent.stop()


BATCH_EXEC = """
job "exec-once" {
  type = "batch"
  group "g" {
    task "once" {
      driver = "exec"
      config {
        command = "/bin/busybox"
        args    = ["sh", "-c", "sleep 1"]
      }
    }
  }
}
"""


@pytest.mark.parametrize("faults", ["", "rerun-completed-on-restore"])
def test_a_batch_exec_task_that_exits_0_completes_and_stays_readable_after_a_restart(
    lab: AgentLab, faults: str
) -> None:
    """Nomad's batch jobs: a task's exit 0 is its completion (no restart, no failure, no
    replacement); the alloc is complete, and still read by the API after an agent restart, never
    run again. With `rerun-completed-on-restore` (nomad-5883) the restarted agent runs it again:
    the check below fails, as it must."""
    agent = lab.start_agent(faults)
    out = agent.core.call(lambda: agent.core.job_registry.submit(BATCH_EXEC, "hcl"))
    (alloc,) = out["allocs"]
    try:
        wait_until(
            lambda: (True if _view(agent, alloc)["status"] == "complete" else None, str(_view(agent, alloc))),
            timeout=TIMEOUT,
            what="the batch alloc complete",
        )
        time.sleep(2)  # longer than the task's run: a restart would have started it again by now
        tasks = _view(agent, alloc)["tasks"]
        assert isinstance(tasks, dict)
        assert (tasks["once"]["state"], tasks["once"]["restarts"], tasks["once"]["failed"]) == (
            "dead",
            0,
            False,
        )
        events = [(e.type, e.message) for e in agent.core.store.events(alloc, "once")]
        assert ("Terminated", "Exit Code: 0") in events and [t for t, _ in events].count("Started") == 1
        assert not {"Restarting", "Not Restarting"} & {t for t, _ in events}, events
        assert agent.core.call(lambda: list(agent.core.runners)) == [alloc], "nothing replaced it"
        agent.stop()
        agent = lab.start_agent(faults)
        if faults:  # nomad-5883: the complete alloc was taken back as running, its task started again

            def started() -> tuple[bool | None, str]:
                types = [e.type for e in agent.core.store.events(alloc, "once")]
                return (True if types.count("Started") == 2 else None), str(types)

            wait_until(started, timeout=TIMEOUT, what="the completed task started again (the bug)")
            return
        status, read = NomadRoutes(agent.core).call("GET", f"/v1/allocation/{alloc}")
        assert status == 200 and read["ClientStatus"] == "complete", read
        once = read["TaskStates"]["once"]
        assert once["State"] == "dead" and once["Failed"] is False
        assert "Terminated" in [e["Type"] for e in once["Events"]]
    finally:
        agent.stop()


def test_a_batch_exec_task_that_completes_while_the_agent_is_down_is_complete_not_run_again(
    lab: AgentLab,
) -> None:
    """hashicorp/nomad#5883's symptom, not reproduced: the exit 0 of a batch task that ended while
    the agent was down (its keeper kept it) completes the alloc at restore; nothing runs it again."""
    from agent.drivers.hostproc import proc_start_time

    agent = lab.start_agent()
    (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(BATCH_EXEC, "hcl"))["allocs"]
    handle = agent.core.store.get("handle", f"{alloc}/once")
    assert handle is not None
    agent.stop()  # the task sleeps 1 s: it ends while no agent runs
    wait_until(
        lambda: (True if proc_start_time(int(handle["id"])) is None else None, "still running"),
        timeout=TIMEOUT,
        what="the batch task ended while the agent is down",
    )
    agent = lab.start_agent()
    try:
        view = _view(agent, alloc)
        assert view["status"] == "complete", view
        events = [(e.type, e.message) for e in agent.core.store.events(alloc, "once")]
        assert ("Terminated", "Exit Code: 0") in events, events
        assert [t for t, _ in events].count("Started") == 1, events
    finally:
        agent.stop()


# -- restore: change_mode script before the driver handle (nomad-15851/24051) -----------------------------
class _NewSerialEachStart:
    """A stand-in for Vault's PKI: each fetch issues a new serial (the agent fetches once per render
    pass, so once per agent start here: the hour-long TTL schedules no re-render within the test)."""

    def __init__(self) -> None:
        self.issued = 0

    def list_keys(self, path: str) -> list[str]:

        return []

    def fetch(self, path: str, params: dict[str, object]) -> tuple[dict[str, object], float]:
        self.issued += 1
        return {"serial_number": f"{self.issued:04x}"}, 3600.0


@pytest.mark.parametrize("fault", ["", "script-change-before-handle"])
def test_change_script_runs_once_inside_a_restored_task_unless_delivered_before_the_handle(
    lab: AgentLab, fault: str
) -> None:
    vault = FakeVault(_NewSerialEachStart())  # the task's token (vault block) reads the stand-in
    agent = lab.start_agent(vault=vault)
    alloc = _submit(agent, "template-script-restore.hcl")
    assert _view(agent, alloc)["status"] == "running"
    runs = lab.data_dir / "alloc" / alloc / "web" / "local" / "script-runs"
    serial = lab.data_dir / "alloc" / alloc / "web" / "secrets" / "serial"
    first = serial.read_text()
    agent.stop()
    agent = lab.start_agent(faults=fault, vault=vault)
    try:
        assert serial.read_text() != first, "the restart re-issued the secret and re-rendered it"
        if not fault:
            wait_until(
                lambda: (True if runs.exists() else None, "no run yet"),
                timeout=TIMEOUT,
                what="the change script to run after restore",
            )
        time.sleep(3.0)  # a late or repeated delivery would land well within this
        events = [(e.type, e.message) for e in agent.core.store.events(alloc)]
        scripts = [(t, m) for t, m in events if t.startswith("Template Script")]
        if fault:
            assert not runs.exists(), "the script ran inside the task despite the fault"
            assert len(scripts) == 1 and scripts[0][0] == "Template Script Failed", scripts
            assert "no driver handle" in scripts[0][1]
            return
        assert runs.read_text() == "ran\n", "the change script must run exactly once after restore"
        assert [t for t, _ in scripts] == ["Template Script"], scripts
    finally:
        agent.stop()


# -- restore: network status after the network is recreated (nomad-24236/16893) --------------------------
def _netns_ipv4(pid: int, ifname: str = "eth0") -> list[str]:
    """The IPv4 addresses on `ifname` inside the network namespace of `pid`, as `ip -4 addr` shows."""
    out = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-4", "-o", "addr", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines()]


def _container_env(lab: AgentLab, container_id: str) -> dict[str, str]:
    env = lab.docker.client.containers.get(container_id).attrs["Config"]["Env"] or []
    return dict(item.split("=", 1) for item in env)


@pytest.mark.parametrize("fault", ["", "stale-network-status-on-restore"])
def test_recreated_network_reports_its_new_address_unless_the_fault_keeps_the_old(
    lab: AgentLab, fault: str
) -> None:
    agent = lab.start_agent()
    alloc = _submit(agent, "cni-check-on-restore.hcl")
    net = _view(agent, alloc)["network"]
    assert isinstance(net, dict)
    old = str(net["address"])
    agent.stop()
    _simulate_reboot(lab, alloc)
    agent = lab.start_agent(faults=fault)
    try:
        view = _view(agent, alloc)
        assert view["status"] == "running", view
        assert "Network Recovered" in [e.type for e in agent.core.store.events(alloc)]
        net = view["network"]
        assert isinstance(net, dict)
        containers = _running_containers(lab, alloc)
        pause_pid = int(lab.docker.client.containers.get(containers["pause:"]).attrs["State"]["Pid"])
        on_eth0 = _netns_ipv4(pause_pid)
        assert len(on_eth0) == 1 and on_eth0[0] != old, f"host-local handed out {on_eth0}, had {old}"
        task_env = _container_env(lab, containers["task:nginx"])
        if fault:
            # nomad-24236/16893: the API and the restarted task still say the address from before.
            assert net["address"] == old
            assert task_env["NOMAD_ALLOC_IP"] == old
            return
        assert net["address"] == on_eth0[0]
        assert task_env["NOMAD_ALLOC_IP"] == on_eth0[0]
    finally:
        agent.stop()


def _busybox_job(job: str, script: str, *, kill_timeout: str = "5s") -> str:
    return f"""
job "{job}" {{
  group "g" {{
    restart {{
      attempts = 3
      interval = "10m"
      delay    = "0s"
      mode     = "fail"
    }}
    task "t" {{
      driver       = "docker"
      kill_timeout = "{kill_timeout}"
      config {{
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "/bin/sh"
        args    = ["-c", "{script}"]
      }}
    }}
  }}
}}
"""


def test_a_hung_stop_and_a_hung_change_script_hold_up_no_other_alloc(lab: AgentLab) -> None:
    """Real containers: one ignores SIGTERM (its stop waits its 25 s kill_timeout), one runs a change
    script that sleeps until its 25 s timeout; a third is SIGKILLed meanwhile and its restart (delay
    0s) completes within 2 s. The stop and the script then finish as their timeouts say."""
    agent = lab.start_agent()
    try:

        def submit(job: str, script: str, kill_timeout: str = "5s") -> str:
            spec = _busybox_job(job, script, kill_timeout=kill_timeout)
            return str(agent.core.call(lambda: agent.core.job_registry.submit(spec, "hcl"))["allocs"][0])

        stubborn = submit("stubborn", "trap '' TERM; sleep 1000", "25s")
        scripted = submit("scripted", "sleep 1000")
        crasher = submit("crasher", "sleep 1000")
        for alloc in (stubborn, scripted, crasher):
            wait_until(
                lambda alloc=alloc: (True if lab.containers(alloc) else None, "no container"),
                timeout=TIMEOUT,
                what=f"alloc {alloc[:8]} running",
            )
        t0 = time.monotonic()
        agent.core.call(
            lambda: agent.core.job_registry.stop_job("stubborn")
        )  # returns: the stop runs off the loop
        script: Future[tuple[int, str]] = Future()

        def change_script() -> None:
            r = agent.core.allocs.runner(scripted)
            r.tasks[r.group.tasks[0].name].exec(
                ["sleep", "60"], 25.0, lambda rc, out: script.set_result((rc, out))
            )

        agent.core.call(change_script)
        assert time.monotonic() - t0 < 2, "submitting the stop and the script waited on them"

        (victim,) = lab.containers(crasher)
        old = victim.id
        victim.kill()  # SIGKILL: the task dies on its own; the restart policy restarts it at once
        killed = time.monotonic()

        def restarted() -> tuple[bool | None, str]:
            causes = [
                (e.details or {}).get("cause")
                for e in agent.core.store.events(crasher)
                if e.type == "Started"
            ]
            return (True if causes.count("restart policy") == 1 else None), str(causes)

        wait_until(restarted, timeout=2.0, what="the killed task's restart while a stop and a script hang")
        took = time.monotonic() - killed
        print(f"restart completed {took * 1000:.0f} ms after the kill, while a stop and a script hang")
        assert [c.id for c in lab.containers(crasher)] != [old]
        assert agent.core.call(lambda: agent.core.allocs.runner(stubborn).rec.status.value) == "running"
        assert not script.done()

        rc, out = script.result(timeout=40)
        assert rc == -1 and "timeout" in out, (rc, out)
        wait_until(
            lambda: (True if lab.containers(stubborn) == [] else None, "container still there"),
            timeout=40,
            what="the stubborn task killed after its kill_timeout",
        )
        stopped_after = time.monotonic() - t0
        assert stopped_after >= 24, f"the stop did not wait for the kill_timeout ({stopped_after:.1f}s)"
    finally:
        agent.stop()
