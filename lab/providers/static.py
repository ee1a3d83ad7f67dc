"""Bring-your-own hosts: cloud VMs, Vagrant boxes or bare metal listed in an Ansible inventory.

The provider creates nothing. It checks that the inventory has the host groups the playbooks need
(`servers` and `clients`, each with at least one host and an address), that each host's key file is
there (`~` and `$HOME` expanded) and that each host answers over ssh, as root or as a user with
passwordless sudo; then the lab goes on exactly as with the docker provider. Reboots go over ssh
(`systemctl reboot`, or sysrq `b` for --hard, through `sudo -n` for a non-root user). Nothing of it
needs root on the controller.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from lab.config import LabPaths, LabSpec
from lab.errors import ConfigError, ProviderError
from lab.providers.base import (
    NODE_BOOT_TIMEOUT,
    LabRecord,
    Node,
    NodeState,
    expand_path,
    run_as_root,
    ssh_argv,
)
from lab.ssh import answers, boot_id, wait_ssh

REQUIRED_GROUPS = {"servers": "server", "clients": "client"}


def read_static_inventory(path: Path) -> list[Node]:
    """Nodes of a user's inventory, with a clear error naming the file and what is missing."""
    if not path.exists():
        raise ConfigError(f"{path}: no such inventory file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    top: dict[str, Any] = (data or {}).get("all") or {}
    children: dict[str, Any] = top.get("children") or {}
    all_vars: dict[str, Any] = top.get("vars") or {}
    nodes: list[Node] = []
    for group, role in REQUIRED_GROUPS.items():
        hosts = (children.get(group) or {}).get("hosts") or {}
        group_vars = {**all_vars, **((children.get(group) or {}).get("vars") or {})}
        if not hosts:
            raise ConfigError(
                f"{path}: host group all.children.{group} is missing or empty "
                "(see lab/inventory/examples/static.yml)"
            )
        for name, host_vars in hosts.items():
            hv = host_vars or {}
            addr = hv.get("ansible_host")
            if not addr:
                raise ConfigError(f"{path}: all.children.{group}.hosts.{name}.ansible_host is not set")
            merged = {**group_vars, **hv}  # a host's own vars win over its group's, then all's
            nodes.append(
                Node(
                    str(name),
                    role,
                    str(addr),
                    int(merged.get("ansible_port", 22)),
                    str(merged.get("ansible_user", "root")),
                    expand_path(str(merged.get("ansible_ssh_private_key_file") or "")),
                )
            )
    return nodes


def key_file_problems(nodes: list[Node]) -> list[str]:
    """What is wrong with the nodes' key files, one line per node: missing, or readable by others
    (OpenSSH, which Ansible runs, refuses such a key; paramiko would not, so say it before either)."""
    problems = []
    for n in nodes:
        if not n.key_file:
            continue
        key = Path(n.key_file)
        if not key.is_file():
            problems.append(f"{n.name}: key file {key} (ansible_ssh_private_key_file) does not exist")
        elif key.stat().st_mode & 0o077:
            problems.append(
                f"{n.name}: key file {key} is readable by others (mode {key.stat().st_mode & 0o777:o});"
                f" ssh refuses it: chmod 600 {key}"
            )
    return problems


class StaticProvider:
    name = "static"

    def up(self, spec: LabSpec, paths: LabPaths, images: Mapping[str, str] | None = None) -> LabRecord:
        del images  # bring-your-own hosts: nothing to start from an image
        assert spec.static_inventory is not None
        nodes = read_static_inventory(spec.static_inventory)
        problems = key_file_problems(nodes)
        if problems:
            raise ConfigError(f"{spec.static_inventory}: " + "; ".join(problems))
        paths.ensure()
        record = LabRecord(spec.name, self.name, nodes, static_inventory=str(spec.static_inventory.resolve()))
        record.save(paths)
        for n in nodes:
            target = n.target(paths)
            wait_ssh(target, NODE_BOOT_TIMEOUT, what=f"ssh as {n.user}")
            # Every play and the e2e suites act as root: a user whose sudo wants a password fails here,
            # named, rather than in the middle of a playbook.
            run_as_root(target, "true", timeout=30.0)
        return record

    def down(self, record: LabRecord, paths: LabPaths) -> list[str]:
        return []  # the hosts are the user's: nothing of theirs is removed

    def status(self, record: LabRecord, paths: LabPaths) -> list[NodeState]:
        return [
            NodeState(n.name, n.address, "reachable" if answers(n.target(paths)) else "unreachable")
            for n in record.nodes
        ]

    def reboot(self, record: LabRecord, paths: LabPaths, node: str, *, hard: bool) -> float:
        n = record.node(node)
        target = n.target(paths)
        before = boot_id(target)
        if before is None:
            raise ProviderError(f"{node}: does not answer over ssh before the reboot")
        action = "echo b > /proc/sysrq-trigger" if hard else "systemctl reboot"
        t0 = time.monotonic()
        # Detached so that the ssh call returns before the host goes down.
        run_as_root(target, f"nohup sh -c 'sleep 1; {action}' >/dev/null 2>&1 &")
        wait_ssh(
            target, NODE_BOOT_TIMEOUT * 4, not_boot_id=before, what="ssh with a new boot id after reboot"
        )
        return time.monotonic() - t0

    def ssh_argv(self, record: LabRecord, paths: LabPaths, node: str) -> list[str]:
        return ssh_argv(record.node(node), paths)
