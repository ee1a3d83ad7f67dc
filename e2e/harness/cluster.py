"""The lab as the suites see it: read from the inventory that `fieldlab lab up` wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.harness.remote import Remote
from lab.config import LabPaths
from lab.ssh import SshTarget


@dataclass(frozen=True)
class Cluster:
    name: str
    paths: LabPaths
    servers: list[Remote]
    clients: list[Remote]

    @property
    def nodes(self) -> list[Remote]:
        return self.servers + self.clients

    def node(self, name: str) -> Remote:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"lab {self.name} has no node {name} (has {[n.name for n in self.nodes]})")

    @property
    def secrets(self) -> Path:
        return self.paths.secrets_dir

    @property
    def vault_addr(self) -> str:
        return f"http://{self.servers[0].address}:8200"


def load_cluster(lab: str) -> Cluster:
    paths = LabPaths(lab)
    if not paths.inventory.exists():
        raise FileNotFoundError(
            f"no inventory for lab {lab!r} at {paths.inventory}: run `make lab-up LAB={lab}`"
        )
    inv = yaml.safe_load(paths.inventory.read_text())["all"]
    v = inv["vars"]
    key = Path(v["ansible_ssh_private_key_file"]) if v.get("ansible_ssh_private_key_file") else None

    def remotes(group: str) -> list[Remote]:
        hosts = (inv["children"].get(group) or {}).get("hosts") or {}
        return [
            Remote(
                SshTarget(
                    name,
                    hv["ansible_host"],
                    int(hv.get("ansible_port", 22)),
                    hv.get("ansible_user", v.get("ansible_user", "root")),
                    key,
                    paths.state_dir / "known_hosts",
                )
            )
            for name, hv in hosts.items()
        ]

    return Cluster(lab, paths, remotes("servers"), remotes("clients"))
