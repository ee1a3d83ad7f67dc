"""The Vault hook (agent.runner.vaulthook.VaultHook), handed a fake token keeper, its task's
lifecycle and the alloc's state: the token made at the setup and at each start (it is the hook's,
made once), VAULT_ADDR and VAULT_TOKEN in the env, a new token at the restore noted, the token
revoked at the teardown, a new token told to the running task by change_mode, and the nomad-19268
fault's refusal for an alloc told to stop."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from agent.decide.decisions import StartCause
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.runner.interfaces import StartRequest
from agent.runner.vaulthook import NewToken, VaultHook, VaultPorts
from agent.runner.vaulttoken import TaskVaultToken
from agent.structs.model import Task, Vault
from agent.vault.errors import VaultError
from tests.fakes import FakeNode
from tests.hook_fakes import Task_

ADDRESS = "https://vault.invalid:8200"


class Keeper:
    """A task's token keeper (TaskVaultToken's calls the hook makes)."""

    def __init__(self, on_new_token: NewToken) -> None:
        self.on_new_token = on_new_token
        self.token = ""
        self.calls: list[str] = []
        self.restored_new = False

    def ensure(self) -> bool:
        self.calls.append("ensure")
        self.token = "s.task"
        return True

    def restore(self) -> bool:
        self.calls.append("restore")
        return self.restored_new

    def revoke(self) -> None:
        self.calls.append("revoke")


class Made:
    def __init__(self, tmp_path: Path, block: Vault, bugs: Bugs = NO_BUGS) -> None:
        self.task = Task_(FakeNode(tmp_path), Task(name="web", driver="exec", vault=block))
        self.keepers: list[Keeper] = []
        self.stopping = False
        self.alloc_running = True
        self.turns: list[Callable[[], None]] = []

        def make(on_new_token: NewToken) -> TaskVaultToken:
            self.keepers.append(Keeper(on_new_token))
            return cast(TaskVaultToken, self.keepers[-1])

        ports = VaultPorts(
            lifecycle=self.task,
            make_token=make,
            address=ADDRESS,
            alloc_running=lambda: self.alloc_running,
            alloc_stopping=lambda: self.stopping,
            in_turn=self.turns.append,
            bugs=bugs,
        )
        self.hook = VaultHook(block, ports)

    @property
    def keeper(self) -> Keeper:
        (k,) = self.keepers
        return k


def test_the_token_is_made_at_the_setup_and_each_start_by_one_keeper(tmp_path: Path) -> None:
    m = Made(tmp_path, Vault(policies=("app",)))
    done: list[Exception | None] = []
    m.hook.setup(done.append)
    m.hook.prestart(StartRequest())
    assert done == [None] and m.keeper.calls == ["ensure", "ensure"]


@pytest.mark.parametrize(
    ("env", "want"),
    [(True, {"VAULT_ADDR": ADDRESS, "VAULT_TOKEN": "s.task"}), (False, {"VAULT_ADDR": ADDRESS})],
)
def test_the_env_has_vaults_address_and_the_token_unless_env_is_false(
    tmp_path: Path, env: bool, want: dict[str, str]
) -> None:
    m = Made(tmp_path, Vault(policies=("app",), env=env))
    m.hook.setup(lambda exc: None)
    assert m.hook.env() == want


def test_a_new_token_at_the_restore_is_noted_and_the_teardown_revokes(tmp_path: Path) -> None:
    m = Made(tmp_path, Vault(policies=("app",)))
    m.hook.restore()
    assert not m.hook.changed_on_restore
    m.keeper.restored_new = True
    m.hook.restore()
    m.hook.stop()
    assert m.hook.changed_on_restore and m.keeper.calls == ["restore", "restore", "revoke"]


def test_the_nomad_19268_fault_refuses_a_token_once_the_alloc_is_told_to_stop(tmp_path: Path) -> None:
    fixed = Made(tmp_path / "fixed", Vault(policies=("app",)))
    fixed.stopping = True
    fixed.hook.prestart(StartRequest())  # a poststop task gets its own token
    assert fixed.keeper.calls == ["ensure"]
    faulty = Made(tmp_path / "faulty", Vault(policies=("app",)), Bugs(no_vault_token_after_stop=True))
    faulty.stopping = True
    with pytest.raises(VaultError, match="Can't request Vault token for terminal allocation"):
        faulty.hook.prestart(StartRequest())
    assert faulty.keepers == []


def test_a_new_token_is_told_to_the_running_task_by_change_mode(tmp_path: Path) -> None:
    signal = Made(tmp_path / "s", Vault(policies=("app",), change_mode="signal", change_signal="SIGHUP"))
    signal.hook.changed("renewal failed")
    assert signal.task.signals == ["SIGHUP"] and signal.task.events[-1][0] == "Signaling"

    restart = Made(tmp_path / "r", Vault(policies=("app",), change_mode="restart"))
    restart.hook.changed("renewal failed")
    assert restart.task.restarts == []  # in the alloc's turn
    (turn,) = restart.turns
    turn()
    assert restart.task.restarts == [(StartCause.CHANGE_MODE, "new Vault token")]
    assert restart.task.events == [("Restart Signaled", "new Vault token acquired (renewal failed)")]

    noop = Made(tmp_path / "n", Vault(policies=("app",), change_mode="noop"))
    noop.hook.changed("renewal failed")
    assert noop.task.signals == [] and noop.turns == [] and noop.task.events == []


def test_a_task_not_running_or_an_alloc_not_running_hears_nothing(tmp_path: Path) -> None:
    m = Made(tmp_path, Vault(policies=("app",), change_mode="signal", change_signal="SIGHUP"))
    m.task.is_running = False
    m.hook.changed("x")
    m.task.is_running, m.alloc_running = True, False
    m.hook.changed("x")
    assert m.task.signals == [] and m.task.events == []
