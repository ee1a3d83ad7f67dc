"""Typed description of a lab and where its files live. Loaded once, then handed to a provider."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import ConfigError

LAB_DIR = Path(__file__).resolve().parent
PROJECT_DIR = LAB_DIR.parent
PLAYBOOK_DIR = LAB_DIR / "playbooks"
ROLES_DIR = LAB_DIR / "roles"

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
PROVIDERS = ("docker", "static", "qemu")
DEFAULT_SUBNET = "10.213.0.0/24"
# A lab's clients: the first FULL_CLIENTS (default 2, at most MAX_FULL_CLIENTS) are full clients (an
# inner docker engine, every driver); the rest are light clients (docs/fleet.md): the same node image
# and roles without the docker engine, running exec tasks (and raw_exec ones in a lab made with
# --raw-exec), so that a fleet of a hundred fits on 2 cores.
MAX_CLIENTS = 200
MAX_FULL_CLIENTS = 8
DEFAULT_FULL_CLIENTS = 2
# Node roles: the server, full clients and light clients (Ansible groups servers, clients and
# light_clients; light clients are also in clients).
ROLES = ("server", "client", "light")


def image_role(role: str) -> str:
    """The node image a role's nodes start from: light clients run the full clients' (baked) image,
    its docker engine masked before first boot."""
    return "client" if role == "light" else role


def _home() -> Path:
    """Where inventories and lab state live: the project's lab/ dir unless FIELDLAB_HOME says otherwise."""
    override = os.environ.get("FIELDLAB_HOME")
    return Path(override).resolve() if override else LAB_DIR


@dataclass(frozen=True)
class NodeSpec:
    name: str
    role: str  # "server", "client" or "light" (a client without docker)
    address: str


LAYOUTS = ("fieldlab", "nomad")  # the agent role's fieldlab_agent_layout


@dataclass(frozen=True)
class LabSpec:
    """What the user asked for: a named lab, its provider and its shape."""

    name: str = "default"
    provider: str = "docker"
    clients: int = 2
    full_clients: int = DEFAULT_FULL_CLIENTS  # the first clients are full, the rest light
    subnet: str = DEFAULT_SUBNET
    static_inventory: Path | None = None
    extra_vars: dict[str, str] = field(default_factory=dict)
    # The agents' raw_exec driver (no isolation: trusted jobspecs only). Off unless the lab is made
    # for suites that run raw_exec tasks (`fieldlab lab up --raw-exec`; make test and make nightly).
    raw_exec: bool = False
    # The node layout the agents are deployed with: `fieldlab` (this project's names) or `nomad` (a
    # Nomad client's: unit, data dir, netns, cgroups, CNI network), which the suites then read with
    # TARGET=nomad (the inventory's fieldlab_target).
    layout: str = "fieldlab"
    # What runs on the clients: `fieldlab`, this project's agent (deployed by lab up), or `nomad`, a
    # Nomad cluster's clients on the user's own hosts (static provider): nothing is deployed, the
    # cluster's certificates go into the secrets dir by hand, and the suites read the nodes so.
    target: str = "fieldlab"

    def _check_layout_and_target(self) -> None:
        if self.layout not in LAYOUTS:
            raise ConfigError(f"--layout {self.layout!r}: one of {', '.join(LAYOUTS)}")
        if self.target not in LAYOUTS:
            raise ConfigError(f"--target {self.target!r}: one of {', '.join(LAYOUTS)}")
        if self.target != "fieldlab" and self.provider != "static":
            raise ConfigError(
                f"--target {self.target}: the clients of a running {self.target} cluster on your own hosts"
                " (--provider static --inventory FILE); to run this agent under Nomad's names, --layout nomad"
            )
        if self.target != "fieldlab" and self.layout != "fieldlab":
            raise ConfigError(f"--target {self.target} deploys nothing: --layout does not apply")

    def __post_init__(self) -> None:
        self._check_layout_and_target()
        if not _NAME_RE.match(self.name):
            raise ConfigError(f"lab name {self.name!r}: use 1-24 of a-z, 0-9 and '-', starting with a letter")
        if self.provider not in PROVIDERS:
            raise ConfigError(f"unknown provider {self.provider!r}: choose one of {', '.join(PROVIDERS)}")
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ConfigError(f"--clients {self.clients}: a lab has 1 to {MAX_CLIENTS} client nodes")
        if not 1 <= self.full_clients <= MAX_FULL_CLIENTS:
            raise ConfigError(
                f"--full-clients {self.full_clients}: 1 to {MAX_FULL_CLIENTS} clients run a docker engine"
            )
        try:
            net = ipaddress.ip_network(self.subnet)
        except ValueError as exc:
            raise ConfigError(f"--subnet {self.subnet!r}: {exc}") from None
        if net.version != 4 or net.prefixlen > 28:
            raise ConfigError(f"--subnet {self.subnet}: an IPv4 network of /28 or larger is needed")
        if not net.is_private:
            raise ConfigError(f"--subnet {self.subnet}: a lab network must use a private range")
        last = int(net.network_address) + 10 + self.clients
        if last >= int(net.broadcast_address):
            raise ConfigError(
                f"--subnet {self.subnet}: too small for {self.clients} clients (nodes take .10 upwards)"
            )
        if self.provider == "static" and self.static_inventory is None:
            raise ConfigError("provider static needs --inventory FILE (see lab/inventory/examples/)")

    @property
    def nodes(self) -> list[NodeSpec]:
        """server1, the full clients client1..F, then the light clients light001.., on fixed addresses
        of the lab subnet (.10, .11, ...)."""
        net = ipaddress.ip_network(self.subnet)
        base = int(net.network_address)
        names = [("server1", "server")] + [(f"client{i}", "client") for i in range(1, self.full + 1)]
        names += [(f"light{i:03d}", "light") for i in range(1, self.light + 1)]
        return [NodeSpec(n, r, str(ipaddress.ip_address(base + 10 + i))) for i, (n, r) in enumerate(names)]

    @property
    def full(self) -> int:
        """Full clients (a docker engine each)."""
        return min(self.clients, self.full_clients)

    @property
    def light(self) -> int:
        """Light clients: every client beyond the full ones."""
        return self.clients - self.full

    @property
    def gateway(self) -> str:
        return str(ipaddress.ip_address(int(ipaddress.ip_network(self.subnet).network_address) + 1))


@dataclass(frozen=True)
class LabPaths:
    """Files of one lab. The state dir holds secrets: it is 0700 and its files 0600."""

    name: str
    home: Path = field(default_factory=_home)

    @property
    def inventory_dir(self) -> Path:
        return self.home / "inventory" / self.name

    @property
    def inventory(self) -> Path:
        return self.inventory_dir / "hosts.yml"

    @property
    def state_dir(self) -> Path:
        return self.home / "state" / self.name

    @property
    def secrets_dir(self) -> Path:
        return self.state_dir / "secrets"

    @property
    def ssh_key(self) -> Path:
        return self.secrets_dir / "id_ed25519"

    @property
    def lab_file(self) -> Path:
        """What `up` created, so that `down`, `status` and `reboot` work without flags."""
        return self.state_dir / "lab.json"

    @property
    def timings(self) -> Path:
        return self.state_dir / "timings.json"

    @property
    def wheelhouse(self) -> Path:
        return self.state_dir / "wheelhouse"

    def ensure(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        self.secrets_dir.chmod(0o700)
        self.inventory_dir.mkdir(parents=True, exist_ok=True)
