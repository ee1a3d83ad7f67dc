"""The agent's lifecycle: startup -> run until told to stop -> shutdown within a grace period.

Signal handlers only set an event. A first SIGTERM/SIGINT stops the agent and leaves every task
running (the systemd unit has KillMode=process, as Nomad's does); a second one forces exit.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from types import FrameType

from agent import __version__
from agent.api import ApiServer
from agent.config import Config
from agent.vault import VaultStatus, check_vault

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.started = time.time()
        self._stop = threading.Event()
        self._signals = 0
        self._api: ApiServer | None = None
        self.vault = VaultStatus(configured=bool(config.vault.address))

    # -- lifecycle ---------------------------------------------------------------------------
    def startup(self) -> None:
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.vault = check_vault(self.config.vault)
        if self.vault.configured:
            log.info(
                "vault %s: %s",
                self.config.vault.address,
                "authenticated with approle" if self.vault.authenticated else self.vault.error,
            )
        self._api = ApiServer(
            self.config,
            {
                "/v1/agent/health": self._health,
                "/v1/metrics": self._metrics,
            },
        )
        self._api.start()
        log.info(
            "fieldlab-agent %s on node %s serving mTLS API on %s:%d",
            __version__,
            self.config.node_name,
            self.config.bind_address,
            self._api.port,
        )

    def run(self) -> None:
        self._stop.wait()

    def shutdown(self) -> None:
        log.info("shutting down (tasks keep running)")
        if self._api is not None:
            self._api.stop(self.config.shutdown_timeout)
        log.info("stopped")

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            os.write(2, b"fieldlab-agent: second signal, forcing exit\n")
            os._exit(1)
        self._stop.set()

    # -- API routes --------------------------------------------------------------------------
    def _health(self) -> tuple[int, str, bytes]:
        body = {
            "status": "ok",
            "node": self.config.node_name,
            "version": __version__,
            "uptime_seconds": round(time.time() - self.started, 1),
            "vault": self.vault.as_dict(),
        }
        return 200, "application/json", json.dumps(body).encode()

    def _metrics(self) -> tuple[int, str, bytes]:
        lines = [
            "# HELP fieldlab_agent_up The agent is running.",
            "# TYPE fieldlab_agent_up gauge",
            "fieldlab_agent_up 1",
            "# HELP fieldlab_agent_uptime_seconds Seconds since the agent started.",
            "# TYPE fieldlab_agent_uptime_seconds gauge",
            f"fieldlab_agent_uptime_seconds {time.time() - self.started:.1f}",
        ]
        return 200, "text/plain; version=0.0.4", ("\n".join(lines) + "\n").encode()
