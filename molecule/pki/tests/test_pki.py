"""pki on server1, seen from client1: a different node than the server, over the lab network, with
client1's own AppRole credentials, as the agent uses them. The agent's token issues its own API cert
(for its own names only) and creates tasks' tokens through the token role fieldlab-task with a job's
policy (fieldlab-job-probe here); a task token issues workload certs that chain to the root CA and
reads the job's KV entries. Everything else is refused, with the status code asserted. Last, the
controller's files: modes, and an operator client cert that chains to the CA."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from verifylib import Reply, hostvars, http, self_signed

CLIENT2 = "client2"  # another client's name: not in this scenario, but its names are not client1's


@pytest.fixture(scope="module")
def bao(server: Any) -> str:
    return f"http://{hostvars(server)['ansible_host']}:8200/v1"


@pytest.fixture(scope="module")
def secrets(client: Any) -> Path:
    return Path(hostvars(client)["fieldlab_secrets_dir"])


@pytest.fixture(scope="module")
def approle(client: Any, secrets: Path) -> dict[str, Any]:
    """client1's AppRole login body, as the pki role wrote it on the controller."""
    return dict(json.loads((secrets / f"approle-{hostvars(client)['inventory_hostname']}.json").read_text()))


@pytest.fixture(scope="module")
def login(client: Any, bao: str, approle: dict[str, Any]) -> dict[str, Any]:
    reply = http(client, "POST", f"{bao}/auth/approle/login", body=approle)
    assert reply.status == 200, f"AppRole login from client1: {reply.status} {reply.errors}"
    return dict(reply.data["auth"])


@pytest.fixture(scope="module")
def agent_token(login: dict[str, Any]) -> str:
    return str(login["client_token"])


@pytest.fixture(scope="module")
def task(client: Any, bao: str, agent_token: str) -> Iterator[dict[str, Any]]:
    """A task's token for the probe job, made as the agent makes it; revoked afterwards."""
    reply = http(
        client,
        "POST",
        f"{bao}/auth/token/create/fieldlab-task",
        token=agent_token,
        body={"policies": ["fieldlab-job-probe"]},
    )
    assert reply.status == 200, f"task token: {reply.status} {reply.errors}"
    auth = dict(reply.data["auth"])
    yield auth
    http(
        client,
        "POST",
        f"{bao}/auth/token/revoke-accessor",
        token=agent_token,
        body={"accessor": auth["accessor"]},
    )


def cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def lifetime(pem: str) -> float:
    c = cert(pem)
    return (c.not_valid_after_utc - c.not_valid_before_utc).total_seconds()


def ekus(pem: str) -> list[x509.ObjectIdentifier]:
    return list(cert(pem).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def openssl_verify(tmp: Path, ca: str, leaf: str, untrusted: str = "") -> subprocess.CompletedProcess[str]:
    """`openssl verify` of `leaf` against the root `ca`, through the `untrusted` intermediate."""
    (tmp / "ca.pem").write_text(ca)
    (tmp / "leaf.pem").write_text(leaf)
    argv = ["openssl", "verify", "-CAfile", str(tmp / "ca.pem")]
    if untrusted:
        (tmp / "intermediate.pem").write_text(untrusted)
        argv += ["-untrusted", str(tmp / "intermediate.pem")]
    return subprocess.run([*argv, str(tmp / "leaf.pem")], capture_output=True, text=True, check=False)


def test_the_approle_logs_in_from_the_client_with_the_agent_policy(
    client: Any, login: dict[str, Any]
) -> None:
    name = hostvars(client)["inventory_hostname"]
    assert login["token_policies"] == ["default", f"fieldlab-agent-{name}"]
    assert login["lease_duration"] == 3600


def test_the_approle_does_not_log_in_from_another_node(
    server: Any, bao: str, approle: dict[str, Any]
) -> None:
    reply = http(server, "POST", f"{bao}/auth/approle/login", body=approle)
    assert reply.status == 400, f"client1's credentials from the server: {reply.status} (want 400)"


def test_a_task_token_has_the_jobs_policy_only(task: dict[str, Any]) -> None:
    assert task["token_policies"] == ["default", "fieldlab-job-probe"]
    assert task["orphan"] and task["renewable"] and task["lease_duration"] == 3600


def test_a_workload_cert_chains_to_the_root_ca_and_lives_five_minutes(
    client: Any, bao: str, task: dict[str, Any], tmp_path: Path
) -> None:
    reply = http(
        client,
        "POST",
        f"{bao}/pki_int/issue/fieldlab-workload",
        token=task["client_token"],
        body={"common_name": "probe.service.fieldlab", "ttl": "5m"},
    )
    assert reply.status == 200, f"issue: {reply.status} {reply.errors}"
    leaf, intermediate = reply.data["data"]["certificate"], reply.data["data"]["issuing_ca"]
    root = requests.get(f"{bao}/pki/ca/pem", timeout=5).text
    verified = openssl_verify(tmp_path, root, leaf, untrusted=intermediate)
    assert verified.returncode == 0, f"the workload cert does not chain to the root: {verified.stderr}"
    # 5m, plus the 30 s the server backdates not_before by (the role's not_before_duration). The two
    # ends are taken from the clock a moment apart, each to the whole second: 329 when a second
    # boundary falls between them (seen once in a molecule run), never anything else.
    assert lifetime(leaf) in (329, 330)
    assert ekus(leaf) == [ExtendedKeyUsageOID.SERVER_AUTH], "a workload cert must not be a client cert"


def test_only_the_workload_client_role_issues_client_certs(
    client: Any, bao: str, task: dict[str, Any]
) -> None:
    reply = http(
        client,
        "POST",
        f"{bao}/pki_int/issue/fieldlab-workload-client",
        token=task["client_token"],
        body={"common_name": "probe.service.fieldlab", "ttl": "5m"},
    )
    assert reply.status == 200, f"issue: {reply.status} {reply.errors}"
    assert ekus(reply.data["data"]["certificate"]) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_the_agent_gets_a_cert_for_its_own_names_only(client: Any, bao: str, agent_token: str) -> None:
    v = hostvars(client)
    name, address = v["inventory_hostname"], v["ansible_host"]
    url = f"{bao}/pki_int/issue/fieldlab-agent"
    own = http(
        client,
        "POST",
        url,
        token=agent_token,
        body={
            "common_name": f"{name}.agent.fieldlab",
            "alt_names": f"{name},localhost",
            "ip_sans": f"{address},127.0.0.1",
            "ttl": "1h",
        },
    )
    assert own.status == 200, f"own agent cert: {own.status} {own.errors}"
    sans = cert(own.data["data"]["certificate"]).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert sans.value.get_values_for_type(x509.DNSName) == [f"{name}.agent.fieldlab", name, "localhost"]
    assert sans.value.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address(address),
        ipaddress.ip_address("127.0.0.1"),
    ]
    refused = {
        "another client's cert": {"common_name": f"{CLIENT2}.agent.fieldlab"},
        "another client as alt name": {
            "common_name": f"{name}.agent.fieldlab",
            "alt_names": f"{CLIENT2}.agent.fieldlab",
        },
        "another client's short name": {
            "common_name": f"{name}.agent.fieldlab",
            "alt_names": f"{name},{CLIENT2}",
        },
    }
    got = {
        what: http(client, "POST", url, token=agent_token, body=body).status for what, body in refused.items()
    }
    assert got == dict.fromkeys(refused, 403)


def test_the_agent_policy_refuses_everything_else(client: Any, bao: str, agent_token: str) -> None:
    def call(method: str, path: str, body: Any = None) -> Reply:
        return http(client, method, f"{bao}/{path}", token=agent_token, body=body)

    got = {
        "list the secrets engines": call("GET", "sys/mounts").status,
        "generate a new root CA": call(
            "POST", "pki/root/generate/internal", {"common_name": "evil root"}
        ).status,
        "read the shared KV entry": call("GET", "secret/data/fieldlab/shared").status,
        "issue a workload cert": call(
            "POST", "pki_int/issue/fieldlab-workload", {"common_name": "probe.service.fieldlab"}
        ).status,
        "create a token outside the token role": call(
            "POST", "auth/token/create", {"policies": ["fieldlab-job-probe"]}
        ).status,
    }
    assert got == dict.fromkeys(got, 403)
    name = hostvars(client)["inventory_hostname"]
    wide = call("POST", "auth/token/create/fieldlab-task", {"policies": [f"fieldlab-agent-{name}"]})
    assert wide.status == 400, f"a task token with the agent's own policy: {wide.status} (want 400)"


def test_a_task_token_reads_its_jobs_kv_and_no_other_jobs_certs(
    client: Any, bao: str, task: dict[str, Any]
) -> None:
    kv = http(client, "GET", f"{bao}/secret/data/fieldlab/shared", token=task["client_token"])
    assert kv.status == 200 and kv.data["data"]["data"]["greeting"] == "hello from fieldlab", kv
    other = http(
        client,
        "POST",
        f"{bao}/pki_int/issue/fieldlab-workload",
        token=task["client_token"],
        body={"common_name": "noop-secrets.service.fieldlab"},
    )
    assert other.status == 403, f"a cert for another job's service: {other.status} (want 403)"


def test_the_agent_revokes_a_task_token_by_its_accessor(client: Any, bao: str, agent_token: str) -> None:
    made = http(
        client,
        "POST",
        f"{bao}/auth/token/create/fieldlab-task",
        token=agent_token,
        body={"policies": ["fieldlab-job-probe"]},
    )
    assert made.status == 200
    auth = made.data["auth"]
    revoked = http(
        client,
        "POST",
        f"{bao}/auth/token/revoke-accessor",
        token=agent_token,
        body={"accessor": auth["accessor"]},
    )
    assert revoked.status == 204, f"revoke-accessor: {revoked.status} {revoked.errors}"
    lookup = http(client, "GET", f"{bao}/auth/token/lookup-self", token=auth["client_token"])
    assert lookup.status == 403, f"the revoked token still works: {lookup.status}"


def _signed(data_dir: Path, key_pem: bytes | None, job: str, aud: str = "vault.io") -> str:
    """A task's vault_default identity for `job`, signed as an agent signs it: with the lab's key
    (copied into a keystore) or, `key_pem` None, with a key of its own."""
    import time
    import uuid

    from agent.identity.claims import Workload, identity_claims
    from agent.identity.keyring import Keyring
    from agent.structs.model import WorkloadIdentity

    if key_pem is not None:
        (data_dir / "server" / "keystore").mkdir(parents=True, mode=0o700)
        (data_dir / "server" / "keystore" / "lab.pem").write_bytes(key_pem)
    wid = WorkloadIdentity("vault_default", (aud,), ttl=600)
    claims = identity_claims(Workload(job, "g", str(uuid.uuid4()), "t"), wid, time.time(), str(uuid.uuid4()))
    return Keyring(data_dir).sign(claims)


def test_a_tasks_identity_signed_with_the_lab_key_logs_in_and_reads_only_its_jobs_paths(
    client: Any, bao: str, secrets: Path, tmp_path: Path
) -> None:
    key = (secrets / "workload-identity.pem").read_bytes()
    jwt = _signed(tmp_path / "agent", key, "probe")
    login = http(client, "POST", f"{bao}/auth/jwt-nomad/login", body={"jwt": jwt})  # the default role
    assert login.status == 200, f"JWT login: {login.status} {login.errors}"
    auth = login.data["auth"]
    assert auth["policies"] == ["default", "nomad-workloads"] and auth["metadata"]["nomad_job_id"] == "probe"
    token = auth["client_token"]
    shared = http(client, "GET", f"{bao}/secret/data/fieldlab/shared", token=token)
    assert shared.status == 200, shared
    own = http(client, "GET", f"{bao}/secret/data/fieldlab/jobs/probe/missing", token=token)
    other = http(client, "GET", f"{bao}/secret/data/fieldlab/jobs/noop/missing", token=token)
    assert (own.status, other.status) == (404, 403), (
        "its own job's path is readable (absent), another's denied"
    )
    foreign = http(
        client, "POST", f"{bao}/auth/jwt-nomad/login", body={"jwt": _signed(tmp_path / "x", None, "probe")}
    )
    wrong_aud = http(
        client,
        "POST",
        f"{bao}/auth/jwt-nomad/login",
        body={"jwt": _signed(tmp_path / "y", key, "probe", "nomadproject.io")},
    )
    assert (foreign.status, wrong_aud.status) == (400, 400), "another key's or another audience's JWT"


def test_the_controllers_files_are_private_and_the_operator_cert_chains_to_the_ca(secrets: Path) -> None:
    modes = {
        f: oct(stat.S_IMODE((secrets / f).stat().st_mode))
        for f in (
            "openbao-init.json",
            "approle-client1.json",
            "operator.crt",
            "operator.key",
            "ca.pem",
            "workload-identity.pem",
        )
    }
    assert modes == {
        "workload-identity.pem": "0o600",
        "openbao-init.json": "0o600",
        "approle-client1.json": "0o600",
        "operator.crt": "0o600",
        "operator.key": "0o600",
        "ca.pem": "0o644",
    }
    operator = (secrets / "operator.crt").read_text()
    common_names = cert(operator).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [a.value for a in common_names] == ["controller.operator.fieldlab"]
    assert ekus(operator) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(secrets / "ca.pem"), str(secrets / "operator.crt")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _converge(inventory: str) -> None:
    """The scenario's converge again, from the controller, as molecule runs it."""
    playbook = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    run = subprocess.run(
        [str(ansible_playbook), "-i", inventory, str(playbook)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert run.returncode == 0, f"converge failed:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"


def test_the_operator_cert_is_issued_again_when_it_expires_soon_or_another_ca_signed_it(
    server: Any, inventory: str, secrets: Path
) -> None:
    """The role keeps a valid operator certificate (the idempotence step saw that) and issues it again
    when it expires within pki_operator_renew_before (168h) or when another CA signed it (a lab rebuilt
    beside an old secrets directory): each case alone, then the new one chains to the CA."""
    crt, key = secrets / "operator.crt", secrets / "operator.key"
    root = json.loads((secrets / "openbao-init.json").read_text())["root_token"]
    short = http(
        server,
        "POST",
        "http://127.0.0.1:8200/v1/pki_int/issue/fieldlab-operator",
        token=root,
        body={"common_name": "controller.operator.fieldlab", "ttl": "2h"},
    )
    assert short.status == 200, short.errors
    issued = short.data["data"]
    for case, (pem, pem_key) in {
        "expires within 168h (the lab's CA)": (issued["certificate"], issued["private_key"]),
        "is valid a year (another CA)": self_signed(
            "controller.operator.fieldlab", datetime.timedelta(days=365)
        ),
    }.items():
        crt.write_text(pem + "\n")
        key.write_text(pem_key + "\n")
        _converge(inventory)
        new = crt.read_text()
        assert cert(new).serial_number != cert(pem).serial_number, f"an operator cert that {case} was kept"
        assert lifetime(new) > 168 * 3600, f"{case}: the new one lives {lifetime(new)} s"
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", str(secrets / "ca.pem"), str(crt)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert verified.returncode == 0, f"{case}: {verified.stdout}{verified.stderr}"
        assert oct(stat.S_IMODE(crt.stat().st_mode)) == oct(stat.S_IMODE(key.stat().st_mode)) == "0o600"
