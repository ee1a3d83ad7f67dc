"""The agent's Vault (OpenBao): its client over hvac (`client`: AppRole login, renewal, reads, PKI
issue, tasks' tokens), what a request can fail with (`errors`), what Vault answers (`results`), the
requests paced and counted (`load`), and the agent's Vault status at start-up (`status`). Import
from here: these names are the package's public face."""

from agent.vault.client import TokenClient, VaultClient
from agent.vault.errors import (
    VaultDenied,
    VaultError,
    VaultNotFound,
    VaultRateLimited,
    VaultUnavailable,
    retry_after_seconds,
)
from agent.vault.load import (
    VAULT_DENIED,
    VAULT_ERROR,
    VAULT_OK,
    VAULT_SEALED,
    VAULT_UNREACHABLE,
    VaultCallStatus,
    VaultLoad,
)
from agent.vault.results import LOGIN_PATH, RENEW_FRACTION, SecretResult, TokenGrant, backoff, reissue_at
from agent.vault.status import VaultStatus, check_vault, vault_client

__all__ = [
    "LOGIN_PATH",
    "RENEW_FRACTION",
    "VAULT_DENIED",
    "VAULT_ERROR",
    "VAULT_OK",
    "VAULT_SEALED",
    "VAULT_UNREACHABLE",
    "SecretResult",
    "TokenClient",
    "TokenGrant",
    "VaultCallStatus",
    "VaultClient",
    "VaultDenied",
    "VaultError",
    "VaultLoad",
    "VaultNotFound",
    "VaultRateLimited",
    "VaultStatus",
    "VaultUnavailable",
    "backoff",
    "check_vault",
    "reissue_at",
    "retry_after_seconds",
    "vault_client",
]
