"""The task's own Vault token (Nomad's vault hook): made at setup, made again at a start when it
expired while the task was down, checked at restore, revoked at the teardown; a new token reaches
the running task by its vault block's `change_mode` (signal, restart, noop). Made only for a task
with a vault block on an agent with Vault. The hook owns the task's token keeper
(agent.runner.vaulttoken.TaskVaultToken), made at its first use, and whether the restore gave the
task a new token."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.decide.decisions import StartCause
from agent.decide.taskdecisions import plan_vault_token_allowed
from agent.fieldbugs.bugs import Bugs
from agent.runner.interfaces import StartRequest, TaskLifecycle, Then
from agent.runner.vaulttoken import TaskVaultToken
from agent.structs.model import Vault
from agent.vault.errors import VaultError

NewToken = Callable[[str], None]  # the keeper's word that a new token replaced the task's: why


@dataclass(frozen=True)
class VaultPorts:
    """What the Vault hook is handed: its task's lifecycle, how its token keeper is made (given
    where it says a new token came), Vault's address, the alloc's state it asks and its turn."""

    lifecycle: TaskLifecycle
    make_token: Callable[[NewToken], TaskVaultToken]
    address: str
    alloc_running: Callable[[], bool]
    alloc_stopping: Callable[[], bool]  # the alloc was told to stop
    in_turn: Callable[[Callable[[], None]], None]
    bugs: Bugs


class VaultHook:
    name = "vault"

    def __init__(self, block: Vault, ports: VaultPorts) -> None:
        self.block, self.p = block, ports
        self._token: TaskVaultToken | None = None
        self.changed_on_restore = False  # the restore gave the task a new token

    @property
    def token(self) -> TaskVaultToken:
        if self._token is None:
            self._token = self.p.make_token(self.changed)
        return self._token

    def setup(self, then: Then) -> None:
        self._may_derive()
        self.token.ensure()
        then(None)

    def prestart(self, req: StartRequest) -> None:
        self._may_derive()
        self.token.ensure()  # a no-op unless the token expired while the task was down

    def env(self) -> dict[str, str]:
        env = {"VAULT_ADDR": self.p.address}
        if self.block.env and self.token.token:
            env["VAULT_TOKEN"] = self.token.token
        return env

    def _may_derive(self) -> None:
        if not plan_vault_token_allowed(self.p.alloc_stopping(), self.p.bugs):
            raise VaultError(
                "derive token", "auth/token/create", "Can't request Vault token for terminal allocation"
            )

    def restore(self) -> None:
        self.changed_on_restore = self.token.restore()

    def stop(self) -> None:
        self.token.revoke()

    def changed(self, why: str) -> None:
        """A new token replaced the one the running task was given: `change_mode` says how it hears."""
        lifecycle = self.p.lifecycle
        if not lifecycle.running() or not self.p.alloc_running():
            return
        if self.block.change_mode == "signal":
            lifecycle.event(
                "Signaling", f"new Vault token acquired ({why}); sending {self.block.change_signal}"
            )
            lifecycle.signal(self.block.change_signal)
        elif self.block.change_mode == "restart":
            lifecycle.event("Restart Signaled", f"new Vault token acquired ({why})")
            self.p.in_turn(lambda: lifecycle.stop_then_restart(StartCause.CHANGE_MODE, "new Vault token"))
