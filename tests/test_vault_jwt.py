"""A task's Vault token from its workload identity (Nomad 1.7+'s way, agent.identity.vaultlogin):
which tasks log in with a JWT and as which role (pure), the runner's login through a fake Vault
(the token role is not used, the JWT is the task's own and verifies), and against a real OpenBao:
a JWT auth method configured as `nomad setup vault` does, whose templated policy binds the KV path
to the job id claim, so a task reads its own job's secret and another job's task cannot; a JWT for
another audience is refused and fails the task's setup."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from agent.command.config import load_config
from agent.errors import ConfigError
from agent.identity.keyring import Keyring
from agent.identity.vaultlogin import (
    JwtLogin,
    VaultJwt,
    plan_vault_login,
    token_role_policies,
    with_implicit_identities,
)
from agent.runner.alloc import AllocRunner
from agent.runner.vaulttoken import TokenIssuer
from agent.structs.model import Group, Job, Task, Template, Vault, WorkloadIdentity
from agent.structs.records import AllocRecord, AllocStatus
from agent.templates.runner import TemplateDeps
from agent.vault import VaultClient
from tests.agent_api import Agent
from tests.fakes import FakeNode, FakeVault
from tests.openbao_server import (  # noqa: F401 - openbao: the fixture
    JOB_OTHER,
    JOB_PROBE,
    OpenBaoError,
    OpenBaoServer,
    job_kv_path,
    openbao,
)
from tests.test_identity import verify
from tests.test_vault_tokens import Loop

ALLOC = "a1b2c3d4-0000-4000-8000-0000000000b7"
VAULT_ID = WorkloadIdentity("vault_default", ("vault.io",), ttl=3600)
MOUNT = "jwt-nomad"
ROLE = "nomad-workloads"


def _task(name: str = "web", *, vault: Vault | None = None, wid: WorkloadIdentity | None = VAULT_ID) -> Task:
    kv = '{{ with secret "%s" }}{{ .Data.data.owner }}{{ end }}' % job_kv_path(JOB_PROBE)  # noqa: UP031
    return Task(
        name,
        "docker",
        config={"image": "x"},
        templates=(Template("local/out", data=kv, change_mode="noop", splay=0),),
        vault=vault if vault is not None else Vault(),
        identities=(wid,) if wid is not None else (),
    )


def _runner(
    node: FakeNode, vault: TokenIssuer, task: Task, jwt: VaultJwt, keyring: Keyring, job: str = "probe"
) -> AllocRunner:
    loop = Loop(time.time())  # OpenBao checks the JWT's iat, nbf and exp against its own clock
    deps = dataclasses.replace(
        node.deps(network=None),
        vault=vault,
        vault_jwt=jwt,
        keyring=keyring,
        clock=loop,
        schedule=loop.schedule,
        templates=TemplateDeps(node.store, loop.schedule),
    )
    group = Group("g", (task,))
    rec = AllocRecord(id=ALLOC, job=job, group="g")
    node.store.put("alloc", ALLOC, rec.to_record())
    return AllocRunner(deps, rec, Job(job, (group,)), group)


# --- which way (pure) ---------------------------------------------------------------------------------


def test_a_task_with_a_vault_identity_logs_in_as_its_blocks_role_or_the_agents() -> None:
    jwt = VaultJwt(MOUNT, role="agent-default")
    assert plan_vault_login(_task(), jwt) == JwtLogin(MOUNT, "agent-default", VAULT_ID)
    assert plan_vault_login(_task(vault=Vault(role="mine")), jwt) == JwtLogin(MOUNT, "mine", VAULT_ID)
    # Without a role anywhere: "" (the method's default_role decides).
    assert plan_vault_login(_task(), VaultJwt()) == JwtLogin(MOUNT, "", VAULT_ID)


def test_the_agents_default_identity_is_the_tasks_when_it_has_none_else_the_token_role() -> None:
    other = WorkloadIdentity("consul_default", ("consul.io",))
    assert plan_vault_login(_task(wid=other), VaultJwt()) is None
    assert plan_vault_login(_task(wid=None), VaultJwt()) is None
    default = WorkloadIdentity("vault_default", ("vault.io",), ttl=600)
    jwt = VaultJwt(default_identity=default)
    assert plan_vault_login(_task(wid=None), jwt) == JwtLogin(MOUNT, "", default)
    assert plan_vault_login(_task(), jwt) == JwtLogin(MOUNT, "", VAULT_ID), "the task's own wins"
    no_vault = dataclasses.replace(_task(), vault=None)
    assert plan_vault_login(no_vault, jwt) is None
    assert token_role_policies(Vault()) == ("default",)
    assert token_role_policies(Vault(policies=("a",))) == ("a",)


def test_the_job_shows_the_default_identity_a_vault_task_gets_as_nomads_servers_store_it(
    agent: Agent,
) -> None:
    """Nomad's servers add `vault_default` (their default identity) to a vault task without one at
    register, so `job inspect` shows it: the job's API JSON here shows what the task will log in
    with; a task with its own, or without a vault block, is left as it is."""
    default = WorkloadIdentity("vault_default", ("vault.io",), ttl=600, file=True)
    plain = Task("plain", "docker", config={"image": "x"})
    job = Job("j", (Group("g", (_task("own"), _task("implied", wid=None), plain)),))
    assert with_implicit_identities(job, VaultJwt()) is job, "no default identity: nothing added"
    shown = with_implicit_identities(job, VaultJwt(default_identity=default))
    own, implied, untouched = shown.groups[0].tasks
    assert (own, untouched) == job.groups[0].tasks[::2] and implied.identities == (default,)

    api = agent.api
    assert api is not None
    agent.core.deps = dataclasses.replace(agent.core.deps, vault_jwt=VaultJwt(default_identity=default))
    tasks = agent.core.call(lambda: api.job_dict(job, allocs=[]))["TaskGroups"][0]["Tasks"]
    ids = {t["Name"]: [(i["Name"], i["Audience"], i["File"]) for i in t["Identities"] or []] for t in tasks}
    assert ids == {
        "own": [("vault_default", ["vault.io"], False)],
        "implied": [("vault_default", ["vault.io"], True)],
        "plain": [],
    }, ids


def _config(tmp_path: Path, vault: dict[str, object]) -> Path:
    p = tmp_path / "agent.json"
    p.write_text(json.dumps({"node_name": "client1", "data_dir": str(tmp_path / "data"), "vault": vault}))
    return p


def test_the_agent_config_reads_the_jwt_settings_and_names_what_is_wrong(tmp_path: Path) -> None:
    default = {"aud": ["vault.io"], "ttl": 3600, "file": True}
    cfg = load_config(_config(tmp_path, {"jwt_role": "nomad-workloads", "default_identity": default}))
    assert cfg.vault.jwt == VaultJwt(
        MOUNT, "nomad-workloads", WorkloadIdentity("vault_default", ("vault.io",), file=True, ttl=3600)
    )
    assert load_config(_config(tmp_path, {})).vault.jwt == VaultJwt()
    assert load_config(_config(tmp_path, {"default_identity": {}})).vault.jwt == VaultJwt(), "the lab's none"
    bad = [
        ({"default_identity": {"ttl": 60}}, "vault.default_identity.aud"),
        ({"default_identity": {"aud": ["vault.io"], "tll": 60}}, "vault.default_identity.tll"),
        ({"default_identity": {"aud": ["vault.io"], "env": "yes"}}, "vault.default_identity.env"),
        ({"jwt_auth_backend_path": ""}, "vault.jwt_auth_backend_path"),
        ({"jwt_auth_backend_path": "../sys"}, "vault.jwt_auth_backend_path"),
        ({"jwt_role": 3}, "vault.jwt_role"),
    ]
    for vault, where in bad:
        with pytest.raises(ConfigError, match=rf"{where}\b"):
            load_config(_config(tmp_path, vault))


# --- the runner, through a fake Vault -------------------------------------------------------------------


def test_the_runner_logs_in_with_the_tasks_signed_identity_not_through_the_token_role(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    keyring = Keyring(tmp_path / "keys")
    vault = FakeVault()
    task = _task(vault=Vault(role="shop", policies=("ignored-by-a-jwt-login",)))
    task = dataclasses.replace(task, templates=())  # the fake Vault has nothing to read
    r = _runner(node, vault, task, VaultJwt(MOUNT, "agent-default"), keyring)
    r.start()
    assert vault.created == [], "a task with a Vault identity never goes through the token role"
    ((mount, role, jwt),) = vault.logins
    assert (mount, role) == (MOUNT, "shop")
    claims = verify(jwt, keyring.jwks())
    assert claims["aud"] == ["vault.io"] and claims["nomad_job_id"] == "probe"
    assert claims["nomad_task"] == "web"
    assert claims["sub"] == "global:default:probe:g:web:vault_default"
    token = (r.tasks[task.name].task_dir / "secrets" / "vault_token").read_text()
    assert token in vault.live and vault.live[token] == r.tasks[task.name].vault_token().lease.accessor  # type: ignore[union-attr]
    assert any(
        t == "Vault Token" and "logged in with identity vault_default at auth/jwt-nomad as role shop" in m
        for t, m in [(e.type, e.message) for e in node.store.events(ALLOC)]
    )
    r.stop()
    assert vault.live == {}, "the task's token is revoked at the stop, as the token role's"


# --- against a real OpenBao -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jwt_keyring(openbao: OpenBaoServer, tmp_path_factory: pytest.TempPathFactory) -> Keyring:  # noqa: F811
    """A JWT auth method trusting one agent's key, its role's policy templated on the job id claim
    (Nomad's documented per-job policy): KV under secret/data/fieldlab/jobs/<nomad_job_id>/."""
    keyring = Keyring(tmp_path_factory.mktemp("agent-keys"))
    accessor = openbao.add_jwt_auth(MOUNT, ROLE, keyring.public_pem(), [ROLE])
    job = f"{{{{identity.entity.aliases.{accessor}.metadata.nomad_job_id}}}}"
    policy = f'path "secret/data/fieldlab/jobs/{job}/*" {{\n  capabilities = ["read"]\n}}\n'
    openbao._call("PUT", f"sys/policies/acl/{ROLE}", {"policy": policy})
    return keyring


@pytest.fixture
def agent_vault(openbao: OpenBaoServer) -> VaultClient:  # noqa: F811
    client = VaultClient(openbao.address, openbao.approle_file)
    client.login()
    return client


def test_a_task_reads_its_own_jobs_secret_with_its_jwt_login_and_another_job_cannot(
    openbao: OpenBaoServer,  # noqa: F811
    jwt_keyring: Keyring,
    agent_vault: VaultClient,
    tmp_path: Path,
) -> None:
    jwt = VaultJwt(MOUNT, ROLE)
    task = _task()
    node = FakeNode(tmp_path / "probe")
    r = _runner(node, agent_vault, task, jwt, jwt_keyring, job="probe")
    r.start()
    assert r.rec.status is AllocStatus.RUNNING, [e.message for e in node.store.events(ALLOC)]
    assert (r.tasks[task.name].task_dir / "local" / "out").read_text() == JOB_PROBE
    token = (r.tasks[task.name].task_dir / "secrets" / "vault_token").read_text()
    info = openbao._call("POST", "auth/token/lookup", {"token": token})["data"]
    assert info["policies"] == ["default", ROLE] and info["meta"]["role"] == ROLE
    assert info["path"] == f"auth/{MOUNT}/login" and info["period"] == 1800
    r.stop()
    with pytest.raises(OpenBaoError, match=r"bad token|permission denied|invalid token"):
        openbao._call("POST", "auth/token/lookup", {"token": token})

    # The same template in job "other": its token's policy reads secret/.../jobs/other/*, not probe's.
    node = FakeNode(tmp_path / "other")
    r = _runner(node, agent_vault, _task(), jwt, jwt_keyring, job="other")
    r.start()
    failed = [e.message for e in node.store.events(ALLOC) if e.type == "Template Failed"]
    assert r.rec.status is AllocStatus.FAILED and failed, [e.message for e in node.store.events(ALLOC)]
    assert f"{job_kv_path(JOB_PROBE)}: permission denied" in failed[0]
    assert job_kv_path(JOB_OTHER).startswith("secret/data/fieldlab/jobs/other/")


def test_a_jwt_for_another_audience_is_refused_and_fails_the_setup_naming_the_login(
    openbao: OpenBaoServer,  # noqa: F811
    jwt_keyring: Keyring,
    agent_vault: VaultClient,
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    wrong = WorkloadIdentity("vault_default", ("not-vault",), ttl=600)
    r = _runner(node, agent_vault, _task(wid=wrong), VaultJwt(MOUNT, ROLE), jwt_keyring)
    r.start()
    assert r.rec.status is AllocStatus.FAILED
    assert f"auth/{MOUNT}/login" in r.rec.reason and "aud" in r.rec.reason, r.rec.reason
    assert not any((r.tasks[r.group.tasks[0].name].task_dir / "secrets").glob("vault_token")), (
        "no token was had"
    )
