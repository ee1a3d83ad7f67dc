"""Bring-your-own hosts without a lab: key paths with `~` and `$HOME` (inventory-wide and per host),
a non-root `ansible_user` with passwordless sudo (every node command as root through `sudo -n`, and a
refusal that names the node and the user), the lab's inventory keeping become off the controller, and
no root on the controller for the static provider. The real thing: test_static_provider_e2e.py."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.harness import remote
from e2e.harness.cluster import node_target
from e2e.harness.remote import Remote
from lab import cli
from lab.config import LabPaths
from lab.inventory import inventory_data
from lab.providers.base import (
    LabRecord,
    Node,
    SudoRefused,
    as_root,
    check_sudo,
    expand_path,
    ssh_argv,
    sudo_refusal,
)
from lab.providers.static import key_file_problems, read_static_inventory
from lab.ssh import Result, SshTarget

INVENTORY = """
all:
  vars:
    ansible_user: ops
    ansible_ssh_private_key_file: ~/.ssh/lab_key
    ansible_become_method: sudo
    openbao_install_method: apt
  children:
    servers:
      vars:
        ansible_port: 2200
      hosts:
        server1:
          ansible_host: 192.0.2.10
          ansible_ssh_private_key_file: $HOME/keys/server1
    clients:
      hosts:
        client1:
          ansible_host: 192.0.2.11
          ansible_user: root
          ansible_port: 2222
          ansible_ssh_private_key_file: ${HOME}/keys/client1
        client2:
          ansible_host: 192.0.2.12
          fieldlab_lab_name: not-the-users
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


# -- ~ and $HOME ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expanded"),
    [
        ("~/.ssh/id_ed25519", "{home}/.ssh/id_ed25519"),
        ("$HOME/.ssh/id", "{home}/.ssh/id"),
        ("${HOME}/k", "{home}/k"),
        ("/etc/keys/k", "/etc/keys/k"),
        ("keys/relative", "keys/relative"),
        ("", ""),
    ],
)
def test_key_paths_expand_tilde_and_home(home: Path, written: str, expanded: str) -> None:
    assert expand_path(written) == expanded.format(home=home)


def test_static_inventory_gives_each_host_its_user_port_and_expanded_key(home: Path, tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    nodes = {n.name: n for n in read_static_inventory(inv)}
    # all.vars, then the group's vars, then the host's own.
    assert nodes["server1"] == Node("server1", "server", "192.0.2.10", 2200, "ops", f"{home}/keys/server1")
    assert nodes["client1"] == Node("client1", "client", "192.0.2.11", 2222, "root", f"{home}/keys/client1")
    assert nodes["client2"] == Node("client2", "client", "192.0.2.12", 22, "ops", f"{home}/.ssh/lab_key")


def test_key_files_that_are_missing_or_open_to_others_are_named(home: Path) -> None:
    ok, loose = home / "ok", home / "loose"
    for f, mode in ((ok, 0o600), (loose, 0o644)):
        f.write_text("key")
        f.chmod(mode)
    nodes = [
        Node("a", "server", "192.0.2.1", key_file=str(ok)),
        Node("b", "client", "192.0.2.2", key_file=str(loose)),
        Node("c", "client", "192.0.2.3", key_file=str(home / "missing")),
        Node("d", "client", "192.0.2.4"),  # no key of its own: ssh's defaults
    ]
    assert key_file_problems(nodes) == [
        f"b: key file {loose} is readable by others (mode 644); ssh refuses it: chmod 600 {loose}",
        f"c: key file {home / 'missing'} (ansible_ssh_private_key_file) does not exist",
    ]


def test_the_harness_reaches_each_host_with_its_own_user_port_and_key(home: Path, tmp_path: Path) -> None:
    paths = LabPaths("x", home=tmp_path)
    lab_vars = {"ansible_user": "root", "ansible_ssh_private_key_file": "~/lab_key"}
    own = node_target(
        "client1",
        {
            "ansible_host": "192.0.2.11",
            "ansible_user": "ops",
            "ansible_port": 2222,
            "ansible_ssh_private_key_file": "$HOME/c1",
        },
        lab_vars,
        paths,
    )
    assert own == SshTarget(
        "client1", "192.0.2.11", 2222, "ops", home / "c1", paths.state_dir / "known_hosts"
    )
    shared = node_target("server1", {"ansible_host": "192.0.2.10"}, lab_vars, paths)
    assert (shared.user, shared.port, shared.key_file) == ("root", 22, home / "lab_key")
    assert node_target("s", {"ansible_host": "h"}, {}, paths).key_file is None


def test_lab_ssh_uses_the_hosts_own_key_user_and_port(tmp_path: Path) -> None:
    paths = LabPaths("x", home=tmp_path)
    argv = ssh_argv(Node("client1", "client", "192.0.2.11", 2222, "ops", "/keys/c1"), paths)
    assert argv[:3] == ["ssh", "-i", "/keys/c1"]
    assert argv[-3:] == ["-p", "2222", "ops@192.0.2.11"]
    # Neither its own key nor a lab key: no -i (ssh's own keys and agent).
    assert "-i" not in ssh_argv(Node("s", "server", "192.0.2.10"), paths)
    paths.ensure()
    paths.ssh_key.write_text("k")
    assert ssh_argv(Node("s", "server", "192.0.2.10"), paths)[1:3] == ["-i", str(paths.ssh_key)]


# -- the lab's inventory ----------------------------------------------------------------------------


def test_the_labs_inventory_keeps_become_on_the_hosts_never_lab_wide(home: Path, tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    paths = LabPaths("x", home=tmp_path)
    rec = LabRecord("x", "static", read_static_inventory(inv), static_inventory=str(inv))
    data = inventory_data(rec, paths)
    lab_vars = data["all"]["vars"]
    # Tasks delegated to localhost take all's vars: no become (it would sudo on the controller).
    assert not [k for k in lab_vars if k.startswith("ansible_become")]
    assert lab_vars["openbao_install_method"] == "apt"  # the user's other vars carry over
    assert lab_vars["fieldlab_lab_name"] == "x"
    assert "~" not in yaml.safe_dump(data) and "$HOME" not in yaml.safe_dump(data)
    servers, clients = data["all"]["children"]["servers"], data["all"]["children"]["clients"]
    assert servers["hosts"]["server1"] == {
        "ansible_host": "192.0.2.10",
        "ansible_port": 2200,
        "ansible_user": "ops",
        "ansible_become": True,
        "ansible_ssh_private_key_file": f"{home}/keys/server1",
        "ansible_become_method": "sudo",
    }
    assert "ansible_become" not in clients["hosts"]["client1"]  # root: nothing to become
    assert clients["hosts"]["client2"]["ansible_become"] is True
    assert "fieldlab_lab_name" not in clients["hosts"]["client2"]  # the lab's vars stay the lab's
    assert "vars" not in servers  # the group's ansible_port went into each node


# -- root through sudo -n -------------------------------------------------------------------------


def test_root_runs_a_command_as_it_is_and_another_user_through_sudo_n() -> None:
    cmd = "docker ps -q | wc -l > /tmp/n 2>&1 &"
    assert as_root(cmd, "root") == cmd
    assert as_root(cmd, "ops") == "sudo -n -- sh -c 'docker ps -q | wc -l > /tmp/n 2>&1 &'"


def test_the_wrapped_command_keeps_its_pipes_quotes_and_redirections_inside(tmp_path: Path) -> None:
    # A stand-in sudo that runs what follows `-n --`, as a passwordless sudo does.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "sudo"
    fake.write_text('#!/bin/sh\n[ "$1" = -n ] && [ "$2" = -- ] || exit 99\nshift 2\nexec "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "out"
    cmd = f"printf '%s\\n' \"it's\" b | tr b c > {out} && echo \"$((1 + 1))\" 'a  b'"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    direct = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    wrapped = subprocess.run(
        ["sh", "-c", as_root(cmd, "ops")], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert wrapped == direct == "2 a  b\n"
    assert out.read_text() == "it's\nc\n"


@pytest.mark.parametrize(
    ("res", "why"),
    [
        (Result(1, "", "sudo: a password is required\n"), "sudo: a password is required"),
        (
            Result(1, "", "sudo: a terminal is required to read the password; either use the -S option\n"),
            "sudo: a terminal is required to read the password; either use the -S option",
        ),
        (
            Result(1, "", "sudo: unable to resolve host n1\nsudo: ops is not in the sudoers file.\n"),
            "sudo: ops is not in the sudoers file.",
        ),
        (Result(127, "", "sh: 1: sudo: not found\n"), "sudo is not installed"),
        (Result(1, "", "grep: /etc/x: No such file or directory\n"), None),  # the command's own failure
        (Result(0, "ok\n", "sudo: unable to resolve host n1\n"), None),  # a warning, the command ran
    ],
)
def test_a_sudo_refusal_is_told_from_the_commands_own_failure(res: Result, why: str | None) -> None:
    assert sudo_refusal(res) == why


def test_a_refusal_names_the_node_and_the_user_and_never_for_root() -> None:
    refused = Result(1, "", "sudo: a password is required\n")
    with pytest.raises(SudoRefused) as exc:
        check_sudo(SshTarget("client1", "192.0.2.11", user="ops"), refused)
    msg = str(exc.value)
    assert msg.startswith("client1 (192.0.2.11): user ops cannot run commands as root without a password")
    assert "ops ALL=(ALL) NOPASSWD: ALL" in msg
    assert check_sudo(SshTarget("client1", "192.0.2.11"), refused) is refused  # root: its own failure


def test_the_harness_runs_node_commands_as_root_and_does_not_retry_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[str] = []
    answer = Result(1, "", "sudo: a password is required\n")

    def fake_run(target: SshTarget, command: str, *, stdin: bytes = b"", timeout: float = 60.0) -> Result:
        sent.append(command)
        return answer

    monkeypatch.setattr(remote.CONNECTIONS, "run", fake_run)
    node = Remote(SshTarget("client1", "192.0.2.11", user="ops"))
    with pytest.raises(SudoRefused, match=r"client1 .* user ops"):
        node.run("systemctl is-active fieldlab-agent", retry_for=30.0)
    assert sent == ["sudo -n -- sh -c 'systemctl is-active fieldlab-agent'"]
    sent.clear()
    answer = Result(0, "active\n", "")
    assert Remote(SshTarget("client1", "192.0.2.11")).out("systemctl is-active fieldlab-agent") == "active"
    assert sent == ["systemctl is-active fieldlab-agent"]


# -- no root on the controller for the static provider ---------------------------------------------


def test_a_static_lab_needs_no_root_on_the_controller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setenv("FIELDLAB_HOME", str(tmp_path))
    missing = tmp_path / "nope.yml"
    # Past the root check: the next thing said is about the inventory.
    assert cli.main(["lab", "up", "--provider", "static", "--inventory", str(missing), "--lab", "s"]) == 2
    assert capsys.readouterr().err.strip() == f"fieldlab: error: {missing}: no such inventory file"
    paths = LabPaths("s")
    paths.ensure()
    LabRecord("s", "static", [Node("server1", "server", "192.0.2.10")]).save(paths)
    assert cli.main(["lab", "down", "--lab", "s"]) == 0
    assert not paths.lab_file.exists()
    # The docker provider still needs root, and says the static one does not.
    assert cli.main(["lab", "up", "--provider", "docker", "--lab", "d"]) == 2
    err = capsys.readouterr().err
    assert "the docker provider needs root on the controller" in err
    assert "the static provider needs none" in err
    assert cli.main(["lab", "down", "--lab", "nolab"]) == 2  # no record: docker leftovers, root


def test_a_static_lab_up_stops_on_a_missing_key_before_any_ssh(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setenv("FIELDLAB_HOME", str(tmp_path / "fl"))
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    argv = ["lab", "up", "--provider", "static", "--inventory", str(inv), "--lab", "s", "--no-provision"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"server1: key file {home}/keys/server1 (ansible_ssh_private_key_file) does not exist" in err
    assert not LabPaths("s").lab_file.exists()
