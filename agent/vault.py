"""The agent's Vault (OpenBao) client: AppRole login with the credentials file the lab deploys."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from agent.config import VaultConfig

log = logging.getLogger(__name__)
VAULT_TIMEOUT = 5.0


@dataclass
class VaultStatus:
    configured: bool
    authenticated: bool = False
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"configured": self.configured, "authenticated": self.authenticated, "error": self.error}


def check_vault(cfg: VaultConfig) -> VaultStatus:
    """Log in with AppRole once; say what went wrong rather than raising (Vault may come later)."""
    if not cfg.address:
        return VaultStatus(configured=False)
    if cfg.approle_file is None:
        return VaultStatus(True, False, "vault.approle_file is not set")
    try:
        creds = json.loads(cfg.approle_file.read_text())
        role_id, secret_id = creds["role_id"], creds["secret_id"]
    except (OSError, ValueError, KeyError) as exc:
        return VaultStatus(True, False, f"{cfg.approle_file}: unreadable approle credentials ({exc})")
    import hvac
    import requests

    try:
        client = hvac.Client(url=cfg.address, timeout=VAULT_TIMEOUT)
        client.auth.approle.login(role_id=role_id, secret_id=secret_id)
        return VaultStatus(True, client.is_authenticated())
    except (hvac.exceptions.VaultError, requests.RequestException) as exc:
        return VaultStatus(True, False, f"approle login failed: {type(exc).__name__}: {exc}")
