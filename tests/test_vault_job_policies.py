"""A job may name only its own per-job Vault policies (issue 32, item 5).

The token role grants any of the lab's job policies (fieldlab-job-<name>) to any task's token: OpenBao
cannot tell jobs apart, only the agent knows which job asks. So the agent (TaskVaultToken) refuses a
vault block that names a per-job policy of another job, with a "Vault Policy Refused" task event
naming the policy and the job, and asks Vault for nothing. Against a real OpenBao: the attack as it
was (job probe naming fieldlab-job-other reads the other job's KV entry), then refused.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.command.config import ConfigError, load_config
from agent.runner import vaulttoken
from agent.runner.alloc import AllocRunner
from agent.runner.vaulttoken import JobPolicies, PolicyRefused, TaskVaultToken, TokenIssuer
from agent.state import SqliteStore
from agent.structs.model import Group, Job, Task, Vault
from agent.structs.records import AllocRecord, AllocStatus
from agent.templates.runner import TemplateDeps
from agent.vault import VaultClient
from tests.fakes import FakeNode, FakeVault
from tests.openbao_server import JOB_OTHER, JOB_PROBE, TOKEN_ROLE, OpenBaoServer, job_kv_path

ALLOC = "b1b2c3d4-0000-4000-8000-0000000000bb"
LAB = JobPolicies(
    "fieldlab-job-",
    (("fieldlab-job-probe", ("pki-*", "filler", "probe", "s")), ("fieldlab-job-noop", ("noop-*",))),
)


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The agent as the lab configures it (the daemon's bind_job_policies at start)."""
    monkeypatch.setattr(vaulttoken, "_job_policies", JobPolicies())
    vaulttoken.bind_job_policies(LAB)
    yield


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.timers: list[float] = []

    def __call__(self) -> float:
        return self.now

    def schedule(self, delay: float, fn: object) -> None:
        self.timers.append(delay)


def _keeper(
    tmp_path: Path, job: str, policies: tuple[str, ...], vault: FakeVault | None = None
) -> tuple[TaskVaultToken, FakeVault, list[tuple[str, str]]]:
    clock = Clock()
    vault = vault or FakeVault(clock=clock)
    issuer: TokenIssuer = vault
    events: list[tuple[str, str]] = []
    token = TaskVaultToken(
        alloc_id=ALLOC,
        job=job,
        task=Task("web", "docker", vault=Vault(policies=policies)),
        issuer=issuer,
        role=TOKEN_ROLE,
        store=SqliteStore(tmp_path / "state.db"),
        secrets_dir=tmp_path / "web" / "secrets",
        schedule=clock.schedule,
        event=lambda type_, message: events.append((type_, message)),
        on_new_token=lambda why: None,
        clock=clock,
    )
    return token, vault, events


# --- the rule ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "policies", "refused"),
    [
        ("pki-restart", ("fieldlab-job-probe",), None),  # a prefix the policy belongs to
        ("probe", ("fieldlab-job-probe",), None),
        ("s", ("fieldlab-job-probe",), None),
        ("noop-secrets", ("fieldlab-job-noop",), None),
        ("web", ("fieldlab-job-web",), None),  # not listed: the job of its name
        ("web", ("app-read", "default"), None),  # not a per-job policy: not the agent's to judge
        ("noop-secrets", ("fieldlab-job-probe",), "fieldlab-job-probe"),
        ("hostile-1", ("fieldlab-job-noop",), "fieldlab-job-noop"),
        ("probe", ("fieldlab-job-probe", "fieldlab-job-web"), "fieldlab-job-web"),
        ("pki", ("fieldlab-job-probe",), "fieldlab-job-probe"),  # "pki-*" is a prefix with its dash
        ("web2", ("fieldlab-job-web",), "fieldlab-job-web"),
    ],
)
def test_a_per_job_policy_belongs_to_its_jobs_only(
    job: str, policies: tuple[str, ...], refused: str | None
) -> None:
    why = LAB.refusal(policies, job)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why and f"not to job {job}" in why, why


def test_without_a_prefix_nothing_is_refused() -> None:
    assert JobPolicies().refusal(("fieldlab-job-other",), "probe") is None


# --- TaskVaultToken ----------------------------------------------------------------------------------


def test_another_jobs_policy_is_refused_with_an_event_and_no_token_is_asked_for(
    tmp_path: Path, bound: None
) -> None:
    token, vault, events = _keeper(tmp_path, "noop-secrets", (JOB_PROBE,))
    with pytest.raises(PolicyRefused) as refused:
        token.ensure()
    assert vault.created == [] and token.token == "" and token.lease is None
    assert not token.token_file.exists()
    assert JOB_PROBE in str(refused.value) and "noop-secrets" in str(refused.value)
    assert [t for t, _ in events] == ["Vault Policy Refused"]
    assert JOB_PROBE in events[0][1] and "job noop-secrets" in events[0][1] and "task web" in events[0][1]


def test_the_jobs_own_policy_is_derived_as_before(tmp_path: Path, bound: None) -> None:
    token, vault, events = _keeper(tmp_path, "pki-restart", (JOB_PROBE,))
    assert token.ensure() is True
    assert [(role, pol) for role, pol, _ in vault.created] == [(TOKEN_ROLE, (JOB_PROBE,))]
    assert [t for t, _ in events] == ["Vault Token"]


def test_a_token_kept_from_before_the_binding_is_revoked_at_restore_not_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent restarted with the binding (or a new binding) finds a stored token of a policy the job
    may no longer name: it is revoked, not kept, and no new one is derived."""
    monkeypatch.setattr(vaulttoken, "_job_policies", JobPolicies())
    first, vault, _ = _keeper(tmp_path, "probe", (JOB_OTHER,))
    first.ensure()  # no binding: derived
    assert first.token_file.exists() and vault.live
    vaulttoken.bind_job_policies(LAB)
    again, _, events = _keeper(tmp_path, "probe", (JOB_OTHER,), vault=vault)
    assert again.restore() is False
    assert vault.revoked == ["acc-1"] and not vault.live and len(vault.created) == 1
    assert again.lease is None and again.token == "" and not again.token_file.exists()
    assert [t for t, _ in events] == ["Vault Policy Refused"] and JOB_OTHER in events[0][1]


def test_the_alloc_fails_at_setup_with_the_refusal_and_its_task_never_starts(
    tmp_path: Path, bound: None
) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault()
    clock = Clock()
    deps = dataclasses.replace(
        node.deps(network=None),
        vault=vault,
        clock=clock,
        schedule=clock.schedule,
        templates=TemplateDeps(node.store, clock.schedule),
    )
    task = Task("web", "docker", config={"image": "x"}, vault=Vault(policies=(JOB_PROBE,)))
    group = Group("g", (task,))
    rec = AllocRecord(id=ALLOC, job="noop-steal", group="g")
    node.store.put("alloc", ALLOC, rec.to_record())
    runner = AllocRunner(deps, rec, Job("noop-steal", (group,)), group)
    runner.start()
    events = [(e.type, e.message) for e in node.store.events(ALLOC)]
    assert runner.rec.status is AllocStatus.FAILED, events
    assert node.docker.starts == [] and vault.created == []
    refused = [m for t, m in events if t == "Vault Policy Refused"]
    assert len(refused) == 1 and JOB_PROBE in refused[0] and "job noop-steal" in refused[0], events


# --- the config ---------------------------------------------------------------------------------------


def test_the_config_names_the_prefix_and_each_policys_jobs(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    vault = {
        "job_policy_prefix": "fieldlab-job-",
        "job_policies": {"fieldlab-job-probe": ["pki-*", "probe"]},
    }
    path.write_text(json.dumps({"node_name": "c1", "vault": vault}))
    cfg = load_config(path).vault
    assert JobPolicies(cfg.job_policy_prefix, cfg.job_policies) == JobPolicies(
        "fieldlab-job-", (("fieldlab-job-probe", ("pki-*", "probe")),)
    )
    for bad, key in [
        ({"job_policies": {"fieldlab-job-probe": ["x"]}}, "vault.job_policies"),  # no prefix
        ({**vault, "job_policies": {"other-policy": ["x"]}}, "vault.job_policies.other-policy"),
        ({**vault, "job_policies": {"fieldlab-job-probe": []}}, "vault.job_policies.fieldlab-job-probe"),
        ({**vault, "job_policies": {"fieldlab-job-probe": ["*"]}}, "vault.job_policies.fieldlab-job-probe"),
        ({**vault, "job_policies": ["fieldlab-job-probe"]}, "vault.job_policies"),
        ({"job_policy_prefix": " x"}, "vault.job_policy_prefix"),
    ]:
        path.write_text(json.dumps({"node_name": "c1", "vault": bad}))
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(path)


# --- against a real OpenBao, configured as the lab's -------------------------------------------------


def test_the_token_role_grants_another_jobs_policy_so_the_agent_must_refuse_it(
    openbao: OpenBaoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: job probe's task names fieldlab-job-other, the token role grants it, and the task's
    token reads the other job's KV entry. After (the lab's binding): refused, nothing asked of Vault."""
    agent_vault = VaultClient(openbao.address, openbao.approle_file)
    agent_vault.login()
    other_kv = job_kv_path(JOB_OTHER)

    monkeypatch.setattr(vaulttoken, "_job_policies", JobPolicies())  # the agent without the binding
    stolen, _, _ = _keeper(tmp_path / "before", "probe", (JOB_OTHER,), vault=None)
    stolen.issuer = agent_vault
    stolen.ensure()
    data, _ = stolen.fetch(other_kv, {})
    assert data["data"] == {"owner": JOB_OTHER}, "the attack: job probe read job other's entry"
    stolen.revoke()

    vaulttoken.bind_job_policies(JobPolicies("fieldlab-job-"))  # each policy: the job of its name
    before = openbao.api("LIST", "auth/token/accessors")["data"]["keys"]
    refused, _, events = _keeper(tmp_path / "after", "probe", (JOB_OTHER,), vault=None)
    refused.issuer = agent_vault
    with pytest.raises(PolicyRefused):
        refused.ensure()
    assert openbao.api("LIST", "auth/token/accessors")["data"]["keys"] == before, "a token was created"
    assert (
        events[0][0] == "Vault Policy Refused" and JOB_OTHER in events[0][1] and "job probe" in events[0][1]
    )
    with pytest.raises(Exception, match="not derived"):
        refused.fetch(other_kv, {})
    own, _, _ = _keeper(tmp_path / "own", "other", (JOB_OTHER,), vault=None)
    own.issuer = agent_vault
    own.ensure()
    assert own.fetch(other_kv, {})[0]["data"] == {"owner": JOB_OTHER}
    own.revoke()


def test_the_daemon_binds_the_configs_job_policies_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.command.config import Config, VaultConfig
    from agent.command.daemon import Agent

    monkeypatch.setattr(vaulttoken, "_job_policies", JobPolicies())
    vault = VaultConfig(job_policy_prefix="fieldlab-job-", job_policies=(("fieldlab-job-probe", ("pki-*",)),))
    Agent(Config(node_name="c1", data_dir=tmp_path, vault=vault))._bind_vault_and_templates()
    assert vaulttoken.job_policies() == JobPolicies("fieldlab-job-", (("fieldlab-job-probe", ("pki-*",)),))
    assert vaulttoken.job_policies().refusal((JOB_PROBE,), "noop-1") is not None
