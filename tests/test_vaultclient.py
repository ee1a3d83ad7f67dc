"""agent.vault against a real OpenBao server (tests/openbao_server.py): AppRole login, PKI issue
with re-issue jitter, KV v2 reads, denials, outages, token renewal and fresh logins, and tasks' tokens
created through the token role. The agent's own AppRole reads nothing (tests/test_vault_tokens.py
checks its policy); the client's mechanics are tested here with a test AppRole that may read."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from agent.command.config import Config, VaultConfig
from agent.command.daemon import VAULT_PROBE_INTERVAL, Agent, needs_vault_probe, newest_vault_status
from agent.vault import (
    LOGIN_PATH,
    SecretResult,
    TokenClient,
    VaultCallStatus,
    VaultClient,
    VaultDenied,
    VaultError,
    VaultNotFound,
    VaultStatus,
    VaultUnavailable,
    backoff,
    check_vault,
    reissue_at,
    vault_client,
)
from lab.waits import wait_until
from tests.openbao_server import JOB_PROBE, TOKEN_ROLE, WORKLOAD_ROLE, OpenBaoServer, job_kv_path

ISSUE = f"pki_int/issue/{WORKLOAD_ROLE}"
SHARED = "secret/data/fieldlab/shared"


class Clock:
    """A clock the test moves; starts at the real time so that the server's times still make sense."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(openbao: OpenBaoServer) -> VaultClient:
    return VaultClient(openbao.address, openbao.client_test_approle_file, timeout=2.0)


# --- pure helpers


def test_reissue_at_is_a_random_point_between_60_and_80_percent_of_the_ttl() -> None:
    result = SecretResult(data={}, ttl=100.0, renewable=False, fetched_at=1000.0)
    rng = random.Random(7)
    draws = [reissue_at(result, rng=rng) for _ in range(200)]
    assert all(d is not None and 1060.0 <= d <= 1080.0 for d in draws)
    assert len(set(draws)) > 150  # jitter, not a fixed interval
    assert reissue_at(SecretResult(data={}, ttl=0, renewable=False, fetched_at=1.0)) is None
    with pytest.raises(ValueError, match="fraction"):
        reissue_at(result, fraction=(0.8, 0.6))


def test_backoff_grows_exponentially_with_jitter_and_is_capped() -> None:
    rng = random.Random(3)
    assert backoff(0, rng=rng) == 1.0
    for attempt in range(1, 6):
        draws = {backoff(attempt, rng=rng) for _ in range(50)}
        assert min(draws) >= 2**attempt / 2 and max(draws) <= 2**attempt
        assert len(draws) > 1
    late = [backoff(a, rng=rng) for a in range(7, 200)]
    assert all(30.0 <= d <= 60.0 for d in late) and len(set(late)) > 1


# --- against OpenBao


def test_approle_login_keeps_the_token_ttl(client: VaultClient) -> None:
    clock_before = time.time()
    client.login()
    assert client.logins == 1 and client.token_accessor
    assert client.token_expires_at == pytest.approx(clock_before + 3600, abs=5)
    assert not client.token_needs_renewal()
    assert "client_token" not in repr(client) and client.token_accessor not in repr(client)


def test_workload_cert_has_the_role_ttl_and_reissue_is_jittered(client: VaultClient) -> None:
    result = client.write(ISSUE, common_name="web.service.fieldlab", ip_sans="127.0.0.1")
    assert result.data["certificate"].startswith("-----BEGIN CERTIFICATE-----")
    assert result.data["private_key"] and result.data["serial_number"]
    assert 25.0 <= result.ttl <= 31.0, result.ttl
    assert not result.renewable
    cert = x509.load_pem_x509_certificate(result.data["certificate"].encode())
    assert cert.not_valid_after_utc == dt.datetime.fromtimestamp(result.data["expiration"], dt.UTC)
    assert result.expires_at == pytest.approx(result.data["expiration"], abs=1)

    draws = [reissue_at(result) for _ in range(20)]
    assert all(
        d is not None and result.fetched_at + 0.6 * result.ttl <= d <= result.fetched_at + 0.8 * result.ttl
        for d in draws
    )
    assert len(set(draws)) > 1

    data, ttl = client.fetch(ISSUE, {"common_name": "db.service.fieldlab"})
    assert data["serial_number"] != result.data["serial_number"] and 25.0 <= ttl <= 31.0


def test_kv_v2_read_returns_data_and_metadata(client: VaultClient) -> None:
    got = client.read(SHARED)
    assert got["data"] == {"greeting": "hello"}
    assert got["metadata"]["version"] >= 1
    assert client.fetch(SHARED, {}) == (got, 0.0)
    with pytest.raises(VaultNotFound, match="secret/data/fieldlab/missing"):
        client.read("secret/data/fieldlab/missing")


def test_paths_outside_the_policy_are_denied_naming_the_path(client: VaultClient) -> None:
    client.login()
    with pytest.raises(VaultDenied, match=r"secret/data/other: permission denied") as denied:
        client.read("secret/data/other")
    assert denied.value.path == "secret/data/other" and denied.value.op == "read"
    with pytest.raises(VaultDenied, match="pki/root/generate/internal"):
        client.write("pki/root/generate/internal", common_name="evil")
    assert client.logins == 1  # a denial is not mistaken for an unknown token


def test_refused_or_unreadable_credentials_are_denied_without_the_secret(
    openbao: OpenBaoServer, tmp_path: Path
) -> None:
    creds = json.loads(openbao.approle_file.read_text())
    bad = tmp_path / "approle.json"
    bad.write_text(json.dumps({"role_id": creds["role_id"], "secret_id": "not-the-secret-id"}))
    with pytest.raises(VaultDenied, match="AppRole credentials refused") as refused:
        VaultClient(openbao.address, bad).read(SHARED)
    assert "not-the-secret-id" not in str(refused.value)
    with pytest.raises(VaultDenied, match=re.escape(str(tmp_path / "missing.json"))):
        VaultClient(openbao.address, tmp_path / "missing.json").login()
    bad.write_text("{}")
    with pytest.raises(VaultDenied, match="role_id and secret_id"):
        VaultClient(openbao.address, bad).login()


def test_a_token_the_server_no_longer_knows_leads_to_one_fresh_login(
    openbao: OpenBaoServer, client: VaultClient
) -> None:
    client.login()
    first = client.token_accessor
    openbao.api("POST", "auth/token/revoke-accessor", {"accessor": first})
    assert client.read(SHARED)["data"] == {"greeting": "hello"}
    assert client.logins == 2 and client.token_accessor != first


def test_token_is_renewed_at_two_thirds_of_its_ttl_and_a_too_old_token_logs_in_afresh(
    openbao: OpenBaoServer,
) -> None:
    clock = Clock()
    client = VaultClient(openbao.address, openbao.client_test_approle_file, clock=clock)
    client.login()
    accessor, expires = client.token_accessor, client.token_expires_at
    assert not client.token_needs_renewal(clock.now + 0.6 * 3600)
    assert client.token_needs_renewal(clock.now + 0.67 * 3600)

    clock.now += 0.7 * 3600  # the next request renews first
    client.read(SHARED)
    assert (client.renewals, client.logins) == (1, 1)
    assert client.token_accessor == accessor and client.token_expires_at > expires

    clock.now += 2 * 3600  # expired by our clock: a renewal would fail, so log in again
    client.read(SHARED)
    assert (client.renewals, client.logins) == (1, 2)
    assert client.token_accessor != accessor


def test_a_renewal_capped_by_the_max_ttl_is_followed_by_a_fresh_login(
    openbao: OpenBaoServer, tmp_path: Path
) -> None:
    creds = tmp_path / "short.json"
    openbao.add_approle("fieldlab-agent-short", creds, token_ttl="10s", token_max_ttl="10s")
    client = VaultClient(openbao.address, creds)
    client.login()
    accessor = client.token_accessor

    def capped() -> tuple[bool | None, str]:
        client.renew()
        return (True if client.token_capped else None), f"token expires at {client.token_expires_at:.1f}"

    # The server caps a renewal once the token has lived about a second of its 10 s max TTL.
    wait_until(capped, timeout=8, what="a renewal capped by the token's max TTL", interval=0.5)
    assert client.token_accessor == accessor and client.logins == 1
    client.renew()
    assert client.logins == 2 and client.token_accessor != accessor and not client.token_capped


def test_a_server_that_does_not_answer_fails_within_the_timeout(openbao: OpenBaoServer) -> None:
    with socket.socket() as hung:  # accepts connections (the kernel does) but never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        port = hung.getsockname()[1]
        client = VaultClient(f"http://127.0.0.1:{port}", openbao.client_test_approle_file, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(VaultUnavailable, match="timed out"):
            client.read(SHARED)
        assert time.monotonic() - started < 2.0


@pytest.fixture
def outage(openbao: OpenBaoServer) -> Iterator[OpenBaoServer]:
    """The test stops or seals the server; it is running and unsealed again afterwards."""
    yield openbao
    openbao.start()
    if openbao.is_sealed():
        openbao.unseal()


def test_vault_down_or_sealed_is_unavailable_and_calls_work_again_after_it_returns(
    outage: OpenBaoServer, client: VaultClient
) -> None:
    client.login()
    outage.stop()
    started = time.monotonic()
    with pytest.raises(VaultUnavailable, match=f"read {SHARED}: connection failed") as down:
        client.read(SHARED)
    with pytest.raises(VaultUnavailable):
        client.write(ISSUE, common_name="web.service.fieldlab")
    assert time.monotonic() - started < client.timeout
    assert isinstance(down.value, VaultError)

    outage.start()  # unseals with the kept key; raft kept the token
    assert client.read(SHARED)["data"] == {"greeting": "hello"}
    assert 25.0 <= client.write(ISSUE, common_name="web.service.fieldlab").ttl <= 31.0

    outage.seal()
    with pytest.raises(VaultUnavailable, match="sealed"):
        client.read(SHARED)
    outage.unseal()
    assert client.read(SHARED)["data"] == {"greeting": "hello"}
    assert client.logins == 1


# --- the agent's start-up check (agent.vault): one login, through the agent's own client


def test_start_up_check_logs_the_agents_client_in_once_and_keeps_its_token(openbao: OpenBaoServer) -> None:
    cfg = VaultConfig(openbao.address, openbao.approle_file)
    client = vault_client(cfg)
    assert client is not None and client.timeout == 5.0
    assert check_vault(cfg, client) == VaultStatus(configured=True, authenticated=True, error="")
    assert client.logins == 1 and client.token_accessor
    # The token the check made is the one the client goes on using: no second login, none left over.
    grant = client.create_token(TOKEN_ROLE, [JOB_PROBE])
    client.revoke_accessor(grant.accessor)
    assert client.logins == 1
    looked_up = openbao.api("POST", "auth/token/lookup-accessor", {"accessor": client.token_accessor})
    assert looked_up["data"]["accessor"] == client.token_accessor


def test_start_up_check_reports_what_is_missing_or_refused_without_raising(
    openbao: OpenBaoServer, tmp_path: Path
) -> None:
    assert vault_client(VaultConfig()) is None
    assert check_vault(VaultConfig(), None) == VaultStatus(configured=False)
    no_creds = VaultConfig(openbao.address, None)
    assert vault_client(no_creds) is None
    assert check_vault(no_creds, None) == VaultStatus(True, False, "vault.approle_file is not set")

    missing = VaultConfig(openbao.address, tmp_path / "missing.json")
    status = check_vault(missing, vault_client(missing))
    assert not status.authenticated and status.error.startswith("approle login failed: VaultDenied: ")
    assert str(tmp_path / "missing.json") in status.error

    creds = json.loads(openbao.approle_file.read_text())
    bad = tmp_path / "approle.json"
    bad.write_text(json.dumps({"role_id": creds["role_id"], "secret_id": "not-the-secret-id"}))
    status = check_vault(VaultConfig(openbao.address, bad), vault_client(VaultConfig(openbao.address, bad)))
    assert status.configured and not status.authenticated
    assert "AppRole credentials refused" in status.error and "not-the-secret-id" not in status.error

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        down = VaultConfig(f"http://127.0.0.1:{closed.getsockname()[1]}", openbao.approle_file)
    status = check_vault(down, vault_client(down))
    assert status == VaultStatus(
        True,
        False,
        "approle login failed: VaultUnavailable: vault login auth/approle/login: connection"
        " failed (server down or unreachable)",
    )


# --- tasks' tokens: created through the token role, used, renewed and revoked


def test_a_task_token_is_created_through_the_role_with_exactly_the_asked_policies(
    openbao: OpenBaoServer,
) -> None:
    agent = VaultClient(openbao.address, openbao.approle_file)
    grant = agent.create_token(TOKEN_ROLE, [JOB_PROBE], meta={"job": "probe"}, display_name="probe-web")
    assert grant.policies == ("default", JOB_PROBE) and grant.renewable and grant.ttl == 3600.0
    assert grant.token and grant.token not in repr(grant) and grant.accessor in repr(grant)
    looked_up = openbao.api("POST", "auth/token/lookup-accessor", {"accessor": grant.accessor})["data"]
    assert looked_up["orphan"] and looked_up["role"] == TOKEN_ROLE and looked_up["meta"] == {"job": "probe"}

    task = agent.token_client(grant.token)
    assert isinstance(task, TokenClient) and grant.token not in repr(task)
    assert task.read(job_kv_path(JOB_PROBE))["data"] == {"owner": JOB_PROBE}
    assert task.lookup_self().accessor == grant.accessor
    renewed = task.renew_self()
    assert renewed.accessor == grant.accessor and renewed.ttl == 3600.0

    agent.revoke_accessor(grant.accessor)
    with pytest.raises(VaultDenied, match="lookup auth/token/lookup-self: permission denied"):
        task.lookup_self()
    with pytest.raises(VaultDenied):
        task.read(job_kv_path(JOB_PROBE))
    agent.revoke_accessor(grant.accessor)  # gone already: not an error


def test_the_token_role_refuses_other_policies_and_the_client_refuses_none(openbao: OpenBaoServer) -> None:
    agent = VaultClient(openbao.address, openbao.approle_file)
    for policies in (["root"], ["fieldlab-agent-test"], [JOB_PROBE, "fieldlab-client-test"]):
        with pytest.raises(VaultDenied, match="must be subset of the role's allowed policies"):
            agent.create_token(TOKEN_ROLE, policies)
    # Through a role an empty list means every allowed policy: the client never sends one.
    with pytest.raises(VaultDenied, match="no policies asked for"):
        agent.create_token(TOKEN_ROLE, [])
    with pytest.raises(VaultDenied, match="auth/token/create/another-role: permission denied"):
        agent.create_token("another-role", [JOB_PROBE])


# --- Vault as it is now: each request's outcome, and the agent's health from it (agent.command.daemon)


def _health(agent: Agent) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent's health as /v1/agent/self carries it (Stats["fieldlab"],
    agent.command.daemon.health_stats)."""
    body = agent.health_body()
    return body["vault"], body["vault_status"]


def _agent(openbao: OpenBaoServer, tmp_path: Path, clock: Clock | None = None) -> Agent:
    """An agent with only its Vault side: the client made and logged in as startup() does."""
    cfg = Config(
        node_name="client1", data_dir=tmp_path, vault=VaultConfig(openbao.address, openbao.approle_file)
    )
    agent = Agent(cfg)
    agent.vault_client = VaultClient(
        openbao.address, openbao.approle_file, timeout=2.0, clock=clock or time.time
    )
    agent.vault = check_vault(cfg.vault, agent.vault_client)
    return agent


def test_health_reports_vault_from_the_last_request_sealed_ok_unreachable_denied(
    outage: OpenBaoServer, tmp_path: Path
) -> None:
    agent = _agent(outage, tmp_path)
    client = agent.vault_client
    assert client is not None
    vault, status = _health(agent)
    assert vault == {"configured": True, "authenticated": True, "error": ""}
    assert status["state"] == "ok" and status["op"] == "login" and status["source"] == "request"

    outage.seal()
    before = time.time()
    with pytest.raises(VaultUnavailable, match="sealed"):
        client.create_token(TOKEN_ROLE, [JOB_PROBE])
    vault, status = _health(agent)
    assert vault["authenticated"] is False and "sealed" in vault["error"]
    assert status["state"] == "sealed" and status["op"] == "write" and status["at"] >= before
    assert status["path"] == f"auth/token/create/{TOKEN_ROLE}" and "sealed" in status["error"]

    outage.unseal()
    client.revoke_accessor(client.create_token(TOKEN_ROLE, [JOB_PROBE]).accessor)
    vault, status = _health(agent)
    assert vault == {"configured": True, "authenticated": True, "error": ""}
    assert status["state"] == "ok" and status["op"] == "write" and status["error"] == ""

    with pytest.raises(VaultDenied):  # the agent's own policy reads no KV
        client.read(SHARED)
    vault, status = _health(agent)
    assert status["state"] == "denied" and "permission denied" in status["error"]
    assert vault["authenticated"] is False and vault["error"] == status["error"]

    outage.stop()
    with pytest.raises(VaultUnavailable, match="connection failed"):
        client.create_token(TOKEN_ROLE, [JOB_PROBE])
    vault, status = _health(agent)
    assert status["state"] == "unreachable" and "connection failed" in status["error"]
    assert vault["authenticated"] is False
    assert status["last_request"]["path"] == f"auth/token/create/{TOKEN_ROLE}"


def test_health_probes_sys_health_when_no_request_told_it_anything_lately(
    outage: OpenBaoServer, tmp_path: Path
) -> None:
    clock = Clock()
    agent = _agent(outage, tmp_path, clock)
    client = agent.vault_client
    assert client is not None and client.last_status is not None and client.last_probe is None
    _health(agent)
    assert client.last_probe is None  # the login just now says enough

    outage.seal()
    clock.now += VAULT_PROBE_INTERVAL + 1  # no request since: health asks sys/health itself
    vault, status = _health(agent)
    assert status["state"] == "sealed" and status["source"] == "probe" and status["path"] == "sys/health"
    assert vault["authenticated"] is False and "sealed" in vault["error"]
    probed = client.last_probe
    assert probed is not None and probed.at == clock.now
    _health(agent)
    assert client.last_probe is probed  # at most one probe per interval

    outage.unseal()
    clock.now += VAULT_PROBE_INTERVAL + 1
    vault, status = _health(agent)
    assert status["state"] == "ok" and status["source"] == "probe"
    assert vault == {"configured": True, "authenticated": True, "error": ""}

    outage.stop()
    clock.now += VAULT_PROBE_INTERVAL + 1
    vault, status = _health(agent)
    assert status["state"] == "unreachable" and status["source"] == "probe"
    assert vault["authenticated"] is False and "connection failed" in vault["error"]


def test_health_with_no_request_at_all_probes_rather_than_reporting_start_up(
    openbao: OpenBaoServer, tmp_path: Path
) -> None:
    cfg = Config(node_name="n", data_dir=tmp_path, vault=VaultConfig(openbao.address, tmp_path / "none.json"))
    agent = Agent(cfg)
    agent.vault_client = VaultClient(openbao.address, tmp_path / "none.json", timeout=2.0)
    agent.vault = VaultStatus(True, True, "")  # what start-up said, whatever it was
    vault, status = _health(agent)
    assert status["source"] == "probe" and status["state"] == "ok"
    assert vault["authenticated"] is False  # Vault is up, but this client never logged in
    with pytest.raises(VaultDenied):
        agent.vault_client.login()
    vault, status = _health(agent)
    assert status["state"] == "denied" and status["op"] == "login" and "none.json" in vault["error"]


def test_newest_vault_status_keeps_a_denial_a_probe_cannot_see() -> None:
    ok = VaultCallStatus("ok", 10.0, "health", "sys/health")
    denied = VaultCallStatus("denied", 5.0, "login", LOGIN_PATH, "AppRole credentials refused")
    sealed = VaultCallStatus("sealed", 12.0, "health", "sys/health", "sealed")
    assert newest_vault_status(None, None) is None
    assert newest_vault_status(denied, None) is denied and newest_vault_status(None, ok) is ok
    assert newest_vault_status(denied, ok) is denied  # sys/health knows nothing of our credentials
    assert newest_vault_status(denied, sealed) is sealed
    later = VaultCallStatus("ok", 20.0, "write", "x")
    assert newest_vault_status(later, sealed) is later
    assert needs_vault_probe(None, None, 0.0, 10.0)
    assert not needs_vault_probe(later, None, 29.0, 10.0) and needs_vault_probe(later, None, 30.0, 10.0)
    assert not needs_vault_probe(denied, sealed, 21.0, 10.0)
