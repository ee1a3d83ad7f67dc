"""The agent's lifecycle: startup -> run until told to stop -> shutdown within a grace period.

Signal handlers only set an event. A first SIGTERM/SIGINT stops the agent and leaves every task
running (the systemd unit has KillMode=process, as Nomad's does); a second one forces exit.

Health reports Vault as it is now: from the last request the agent's Vault client made, or, when
that is older than VAULT_PROBE_INTERVAL (or there was none), from a `sys/health` probe made then, at
most once per interval (`vault_health`, pure). `vault` keeps its start-up shape (configured,
authenticated, error) with live values; `vault_status` says which state (ok, sealed, unreachable,
denied, error), when, from which request, and its error text.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any

from agent import __version__
from agent.api.handler import Handler, StreamOpener, Upgrade, query_params
from agent.api.server import ApiServer
from agent.client.core import Core
from agent.command.config import Config
from agent.command.wiring import CoreSettings, build_core, start_core
from agent.consul.catalog import ConsulClient
from agent.errors import AgentError
from agent.fieldbugs.faults import Faults
from agent.network.cni import CniNetwork
from agent.network.result import CniError
from agent.node.nodeinfo import driver_health
from agent.nomadapi import structs
from agent.nomadapi.http import answer, blocked_now
from agent.nomadapi.metrics import Metric
from agent.nomadapi.metrics import render as render_metrics
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.nomadapi.wsexec import exec_stream
from agent.runner.vaulttoken import JobPolicies, bind_job_policies
from agent.state import SqliteStore
from agent.structs import layout
from agent.structs.layout import NodeLayout
from agent.templates import worker as render_worker
from agent.vault import (
    VAULT_DENIED,
    VAULT_OK,
    VaultCallStatus,
    VaultClient,
    VaultStatus,
    check_vault,
    vault_client,
)

log = logging.getLogger(__name__)

VAULT_PROBE_INTERVAL = 10.0  # seconds: the most often health asks Vault's sys/health itself
VAULT_PROBE_TIMEOUT = 2.0


def newest_vault_status(
    last: VaultCallStatus | None, probe: VaultCallStatus | None
) -> VaultCallStatus | None:
    """What Vault is now: the newer of the last request and the last probe, except that a probe
    finding Vault up does not clear a denial (sys/health is unauthenticated: it cannot see one)."""
    if last is None or (probe is not None and probe.at > last.at):
        if probe is not None and last is not None and probe.state == VAULT_OK and last.state == VAULT_DENIED:
            return last
        return probe
    return last


def needs_vault_probe(
    last: VaultCallStatus | None, probe: VaultCallStatus | None, now: float, interval: float
) -> bool:
    """Probe when neither a request nor a probe told us anything within `interval`."""
    seen = [s.at for s in (last, probe) if s is not None]
    return not seen or now - max(seen) >= interval


def health_stats(body: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A health body as Nomad's agent Stats hold it (api.AgentSelf: map[string]map[string]string):
    nested keys joined with "_", booleans "true"/"false", None "" (pure)."""
    out: dict[str, str] = {}
    for key, value in body.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= health_stats(value, f"{name}_")
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, list | tuple):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = "" if value is None else str(value)
    return out


def vault_health(
    startup: VaultStatus, client_token: str, last: VaultCallStatus | None, probe: VaultCallStatus | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(`vault`: configured/authenticated/error as now, `vault_status`: the state and where it comes
    from). `client_token` is the accessor of the client's token ("" before a successful login)."""
    now_state = newest_vault_status(last, probe)
    if not startup.configured or now_state is None:
        state = "unconfigured" if not startup.configured else ("error" if startup.error else "unknown")
        return startup.as_dict(), {"state": state, "error": startup.error, "last_request": None}
    authenticated = now_state.state == VAULT_OK and bool(client_token)
    error = now_state.error
    if not authenticated and not error and last is not None:
        error = last.error or ("no successful login yet" if not client_token else "")
    vault = {"configured": True, "authenticated": authenticated, "error": error}
    status = {
        **now_state.as_dict(),
        "source": "probe" if now_state is probe else "request",
        "last_request": last.as_dict() if last is not None else None,
    }
    return vault, status


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.started = time.time()
        self._stop = threading.Event()
        self._signals = 0
        self._wakeup: int | None = None  # the read end of the signal pipe (install_signal_handlers)
        self._api: ApiServer | None = None
        self.vault = VaultStatus(configured=bool(config.vault.address))
        # The agent's one Vault client: logged in by the start-up check, then creates tasks' tokens.
        self.vault_client: VaultClient | None = None
        self.faults = Faults.from_env(os.environ)
        self.core: Core | None = None
        self._store: SqliteStore | None = None
        self._probing = threading.Lock()  # one sys/health probe at a time; other health calls don't wait

    # -- lifecycle ---------------------------------------------------------------------------
    def startup(self) -> None:
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.faults.require_implemented()
        self.faults.announce(log)
        self.vault_client = vault_client(self.config.vault)
        self.vault = check_vault(self.config.vault, self.vault_client)
        if self.vault.configured:
            log.info(
                "vault %s: %s",
                self.config.vault.address,
                "authenticated with approle" if self.vault.authenticated else self.vault.error,
            )
        handlers: list[tuple[str, str, Handler]] = []
        streams: list[tuple[str, str, StreamOpener] | tuple[str, str, StreamOpener, Upgrade]] = []
        if self.config.jobs_enabled:
            self._bind_vault_and_templates()
            self.core = self._start_core()
            nomad = self._nomad_api(self.core)
            watch_drivers(self.core, nomad)
            handlers = build_nomad_routes(nomad)
            streams = [exec_stream(nomad)]
        routes = {"/v1/agent/health": self._nomad_health, "/v1/metrics": self._metrics}
        self._api = ApiServer(self.config, routes, handlers, streams)
        self._api.start()
        log.info(
            "fieldlab-agent %s on node %s serving mTLS API on %s:%d",
            __version__,
            self.config.node_name,
            self.config.bind_address,
            self._api.port,
        )

    def _nomad_api(self, core: Core) -> NomadApi:
        """Nomad's API over the core, as this node: its ID kept in the data dir, as Nomad's client."""
        cfg = self.config
        host = cfg.advertise_address or cfg.bind_address
        node = NodeIdentity.load(cfg.data_dir, cfg.node_name, cfg.datacenter, f"{host}:{cfg.port}")
        return NomadApi(
            core,
            node,
            driver_health=lambda: driver_health(core.drivers.all()),
            agent_health=self._nomad_health,
            agent_stats=lambda: health_stats(self.health_body()),
        )

    def _bind_vault_and_templates(self) -> None:
        """Process-wide choices of the config, before any alloc runs: which jobs may name which
        per-job Vault policies, and whether a render worker that cannot drop to nobody fails closed
        (then it is started now, so that health says at once whether it can)."""
        vault = self.config.vault
        bind_job_policies(JobPolicies(vault.job_policy_prefix, vault.job_policies))
        cfg = self.config
        layout.bind(NodeLayout(cfg.netns_prefix, cfg.cgroup_parent, cfg.cni_network))
        render_worker.configure(fail_closed=self.config.template_worker_fail_closed)
        if self.config.template_worker_fail_closed:
            render_worker.prestart()

    def _start_core(self) -> Core:
        cfg = self.config
        if not cfg.cni_plugin_dir.is_dir():
            raise AgentError(f"CNI plugin dir {cfg.cni_plugin_dir} does not exist (config cni_plugin_dir)")
        conflist = cfg.cni_conf_dir / f"{cfg.cni_network}.conflist"
        cni = None
        if conflist.exists():
            cni = CniNetwork(conflist, cfg.cni_plugin_dir, cfg.data_dir / "cni", bugs=self.faults.bugs())
        else:
            log.warning("no CNI conflist at %s: bridge networking is unavailable", conflist)
        former = self._former_networks() if cni is not None else []
        store = SqliteStore(cfg.data_dir / "state" / "state.db")
        core = build_core(
            CoreSettings.from_config(cfg),
            store,
            cni,
            self.faults,
            consul=ConsulClient(cfg.consul_address) if cfg.consul_address else None,
            vault=self.vault_client,
            former_cni=former,
        )
        start_core(core, sweep_interval=cfg.sweep_interval, gc_interval=cfg.gc_interval)
        self._store = store
        return core

    def _former_networks(self) -> list[CniNetwork]:
        """The bridge networks of earlier layouts whose conflist is still on the node (agent.structs.layout):
        the allocs an earlier agent attached to them keep them until they stop."""
        cfg = self.config
        found = []
        for lay in layout.FORMER:
            path = cfg.cni_conf_dir / f"{lay.cni_network}.conflist"
            if lay.cni_network == cfg.cni_network or not path.exists():
                continue
            try:
                found.append(
                    CniNetwork(path, cfg.cni_plugin_dir, cfg.data_dir / "cni", bugs=self.faults.bugs())
                )
            except CniError as exc:
                log.error(
                    "earlier network %s not loaded (its allocs' DEL cannot run): %s", lay.cni_network, exc
                )
        return found

    def run(self) -> None:
        """Until a stop: the main thread watches the signal pipe (install_signal_handlers), waking
        now and then besides (a Python handler runs only when the main thread runs bytecode)."""
        while not self._stop.is_set():
            if self._wakeup is None:
                self._stop.wait(0.5)
                continue
            ready, _, _ = select.select([self._wakeup], [], [], 0.5)
            if not ready:
                continue
            try:
                seen = os.read(self._wakeup, 512)
            except BlockingIOError:
                continue
            stops = sorted({signal.Signals(b).name for b in seen if b in (signal.SIGTERM, signal.SIGINT)})
            if stops and not self._stop.is_set():
                log.warning("%s seen on the signal pipe before its handler ran: stopping", ", ".join(stops))
                self._stop.set()

    def shutdown(self) -> None:
        log.info("shutting down (tasks keep running)")
        if self._api is not None:
            self._api.stop(self.config.shutdown_timeout)
        if self.core is not None:
            self.core.stop()
        if self._store is not None:
            self._store.close()
        log.info("stopped")

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the agent (a second one forces the exit). Besides the handler, the
        C-level handler writes each signal's number to a pipe (signal.set_wakeup_fd) that `run`
        reads on the main thread: in a storm of 100 agents SIGTERM'd at once, one agent's handler
        never ran and it went on for minutes; a byte in the pipe stops it whatever thread the kernel
        gave the signal to."""
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._wakeup = r
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            os.write(2, b"fieldlab-agent: second signal, forcing exit\n")
            os._exit(1)
        self._stop.set()

    # -- API routes --------------------------------------------------------------------------
    def _vault_now(self) -> tuple[dict[str, Any], dict[str, Any]]:
        client = self.vault_client
        if client is None or not self.vault.configured:
            return vault_health(self.vault, "", None, None)
        due = needs_vault_probe(client.last_status, client.last_probe, client.clock(), VAULT_PROBE_INTERVAL)
        if due and self._probing.acquire(blocking=False):
            try:
                client.probe(VAULT_PROBE_TIMEOUT)
            finally:
                self._probing.release()
        return vault_health(self.vault, client.token_accessor, client.last_status, client.last_probe)

    def _nomad_health(self) -> tuple[int, str, bytes]:
        """Nomad's /v1/agent/health: 200 while the agent is ok, 500 with what is wrong (as Nomad's
        agent answers an unhealthy client); the detail is Stats["fieldlab"] of /v1/agent/self."""
        body = self.health_body()
        ok = body["status"] == "ok"
        message = "ok" if ok else str(body.get("error") or body["status"])
        return answer(structs.health(ok, message), 200 if ok else 500)

    def health_body(self) -> dict[str, Any]:
        """This agent's health beyond Nomad's: its Vault login, the render worker, the state db."""
        vault, vault_status = self._vault_now()
        body: dict[str, Any] = {
            "status": "ok",
            "node": self.config.node_name,
            "version": __version__,
            "uptime_seconds": round(time.time() - self.started, 1),
            "vault": vault,
            "vault_status": vault_status,
            "template_worker": render_worker.status(),
        }
        if body["template_worker"]["state"] == "refused":  # fail closed: no template renders
            body["status"] = "degraded"
            body["error"] = (
                "templates are not rendered: the render worker cannot run as nobody "
                f"({body['template_worker']['error']}) and template_worker_fail_closed is on"
            )
        if self._store is not None and self._store.recovered_from:
            body["state_recovered_from"] = self._store.recovered_from
        if self.core is not None:
            body["restore_seconds"] = round(self.core.restore_seconds, 3)
            body["sweeps"] = self.core.sweeps
            body["swept"] = list(self.core.swept)
        return body

    def _metrics(self) -> tuple[int, str, bytes]:
        """Nomad's /v1/metrics: JSON, or Prometheus text with `?format=prometheus`."""
        core = self.core
        allocs = list(core.runners.values()) if core else []
        running = sum(1 for r in allocs if r.alloc_running())
        uptime = round(time.time() - self.started, 1)
        swept = core.sweeper.totals if core and core.sweeper else {}
        metrics = [
            Metric("nomad.client.allocations.running", "gauge", "Allocations running on this node.", running),
            Metric(
                "nomad.client.allocations.terminal",
                "gauge",
                "Allocations ended on this node.",
                len(allocs) - running,
            ),
            Metric("nomad.client.uptime", "gauge", "Seconds since the client started.", uptime),
            Metric("fieldlab.agent.allocs_running", "gauge", "Allocations running on this node.", running),
            Metric(
                "fieldlab.agent.restore_seconds",
                "gauge",
                "How long the last restore on start took.",
                round(core.restore_seconds if core else 0.0, 3),
            ),
            *(
                Metric(
                    "fieldlab.agent.orphans_removed_total",
                    "counter",
                    "Orphaned resources the sweeper removed, by kind.",
                    n,
                    {"kind": k},
                )
                for k, n in sorted(swept.items())
            ),
            Metric(
                "fieldlab.agent.sweeps_total",
                "counter",
                "Orphan sweeps done since the agent started.",
                core.sweeps if core else 0,
            ),
            Metric(
                "fieldlab.agent.blocking_queries",
                "gauge",
                "Nomad API blocking queries waiting for a change now.",
                blocked_now(),
            ),
            Metric("fieldlab.agent.up", "gauge", "The agent is running.", 1),
            Metric("fieldlab.agent.uptime_seconds", "gauge", "Seconds since the agent started.", uptime),
        ]
        return render_metrics(metrics, query_params().get("format", ""))


DRIVER_POLL = 15.0  # seconds between looks at the drivers' health (Nomad fingerprints them every 15-30 s)


def watch_drivers(core: Core, api: NomadApi) -> None:
    """Look at the drivers' health every DRIVER_POLL seconds, off the main loop (a docker ping may
    wait its timeout); a change becomes a node event on the loop (NomadApi.drivers_checked)."""

    def look() -> None:
        core.offload("driver health", lambda: driver_health(core.drivers.all()), seen)

    def seen(health: object, exc: Exception | None) -> None:
        if exc is None and isinstance(health, dict):
            api.drivers_checked(health)
        core.schedule(DRIVER_POLL, look)

    look()
