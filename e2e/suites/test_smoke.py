"""Smoke: a freshly built lab works, and still works after its nodes are rebooted.

Narrative: every node answers and boots clean; OpenBao is unsealed; each client runs containers,
has the CNI plugins and bridge conflist, logs in to Vault with its own AppRole (and is refused what
its policy does not allow); the agent answers over mTLS only. Then client1 is rebooted cleanly and
hard, and server1 cleanly (OpenBao must unseal itself): the same checks hold afterwards.
"""

from __future__ import annotations

import pytest

from agent.errors import AgentError
from e2e.harness import checkers, faults, fleet, probes
from e2e.harness.cluster import Cluster
from e2e.harness.remote import Remote
from e2e.harness.waits import AGENT_HEALTHY, VAULT_UNSEALED, wait_until


def test_every_node_answers_over_ssh(cluster: Cluster) -> None:
    unreachable = [n.name for n in cluster.nodes if n.boot_id() is None]
    assert not unreachable, f"nodes not answering over ssh: {unreachable}"


@pytest.mark.parametrize("role", ["servers", "clients"])
def test_nodes_are_healthy(cluster: Cluster, role: str) -> None:
    nodes = cluster.servers if role == "servers" else cluster.clients
    problems = [p for n in nodes for p in checkers.node_problems(probes.observe_node(cluster, n))]
    assert not problems, "\n".join(problems)


def test_light_clients_run_an_agent_without_docker(cluster: Cluster) -> None:
    """Every light client: its agent answers over mTLS with exec (and raw_exec where the lab was made
    with it) and no docker driver, its docker engine is masked, and a docker job is refused there with
    the reason."""
    if not cluster.light:
        pytest.skip(f"lab {cluster.name} has no light clients (make lab-up CLIENTS=3 or more)")

    def problems(node: Remote) -> list[str]:
        out = []
        info = cluster.agent(node).node_info()
        if info is None:
            return [f"{node.name}: the agent does not answer"]
        want = ["exec", "raw_exec"] if cluster.raw_exec else ["exec"]
        drivers = sorted(d for d, v in (info.get("Drivers") or {}).items() if v.get("Detected"))
        if drivers != want:
            out.append(f"{node.name}: drivers {drivers}, not {' and '.join(want)}")
        masked = node.run("systemctl is-enabled docker.service", check=False).stdout.strip()
        if masked != "masked":
            out.append(f"{node.name}: docker.service is {masked!r}, not masked")
        return out

    found = [p for per in fleet.pmap(problems, cluster.light) for p in per]
    assert not found, "\n".join(found)
    with pytest.raises(AgentError, match="docker_enabled = false"):
        cluster.agent(cluster.light[0]).run_job(DOCKER_JOB, "light-docker.hcl")


DOCKER_JOB = """
job "light-docker" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "fieldlab/busybox:latest"
      }
    }
  }
}
"""


@pytest.mark.agent_own
def test_testinfra_sees_the_agent_unit_as_systemd_configured_it(cluster: Cluster) -> None:
    host = cluster.clients[0].testinfra()
    svc = host.service("fieldlab-agent")
    assert svc.is_running and svc.is_enabled
    unit = host.file("/etc/systemd/system/fieldlab-agent.service").content_string
    assert "KillMode=process" in unit
    key = host.file("/etc/fieldlab-agent/tls/agent.key")
    assert key.mode == 0o600 and key.user == "root"
    assert host.file("/etc/fieldlab-agent/approle.json").mode == 0o600


def _healthy_again(cluster: Cluster, name: str, timeout: float) -> None:
    node = cluster.node(name)

    def check() -> tuple[bool | None, str]:
        problems = checkers.node_problems(probes.observe_node(cluster, node))
        return (True if not problems else None), "; ".join(problems)

    wait_until(check, timeout=timeout, what=f"{name} healthy after reboot", interval=2.0)


@pytest.mark.destructive
@pytest.mark.reboot
@pytest.mark.parametrize("hard", [False, True], ids=["clean", "hard"])
def test_client_is_healthy_after_reboot(cluster: Cluster, hard: bool) -> None:
    name = cluster.clients[0].name
    before = cluster.node(name).boot_id()
    secs = faults.reboot(cluster, name, hard=hard)
    assert cluster.node(name).boot_id() != before, f"{name}: boot id unchanged after reboot"
    print(f"{name}: {'hard' if hard else 'clean'} reboot back over ssh in {secs:.1f}s")
    _healthy_again(cluster, name, AGENT_HEALTHY)


@pytest.mark.destructive
@pytest.mark.reboot
def test_openbao_unseals_itself_after_server_reboot(cluster: Cluster) -> None:
    server = cluster.servers[0]
    secs = faults.reboot(cluster, server.name, hard=False)
    print(f"{server.name}: clean reboot back over ssh in {secs:.1f}s")
    _healthy_again(cluster, server.name, VAULT_UNSEALED)
    # The clients' agents reach the restarted Vault again (a fresh AppRole login works).
    problems = [
        p
        for c in cluster.clients
        for p in checkers.approle_problems(probes.observe_approle(c, cluster.vault_addr, cluster.target))
    ]
    assert not problems, "\n".join(problems)
