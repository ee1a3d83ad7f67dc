"""The agent's Vault (OpenBao) status at start-up: one AppRole login, through the agent's VaultClient.

The daemon makes its one `VaultClient` (`vault_client`), logs it in at start-up (`check_vault`) and
hands that same client to the core, which creates each task's own token with it (templates never read
with the agent's token): one login implementation (VaultClient.login) and no token made only for
this check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agent.command.config import VaultConfig
from agent.vault.client import VaultClient
from agent.vault.errors import VaultError

log = logging.getLogger(__name__)


@dataclass
class VaultStatus:
    configured: bool
    authenticated: bool = False
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"configured": self.configured, "authenticated": self.authenticated, "error": self.error}


def vault_client(cfg: VaultConfig) -> VaultClient | None:
    """The agent's Vault client; None when Vault is not configured (no address or no approle_file)."""
    if not cfg.address or cfg.approle_file is None:
        return None
    return VaultClient(
        cfg.address,
        cfg.approle_file,
        timeout=cfg.timeout,
        max_requests_per_second=cfg.max_requests_per_second,
        restart_jitter=cfg.restart_jitter,
    )


def check_vault(cfg: VaultConfig, client: VaultClient | None) -> VaultStatus:
    """Log `client` (the agent's, from `vault_client(cfg)`) in with AppRole once; say what went wrong
    rather than raising (Vault may come later: the client logs in again when it is next used)."""
    if not cfg.address:
        return VaultStatus(configured=False)
    if cfg.approle_file is None:
        return VaultStatus(True, False, "vault.approle_file is not set")
    if client is None:
        raise ValueError("check_vault needs the agent's VaultClient (vault_client(cfg))")
    try:
        client.login()
    except VaultError as exc:  # the message names no secret (see agent.vault.errors)
        return VaultStatus(True, False, f"approle login failed: {type(exc).__name__}: {exc}")
    return VaultStatus(True, True)
