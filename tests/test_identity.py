"""Workload identity (Nomad's `identity` blocks): the jobspec's rules, the agent's signing key and
its JWKS, the claims, and the task's side (files, env, renewal and change_mode) on the alloc runner
with fakes. A real OpenBao verifying the tokens is tests/test_identity_openbao.py."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from agent.identity.claims import Workload, identity_claims, renew_at
from agent.identity.keyring import Keyring
from agent.jobspec import JobspecError, parse_jobspec
from agent.nomadapi.jobjson import parsed_job_json
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, RestartPolicy, Task, WorkloadIdentity
from agent.structs.records import AllocRecord, AllocStatus, TaskState
from tests.fakes import FakeNode

SPEC = """
job "wid" {
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
%s
    }
  }
}
"""


def _parse(blocks: str) -> tuple[tuple[WorkloadIdentity, ...], tuple[str, ...]]:
    parsed = parse_jobspec(SPEC % blocks, source="wid.hcl")
    return parsed.job.groups[0].tasks[0].identities, parsed.warnings


def _b64d(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify(token: str, jwks: dict[str, Any]) -> dict[str, Any]:
    """Check a compact RS256 JWS against a JWKS (independently of the keyring's code); its claims."""
    head, body, sig = token.split(".")
    header = json.loads(_b64d(head))
    (jwk,) = [k for k in jwks["keys"] if k["kid"] == header["kid"]]
    assert (header["alg"], jwk["alg"], jwk["kty"]) == ("RS256", "RS256", "RSA")
    n, e = (int.from_bytes(_b64d(jwk[k]), "big") for k in ("n", "e"))
    rsa.RSAPublicNumbers(e, n).public_key().verify(
        _b64d(sig), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256()
    )
    claims: dict[str, Any] = json.loads(_b64d(body))
    return claims


# -- the jobspec -----------------------------------------------------------------------------------
def test_the_default_identity_is_nomads_own_and_named_ones_keep_their_settings() -> None:
    ids, warnings = _parse(
        """
      identity {
        env  = true
        file = true
        aud  = ["something-else"]
      }
      identity {
        name          = "vault_default"
        aud           = ["vault.io"]
        ttl           = "1h"
        file          = true
        change_mode   = "signal"
        change_signal = "sighup"
      }"""
    )
    default, vault = ids
    assert (default.name, default.audience, default.env, default.file) == (
        "default",
        ("nomadproject.io",),
        True,
        True,
    )
    assert (vault.name, vault.audience, vault.ttl, vault.change_mode, vault.change_signal) == (
        "vault_default",
        ("vault.io",),
        3600.0,
        "signal",
        "SIGHUP",
    )
    assert not warnings, warnings


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ('name = "no spaces"', "invalid name"),
        ('ttl = "1h"', "ttl for the default identity"),
        ('name = "x"\n aud = [""]', "empty string is an invalid audience"),
        ('name = "x"\n change_mode = "signal"', 'required with change_mode = "signal"'),
        ('name = "x"\n change_signal = "SIGHUP"', 'only with change_mode = "signal"'),
        ('name = "x"\n change_mode = "signal"\n change_signal = "SIGNOPE"', "not a signal name"),
        ('name = "x"\n filepath = "secrets/t.jwt"', "needs file = true"),
        ('name = "x"\n file = true\n filepath = "../../../etc/shadow"', "leaves the task dir"),
        ('name = "x"\n file = true\n filepath = "/etc/shadow"', "absolute path"),
        ('name = "x"\n change_mode = "reboot"', "change_mode"),
    ],
)
def test_identity_blocks_are_refused_as_nomad_refuses_them(block: str, says: str) -> None:
    with pytest.raises(JobspecError, match=says) as err:
        _parse(f"identity {{\n {block}\n }}")
    assert "identity[0]" in str(err.value), "the error names where"


def test_a_name_given_twice_is_refused_and_insecure_ones_are_warned_about() -> None:
    with pytest.raises(JobspecError, match='identity "x" is given twice'):
        _parse('identity {\n name = "x"\n }\n identity {\n name = "x"\n }')
    _, warnings = _parse('identity {\n name = "x"\n env = true\n }')
    text = "\n".join(warnings)
    assert "without an audience is insecure" in text and "without an expiration" in text
    assert 'env = true without change_mode = "restart"' in text


def test_identities_round_trip_through_nomads_api_json() -> None:
    ids, _ = _parse(
        'identity {\n env = true\n }\n identity {\n name = "a"\n aud = ["x"]\n ttl = "10m"\n file = true\n }'
    )
    task_json = parsed_job_json(parse_jobspec(SPEC % "", source="w.hcl").job)["TaskGroups"][0]["Tasks"][0]
    assert (task_json["Identity"], task_json["Identities"]) == (None, None)
    job = Job(id="wid", groups=(Group("g", (Task("t", "exec", {"command": "/bin/true"}, identities=ids),)),))
    shown = parsed_job_json(job)["TaskGroups"][0]["Tasks"][0]
    assert shown["Identity"]["Name"] == "default" and shown["Identity"]["Env"] is True
    assert [(i["Name"], i["Audience"], i["TTL"], i["File"]) for i in shown["Identities"]] == [
        ("a", ["x"], 600_000_000_000, True)
    ]
    again = parse_jobspec(json.dumps({"Job": parsed_job_json(job)}), source="w.json")
    assert again.job.groups[0].tasks[0].identities == ids


# -- the key and the claims --------------------------------------------------------------------------
def test_the_key_is_made_once_kept_0600_and_tokens_verify_against_the_jwks(tmp_path: Path) -> None:
    ring = Keyring(tmp_path)
    token = ring.sign({"sub": "x", "aud": ["a"]})
    (pem,) = list((tmp_path / "server" / "keystore").glob("*.pem"))
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600 and stat.S_IMODE(pem.parent.stat().st_mode) == 0o700
    assert pem.stem == ring.key_id
    assert verify(token, ring.jwks())["sub"] == "x"
    again = Keyring(tmp_path)  # an agent restart: the same key, so earlier tokens still verify
    assert again.key_id == ring.key_id and verify(token, again.jwks())["aud"] == ["a"]
    other = Keyring(tmp_path / "other")  # another agent's key under this one's id: refused
    with pytest.raises(InvalidSignature):
        verify(token, {"keys": [{**other.jwks()["keys"][0], "kid": ring.key_id}]})
    head, _, sig = token.split(".")
    forged = base64.urlsafe_b64encode(b'{"sub":"root"}').rstrip(b"=").decode()
    with pytest.raises(InvalidSignature):
        verify(f"{head}.{forged}.{sig}", ring.jwks())


def test_claims_are_nomads() -> None:
    w = Workload("web", "g", "a1b2", "t")
    wid = WorkloadIdentity("vault_default", ("vault.io",), ttl=3600)
    c = identity_claims(w, wid, 1000.7, "jti-1")
    assert c == {
        "nomad_namespace": "default",
        "nomad_job_id": "web",
        "nomad_allocation_id": "a1b2",
        "nomad_task": "t",
        "sub": "global:default:web:g:t:vault_default",
        "aud": ["vault.io"],
        "iat": 1000,
        "nbf": 1000,
        "exp": 4600,
        "jti": "jti-1",
    }
    # Nomad signs an identity without a ttl with no exp; the agent gives it the client's default
    assert identity_claims(w, WorkloadIdentity(), 1000, "j")["exp"] == 1000 + 3600
    assert identity_claims(w, WorkloadIdentity(), 1000, "j", default_ttl=60)["exp"] == 1060
    assert renew_at(1000, 3600) == 2800 and renew_at(1000, 0) is None


# -- the task's side -----------------------------------------------------------------------------
ALLOC = "a1b2c3d4-0000-4000-8000-0000000000e1"


def _runner(node: FakeNode, *ids: WorkloadIdentity, now: list[float] | None = None) -> AllocRunner:
    task = Task(name="t", driver="exec", identities=ids)
    group = Group(name="g", tasks=(task,), network=None, restart=RestartPolicy(attempts=0, mode="fail"))
    job = Job(id="wid", groups=(group,))
    deps = node.deps()
    if now is not None:
        deps = dataclasses.replace(deps, clock=lambda: now[0])
    runner = AllocRunner(deps, AllocRecord(id=ALLOC, job="wid", group="g"), job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


def test_tokens_are_in_the_task_dir_0600_and_in_its_env_before_its_first_start(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(
        node,
        WorkloadIdentity(env=True, file=True),
        WorkloadIdentity("vault_default", ("vault.io",), file=True, ttl=600, change_mode="restart"),
        WorkloadIdentity(
            "api", ("api",), env=True, file=True, filepath="local/api.jwt", ttl=600, change_mode="restart"
        ),
        WorkloadIdentity("unused", ("x",)),
    )
    assert r.alloc_running()
    task_dir = r.tasks[r.group.tasks[0].name].task_dir
    jwks = node.deps().keyring.jwks()  # type: ignore[union-attr]
    default = (task_dir / "secrets" / "nomad_token").read_text()
    for path in (task_dir / "secrets" / "nomad_token", task_dir / "secrets" / "nomad_vault_default.jwt"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert verify(default, jwks)["aud"] == ["nomadproject.io"]
    if os.geteuid() == 0:  # the exec task runs as nobody: its token is nobody's (chowned before the start)
        assert (task_dir / "secrets" / "nomad_token").stat().st_uid == pwd.getpwnam("nobody").pw_uid
    vault = verify((task_dir / "secrets" / "nomad_vault_default.jwt").read_text(), jwks)
    assert vault["sub"] == "global:default:wid:g:t:vault_default" and vault["nomad_allocation_id"] == ALLOC
    assert verify((task_dir / "local" / "api.jwt").read_text(), jwks)["aud"] == ["api"]
    (ctx,) = node.exec.starts
    assert ctx.env["NOMAD_TOKEN"] == default and verify(ctx.env["NOMAD_TOKEN_api"], jwks)["aud"] == ["api"]
    assert "NOMAD_TOKEN_vault_default" not in ctx.env, "env = false"
    assert not list((task_dir / "secrets").glob("nomad_unused*")), "neither file nor env: nothing"


def test_a_token_with_a_ttl_is_signed_again_and_the_task_told_by_its_change_mode(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    now = [1000.0]
    sig = WorkloadIdentity("s", ("s",), file=True, ttl=100, change_mode="signal", change_signal="SIGHUP")
    r = _runner(node, sig, now=now)
    path = r.tasks[r.group.tasks[0].name].task_dir / "secrets" / "nomad_s.jwt"
    first = path.read_text()
    assert [round(d) for d, _ in node.timers] == [50], "renewed half way to its expiry"
    now[0] = 1050.0
    timers, node.timers = node.timers, []
    for _, fn in timers:
        fn()
    second = path.read_text()
    assert second != first and verify(second, node.deps().keyring.jwks())["exp"] == 1150  # type: ignore[union-attr]
    assert node.exec.signals and node.exec.signals[-1][1] == "SIGHUP"
    events = [(e.type, e.message) for e in node.store.events(r.id, "t")]
    assert ("Signaling", "Identity[s]: new Identity token acquired") in events
    assert [round(d) for d, _ in node.timers] == [50], "and again"
    signed: list[dict[str, Any]] = []
    keyring = r.d.keyring
    assert keyring is not None
    real_sign = keyring.sign

    def counting(claims: dict[str, Any]) -> str:
        signed.append(claims)
        return real_sign(claims)

    keyring.sign = counting  # type: ignore[method-assign]
    r.stop()
    now[0] = 1100.0
    timers, node.timers = node.timers, []
    for _, fn in timers:  # the renewal armed before the stop fires
        fn()
    assert signed == [], "no renewal after the stop"


def test_a_link_planted_at_the_token_path_is_refused_not_followed(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    target = tmp_path / "host-file"
    target.write_text("the host's")
    secrets = node.deps().data_dir / "alloc" / ALLOC / "t" / "secrets"
    secrets.mkdir(parents=True)
    os.symlink(target, secrets / "nomad_token")
    r = _runner(node, WorkloadIdentity(file=True))
    assert r.rec.status is AllocStatus.FAILED and "symbolic link" in r.rec.reason
    assert target.read_text() == "the host's"
    assert r.state.task("t").state is TaskState.DEAD
