"""docker_engine on client1: dockerd answers with the lab's settings, runs a container on the lab's
docker0 subnet with json-file logs capped as configured, makes its own networks from the lab's pool,
and the DOCKER-USER rules for the CNI bridge are there after converge, a docker restart, dockerd
being killed and a reboot.

The container's image is made on the node from its busybox-static binary (no registry, no pulls)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest
from verifylib import reboot, sh, wait_for_units

from lab.waits import wait_until

# The role's defaults (lab/roles/docker_engine/defaults/main.yml), which the scenario keeps.
BIP = ipaddress.ip_interface("10.213.253.1/24")
ADDRESS_POOL = ipaddress.IPv4Network("10.213.224.0/20")
LOG_OPTS = {"max-size": "10m", "max-file": "3"}
CNI_BRIDGE = "fieldlab0"
IMAGE = "fieldlab-verify/busybox:1"
UNITS = ["docker.service", "fieldlab-docker-user.service"]
RULE_COMMENT = f'-m comment --comment "fieldlab: forward CNI bridge {CNI_BRIDGE}" -j ACCEPT'


def docker_info(host: Any) -> dict[str, Any]:
    return dict(json.loads(sh(host, "docker info --format '{{json .}}'")))


@pytest.fixture(scope="module")
def image(client: Any) -> Iterator[str]:
    """A one-binary busybox image imported on the node; removed with its containers afterwards."""
    sh(
        client,
        "set -e; d=$(mktemp -d); mkdir -p $d/bin; cp /bin/busybox $d/bin/busybox; ln -s busybox $d/bin/sh; "
        f"tar -C $d -c . | docker import - {IMAGE} >/dev/null; rm -rf $d",
    )
    yield IMAGE
    client.run("docker rm -f fieldlab-verify-run fieldlab-verify-log >/dev/null 2>&1; docker rmi -f " + IMAGE)


def test_dockerd_answers_with_the_lab_settings(client: Any) -> None:
    info = docker_info(client)
    assert tuple(int(p) for p in info["ServerVersion"].split(".")[:2]) >= (20, 10), info["ServerVersion"]
    assert info["LoggingDriver"] == "json-file"
    assert info["LiveRestoreEnabled"] is False
    docker0 = sh(client, "ip -4 -o addr show docker0").split()
    assert str(BIP) in docker0, f"docker0 is not on the lab subnet: {docker0}"


def test_a_container_runs_on_docker0_with_capped_json_logs(client: Any, image: str) -> None:
    out = sh(
        client, f"docker run --rm --name fieldlab-verify-run {image} /bin/busybox ip -4 -o addr show eth0"
    )
    address = ipaddress.ip_interface(out.split()[3])
    assert address in BIP.network, f"the container got {address}, not an address of docker0's {BIP.network}"

    sh(client, f"docker run --name fieldlab-verify-log {image} /bin/busybox echo hello from fieldlab")
    log_config = json.loads(
        sh(client, "docker inspect -f '{{json .HostConfig.LogConfig}}' fieldlab-verify-log")
    )
    assert log_config == {"Type": "json-file", "Config": LOG_OPTS}
    assert sh(client, "docker logs fieldlab-verify-log").strip() == "hello from fieldlab"
    log_path = sh(client, "docker inspect -f '{{.LogPath}}' fieldlab-verify-log").strip()
    record = json.loads(sh(client, f"head -n 1 {log_path}"))
    assert record["log"] == "hello from fieldlab\n" and record["stream"] == "stdout"


def test_dockerd_makes_its_networks_from_the_lab_pool(client: Any) -> None:
    client.run("docker network rm fieldlab-verify-net >/dev/null 2>&1")
    try:
        sh(client, "docker network create fieldlab-verify-net >/dev/null")
        subnet = sh(
            client, "docker network inspect -f '{{(index .IPAM.Config 0).Subnet}}' fieldlab-verify-net"
        )
        assert ipaddress.IPv4Network(subnet.strip()).subnet_of(ADDRESS_POOL), subnet
    finally:
        client.run("docker network rm fieldlab-verify-net")


def check_forward_rules(host: Any, phase: str) -> None:
    """dockerd answers, its FORWARD policy is DROP and DOCKER-USER lets the CNI bridge through."""
    states = wait_for_units(host, UNITS, what=f"docker and the DOCKER-USER rules unit ({phase})")
    assert states == dict.fromkeys(UNITS, "active"), f"{phase}: {states}"
    docker_info(host)  # answers
    rules = sh(host, "iptables -w -S").splitlines()
    user_rules = [r for r in rules if r.startswith("-A DOCKER-USER ")]
    assert "-P FORWARD DROP" in rules, f"{phase}: dockerd did not set FORWARD to DROP"
    accept = {f"-A DOCKER-USER -{way} {CNI_BRIDGE} {RULE_COMMENT}" for way in ("i", "o")}
    assert set(user_rules[:-1]) == accept and len(user_rules) == 3, f"{phase}: DOCKER-USER {user_rules}"
    assert user_rules[-1] == "-A DOCKER-USER -j RETURN", f"{phase}: DOCKER-USER {user_rules}"


def remove_rules_by_hand(host: Any) -> None:
    """Take the rules away first, so that only the unit running again can explain them afterwards.
    docker.service allows 3 starts per 60 s: reset-failed clears that count."""
    sh(
        host,
        f"/usr/local/sbin/fieldlab-docker-user stop {CNI_BRIDGE} && systemctl reset-failed docker.service",
    )
    assert "fieldlab: forward CNI bridge" not in sh(host, "iptables -w -S DOCKER-USER")


def test_forward_rules_after_converge(client: Any) -> None:
    check_forward_rules(client, "after converge")


def test_forward_rules_come_back_with_a_docker_restart(client: Any) -> None:
    remove_rules_by_hand(client)
    sh(client, "systemctl restart docker")
    check_forward_rules(client, "after systemctl restart docker")


def test_forward_rules_come_back_when_systemd_restarts_a_killed_dockerd(client: Any) -> None:
    remove_rules_by_hand(client)
    old = sh(client, "systemctl show -P MainPID docker").strip()
    sh(client, f"kill -KILL {old}")

    def restarted() -> tuple[str | None, str]:
        pid = sh(client, "systemctl show -P MainPID docker").strip()
        active = client.run("systemctl is-active --quiet docker").rc == 0
        return (pid if pid not in ("0", old) and active else None), f"MainPID {pid}, active {active}"

    wait_until(restarted, timeout=30, interval=0.2, what="systemd to restart the killed dockerd")
    check_forward_rules(client, "after kill -9 dockerd")


def test_forward_rules_and_the_engine_after_a_reboot(client: Any, image: str) -> None:
    reboot(client)
    check_forward_rules(client, "after reboot")
    out = sh(client, f"docker run --rm --name fieldlab-verify-run {image} /bin/busybox echo up")
    assert out.strip() == "up"
