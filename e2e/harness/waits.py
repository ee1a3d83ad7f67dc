"""Named timeouts for the suites, and the one polling helper (lab.waits.wait_until)."""

from __future__ import annotations

from lab.waits import WaitTimeout, wait_until

# How long each kind of recovery may take on the docker provider (measured 1-3 s; generous for CI).
SYSTEMD_READY = 90.0
REBOOT_BACK = 120.0
VAULT_UNSEALED = 60.0
AGENT_HEALTHY = 60.0

__all__ = ["AGENT_HEALTHY", "REBOOT_BACK", "SYSTEMD_READY", "VAULT_UNSEALED", "WaitTimeout", "wait_until"]
