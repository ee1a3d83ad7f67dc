"""The lab's input checks: every bad flag gets a message naming it, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli import main
from lab.config import LabPaths, LabSpec, image_role
from lab.errors import ConfigError
from lab.providers.static import read_static_inventory


def test_default_topology_is_server_then_clients_on_fixed_addresses() -> None:
    spec = LabSpec(clients=3, full_clients=3)
    assert [(n.name, n.role, n.address) for n in spec.nodes] == [
        ("server1", "server", "10.213.0.10"),
        ("client1", "client", "10.213.0.11"),
        ("client2", "client", "10.213.0.12"),
        ("client3", "client", "10.213.0.13"),
    ]
    assert spec.gateway == "10.213.0.1"


def test_clients_beyond_the_full_ones_are_light_clients_after_them() -> None:
    spec = LabSpec(clients=5)
    assert (spec.full, spec.light) == (2, 3)
    assert [(n.name, n.role, n.address) for n in spec.nodes][1:] == [
        ("client1", "client", "10.213.0.11"),
        ("client2", "client", "10.213.0.12"),
        ("light001", "light", "10.213.0.13"),
        ("light002", "light", "10.213.0.14"),
        ("light003", "light", "10.213.0.15"),
    ]
    one = LabSpec(clients=1)
    assert (one.full, one.light) == (1, 0)
    fleet = LabSpec(clients=100)
    assert (fleet.full, fleet.light) == (2, 98) and fleet.nodes[-1].address == "10.213.0.110"
    assert image_role("light") == "client" and image_role("server") == "server"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"provider": "vagrant"}, "unknown provider 'vagrant'"),
        ({"clients": 0}, "--clients 0"),
        ({"clients": 201}, "--clients 201"),
        ({"full_clients": 9}, "--full-clients 9"),
        ({"clients": 200, "subnet": "10.213.0.0/25"}, "too small for 200 clients"),
        ({"subnet": "10.0.0.0/30"}, "/28 or larger"),
        ({"subnet": "8.8.8.0/24"}, "private range"),
        ({"subnet": "nonsense"}, "--subnet 'nonsense'"),
        ({"name": "Bad_Name"}, "lab name 'Bad_Name'"),
        ({"provider": "static"}, "needs --inventory"),
    ],
)
def test_bad_lab_spec_names_the_offending_option(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as exc:
        LabSpec(**kwargs)  # type: ignore[arg-type]
    assert needle in str(exc.value)


def test_cli_reports_bad_input_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    rc = main(["lab", "up", "--provider", "vagrant"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == "fieldlab: error: unknown provider 'vagrant': choose one of docker, static, qemu"


def test_cli_refuses_to_run_without_root(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["lab", "up"]) == 2
    assert "needs root" in capsys.readouterr().err


def test_status_without_a_lab_is_an_error_saying_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIELDLAB_HOME", str(tmp_path))
    assert main(["lab", "status", "--lab", "nolab"]) == 2
    assert "lab nolab is not up: run `make lab-up`" in capsys.readouterr().err


def test_ssh_to_a_lab_that_is_not_up_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIELDLAB_HOME", str(tmp_path))
    assert main(["lab", "ssh", "--lab", "nolab", "client1"]) == 2
    assert "make lab-up" in capsys.readouterr().err


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hosts.yml"
    p.write_text(text)
    return p


def test_static_inventory_is_read_into_nodes(tmp_path: Path) -> None:
    inv = _write(
        tmp_path,
        """
all:
  children:
    servers:
      hosts:
        vault1: {ansible_host: 192.0.2.10}
    clients:
      hosts:
        worker1: {ansible_host: 192.0.2.11, ansible_port: 2222, ansible_user: admin}
""",
    )
    nodes = read_static_inventory(inv)
    assert [(n.name, n.role, n.address, n.port, n.user) for n in nodes] == [
        ("vault1", "server", "192.0.2.10", 22, "root"),
        ("worker1", "client", "192.0.2.11", 2222, "admin"),
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "all:\n  children:\n    servers:\n      hosts:\n        s1: {ansible_host: 192.0.2.1}\n",
            "all.children.clients is missing or empty",
        ),
        (
            "all:\n  children:\n    servers:\n      hosts:\n        s1: {}\n"
            "    clients:\n      hosts:\n        c1: {ansible_host: x}\n",
            "all.children.servers.hosts.s1.ansible_host is not set",
        ),
        ("all: [unbalanced\n", "not valid YAML"),
    ],
)
def test_static_inventory_errors_name_file_and_path(tmp_path: Path, text: str, needle: str) -> None:
    inv = _write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        read_static_inventory(inv)
    assert str(inv) in str(exc.value)
    assert needle in str(exc.value)


def test_state_dir_keeps_secrets_private(tmp_path: Path) -> None:
    paths = LabPaths("x", home=tmp_path)
    paths.ensure()
    assert paths.secrets_dir.stat().st_mode & 0o777 == 0o700
    assert paths.inventory == tmp_path / "inventory" / "x" / "hosts.yml"
