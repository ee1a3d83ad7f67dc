"""A task's workload identity token against a real OpenBao: its JWT auth method, configured as
`nomad setup vault` configures Vault's for Nomad's workload identities (RS256, audience vault.io,
the job id as the user claim, the job and task as token metadata) with the agent's public key,
logs the task in; a token for another audience, from another agent's key, or expired, is refused."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from agent.identity.claims import Workload, identity_claims
from agent.identity.keyring import Keyring
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, RestartPolicy, Task, WorkloadIdentity
from agent.structs.records import AllocRecord
from tests.fakes import FakeNode
from tests.openbao_server import OpenBaoServer, openbao  # noqa: F401 - the fixture

MOUNT = "jwt-nomad"
ROLE = "nomad-workloads"
ALLOC = "a1b2c3d4-0000-4000-8000-0000000000f1"


@pytest.fixture(scope="module")
def jwt_auth(openbao: OpenBaoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:  # noqa: F811
    """The JWT auth method trusting one agent's key (its data dir, returned)."""
    data_dir = tmp_path_factory.mktemp("agent-data")
    openbao.add_jwt_auth(MOUNT, ROLE, Keyring(data_dir).public_pem(), ["default"])
    yield data_dir


def _login(openbao: OpenBaoServer, jwt: str) -> requests.Response:  # noqa: F811
    return requests.post(
        f"{openbao.address}/v1/auth/{MOUNT}/login", json={"role": ROLE, "jwt": jwt}, timeout=10
    )


def test_the_tasks_vault_identity_logs_in_and_others_do_not(
    openbao: OpenBaoServer,  # noqa: F811
    jwt_auth: Path,
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    vault_id = WorkloadIdentity("vault_default", ("vault.io",), file=True, ttl=3600)
    task = Task(name="web", driver="exec", identities=(WorkloadIdentity(file=True), vault_id))
    group = Group(name="g", tasks=(task,), network=None, restart=RestartPolicy(attempts=0, mode="fail"))
    job = Job(id="shop", groups=(group,))
    deps = dataclasses.replace(node.deps(), keyring=Keyring(jwt_auth))
    r = AllocRunner(deps, AllocRecord(id=ALLOC, job="shop", group="g"), job, group)
    node.store.put("alloc", r.id, r.rec.to_record())
    r.start()
    secrets = r.tasks[task.name].task_dir / "secrets"

    ok = _login(openbao, (secrets / "nomad_vault_default.jwt").read_text())
    assert ok.status_code == 200, ok.text
    auth = ok.json()["auth"]
    want = {"nomad_namespace": "default", "nomad_job_id": "shop", "nomad_task": "web", "role": ROLE}
    assert auth["metadata"] == want
    assert auth["client_token"] and "default" in auth["policies"]

    wrong_aud = _login(openbao, (secrets / "nomad_token").read_text())  # nomadproject.io
    assert wrong_aud.status_code == 400 and "aud" in wrong_aud.text, wrong_aud.text

    w = Workload("shop", "g", ALLOC, "web")
    foreign = Keyring(tmp_path / "another-agent").sign(identity_claims(w, vault_id, time.time(), "j1"))
    refused = _login(openbao, foreign)
    assert refused.status_code == 400, refused.text

    expired = Keyring(jwt_auth).sign(identity_claims(w, vault_id, time.time() - 7200, "j2"))
    late = _login(openbao, expired)
    assert late.status_code == 400 and "expired" in late.text, late.text
