"""A task's `vault { allow_token_expiration = true }` (Nomad's AllowTokenExpiration): Nomad's vault
hook then runs no renewal loop, so the token is never renewed nor replaced while the task lives (a
restart of the task keeps it); it expires and the task keeps running, told nothing. Against the
made-up Vault and the moved clock of test_vault_tokens."""

from __future__ import annotations

from pathlib import Path

from agent.jobspec import parse_jobspec
from agent.nomadapi.jobjson import parsed_job_json
from agent.runner.vaulttoken import TaskVaultToken
from agent.state import SqliteStore
from agent.structs.model import Task, Vault
from tests.fakes import FakeVault
from tests.openbao_server import JOB_PROBE, TOKEN_ROLE
from tests.test_vault_tokens import ALLOC, Loop

SPEC = """
job "j" {
  group "g" {
    task "t" {
      driver = "docker"
      config { image = "x" }
      vault {
        policies               = ["fieldlab-job-j"]
        allow_token_expiration = %s
      }
    }
  }
}
"""


def _token(tmp_path: Path, *, allow: bool) -> tuple[TaskVaultToken, FakeVault, Loop, list[str]]:
    loop = Loop()
    vault = FakeVault(ttl=90.0, clock=loop)
    changes: list[str] = []
    token = TaskVaultToken(
        alloc_id=ALLOC,
        job="probe",
        task=Task("web", "docker", vault=Vault(policies=(JOB_PROBE,), allow_token_expiration=allow)),
        issuer=vault,
        role=TOKEN_ROLE,
        store=SqliteStore(tmp_path / "state.db"),
        secrets_dir=tmp_path / "web" / "secrets",
        schedule=loop.schedule,
        event=lambda type_, message: None,
        on_new_token=changes.append,
        clock=loop,
    )
    return token, vault, loop, changes


def test_an_expiring_token_is_neither_renewed_nor_replaced_and_the_task_is_not_told(tmp_path: Path) -> None:
    token, vault, loop, changes = _token(tmp_path, allow=True)
    assert token.ensure() is True
    loop.advance(10 * 60.0)  # long past its 90 s TTL
    assert vault.renewed == [] and len(vault.created) == 1 and changes == []
    assert token.token == "task-token-1" and token.token_file.read_text() == "task-token-1"
    assert token.ensure() is False  # a restart of the task: Nomad's hook derives at the first start only
    assert len(vault.created) == 1


def test_without_it_the_same_token_is_renewed(tmp_path: Path) -> None:
    token, vault, loop, _ = _token(tmp_path, allow=False)
    token.ensure()
    loop.advance(10 * 60.0)
    assert len(vault.renewed) == 10


def test_it_is_read_without_a_warning_and_shown_in_the_job_json() -> None:
    parsed = parse_jobspec(SPEC % "true", source="<request>")
    (task,) = parsed.job.groups[0].tasks
    assert parsed.warnings == () and task.vault is not None and task.vault.allow_token_expiration
    (shown,) = parsed_job_json(parsed.job)["TaskGroups"][0]["Tasks"]
    assert shown["Vault"]["AllowTokenExpiration"] is True
    off = parse_jobspec(SPEC % "false", source="<request>").job.groups[0].tasks[0].vault
    assert off is not None and not off.allow_token_expiration
