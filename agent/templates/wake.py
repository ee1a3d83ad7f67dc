"""Renders that failed because Vault could not answer are woken when Vault answers again.

A task whose render pass found Vault sealed or unreachable retries with backoff (up to a minute,
agent.decide.decisions.plan_render_retry); an alloc whose setup did retries on its own backoff (up to a
minute, plan_setup_retry). Without more, renders would resume only when each one's backoff ran out,
long after an unseal. `VaultWake` is the callback registry they subscribe to when they fail that way:
while anyone waits, it asks Vault's unauthenticated `sys/health` every `interval` seconds, off the
main loop, and on the first healthy answer calls every waiting callback on the loop, once. Each
caller decides what waking means (a task's templates: a pass after a short random spread, so that a
node's tasks do not all ask Vault in the same instant).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.client.offload import Offload

log = logging.getLogger(__name__)

WAKE_INTERVAL = 0.5  # seconds between sys/health probes while a render waits for Vault
WAKE_SPREAD = 0.5  # at most this many seconds between a wake and a task's render pass (random)


class VaultWake:
    """Callbacks waiting for Vault to answer again, and the probe that finds out. Runs on the
    agent's main loop (`schedule`), the probe off it (`offload`)."""

    def __init__(
        self,
        probe: Callable[[], bool],
        schedule: Callable[[float, Callable[[], None]], None],
        offload: Offload,
        interval: float = WAKE_INTERVAL,
    ) -> None:
        self._probe = probe
        self._schedule = schedule
        self._offload = offload
        self.interval = interval
        self._waiting: dict[str, tuple[Callable[[], None], Callable[[], bool]]] = {}
        self._armed = False  # a probe is on a timer or in flight
        self.probes = 0
        self.wakes = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def subscribe(
        self, key: str, wake: Callable[[], None], wanted: Callable[[], bool] = lambda: True
    ) -> None:
        """Call `wake` (once, on the loop) when Vault next answers, if `wanted()` still says so (a
        waiter that is no longer wanted, e.g. its alloc stopped, is dropped before each probe and
        keeps nothing probing); a second subscription under the same key replaces the first."""
        self._waiting[key] = (wake, wanted)
        if not self._armed:
            self._armed = True
            self._schedule(self.interval, self._tick)

    def unsubscribe(self, key: str) -> None:
        self._waiting.pop(key, None)

    def healthy(self) -> None:
        """Vault answers: every waiting callback runs now, once."""
        waiting, self._waiting = self._waiting, {}
        if waiting:
            self.wakes += 1
            log.info("Vault answers again: %d waiting render(s) resume", len(waiting))
        for key, (wake, _) in waiting.items():
            try:
                wake()
            except Exception:
                log.exception("waking %s after Vault came back failed", key)

    def _tick(self) -> None:
        self._waiting = {key: w for key, w in self._waiting.items() if w[1]()}
        if not self._waiting:
            self._armed = False
            return
        self.probes += 1
        self._offload("vault-health", self._probe, self._probed)

    def _probed(self, result: object, exc: Exception | None) -> None:
        if exc is None and result is True:
            self.healthy()
        elif exc is not None:
            log.debug("Vault health probe failed: %s", exc)
        if self._waiting:
            self._schedule(self.interval, self._tick)
        else:
            self._armed = False


def vault_wake(
    vault: object, schedule: Callable[[float, Callable[[], None]], None], offload: Offload
) -> VaultWake | None:
    """The wake for the agent's Vault client (agent.vault.VaultClient.probe: `sys/health`);
    None when there is no Vault, or a client that cannot probe."""
    probe = getattr(vault, "probe", None)
    if probe is None or not callable(probe):
        return None

    def healthy() -> bool:
        return str(getattr(probe(), "state", "")) == "ok"

    return VaultWake(healthy, schedule, offload)
