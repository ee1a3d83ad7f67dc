"""The composition root: builds the agent's core from its config and starts its threads.

The only place that picks concrete adapters (drivers, netns owners, the CNI bridge network, the
sweeper) and the only place that probes the node for them (the CNI plugins' version). The daemon
and the integration tests' agent both come through here, so they cannot drift apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent.allocdir.hostvolumes import HostVolumeError, own_paths, resolve_host_volume, sweep_staged
from agent.client.checktarget import fingerprinted_address
from agent.client.core import Core
from agent.command.config import DEFAULT_TOKEN_ROLE, Config
from agent.command.plugins import DEFAULT_CHROOT_ENV, DockerPlugin, ExecPlugin, RawExecPlugin
from agent.consul.catalog import ConsulClient
from agent.decide.decisions import GcLimits, plan_orphan_sweep
from agent.decide.placement import NodeFacts
from agent.drivers.docker import DockerDriver
from agent.drivers.exec import ExecDriver
from agent.drivers.raw_exec import RawExecDriver
from agent.drivers.registry import build_registry
from agent.errors import AgentError
from agent.fieldbugs.faults import Faults
from agent.getter.fetch import FetchLimits
from agent.getter.getter import HttpGetter
from agent.identity.vaultlogin import VaultJwt
from agent.jobspec import DEFAULT_LIMITS, Limits
from agent.network.bridge import BridgeNetwork
from agent.network.cni import CniNetwork
from agent.network.networks import NetworkSet
from agent.network.plugins import check_supported, plugin_version
from agent.network.verify import load_netlink
from agent.node.hostnetworks import HostNetwork, NodeNetwork, node_networks
from agent.node.nodeinfo import disk_free_mb, load_node_id, node_attributes, storage_attributes
from agent.node.sweeper import Sweeper, SweepPolicy
from agent.runner.restorer import RESTORE_RENDER
from agent.runner.vaulttoken import TokenIssuer
from agent.state import StateStore
from agent.templates.budget import DEFAULT_PASS_BUDGET
from agent.templates.sockaddr import host_addresses

log = logging.getLogger(__name__)
# Seconds between looks at whether the restore's re-renders are done (_await_restore_renders: a poll
# of a condition, bounded by the restore timeout; the Serials have no completion event to wait on).
RESTORE_RENDER_POLL = 0.02


@dataclass(frozen=True)
class CoreSettings:
    data_dir: Path
    bridge: str
    sweep_grace: float = 60.0
    sweep_dry_run: bool = False
    advertise_address: str = ""
    cni_check: bool | None = None  # None: on when the plugins are new enough (probed here)
    # Nomad's client cni_config_dir and cni_path: where cni/<name> networks' conflists and plugins are
    # (None: no cni/<name> network; the bridge network alone, or none)
    cni_conf_dir: Path | None = None
    cni_plugin_dir: Path | None = None
    template_render_timeout: float = 2.0
    template_max_bytes: int = 4 * 1024 * 1024
    template_pass_budget: float = DEFAULT_PASS_BUDGET
    exec_allow_root: bool = False
    chroot_env: tuple[tuple[str, str], ...] = DEFAULT_CHROOT_ENV
    host_volumes: tuple[tuple[str, str, bool], ...] = ()  # (name, path, read_only), the config's
    host_networks: tuple[HostNetwork, ...] = ()  # the config's host_network blocks
    # the agent's own files and dirs besides data_dir, which no host volume may lead into
    # (agent.allocdir.hostvolumes)
    own_paths: tuple[Path, ...] = ()
    artifacts: HttpGetter = field(default_factory=HttpGetter)  # how tasks' artifacts are fetched
    docker_pids_limit: int = 0
    docker_plugin: DockerPlugin = field(default_factory=DockerPlugin)  # config `plugin` (Nomad's)
    exec_plugin: ExecPlugin = field(default_factory=ExecPlugin)  # config `plugin.exec` (Nomad's)
    raw_exec_plugin: RawExecPlugin = field(default_factory=RawExecPlugin)  # config `plugin.raw_exec`
    vault_token_role: str = DEFAULT_TOKEN_ROLE  # the token role tasks' Vault tokens are created through
    vault_jwt: VaultJwt = field(default_factory=VaultJwt)  # or the workload identity workflow's login
    limits: Limits = DEFAULT_LIMITS  # what a jobspec may ask for (max_count, max_kill_timeout)
    raw_exec_enabled: bool = False  # the raw_exec driver (no isolation) is registered
    docker_enabled: bool = True  # the docker driver (and pause containers) is registered
    datacenter: str = "dc1"
    # this node's name: a constraint's ${node.unique.name}, Nomad's docker label com.hashicorp.nomad.node_name
    node_name: str = ""
    node_class: str = ""  # ${node.class}
    node_meta: tuple[tuple[str, str], ...] = ()  # ${meta.<key>}
    gc: GcLimits = field(default_factory=GcLimits)

    @classmethod
    def from_config(cls, cfg: Config) -> CoreSettings:
        return cls(
            data_dir=cfg.data_dir,
            bridge=cfg.cni_bridge,
            cni_conf_dir=cfg.cni_conf_dir,
            cni_plugin_dir=cfg.cni_plugin_dir,
            sweep_grace=cfg.sweep_grace,
            sweep_dry_run=cfg.sweep_dry_run,
            advertise_address=cfg.advertise_address,
            template_render_timeout=cfg.template_render_timeout,
            template_max_bytes=cfg.template_max_bytes,
            template_pass_budget=cfg.template_pass_budget,
            exec_allow_root=cfg.exec_allow_root,
            chroot_env=cfg.chroot_env,
            host_volumes=cfg.host_volumes,
            host_networks=cfg.host_networks,
            own_paths=own_paths(cfg),
            artifacts=HttpGetter(
                allowed_hosts=cfg.artifact_allowed_hosts,
                fetch_limits=FetchLimits(
                    max_bytes=cfg.artifact_max_bytes, deadline=cfg.artifact_http_read_timeout
                ),
                cafile=str(cfg.tls.ca_file) if cfg.tls else None,
            ),
            docker_pids_limit=cfg.docker_pids_limit,
            docker_plugin=cfg.plugin,
            exec_plugin=cfg.exec_plugin,
            raw_exec_plugin=cfg.raw_exec_plugin,
            vault_token_role=cfg.vault.token_role,
            vault_jwt=cfg.vault.jwt,
            limits=Limits(
                max_count=cfg.max_count,
                max_kill_timeout=cfg.max_kill_timeout,
                max_shutdown_delay=cfg.max_shutdown_delay,
                identity_ttl=cfg.identity_default_ttl,
                max_templates=cfg.template_max_per_task,
            ),
            raw_exec_enabled=cfg.raw_exec_enabled,
            docker_enabled=cfg.docker_enabled,
            datacenter=cfg.datacenter,
            node_name=cfg.node_name,
            node_class=cfg.node_class,
            node_meta=cfg.node_meta,
            gc=GcLimits(
                max_allocs=cfg.gc_max_allocs,
                disk_usage_threshold=cfg.gc_disk_usage_threshold,
                inodes_usage_threshold=cfg.gc_inodes_usage_threshold,
            ),
        )


def build_core(
    settings: CoreSettings,
    store: StateStore,
    cni: CniNetwork | None,
    faults: Faults,
    *,
    docker: DockerDriver | None = None,
    consul: ConsulClient | None = None,
    vault: TokenIssuer | None = None,
    former_cni: Sequence[CniNetwork] = (),
) -> Core:
    own = (settings.data_dir, *settings.own_paths)
    for name, path, _ in settings.host_volumes:  # as Nomad's client, at start: each one must exist
        if not Path(path).is_dir():
            raise AgentError(f"config host_volumes.{name}.path: {path} is not a directory on this node")
        try:  # and, this agent's rule, lead nowhere into its own dirs (resolved again at every mount)
            resolve_host_volume(name, path, own)
        except HostVolumeError as exc:
            raise AgentError(f"config host_volumes.{name}.path: {exc}") from None
    if settings.docker_enabled:
        docker = docker or DockerDriver(
            pids_limit=settings.docker_pids_limit,
            publish_address=settings.advertise_address,
            node_name=settings.node_name,
            plugin=settings.docker_plugin,
            own_paths=own,
            bugs=faults.bugs(),
            staging_dir=settings.data_dir / "hostvolumes",
        )
        sweep_staged(
            settings.data_dir / "hostvolumes"
        )  # a crashed start's binds (agent.allocdir.hostvolumes)
    else:
        docker = None
    exec_driver = ExecDriver(
        allow_root=settings.exec_allow_root,
        chroot_env=settings.chroot_env,
        plugin=settings.exec_plugin,
        bugs=faults.bugs(),
    )
    run_check = settings.cni_check
    plugin_dir = cni.plugin_dir if cni else settings.cni_plugin_dir
    if run_check is None:
        run_check = bool(plugin_dir and check_supported(plugin_version(plugin_dir)))
    log.info("CNI CHECK on restore: %s", "on" if run_check else "off (plugins older than 1.3.0)")
    bridge = BridgeNetwork(cni, settings.bridge, run_check=run_check, former=former_cni) if cni else None
    network: NetworkSet | BridgeNetwork | None = bridge
    if settings.cni_conf_dir is not None and plugin_dir is not None:
        network = NetworkSet(
            bridge,
            settings.cni_conf_dir,
            plugin_dir,
            settings.data_dir / "cni",
            run_check=run_check,
            bugs=faults.bugs(),
        )
    policy = SweepPolicy(
        grace=settings.sweep_grace,
        untracked_pause=plan_orphan_sweep(faults.bugs()).reap_untracked_pause,
    )
    sweeper = Sweeper(
        docker,
        cni,
        settings.data_dir,
        policy=policy,
        dry_run=settings.sweep_dry_run,
        former_cni=former_cni,
        more_networks=network.sweep_networks if isinstance(network, NetworkSet) else None,
    )
    raw_exec = RawExecDriver(plugin=settings.raw_exec_plugin) if settings.raw_exec_enabled else None
    registry = build_registry(
        docker, exec_driver, raw_exec_enabled=settings.raw_exec_enabled, raw_exec=raw_exec
    )
    # The node as constraints see it, and as /v1/node/:id shows it: fingerprinted once, here.
    node = NodeFacts(
        id=load_node_id(settings.data_dir),
        name=settings.node_name,
        datacenter=settings.datacenter,
        node_class=settings.node_class,
        attributes={**node_attributes(registry.names), **storage_attributes(settings.data_dir)},
        meta=dict(settings.node_meta),
        disk_mb=disk_free_mb(settings.data_dir),
        host_volumes={name: (path, ro) for name, path, ro in settings.host_volumes},
    )
    if cni is not None:
        load_netlink()  # the restore's network checks need it (agent.network.verify)
    nets = _node_networks(settings.host_networks)
    named = {a.alias for n in nets for a in n.addresses} - {"default"}
    node = replace(node, node_networks=nets, host_networks=frozenset(named))
    node = replace(node, host_network_config=settings.host_networks)
    core = Core(
        store,
        registry,
        network,
        data_dir=settings.data_dir,
        faults=faults,
        sweeper=sweeper,
        consul=consul,
        advertise_address=settings.advertise_address,
        vault=vault,
        vault_token_role=settings.vault_token_role,
        vault_jwt=settings.vault_jwt,
        template_render_timeout=settings.template_render_timeout,
        template_max_bytes=settings.template_max_bytes,
        template_pass_budget=settings.template_pass_budget,
        limits=settings.limits,
        datacenter=settings.datacenter,
        gc_limits=settings.gc,
        node=node,
        getter=settings.artifacts,
    )
    core.deps.own_paths = settings.own_paths  # what a task's host volume may never lead into
    core.deps.node_address = settings.advertise_address or _fingerprinted_address()
    return core


def _node_networks(networks: Sequence[HostNetwork]) -> tuple[NodeNetwork, ...]:
    """The node's networks as Nomad's network fingerprint finds them (agent.node.hostnetworks), once
    at start; a host network with no address on this node is not there (a port naming it is not
    placed), and said so."""
    try:
        nets = node_networks(host_addresses(), networks)
    except (OSError, ImportError) as exc:
        log.warning("no host networks fingerprinted (ports name only the default one): %s", exc)
        return ()
    found = {a.alias for n in nets for a in n.addresses}
    for hn in networks:
        if hn.name not in found:
            log.warning("config host_networks.%s: no address of this node is in it", hn.name)
    return nets


def _fingerprinted_address() -> str:
    """The node's address on the interface of its default route (host-mode checks), or ""."""
    try:
        return fingerprinted_address(host_addresses())
    except (OSError, ImportError) as exc:
        log.warning("no node address fingerprinted (host-mode checks need advertise_address): %s", exc)
        return ""


def _await_restore_renders(core: Core, deadline: float) -> None:
    """The restore's re-renders run off the main loop (which goes on meanwhile: timers, task exits,
    other allocs); the agent starts answering once they are done, as when they ran inside the
    restore, so that an agent that answers has its tasks' files rendered anew. Counted in
    restore_seconds."""
    started = time.monotonic()

    def rendering() -> list[str]:
        return [a for a, r in core.runners.items() if r.serial.busy == RESTORE_RENDER]

    while core.call(rendering) and time.monotonic() < deadline:  # deadline: start_core's restore_timeout
        time.sleep(RESTORE_RENDER_POLL)
    core.restore_seconds += time.monotonic() - started


def start_core(
    core: Core,
    *,
    sweep_interval: float | None = None,
    gc_interval: float | None = None,
    restore_timeout: float = 600,
) -> list[threading.Thread]:
    """The main loop, the drivers' exit watches (exits seen during restore queue behind it), restore
    on the loop, then the periodic sweep. Returns the threads, the main loop first."""
    loop = threading.Thread(target=core.loop.run, name="core", daemon=True)
    loop.start()
    watches = core.watch_exits()
    began = time.monotonic()
    core.call(core.restorer.restore, timeout=restore_timeout)
    _await_restore_renders(core, began + restore_timeout)
    if sweep_interval is not None:
        core.start_periodic_sweep(sweep_interval)
    if gc_interval is not None:
        core.collector.start_periodic_gc(gc_interval)
    return [loop, *watches]
