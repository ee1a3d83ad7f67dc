"""The provider interface. A provider makes hosts exist and be reachable over SSH, as root or as a
user with passwordless sudo; it never configures them (that is Ansible's job), so the same playbooks
and suites run on every provider.

Also the two rules every SSH client of the lab shares (the providers, `fieldlab lab ssh`, the e2e
harness): key paths expand `~` and `$HOME` (`expand_path`), and a command that needs root runs
through `sudo -n` when the login user is not root (`as_root`, `sudo_refusal`)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from lab.config import LabPaths, LabSpec
from lab.errors import ProviderError
from lab.ssh import Result, SshTarget, run

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
            key: Path | None = Path(expand_path(self.key_file))
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
    # The agents run the raw_exec driver (`lab up --raw-exec`): written into the inventory.
    raw_exec: bool = False
    # The agents' node layout (`lab up --layout`): fieldlab, or nomad (Nomad's names: e2e/targets/).
    layout: str = "fieldlab"
    # What the clients run (`lab up --target`): fieldlab (this agent, deployed) or nomad (theirs).
    target: str = "fieldlab"

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
    """An interactive `ssh` command line for a node, as printed in the summary: its own key (a
    bring-your-own host's, expanded) or the lab's, its user and port; no `-i` when it has neither
    (ssh's own keys and agent then)."""
    target = node.target(paths)
    argv = ["ssh"]
    if target.key_file is not None:
        argv += ["-i", str(target.key_file)]
    argv += [
        "-o",
        f"UserKnownHostsFile={paths.state_dir / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=accept-new",
    ]
    if node.port != 22:
        argv += ["-p", str(node.port)]
    return [*argv, f"{node.user}@{node.address}"]


# -- the shared SSH rules ---------------------------------------------------------------------


def expand_path(path: str) -> str:
    """A key path as a user writes it in an inventory: `~`, `~user`, `$HOME` and `${HOME}` (any
    environment variable, as Ansible's own paths) expanded; "" stays "" (pure but for the environment)."""
    return os.path.expanduser(os.path.expandvars(path)) if path else ""


def as_root(command: str, user: str) -> str:
    """`command` as it must be sent to run as root when logged in as `user`: itself for root, else
    through `sudo -n` (never prompts: a sudo that wants a password fails at once, see `sudo_refusal`)
    in `sh -c`, so that pipes, redirections and `&` stay inside the root command (pure)."""
    if user == "root":
        return command
    return f"sudo -n -- sh -c {shlex.quote(command)}"


_SUDO_REFUSALS = (
    "a password is required",
    "a terminal is required",
    "is not in the sudoers file",
    "is not allowed to execute",
    "may not run sudo",
)


def sudo_refusal(res: Result) -> str | None:
    """Why `sudo -n` refused to run a command, from the command's result (its own first line of
    stderr, or that there is no sudo on the host); None when sudo ran it (pure)."""
    err = res.stderr.strip()
    if res.rc == 127 and "sudo" in err and "not found" in err:
        return "sudo is not installed"
    if res.rc != 0:
        for line in err.splitlines():
            if line.startswith("sudo:") and any(r in line for r in _SUDO_REFUSALS):
                return line.strip()
    return None


class SudoRefused(ProviderError):
    """A non-root login user may not run commands as root without a password."""

    def __init__(self, target: SshTarget, why: str) -> None:
        self.node, self.user, self.why = target.name, target.user, why
        super().__init__(
            f"{target.name} ({target.host}): user {target.user} cannot run commands as root without a"
            f" password (sudo -n: {why}); give it passwordless sudo, e.g. `{target.user} ALL=(ALL)"
            f" NOPASSWD: ALL` in /etc/sudoers.d/{target.user}, or log in as root (ansible_user: root)"
        )


def check_sudo(target: SshTarget, res: Result) -> Result:
    """`res` of a command sent through `as_root`; raises SudoRefused when sudo did not run it."""
    if target.user != "root":
        why = sudo_refusal(res)
        if why is not None:
            raise SudoRefused(target, why)
    return res


def run_as_root(target: SshTarget, command: str, timeout: float = 60.0) -> Result:
    """Run `command` on a node as root (see `as_root`); SudoRefused when the user may not."""
    return check_sudo(target, run(target, as_root(command, target.user), timeout=timeout))
