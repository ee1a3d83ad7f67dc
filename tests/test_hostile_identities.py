"""Hostile jobspecs against workload identities (issue 51): an `identity` with no `ttl` got a JWT
without `exp` (Nomad's rule: WorkloadIdentity.Warnings says "identities without an expiration are
insecure", nothing more), a token good forever for whoever takes it from the task; and the lab's
OpenBao JWT role asked for no expiry. Now the agent gives such an identity the client's
`identity_default_ttl` (1 h): every token it signs has an `exp` and is signed again half way; and
the lab's role (expiration_leeway -1) refuses a token without `exp` once a minute past its issue.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from agent.command.config import load_config
from agent.errors import ConfigError
from agent.identity.claims import Workload, identity_claims
from agent.identity.keyring import Keyring
from agent.jobspec import Limits, parse_jobspec
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, RestartPolicy, Task, WorkloadIdentity
from agent.structs.records import AllocRecord
from tests.fakes import FakeNode
from tests.openbao_server import OpenBaoServer, openbao  # noqa: F401 - the fixture
from tests.test_identity import verify

ALLOC = "a1b2c3d4-0000-4000-8000-0000000000e9"
ROLE_TASKS = Path(__file__).parent.parent / "lab" / "roles" / "pki" / "tasks" / "identity.yml"


def _config(tmp_path: Path, raw: str) -> Path:
    p = tmp_path / "config.json"
    p.write_text(raw)
    return p


# --- the client's default ttl -------------------------------------------------------------------


def test_identity_default_ttl_is_a_client_setting(tmp_path: Path) -> None:
    assert load_config(_config(tmp_path, '{"node_name": "c"}')).identity_default_ttl == 3600.0
    got = load_config(_config(tmp_path, '{"node_name": "c", "identity_default_ttl": 600}'))
    assert got.identity_default_ttl == 600.0


@pytest.mark.parametrize("bad", ["0", "-5", '"1h"', "Infinity", "true"])
def test_a_bad_identity_default_ttl_is_an_error_naming_the_key(tmp_path: Path, bad: str) -> None:
    p = _config(tmp_path, f'{{"node_name": "c", "identity_default_ttl": {bad}}}')
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value).startswith(f"{p}: identity_default_ttl: ")
    assert "is not a number of seconds > 0" in str(exc.value)


# The lab role renders identity_default_ttl: tests/test_hostile_stops.py checks it with max_shutdown_delay.


def test_the_jobspec_warning_says_what_the_agent_does_instead() -> None:
    text = """
job "j" {
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
      identity {
        name = "oidc"
        aud  = ["oidc.example.com"]
        file = true
      }
    }
  }
}
"""
    parsed = parse_jobspec(text, source="t")
    (wid,) = parsed.job.groups[0].tasks[0].identities
    assert wid.ttl == 0, "the job keeps what it asked for, as Nomad's"
    assert (
        "job.j.group.g.task.t.identity[0].ttl: an identity without an expiration (ttl) is insecure: its "
        "tokens expire after the client's identity_default_ttl (1h) and are signed again before"
    ) in parsed.warnings
    quick = parse_jobspec(text, source="t", limits=Limits(identity_ttl=600.0))
    assert any("identity_default_ttl (10m)" in w for w in quick.warnings)


# --- every token the agent signs expires --------------------------------------------------------


def _runner(node: FakeNode, *ids: WorkloadIdentity, now: list[float], **deps: Any) -> AllocRunner:
    task = Task(name="t", driver="exec", identities=ids)
    group = Group(name="g", tasks=(task,), network=None, restart=RestartPolicy(attempts=0, mode="fail"))
    job = Job(id="wid", groups=(group,))
    d = dataclasses.replace(node.deps(), clock=lambda: now[0], **deps)
    runner = AllocRunner(d, AllocRecord(id=ALLOC, job="wid", group="g"), job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


def test_an_identity_without_ttl_gets_a_token_that_expires_and_is_renewed(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    now = [1000.0]
    no_ttl = WorkloadIdentity("oidc", ("oidc.example.com",), file=True)  # ttl 0, as the jobspec said
    r = _runner(node, no_ttl, WorkloadIdentity(file=True), now=now)  # and the default (Nomad's) one
    jwks = r.d.keyring.jwks()  # type: ignore[union-attr]
    secrets = r.tasks[r.group.tasks[0].name].task_dir / "secrets"
    oidc = verify((secrets / "nomad_oidc.jwt").read_text(), jwks)
    default = verify((secrets / "nomad_token").read_text(), jwks)
    assert oidc.get("exp") == 1000 + 3600, f"a token without exp is good forever: {oidc}"
    assert default.get("exp") == 1000 + 3600, f"a token without exp is good forever: {default}"
    assert sorted(round(d) for d, _ in node.timers) == [1800, 1800], "signed again half way"
    now[0] = 2800.0
    timers, node.timers = node.timers, []
    for _, fn in timers:
        fn()
    assert verify((secrets / "nomad_oidc.jwt").read_text(), jwks)["exp"] == 2800 + 3600


def test_the_default_ttl_is_the_clients_setting(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    now = [1000.0]
    r = _runner(node, WorkloadIdentity("oidc", ("x",), file=True), now=now, identity_ttl=120.0)
    token = (r.tasks[r.group.tasks[0].name].task_dir / "secrets" / "nomad_oidc.jwt").read_text()
    assert verify(token, r.d.keyring.jwks())["exp"] == 1120  # type: ignore[union-attr]
    assert [round(d) for d, _ in node.timers] == [60]


def test_a_ttl_of_its_own_is_kept() -> None:
    w = Workload("j", "g", "a", "t")
    claims = identity_claims(w, WorkloadIdentity("x", ("x",), ttl=90), 1000, "j1", default_ttl=3600)
    assert claims["exp"] == 1090


# --- the lab's OpenBao JWT role -----------------------------------------------------------------

MOUNT = "jwt-hostile"
PLAIN, LAB = "plain", "lab"


def _lab_role_leeways() -> dict[str, Any]:
    """The leeway settings the pki role gives its JWT auth role (lab/roles/pki/tasks/identity.yml)."""
    for task in yaml.safe_load(ROLE_TASKS.read_text()):
        for setting in (task.get("fieldlab.lab.bao_settings") or {}).get("settings", []):
            if "/role/" in setting["path"]:
                return {k: v for k, v in setting["body"].items() if k.endswith("_leeway")}
    raise AssertionError(f"no JWT role in {ROLE_TASKS}")


@pytest.fixture(scope="module")
def roles(openbao: OpenBaoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:  # noqa: F811
    """Two roles on one JWT method trusting one agent's key: `plain` (OpenBao's defaults, as the lab's
    role was) and `lab` (with the lab role's leeways). The agent's data dir is returned."""
    data_dir = tmp_path_factory.mktemp("agent-data")
    openbao.add_jwt_auth(MOUNT, PLAIN, Keyring(data_dir).public_pem(), ["default"])
    body = {
        "role_type": "jwt",
        "bound_audiences": ["vault.io"],
        "user_claim": "/nomad_job_id",
        "user_claim_json_pointer": True,
        "token_policies": ["default"],
        **_lab_role_leeways(),
    }
    answer = requests.post(
        f"{openbao.address}/v1/auth/{MOUNT}/role/{LAB}",
        json=body,
        headers={"X-Vault-Token": openbao.root_token},
        timeout=10,
    )
    assert answer.status_code in (200, 204), answer.text
    yield data_dir


def _login(openbao: OpenBaoServer, role: str, jwt: str) -> requests.Response:  # noqa: F811
    return requests.post(
        f"{openbao.address}/v1/auth/{MOUNT}/login", json={"role": role, "jwt": jwt}, timeout=10
    )


def test_the_lab_role_refuses_a_token_without_exp_after_its_issue(
    openbao: OpenBaoServer,  # noqa: F811
    roles: Path,
) -> None:
    ring = Keyring(roles)
    w = Workload("shop", "g", ALLOC, "web")
    vault_id = WorkloadIdentity("vault_default", ("vault.io",))
    issued = time.time() - 100  # a token taken from a task 100 s ago
    claims = identity_claims(w, vault_id, issued, "j-old")
    claims.pop("exp", None)  # what the agent signed before: no expiry at all
    old = ring.sign(claims)
    plain = _login(openbao, PLAIN, old)
    assert plain.status_code == 200, f"control: OpenBao's defaults took it (iat + 150 s + 60 s): {plain.text}"
    lab = _login(openbao, LAB, old)
    assert lab.status_code != 200, "the lab's role logged in a token without exp, 100 s after its issue"
    assert "expired" in lab.text, lab.text
    fresh = ring.sign(identity_claims(w, vault_id, time.time(), "j-new"))  # what the agent signs now
    ok = _login(openbao, LAB, fresh)
    assert ok.status_code == 200, ok.text


def test_the_configs_limits_reach_the_agents_runners(tmp_path: Path) -> None:
    """config -> CoreSettings.limits (agent.command.wiring) -> the runners' deps (agent.client.core)."""
    from agent.command.wiring import CoreSettings

    raw = '{"node_name": "c", "identity_default_ttl": 600, "max_shutdown_delay": 120}'
    limits = CoreSettings.from_config(load_config(_config(tmp_path, raw))).limits
    assert (limits.identity_ttl, limits.max_shutdown_delay) == (600.0, 120.0)
    core = FakeNode(tmp_path).core(limits=limits)
    assert (core.deps.identity_ttl, core.deps.max_shutdown_delay) == (600.0, 120.0)
