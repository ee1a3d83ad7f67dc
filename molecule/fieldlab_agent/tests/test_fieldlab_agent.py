"""fieldlab_agent on client1 (OpenBao and PKI on server1 from prepare): the agent answers its mTLS API
to the operator's cert of the lab's CA and is logged in to Vault; it refuses a TLS session to a client
without a cert and to one whose cert has the operator's name but another CA; it answers 403 to another
identity of the lab's own CA (a workload client cert, issued as a task of the probe job gets it). Its
unit keeps tasks on restart (KillMode=process), its secrets are private, its template render worker
runs as nobody (health says so; the config fails closed when it cannot), raw_exec is off, each job
policy is bound to its jobs, and SIGTERM is a clean exit."""

from __future__ import annotations

import datetime
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import requests
from verifylib import hostvars, http, self_signed, sh, unit_state

from lab.waits import wait_until

OPERATOR = "controller.operator.fieldlab"


@pytest.fixture(scope="module")
def secrets(client: Any) -> Path:
    return Path(hostvars(client)["fieldlab_secrets_dir"])


@pytest.fixture(scope="module")
def health_url(client: Any) -> str:
    # Nomad's agent self: this agent's own health is its Stats["fieldlab"]
    return f"https://{hostvars(client)['ansible_host']}:4646/v1/agent/self"


def write_private(path: Path, text: str) -> Path:
    path.touch(mode=0o600)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def workload_cert(client: Any, server: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A workload client cert of the lab's CA, issued on client1 as a task of the probe job gets it:
    client1's AppRole (bound to its address) makes a task token through the token role, which issues."""
    bao = f"http://{hostvars(server)['ansible_host']}:8200/v1"
    secrets = Path(hostvars(client)["fieldlab_secrets_dir"])
    approle = json.loads((secrets / f"approle-{hostvars(client)['inventory_hostname']}.json").read_text())
    login = http(client, "POST", f"{bao}/auth/approle/login", body=approle)
    assert login.status == 200, f"AppRole login: {login.status} {login.errors}"
    task = http(
        client,
        "POST",
        f"{bao}/auth/token/create/fieldlab-task",
        token=login.data["auth"]["client_token"],
        body={"policies": ["fieldlab-job-probe"]},
    )
    assert task.status == 200, f"task token: {task.status} {task.errors}"
    issued = http(
        client,
        "POST",
        f"{bao}/pki_int/issue/fieldlab-workload-client",
        token=task.data["auth"]["client_token"],
        body={"common_name": "probe.service.fieldlab", "ttl": "5m"},
    )
    assert issued.status == 200, f"workload client cert: {issued.status} {issued.errors}"
    d = tmp_path_factory.mktemp("workload")
    crt = write_private(d / "workload-client.crt", issued.data["data"]["certificate"] + "\n")
    key = write_private(d / "workload-client.key", issued.data["data"]["private_key"] + "\n")
    return str(crt), str(key)


@pytest.fixture(scope="module")
def foreign_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed client cert with the operator's name: right identity, wrong CA."""
    pem, pem_key = self_signed(OPERATOR, datetime.timedelta(hours=1), client_auth=True)
    d = tmp_path_factory.mktemp("foreign")
    crt = write_private(d / "foreign.crt", pem)
    return str(crt), str(write_private(d / "foreign.key", pem_key))


def operator_health(health_url: str, secrets: Path) -> dict[str, Any]:
    """The agent's health as the operator asks it, once it answers (30 s): Stats["fieldlab"] of
    Nomad's /v1/agent/self (strings, as Nomad's Stats), with the member's name as "node"."""

    def healthy() -> tuple[dict[str, Any] | None, str]:
        try:
            reply = requests.get(
                health_url,
                verify=str(secrets / "ca.pem"),
                cert=(str(secrets / "operator.crt"), str(secrets / "operator.key")),
                timeout=5,
            )
        except requests.RequestException as exc:
            return None, f"no answer: {exc}"
        if reply.status_code != 200:
            return None, f"{reply.status_code} {reply.text}"
        body = reply.json()
        return {**body["stats"]["fieldlab"], "node": body["member"]["Name"]}, "answered"

    health: dict[str, Any] = wait_until(
        healthy, timeout=30, interval=1, what="the agent to answer the operator"
    )
    return health


def test_the_agent_answers_the_operator_over_mtls_and_is_logged_in_to_vault(
    health_url: str, secrets: Path
) -> None:
    health = operator_health(health_url, secrets)
    assert health["status"] == "ok" and health["node"] == "client1", health
    assert health["vault_authenticated"] == "true", health


@pytest.mark.parametrize("who", ["no client cert", "the operator's name from another CA"])
def test_the_agent_refuses_a_tls_session_without_a_cert_of_its_ca(
    who: str, health_url: str, secrets: Path, foreign_cert: tuple[str, str]
) -> None:
    cert = None if who == "no client cert" else foreign_cert
    with pytest.raises(requests.exceptions.ConnectionError):  # a TLS alert or a reset: no HTTP at all
        requests.get(health_url, verify=str(secrets / "ca.pem"), cert=cert, timeout=5)
    assert operator_health(health_url, secrets)["status"] == "ok", "the agent is up: the refusal was its own"


def test_another_identity_of_the_labs_ca_gets_403(
    health_url: str, secrets: Path, workload_cert: tuple[str, str]
) -> None:
    reply = requests.get(health_url, verify=str(secrets / "ca.pem"), cert=workload_cert, timeout=5)
    assert reply.status_code == 403, f"{reply.status_code} {reply.text}"
    assert reply.json()["identity"] == "probe.service.fieldlab"


def test_the_operator_is_the_one_identity_the_config_allows(client: Any) -> None:
    config = json.loads(client.file("/etc/fieldlab-agent/config.json").content_string)
    assert config["api_allowed_identities"] == [OPERATOR]


def test_the_config_is_the_labs_hardened_one(client: Any, secrets: Path) -> None:
    """raw_exec off (trusted jobspecs only; `lab up --raw-exec` turns it on), the render worker
    failing closed, and each job policy bound to the jobs the pki role saved for it."""
    config = json.loads(client.file("/etc/fieldlab-agent/config.json").content_string)
    assert config["raw_exec_enabled"] is False and config["template_worker_fail_closed"] is True
    saved = json.loads((secrets / "job-policies.json").read_text())
    assert (
        config["vault"]["job_policy_prefix"] == "fieldlab-job-" and config["vault"]["job_policies"] == saved
    )
    assert "probe" in saved["fieldlab-job-probe"], saved


def test_health_says_the_render_worker_runs_as_nobody_failing_closed(health_url: str, secrets: Path) -> None:
    """The agent starts its render worker at once (fail closed): health shows it dropped to nobody."""

    def started() -> tuple[dict[str, Any] | None, str]:
        health = operator_health(health_url, secrets)
        worker = {
            k.removeprefix("template_worker_"): v
            for k, v in health.items()
            if k.startswith("template_worker_")
        }
        return (worker if worker["state"] != "not started" else None), str(worker)

    worker = wait_until(started, timeout=30, interval=1, what="the render worker's start")
    assert worker == {"user": "nobody", "fail_closed": "true", "state": "ok", "error": ""}, worker


def test_the_secrets_on_the_node_are_roots_alone(client: Any) -> None:
    paths = ["/etc/fieldlab-agent", "/etc/fieldlab-agent/approle.json", "/etc/fieldlab-agent/tls/agent.key"]
    modes = sh(client, "stat -c '%n %a %U' " + " ".join(paths)).splitlines()
    assert modes == [
        "/etc/fieldlab-agent 700 root",
        "/etc/fieldlab-agent/approle.json 600 root",
        "/etc/fieldlab-agent/tls/agent.key 600 root",
    ]


def test_the_labs_identity_key_is_in_the_agents_keystore_roots_alone(client: Any, secrets: Path) -> None:
    """The pki role's signing key, the one OpenBao's JWT auth method trusts, is the agent's only key
    (every agent signs with it); compared by digest, never shown."""
    import hashlib

    keystore = "/var/lib/fieldlab-agent/server/keystore"
    listed = sh(client, f"stat -c '%n %a %U' {keystore} {keystore}/*.pem").splitlines()
    assert len(listed) == 2 and listed[0] == f"{keystore} 700 root", listed
    assert listed[1].startswith(f"{keystore}/fieldlab-") and listed[1].endswith(".pem 600 root"), listed
    on_node = sh(client, f"sha256sum {keystore}/*.pem").split()[0]
    want = hashlib.sha256((secrets / "workload-identity.pem").read_bytes()).hexdigest()
    assert on_node == want, "the agent's key is not the lab's"


# The agent's own render worker pool, started as the root agent starts it: its worker must drop to
# nobody, which it can only do when nobody can read the installed venv (a worker that cannot start as
# nobody falls back to the agent's user, with a warning, and templates render as root).
RENDER_WORKER_UID = (
    "import os; from agent.templates.worker import _WorkerPool; pool = _WorkerPool(); w = pool.get(); "
    "print(pool.unprivileged, os.stat(f'/proc/{w.proc.pid}').st_uid); pool.close()"
)


def test_the_template_render_worker_runs_as_nobody(client: Any) -> None:
    exec_start = sh(client, "systemctl show -p ExecStart --value fieldlab-agent")
    found = re.search(r"path=(\S+)/fieldlab-agent ", exec_start)
    assert found, f"no agent path in the unit's ExecStart: {exec_start}"
    python = f"{found[1]}/python"  # the venv the unit runs the agent from
    out = sh(client, f'{python} -c "{RENDER_WORKER_UID}" 2>&1').split()
    assert out[-2:] == ["True", "65534"], f"the render worker did not run as nobody: {' '.join(out)}"


def test_the_unit_keeps_tasks_on_restart_and_sigterm_is_a_clean_exit(
    client: Any, health_url: str, secrets: Path
) -> None:
    unit = sh(client, "systemctl show fieldlab-agent -p KillMode -p KillSignal -p ActiveState").split()
    # systemctl shows the signal by number: SIGINT, as Nomad's client is stopped
    assert {"KillMode=process", f"KillSignal={int(signal.SIGINT)}", "ActiveState=active"} <= set(unit), unit

    pid = sh(client, "systemctl show -p MainPID --value fieldlab-agent").strip()
    # Nomad's packaged unit's limit (65536): each blocking query, followed log and exec session is a
    # descriptor. systemd gives what the node allows: a container node's hard limit is its engine's.
    node_hard = int(sh(client, "grep '^Max open files' /proc/1/limits").split()[4])
    limits = sh(client, f"grep '^Max open files' /proc/{pid}/limits").split()
    want = str(min(65536, node_hard))
    assert limits[3:5] == [want, want], f"the agent's open-file limit: {' '.join(limits)}, node's {node_hard}"
    sh(client, f"kill -TERM {pid}")

    def stopped() -> tuple[str | None, str]:
        state = unit_state(client, "fieldlab-agent")
        return (state if state != "active" else None), state

    wait_until(stopped, timeout=15, what="the agent to stop on SIGTERM")
    ended = sh(client, "systemctl show -p Result -p ExecMainStatus fieldlab-agent").split()
    sh(client, "systemctl start fieldlab-agent")
    assert sorted(ended) == ["ExecMainStatus=0", "Result=success"], f"after SIGTERM: {ended}"
    assert operator_health(health_url, secrets)["status"] == "ok", "the agent did not come back"
