"""The group networks of one client: the agent's own bridge network and the `cni/<name>` networks of
the client's CNI config dir, as Nomad's network hook has them (agent.network.base.Network).

`mode = "cni/<name>"` attaches the alloc's netns to the conflist whose `name` is `<name>`: Nomad's
client reads the files of its `cni_config_dir` (`.conf`, `.conflist`, `.json`, in sorted order) and
takes the first one of that name; "CNI network config not found for name" when none is. Each loaded
conflist runs as the bridge network does (agent.network.bridge.BridgeNetwork over a CniNetwork): the
same netns per alloc, the same ADD result kept on disk, the same restore check (the agent's own check
of the netns, the bridge and veth only for a conflist with a bridge plugin, and CNI CHECK where the
plugins are new enough, nomad-24292), the same DEL and cleanup. Port mappings reach only a conflist
whose plugins ask for `portMappings` (Nomad passes the capability; without portmap nothing is mapped).

Which network an alloc is on after a restart is read from the kept ADD results (their file names carry
the network's name: agent.network.cnicache), so CHECK and DEL never depend on the jobspec being read
again; the sweeper is given every conflist of the dir whose results it finds (`sweep_networks`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from agent.errors import AgentError
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.network.base import BRIDGE, AttachSpec
from agent.network.bridge import BridgeNetwork
from agent.network.cni import CniNetwork
from agent.network.result import CniError
from agent.structs.records import PortAlloc

log = logging.getLogger(__name__)

CONF_SUFFIXES = (".conf", ".conflist", ".json")  # libcni's ConfFiles, as Nomad's loadCNIConf asks


def find_conflist(conf_dir: Path, name: str) -> Path:
    """The file of the CNI network `name` in `conf_dir`, as Nomad's loadCNIConf finds it: the first
    file (sorted) whose network name is `name`. A single-plugin `.conf` of that name is refused (this
    agent runs conflists only); raises CniError with Nomad's words when there is none."""
    try:
        files = sorted(p for p in conf_dir.iterdir() if p.suffix in CONF_SUFFIXES and p.is_file())
    except OSError as exc:
        raise CniError(f"no CNI network config found in {conf_dir}: {exc.strerror or exc}") from exc
    if not files:
        raise CniError(f"no CNI network config found in {conf_dir}")
    for path in files:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            # Nomad fails the alloc on the first unreadable file, naming it
            raise CniError(f"failed to load CNI config file {path}: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("name") != name:
            continue
        if not isinstance(doc.get("plugins"), list):
            raise CniError(
                f"{path}: the CNI network {name!r} is a single-plugin config; fieldlab-agent runs "
                "network configuration lists only (write it as a .conflist with a 'plugins' list)"
            )
        return path
    raise CniError(f'CNI network config not found for name "{name}" in {conf_dir}')


def plan_cni_teardown(added_this_run: bool, bugs: Bugs = NO_BUGS) -> bool:
    """Whether an alloc's DEL can run on its network: always, its conflist loaded for the teardown as
    for the setup (Nomad's fix of nomad-7537, PR 7643). With `cni-unloaded-at-teardown` only when an
    ADD ran on that network in this agent run (Nomad 0.11's configurator loaded its conflist in Setup
    only): an alloc restored at an agent start and stopped before any other joined its network
    gets no DEL, and its IP reservation, iptables chains and kept result stay behind."""
    return added_this_run or not bugs.cni_unloaded_at_teardown


def bridge_of(cni: CniNetwork) -> str | None:
    """The host bridge of a conflist (its bridge plugin's `bridge`, the plugin's default "cni0"), or
    None when it has no bridge plugin (macvlan, ipvlan, ptp...): what the restore check looks at."""
    for p in cni.plugins:
        if p.type == "bridge":
            return str(p.conf.get("bridge") or "cni0")
    return None


class NetworkSet:
    """The Network of the alloc runner: routes each alloc to the bridge network or its cni/<name>."""

    def __init__(
        self,
        bridge: BridgeNetwork | None,
        conf_dir: Path,
        plugin_dir: Path,
        cache_dir: Path,
        *,
        run_check: bool,
        bugs: Bugs = NO_BUGS,
    ) -> None:
        self.bridge = bridge
        self.conf_dir = conf_dir
        self.plugin_dir = plugin_dir
        self.cache_dir = cache_dir
        self.run_check = run_check
        self.bugs = bugs
        self._named: dict[str, BridgeNetwork] = {}
        self._added: set[str] = set()  # the networks an ADD ran on in this run (plan_cni_teardown)

    # -- which network

    def _bridge_names(self) -> set[str]:
        if self.bridge is None:
            return set()
        return {self.bridge.cni.name, *self.bridge.former}

    def named(self, name: str) -> BridgeNetwork:
        """The network of mode cni/<name>, loaded from the conf dir at its first use (as Nomad)."""
        if self.bridge is not None and name in self._bridge_names():
            return self.bridge
        if name not in self._named:
            cni = CniNetwork(
                find_conflist(self.conf_dir, name), self.plugin_dir, self.cache_dir, bugs=self.bugs
            )
            self._named[name] = BridgeNetwork(
                cni, bridge_of(cni), run_check=self.run_check, optional_portmap=True
            )
            log.info("CNI network %s loaded from %s", name, cni.conflist_path)
        return self._named[name]

    def held_by(self, alloc_id: str) -> str | None:
        """The name of the network whose kept ADD result is this alloc's, None when none is kept."""
        for p in sorted(self.cache_dir.glob(f"*:{alloc_id}:*.json")):
            return p.name.split(":", 1)[0]
        return None

    def for_alloc(self, alloc_id: str, spec: AttachSpec) -> BridgeNetwork:
        """The network holding the alloc's kept result, else the one its mode names."""
        held = self.held_by(alloc_id)
        try:
            if held is not None:
                return self.named(held)
        except CniError as exc:
            log.error("alloc %s is on CNI network %s, which cannot be loaded: %s", alloc_id, held, exc)
        if spec.cni_name:
            return self.named(spec.cni_name)
        if self.bridge is None:
            raise AgentError("bridge networking needs a CNI conflist (config cni_conf_dir)")
        return self.bridge

    # -- the Network protocol

    def add(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> str:
        net = self.named(spec.cni_name) if spec.cni_name else self.for_alloc(alloc_id, BRIDGE)
        self._added.add(net.cni.name)
        return net.add(alloc_id, netns, ports, spec=spec)

    def has_result(self, alloc_id: str) -> bool:
        return self.held_by(alloc_id) is not None

    def check(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> list[str]:
        try:
            net = self.for_alloc(alloc_id, spec)
        except AgentError as exc:
            return [str(exc)]
        return net.check(alloc_id, netns, ports, spec=spec)

    def delete(
        self,
        alloc_id: str,
        netns: Path | None,
        *,
        address: str = "",
        ports: Sequence[PortAlloc] = (),
        spec: AttachSpec = BRIDGE,
    ) -> list[str]:
        net = self.for_alloc(alloc_id, spec)
        if not plan_cni_teardown(net.cni.name in self._added, self.bugs):
            return [f"cni plugin not initialized: no DEL of alloc {alloc_id} on network {net.cni.name}"]
        return net.delete(alloc_id, netns, address=address, ports=ports, spec=spec)

    def forget(self, alloc_id: str) -> None:
        held = self.held_by(alloc_id)
        if held is not None:
            self.named(held).forget(alloc_id)

    def release_addresses(self, alloc_id: str) -> None:
        held = self.held_by(alloc_id)
        if held is not None:
            self.named(held).release_addresses(alloc_id)
        elif self.bridge is not None:
            self.bridge.release_addresses(alloc_id)

    # -- the sweeper's view

    def sweep_networks(self) -> list[CniNetwork]:
        """The cni/<name> networks with kept results or loaded: their dead allocs' results, IPAM
        reservations and iptables chains are the sweeper's (nomad-12216), as the bridge network's."""
        names = {p.name.split(":", 1)[0] for p in self.cache_dir.glob("*:*:*.json")} | set(self._named)
        found = []
        for name in sorted(names - self._bridge_names()):
            try:
                found.append(self.named(name).cni)
            except CniError as exc:
                log.error("CNI network %s not loaded (its orphans cannot be swept): %s", name, exc)
        return found
