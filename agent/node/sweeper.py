"""The orphan sweeper: remove what no live alloc owns, never what one does (nomad-16338).

`plan_sweep` is pure: given the live alloc ids (and the adopted ones, which it treats alike) and what
was observed on the node it returns the removals. `Sweeper` observes, plans and executes; it runs
after restore on start and periodically, with a grace period for young containers and a dry-run
mode that only reports.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.allocdir.fsutil import unmount_below
from agent.drivers.base import LABEL_ALLOC, LABEL_ROLE
from agent.drivers.cgroups import Cgroups
from agent.drivers.docker import DockerDriver
from agent.network import iptables, netns
from agent.network.cni import CniNetwork
from agent.structs import layout
from agent.structs.layout import FIELDLAB, NOMAD, netns_owner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeenContainer:
    id: str
    name: str
    alloc: str
    role: str  # "pause" or "task"
    age: float  # seconds since created


@dataclass(frozen=True)
class SeenChain:
    table: str
    name: str
    owner: str | None


@dataclass(frozen=True)
class Observed:
    containers: Sequence[SeenContainer] = ()
    cni_cache_ids: Sequence[str] = ()
    reservations: Sequence[tuple[str, str]] = ()  # (ip, container id)
    chains: Sequence[SeenChain] = ()
    alloc_dirs: Sequence[str] = ()
    netns: Sequence[str] = ()  # names of netns in /run/netns, agent-made ones "<netns prefix><alloc id>"
    # ("<alloc>.<task>", pids) of process tasks: exec and raw_exec (agent.drivers.cgroups)
    task_cgroups: Sequence[tuple[str, Sequence[int]]] = ()
    forward_ips: Sequence[str] = ()  # addresses with firewall-plugin rules in CNI-FORWARD (no comment)
    # The recognised layouts' (agent.structs.layout.recognised): which netns names are the agent's.
    netns_prefixes: Sequence[str] = (NOMAD.netns_prefix, FIELDLAB.netns_prefix)


@dataclass(frozen=True)
class Removal:
    kind: str  # container, cni, ipam, chain, alloc_dir
    target: str
    owner: str
    detail: str = ""


@dataclass(frozen=True)
class SweepPolicy:
    grace: float = 60.0  # containers younger than this are left alone (they may be starting)
    # Fault `sweep-untracked-pause` (nomad-16338): pause containers are not counted as tracked by
    # their alloc, so the sweeper removes live allocs' pause containers.
    untracked_pause: bool = False


def plan_sweep(
    live: Iterable[str],
    obs: Observed,
    policy: SweepPolicy = SweepPolicy(),
    adopted: Iterable[str] = (),
    recorded: Iterable[str] = (),
) -> list[Removal]:
    """`adopted`: allocs found running after the state was lost (agent.runner.adopt): everything of
    theirs is kept exactly as a live alloc's is, until an operator stops them. `recorded`: allocs
    with a record, terminal ones too: their alloc dirs (logs) are the GC's to remove, with the
    records and events, never the sweeper's."""
    live_ids = set(live) | set(adopted)
    out: list[Removal] = []
    for c in obs.containers:
        owned = c.alloc in live_ids and not (policy.untracked_pause and c.role == "pause")
        if not owned and c.age >= policy.grace:
            out.append(Removal("container", c.id, c.alloc, c.name))
    # CNI DEL for cached results of dead allocs also releases their IPAM and iptables chains.
    cached_dead = [cid for cid in obs.cni_cache_ids if cid not in live_ids]
    out += [Removal("cni", cid, cid, "DEL with the cached result") for cid in cached_dead]
    gone = live_ids | set(cached_dead)
    out += [Removal("ipam", ip, cid, f"reservation {ip}") for ip, cid in obs.reservations if cid not in gone]
    out += [
        Removal("chain", f"{ch.table}/{ch.name}", ch.owner or "?")
        for ch in obs.chains
        if ch.owner not in live_ids and ch.owner not in cached_dead
    ]
    # The firewall plugin's CNI-FORWARD rules name only an address: they are a live alloc's while a
    # live alloc holds that address, and go with a cached dead alloc's DEL; any other is a leak
    # (a DEL that never ran) that silently accepts traffic for whoever gets the address next.
    kept = {ip for ip, cid in obs.reservations if cid in live_ids or cid in cached_dead}
    out += [
        Removal("forward_rule", ip, "?", "firewall plugin rules") for ip in obs.forward_ips if ip not in kept
    ]
    kept_dirs = live_ids | set(recorded)
    out += [Removal("alloc_dir", d, d) for d in obs.alloc_dirs if d not in kept_dirs]
    for n in obs.netns:
        alloc = netns_owner(n, obs.netns_prefixes)
        if alloc is not None and alloc not in live_ids:
            out.append(Removal("netns", n, alloc))
    for name, pids in obs.task_cgroups:
        alloc = name.rsplit(".", 1)[0]
        if alloc not in live_ids:
            out.append(Removal("task_process", name, alloc, f"pids {list(pids)}"))
    return out


@dataclass
class SweepReport:
    planned: list[Removal] = field(default_factory=list)
    removed: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    dry_run: bool = False


class Sweeper:
    def __init__(
        self,
        docker: DockerDriver | None,
        cni: CniNetwork | None,
        data_dir: Path,
        *,
        former_cni: Sequence[CniNetwork] = (),
        policy: SweepPolicy = SweepPolicy(),
        dry_run: bool = False,
        more_networks: Callable[[], Sequence[CniNetwork]] | None = None,
    ) -> None:
        self.docker = docker
        self.cni = cni
        # The networks of earlier layouts still on the node (agent.structs.layout): their allocs' leftovers
        # too.
        self.own_networks = [n for n in (cni, *former_cni) if n is not None]
        # The cni/<name> networks (agent.network.networks.NetworkSet.sweep_networks): asked at each
        # sweep, as their kept results come and go (nomad-12216 for a cni/* alloc as for a bridge one).
        self.more_networks = more_networks
        self.data_dir = data_dir
        self.policy = policy
        self.dry_run = dry_run
        self.totals: Counter[str] = Counter()

    @property
    def networks(self) -> list[CniNetwork]:
        more = list(self.more_networks()) if self.more_networks is not None else []
        names = {n.name for n in self.own_networks}
        return [*self.own_networks, *(n for n in more if n.name not in names)]

    def observe(self) -> Observed:
        now = time.time()
        containers = []
        # No docker engine on this client (docker_enabled false): no container is ours to sweep.
        for c in self.docker.managed_containers() if self.docker is not None else []:
            age = now - c.created if c.created else 1e9
            containers.append(
                SeenContainer(c.id, c.name, c.labels.get(LABEL_ALLOC, ""), c.labels.get(LABEL_ROLE, ""), age)
            )
        cache_ids: list[str] = []
        reservations: list[tuple[str, str]] = []
        chains: list[SeenChain] = []
        forward_ips: list[str] = []
        if networks := self.networks:
            names = {n.name for n in networks}
            cache_ids = sorted({k.container_id for n in networks for k in n.cached_ids()})
            reservations = [(r.ip, r.container_id) for n in networks for r in n.ipam_reservations()]
            chains = [
                SeenChain(c.table, c.name, c.container_id)
                for c in iptables.list_cni_chains()
                if c.network in names
            ]
            forward_ips = iptables.forward_rule_ips()
        alloc_root = self.data_dir / "alloc"
        dirs = sorted(p.name for p in alloc_root.iterdir() if p.is_dir()) if alloc_root.is_dir() else []
        prefixes = tuple(dict.fromkeys(lay.netns_prefix for lay in layout.recognised()))
        spaces = [n for n in netns.list_names() if netns_owner(n, prefixes) is not None]
        cgroups = [(name, Cgroups.found(name).pids()) for name in Cgroups.names()]
        return Observed(
            containers, cache_ids, reservations, chains, dirs, spaces, cgroups, forward_ips, prefixes
        )

    def sweep(
        self, live: Iterable[str], adopted: Iterable[str] = (), recorded: Iterable[str] = ()
    ) -> SweepReport:
        planned = plan_sweep(live, self.observe(), self.policy, adopted, recorded)
        report = SweepReport(planned, dry_run=self.dry_run)
        for r in report.planned:
            log.warning(
                "sweeper %s orphan %s %s (owner alloc %s) %s",
                "would remove" if self.dry_run else "removes",
                r.kind,
                r.target,
                r.owner,
                r.detail,
            )
            if self.dry_run:
                continue
            try:
                self._remove(r)
                report.removed[r.kind] += 1
            except Exception as exc:
                report.errors.append(f"{r.kind} {r.target}: {exc}")
        self.totals.update(report.removed)
        return report

    def _remove(self, r: Removal) -> None:
        if r.kind == "container" and self.docker is not None:
            self.docker.remove_container(r.target)
        elif r.kind == "cni" and (networks := self.networks):
            # DEL on the network that holds the ADD result (an earlier layout's or a cni/<name> one).
            held = [n for n in networks if n.cache_path(r.target).exists()] or networks[:1]
            for n in held:
                n.delete(r.target)
        elif r.kind == "ipam":
            for n in self.networks:
                n.release_reservations(r.owner)
        elif r.kind == "chain":
            table, name = r.target.split("/", 1)
            iptables.remove_chain(table, name)
        elif r.kind == "alloc_dir":
            unmount_below(self.data_dir / "alloc" / r.target)
            shutil.rmtree(self.data_dir / "alloc" / r.target)
        elif r.kind == "netns":
            netns.delete(r.target)
        elif r.kind == "forward_rule":
            iptables.remove_forward_rules([r.target])
        elif r.kind == "task_process":
            Cgroups.found(r.target).kill_all()
