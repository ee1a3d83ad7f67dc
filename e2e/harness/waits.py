"""Named timeouts for the suites, and the one polling helper (lab.waits.wait_until).

A timeout is how long a recovery may take before the suite calls it broken; the targets the issue
sets (reboot to reachable 30 s, agent restart to restore done 5 s) are measured and printed in the
report, never asserted as timeouts, since these machines are noisy.
"""

from __future__ import annotations

from lab.waits import WaitTimeout, wait_until

# How long each kind of recovery may take on the docker provider (measured 1-3 s; generous for CI).
SYSTEMD_READY = 90.0
REBOOT_BACK = 120.0
VAULT_UNSEALED = 60.0
AGENT_HEALTHY = 60.0
DOCKER_BACK = 60.0
FAULT_EFFECT = 30.0  # an injected fault shows (a process gone, a node unreachable)
# Each agent of a restart storm (the fleet suite: up to a hundred at once on 2 cores) exiting after its
# signal, and answering again after its start: measured at 100, an agent that logged "stopped" within
# 2 s of SIGTERM took 30 s more to exit while the other 99 did the same.
STORM_AGENT = 180.0
ALLOC_RECOVERED = 90.0  # an alloc running and reachable again after a fault
CERT_DELIVERED = 45.0  # agent start to the probe having loaded the new certificate
SWEEPS_DONE = 90.0  # two orphan sweeps at the lab's 15 s interval, with room
SAFETY_HEAL = 900.0  # a partition or Vault outage heals itself on the node after this, whatever happens
# Past the last exit + the longest restart delay, this much more before the last check: a restart
# timer that should have been cancelled fires within it (timers fire on the agent's loop, ~ms late).
RESTART_MARGIN = 5.0
SETTLE_RECHECK = 1.0  # a wait past the restart delays longer than this: every invariant is checked again
RESTARTS_SETTLED = 150.0  # tasks still exiting after this (each exit pushes the wait on): a crash loop

# Targets (printed beside the measured figures in the report).
TARGET_REBOOT_REACHABLE = 30.0
TARGET_RESTORE = 5.0

__all__ = [
    "AGENT_HEALTHY",
    "ALLOC_RECOVERED",
    "CERT_DELIVERED",
    "DOCKER_BACK",
    "FAULT_EFFECT",
    "REBOOT_BACK",
    "RESTARTS_SETTLED",
    "RESTART_MARGIN",
    "SAFETY_HEAL",
    "SETTLE_RECHECK",
    "SWEEPS_DONE",
    "SYSTEMD_READY",
    "TARGET_REBOOT_REACHABLE",
    "TARGET_RESTORE",
    "VAULT_UNSEALED",
    "WaitTimeout",
    "wait_until",
]
