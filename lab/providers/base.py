"""The provider interface. A provider makes hosts exist and be reachable over SSH as root; it never
configures them (that is Ansible's job), so the same playbooks and suites run on every provider."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from lab.config import LabPaths, LabSpec
from lab.errors import ProviderError
from lab.ssh import SshTarget

# How long a node may take from "created" or "rebooted" to answering over ssh.
NODE_BOOT_TIMEOUT = 90.0


@dataclass(frozen=True)
class Node:
    name: str
    role: str  # "server" or "client"
    address: str
    port: int = 22
    user: str = "root"
    key_file: str = ""  # a bring-your-own host's key; docker nodes use the lab's own key

    def target(self, paths: LabPaths) -> SshTarget:
        if self.key_file:
            key: Path | None = Path(self.key_file).expanduser()
        else:
            key = paths.ssh_key if paths.ssh_key.exists() else None
        return SshTarget(self.name, self.address, self.port, self.user, key, paths.state_dir / "known_hosts")


@dataclass(frozen=True)
class NodeState:
    name: str
    address: str
    state: str  # provider's word: running, exited, missing, reachable, unreachable
    detail: str = ""


@dataclass(frozen=True)
class LabRecord:
    """What `up` created; kept in the lab's state dir so later commands need no flags."""

    name: str
    provider: str
    nodes: list[Node]
    subnet: str = ""
    image: str = ""
    static_inventory: str = ""
    # role -> the baked image its nodes were created from (lab/bake.py); empty: the bare image.
    baked: dict[str, str] = field(default_factory=dict)

    def save(self, paths: LabPaths) -> None:
        paths.lab_file.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, paths: LabPaths) -> LabRecord | None:
        if not paths.lab_file.exists():
            return None
        try:
            raw = json.loads(paths.lab_file.read_text())
            nodes = [Node(**n) for n in raw.pop("nodes")]
            return cls(nodes=nodes, **raw)
        except (json.JSONDecodeError, TypeError, KeyError) as exc:
            raise ProviderError(
                f"{paths.lab_file}: unreadable lab record ({exc}); remove it after checking what runs"
            ) from None

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes)
        raise ProviderError(f"lab {self.name} has no node {name!r} (nodes: {known})")


class Provider(Protocol):
    name: str

    def up(self, spec: LabSpec, paths: LabPaths, images: Mapping[str, str] | None = None) -> LabRecord:
        """Create (or find) every node and wait until each answers over ssh. Converges, never duplicates.
        `images`: the image per role, for providers that start nodes from images (the baked ones)."""

    def down(self, record: LabRecord, paths: LabPaths) -> list[str]:
        """Remove what `up` created; return what was removed (empty when nothing was there)."""

    def status(self, record: LabRecord, paths: LabPaths) -> list[NodeState]: ...

    def reboot(self, record: LabRecord, paths: LabPaths, node: str, *, hard: bool) -> float:
        """Reboot a node and wait until it answers with a new boot id; return the seconds it took."""

    def ssh_argv(self, record: LabRecord, paths: LabPaths, node: str) -> list[str]: ...


def ssh_argv(node: Node, paths: LabPaths) -> list[str]:
    """An interactive `ssh` command line for a node, as printed in the summary."""
    argv = [
        "ssh",
        "-i",
        str(paths.ssh_key),
        "-o",
        f"UserKnownHostsFile={paths.state_dir / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=accept-new",
    ]
    if node.port != 22:
        argv += ["-p", str(node.port)]
    return [*argv, f"{node.user}@{node.address}"]
