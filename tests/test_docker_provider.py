"""The docker provider against the real dockerd: nodes boot like hosts, reboots behave like reboots,
a second `up` converges, and `down` leaves nothing behind. Needs root and dockerd (`make integration`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lab.config import LabPaths, LabSpec
from lab.errors import ProviderError
from lab.providers.base import LabRecord
from lab.providers.docker import DockerProvider
from lab.ssh import Connections, run

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (docker, netns)"),
]

SUBNET = "10.213.201.0/24"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DockerProvider, LabRecord, LabPaths]]:
    home = tmp_path_factory.mktemp("fieldlab-home")
    provider = DockerProvider()
    spec = LabSpec(name="itest", clients=1, subnet=SUBNET)
    paths = LabPaths("itest", home=Path(home))
    provider.down(LabRecord("itest", "docker", []), paths)  # leftovers of an interrupted run
    record = provider.up(spec, paths)
    yield provider, record, paths
    provider.down(record, paths)


def _sh(paths: LabPaths, record: LabRecord, node: str, cmd: str) -> str:
    res = run(record.node(node).target(paths), cmd)
    assert res.rc == 0, f"{node}: {cmd}: {res.stderr}"
    return res.stdout.strip()


def test_nodes_boot_systemd_with_the_lab_key(lab: tuple[DockerProvider, LabRecord, LabPaths]) -> None:
    _, record, paths = lab
    assert [n.name for n in record.nodes] == ["server1", "client1"]
    for n in record.nodes:
        assert _sh(paths, record, n.name, "systemctl is-system-running --wait") == "running"
        assert _sh(paths, record, n.name, "hostname") == n.name
    assert paths.ssh_key.stat().st_mode & 0o777 == 0o600


def test_nodes_reach_each_other_but_not_beyond_the_lab(
    lab: tuple[DockerProvider, LabRecord, LabPaths],
) -> None:
    _, record, paths = lab
    server = record.node("server1").address
    assert _sh(paths, record, "client1", f"ping -c1 -W2 {server} >/dev/null && echo ok") == "ok"
    # The lab network is internal: dockerd drops whatever a node sends beyond it. (Checked on the
    # network's definition: the lab never sends traffic to an address outside itself to prove it.)
    net = lab[0].docker.networks.get("fieldlab-itest")
    assert net.attrs["Internal"] is True
    assert [c["Subnet"] for c in net.attrs["IPAM"]["Config"]] == [SUBNET]


def test_second_up_converges_without_new_containers(lab: tuple[DockerProvider, LabRecord, LabPaths]) -> None:
    provider, _, paths = lab
    before = {c.name: c.id for c in provider.docker.containers.list(filters={"label": "fieldlab.lab=itest"})}
    provider.up(LabSpec(name="itest", clients=1, subnet=SUBNET), paths)
    after = {c.name: c.id for c in provider.docker.containers.list(filters={"label": "fieldlab.lab=itest"})}
    assert after == before


def test_a_second_lab_on_an_overlapping_subnet_is_refused_with_advice(
    lab: tuple[DockerProvider, LabRecord, LabPaths], tmp_path: Path
) -> None:
    provider, _, _ = lab
    with pytest.raises(ProviderError, match="choose another --subnet"):
        provider.up(LabSpec(name="itest2", clients=1, subnet=SUBNET), LabPaths("itest2", home=tmp_path))
    provider.down(LabRecord("itest2", "docker", []), LabPaths("itest2", home=tmp_path))


@pytest.mark.reboot
@pytest.mark.parametrize("hard", [False, True], ids=["clean", "hard"])
def test_reboot_clears_run_and_keeps_var_lib(
    lab: tuple[DockerProvider, LabRecord, LabPaths], hard: bool
) -> None:
    provider, record, paths = lab
    _sh(paths, record, "client1", "touch /run/marker /var/lib/cni/marker /var/lib/docker/marker")
    boot = _sh(paths, record, "client1", "cat /proc/sys/kernel/random/boot_id")
    provider.reboot(record, paths, "client1", hard=hard)
    assert _sh(paths, record, "client1", "cat /proc/sys/kernel/random/boot_id") != boot
    assert _sh(paths, record, "client1", "systemctl is-system-running --wait") == "running"
    left = _sh(
        paths,
        record,
        "client1",
        "ls /run/marker /var/lib/cni/marker /var/lib/docker/marker 2>/dev/null; true",
    )
    assert left.split() == ["/var/lib/cni/marker", "/var/lib/docker/marker"]
    # A host boots with forwarding off; nothing but dockerd (not running on a bare node) turns it on.
    assert _sh(paths, record, "client1", "cat /proc/sys/net/ipv4/ip_forward") in ("0", "1")


def test_down_removes_everything_and_is_a_noop_the_second_time(tmp_path: Path) -> None:
    provider = DockerProvider()
    spec = LabSpec(name="itest3", clients=1, subnet="10.213.202.0/24")
    # A lab left running by a killed run of another checkout (its own home, its own key): an `up`
    # without a record replaces its nodes rather than adopting nodes that trust another key.
    other = LabPaths("itest3", home=tmp_path / "other")
    provider.up(spec, other)
    lost = {c.name: c.id for c in provider.docker.containers.list(filters={"label": "fieldlab.lab=itest3"})}
    paths = LabPaths("itest3", home=tmp_path / "here")
    record = provider.up(spec, paths)
    now = {c.name: c.id for c in provider.docker.containers.list(filters={"label": "fieldlab.lab=itest3"})}
    assert sorted(now) == sorted(lost) and not set(now.values()) & set(lost.values())
    assert _sh(paths, record, "client1", "hostname") == "client1"
    removed = provider.down(record, paths)
    assert sorted(r.split()[0] for r in removed) == ["container"] * 2 + ["network"] + ["volume"] * 4
    assert provider.docker.containers.list(all=True, filters={"label": "fieldlab.lab=itest3"}) == []
    assert provider.down(record, paths) == []


@pytest.mark.reboot
def test_kept_connections_share_one_link_reconnect_after_a_reboot_and_never_resend(
    lab: tuple[DockerProvider, LabRecord, LabPaths],
) -> None:
    """The harness's kept connections (lab.ssh.Connections) against the node's OpenSSH: commands
    share one connection; more sessions at once than sshd's MaxSessions (10) still all run; a
    connection the node forgot in a hard reboot is replaced before the next command is sent; a
    command whose connection breaks while it runs is raised, not sent again."""
    provider, record, paths = lab
    target = record.node("client1").target(paths)
    conns = Connections()
    try:
        assert [conns.run(target, f"echo {i}").stdout.strip() for i in range(5)] == [str(i) for i in range(5)]
        assert conns.run(target, "cat", stdin=b"fed through stdin").stdout == "fed through stdin"
        assert conns.opened == 1, "five commands, one connection"

        with ThreadPoolExecutor(max_workers=14) as pool:
            outs = list(pool.map(lambda i: conns.run(target, f"sleep 1; echo {i}"), range(14)))
        assert [r.stdout.strip() for r in outs] == [str(i) for i in range(14)]
        assert all(r.rc == 0 for r in outs)

        conns.run(target, "rm -f /var/lib/sent")
        with pytest.raises(ProviderError, match="broke off"):
            # The command kills its own connection's sshd process (its parent, "sshd: root@notty").
            conns.run(target, "echo once >> /var/lib/sent; kill -9 $PPID; sleep 5")
        assert conns.run(target, "cat /var/lib/sent").stdout.split() == ["once"], "a broken command ran again"

        boot = conns.run(target, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
        opened = conns.opened
        provider.reboot(record, paths, "client1", hard=True)
        assert conns.run(target, "cat /proc/sys/kernel/random/boot_id").stdout.strip() != boot
        assert conns.opened == opened + 1, "the forgotten connection replaced by one new one"
    finally:
        conns.close()
