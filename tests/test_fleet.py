"""The fleet's pure parts: light clients in the inventory, node memory figures, the storm suite's
delivery accounting, waves, and the OpenBao load figures read from its audit log."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from e2e.harness import fleet, vaultload
from lab.config import LabPaths, LabSpec
from lab.inventory import inventory_data
from lab.providers.base import LabRecord, Node
from lab.providers.docker import DockerProvider, _tar_masks, memory_in_use
from lab.summary import memory_line


def _record(clients: int) -> LabRecord:
    spec = LabSpec(name="fleet", clients=clients)
    return LabRecord("fleet", "docker", [Node(n.name, n.role, n.address) for n in spec.nodes])


def test_light_clients_are_clients_in_a_group_of_their_own(tmp_path: Any) -> None:
    inv = inventory_data(_record(4), LabPaths("fleet"))["all"]["children"]
    clients = inv["clients"]
    assert list(clients["hosts"]) == ["client1", "client2"]
    assert list(clients["children"]["light_clients"]["hosts"]) == ["light001", "light002"]
    # No light client: the group is still there (empty), so `clients:!light_clients` names a group.
    two = inventory_data(_record(2), LabPaths("fleet"))["all"]["children"]["clients"]
    assert two["children"] == {"light_clients": {"hosts": {}}}
    yaml.safe_dump(inv)  # plain data


def test_a_light_client_has_no_docker_volume_and_its_engine_is_masked() -> None:
    assert set(DockerProvider.volume_names("l", "light001", "light").values()) == {"/var/lib/cni"}
    assert set(DockerProvider.volume_names("l", "client1").values()) == {"/var/lib/cni", "/var/lib/docker"}
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(_tar_masks(("docker.service", "containerd.service")))) as tf:
        links = {m.name: (m.issym(), m.linkname) for m in tf.getmembers()}
    assert links == {"docker.service": (True, "/dev/null"), "containerd.service": (True, "/dev/null")}


def test_memory_in_use_is_usage_less_inactive_file_pages() -> None:
    v1 = {"usage": 100 * 2**20, "stats": {"total_inactive_file": 30 * 2**20}}
    v2 = {"usage": 100 * 2**20, "stats": {"inactive_file": 40 * 2**20}}
    assert memory_in_use(v1) == 70 * 2**20
    assert memory_in_use(v2) == 60 * 2**20
    assert memory_in_use({}) is None
    rec = _record(4)
    mb = 2**20
    line = memory_line(
        rec,
        {
            "server1": 200 * mb,
            "client1": 300 * mb,
            "client2": 310 * mb,
            "light001": 90 * mb,
            "light002": 110 * mb,
        },
    )
    assert line == (
        "full client 305 MB avg (min 300, max 310, n=2); light client 100 MB avg (min 90, max 110, n=2); "
        "server 200 MB avg"
    )


def _sighup(sha: str) -> dict[str, Any]:
    return {"signal": "SIGHUP", "cert_sha256": sha}


def _signaled(n: int) -> list[dict[str, Any]]:
    return [{"task": "probe", "type": "Signaling", "message": "Template re-rendered; sending SIGHUP"}] * n


def test_exactly_once_accounting_of_signal_deliveries() -> None:
    ok = fleet.delivery_problems(
        "n/j", "signal", _signaled(2), {"signals": [_sighup("b"), _sighup("c")]}, _signaled(2), 0, "a", 0
    )
    assert ok == []
    # A change signal in flight between the two event reads is not a problem.
    assert (
        fleet.delivery_problems(
            "n/j", "signal", _signaled(1), {"signals": [_sighup("b")]}, _signaled(2), 0, "a", 0
        )
        == []
    )
    lost = fleet.delivery_problems(
        "n/j", "signal", _signaled(2), {"signals": [_sighup("b")]}, _signaled(2), 0, "a", 0
    )
    assert lost and "lost" in lost[0]
    extra = fleet.delivery_problems(
        "n/j", "signal", _signaled(1), {"signals": [_sighup("b"), _sighup("c")]}, _signaled(1), 0, "a", 0
    )
    assert extra and "extra" in extra[0]
    twice = fleet.delivery_problems(
        "n/j", "signal", _signaled(2), {"signals": [_sighup("b"), _sighup("b")]}, _signaled(2), 0, "a", 0
    )
    assert twice and "already loaded" in twice[0]
    # Only the SIGHUPs since the start of the storm are compared with the certificate loaded then.
    since = fleet.delivery_problems(
        "n/j", "signal", _signaled(2), {"signals": [_sighup("a"), _sighup("b")]}, _signaled(2), 0, "a", 1
    )
    assert since == []


def test_exactly_once_accounting_of_restart_deliveries() -> None:
    ev = [
        {
            "task": "probe",
            "type": "Restart Signaled",
            "message": "Template with change_mode restart re-rendered",
        }
    ] * 3
    assert fleet.delivery_problems("n/j", "restart", ev, None, ev, 3, "", 0) == []
    assert "4 task restarts for 3" in fleet.delivery_problems("n/j", "restart", ev, None, ev, 4, "", 0)[0]


@pytest.mark.parametrize(
    ("n", "sizes"), [(10, [1] * 10), (100, [10] * 10), (5, [1] * 5), (25, [2] * 12 + [1])]
)
def test_waves_of_ten_percent(n: int, sizes: list[int]) -> None:
    got = fleet.waves(list(range(n)), 0.10)  # type: ignore[arg-type]
    assert [len(w) for w in got] == sizes
    assert [x for w in got for x in w] == list(range(n))


def test_load_figures_from_paired_audit_requests() -> None:
    R = vaultload.Request
    reqs = [
        R(100.2, 0.010, "auth/approle/login"),
        R(100.5, 0.020, "pki_int/issue/fieldlab-workload"),
        R(100.9, 0.030, "pki_int/issue/fieldlab-workload"),
        R(102.1, 0.400, "auth/token/create/fieldlab-task"),
        R(103.0, 0.005, "sys/health", "boom"),
        R(200.0, 9.0, "pki_int/issue/x"),  # after the storm: not counted
    ]
    f = vaultload.load_figures(reqs, 100.0, 103.5)
    assert f.requests == 5 and f.peak_rps == 3 and f.errors == 1
    assert f.series == [(0.0, 3), (1.0, 0), (2.0, 1), (3.0, 1)]
    assert f.p50 == 0.020 and f.max == 0.400 and f.p99 == 0.400
    assert f.kinds == {"login": 1, "pki issue": 2, "token create": 1, "sys": 1}
    assert "5 requests" in f.line() and "p99 400 ms" in f.line()
    assert vaultload.quantile([], 0.5) == 0.0
    assert vaultload.quantile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_a_fleet_gets_more_ansible_forks(tmp_path: Any) -> None:
    from lab.playbook import forks_for, inventory_hosts

    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory_data(_record(100), LabPaths("fleet"))))
    assert inventory_hosts(inv) == 101
    assert (forks_for(3), forks_for(20), forks_for(101)) == (10, 20, 25)
    assert inventory_hosts(tmp_path / "missing.yml") == 0


def test_a_change_restart_is_in_flight_until_its_task_started_again() -> None:
    signalled = {"task": "probe", "type": "Restart Signaled", "message": "re-rendered"}
    started = {"task": "probe", "type": "Started", "details": {"cause": "change_mode restart"}}
    first = {"task": "probe", "type": "Started", "details": {"cause": "first start"}}
    assert fleet.restarts_in_flight([first]) == 0
    assert fleet.restarts_in_flight([first, signalled]) == 1
    assert fleet.restarts_in_flight([first, signalled, started, signalled]) == 1
    assert fleet.restarts_in_flight([first, signalled, started]) == 0
