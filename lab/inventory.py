"""Writes the Ansible inventory of a lab: the one file that playbooks and e2e suites read.

Connection settings are per host: each host's address, port, user and key (a static inventory's, `~`
and `$HOME` expanded at lab-up), and `ansible_become: true` for a user other than root. Become is
never a lab-wide (`all`) var nor a play keyword: both would also apply to the tasks the roles run on
the controller (`delegate_to: localhost`, e.g. saving the unseal keys), which would then need sudo
there, and the controller needs no root for a static lab."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lab.config import LabPaths
from lab.providers.base import LabRecord

# What a lab record's node carries itself (expanded); a user inventory's own values are not copied.
NODE_VARS = frozenset({"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file"})


def _is_become(key: str) -> bool:
    return key == "ansible_become" or key.startswith("ansible_become_")


def _carried(v: dict[str, Any] | None) -> dict[str, Any]:
    """A user's vars the lab's inventory keeps: all but the node's own and the lab's fieldlab_* ones."""
    return {k: x for k, x in (v or {}).items() if k not in NODE_VARS and not str(k).startswith("fieldlab_")}


def user_vars(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(all vars, vars per group, vars per host) of a static inventory that the lab's inventory keeps:
    install methods, become method, ... (the `ansible_become*` of `all` move to every host)."""
    data = yaml.safe_load(path.read_text()) or {}
    top = data.get("all") or {}
    children = top.get("children") or {}
    groups = {g: _carried((children.get(g) or {}).get("vars")) for g in ("servers", "clients")}
    hosts = {
        str(name): _carried(hv)
        for g in ("servers", "clients")
        for name, hv in ((children.get(g) or {}).get("hosts") or {}).items()
    }
    return _carried(top.get("vars")), groups, hosts


def _target_vars(record: LabRecord) -> dict[str, str]:
    """The agents laid out as a Nomad client (`--layout`: the roles' fieldlab_layout), or a Nomad
    cluster's own clients (`--target`): either way the harness reads the nodes by that target
    profile's names (fieldlab_target, e2e/targets/<name>.yml)."""
    if record.target != "fieldlab":
        return {"fieldlab_target": record.target}
    if record.layout != "fieldlab":
        return {"fieldlab_layout": record.layout, "fieldlab_target": record.layout}
    return {}


def inventory_data(record: LabRecord, paths: LabPaths) -> dict[str, Any]:
    all_vars: dict[str, Any] = {}
    group_vars: dict[str, dict[str, Any]] = {}
    host_vars: dict[str, dict[str, Any]] = {}
    if record.static_inventory:
        all_vars, group_vars, host_vars = user_vars(Path(record.static_inventory))
    become = {k: v for k, v in all_vars.items() if _is_become(k)}
    groups: dict[str, dict[str, Any]] = {"servers": {"hosts": {}}, "clients": {"hosts": {}}}
    for g, gv in group_vars.items():
        if gv:
            groups[g]["vars"] = gv
    # Always there (empty unless the lab has light clients), so the docker plays' `clients:!light_clients`
    # never names an unknown group.
    light: dict[str, Any] = {}
    groups["clients"]["children"] = {"light_clients": {"hosts": light}}
    for n in record.nodes:
        hv: dict[str, Any] = {"ansible_host": n.address}
        if n.port != 22:
            hv["ansible_port"] = n.port
        if n.user != "root":
            hv["ansible_user"] = n.user
            hv["ansible_become"] = True
        if n.key_file:
            hv["ansible_ssh_private_key_file"] = n.key_file
        hv.update(become)
        hv.update(host_vars.get(n.name, {}))
        if n.role == "light":
            # Light clients are clients (every client role and the agent) in a group of their own,
            # which the docker plays leave out (hosts: clients:!light_clients).
            light[n.name] = hv
        else:
            groups["servers" if n.role == "server" else "clients"]["hosts"][n.name] = hv
    lab_vars: dict[str, Any] = {
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_common_args": (
            f"-o UserKnownHostsFile={paths.state_dir / 'known_hosts'} "
            "-o StrictHostKeyChecking=accept-new -o ControlMaster=auto "
            "-o ControlPersist=120s -o ServerAliveInterval=5"
        ),
        "fieldlab_lab_name": record.name,
        "fieldlab_provider": record.provider,
        "fieldlab_state_dir": str(paths.state_dir),
        "fieldlab_secrets_dir": str(paths.secrets_dir),
        # The agents' raw_exec driver (no isolation, trusted jobspecs only): as `lab up` was asked.
        "fieldlab_agent_raw_exec_enabled": record.raw_exec,
    }
    lab_vars.update(_target_vars(record))
    if record.provider == "docker" or paths.ssh_key.exists():
        lab_vars["ansible_ssh_private_key_file"] = str(paths.ssh_key)
    if record.static_inventory:
        lab_vars["fieldlab_static_inventory"] = record.static_inventory
        # The user's own vars (install methods, ...) carry over, become settings onto the hosts; the
        # lab's fieldlab_* vars stay the lab's.
        lab_vars.update({k: v for k, v in all_vars.items() if not _is_become(k)})
    return {"all": {"vars": lab_vars, "children": groups}}


def write_inventory(record: LabRecord, paths: LabPaths) -> Path:
    paths.inventory_dir.mkdir(parents=True, exist_ok=True)
    header = f"# Generated by `fieldlab lab up` for lab {record.name!r} ({record.provider}); do not edit.\n"
    paths.inventory.write_text(header + yaml.safe_dump(inventory_data(record, paths), sort_keys=False))
    return paths.inventory
