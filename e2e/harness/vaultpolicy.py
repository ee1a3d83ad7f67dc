"""A report's Vault policies, created in the lab's OpenBao for one scenario run.

A report's jobspec names policies of its own cluster (`vault { policies = ["my-app"] }`); the lab has
none of them, and the agents' tokens come through a token role that grants only the lab's job
policies. For the run, each policy a job names that is not one of the lab's is replaced (in the
parsed job, as an image is: the jobspec stays as the report gives it) by `fieldlab-job-<job>`,
created for the run and scoped as the pki role scopes the lab's job policies: certificates for the
job's own service names, reads of its own KV path. The agents' rule binds a `fieldlab-job-<job>`
policy to the job `<job>` alone. The token role grants it for the run; both are undone afterwards.

The policy text and the job's rewriting are pure; `RunPolicies` is the thin adapter to OpenBao's HTTP
API (sys/policies/acl, auth/token/roles) with the operator's root token from the lab's secrets dir,
which never leaves this process (no log line, no history record carries it).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOB_PREFIX = "fieldlab-job-"  # the pki role's job policies (and the agents' vault.job_policy_prefix)
TOKEN_ROLE = "fieldlab-task"  # the pki role's pki_task_token_role
DOMAIN = "service.fieldlab"  # the pki role's pki_workload_domain
KV_MOUNT = "secret"  # the pki role's pki_kv_mount
CERT_ROLES = ("fieldlab-workload", "fieldlab-workload-client")


def _tasks(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for g in job.get("TaskGroups") or [] for t in g.get("Tasks") or []]


def report_policies(job: dict[str, Any]) -> list[str]:
    """The policies the job's vault blocks name that are not the lab's job policies."""
    named = {p for t in _tasks(job) for p in ((t.get("Vault") or {}).get("Policies") or [])}
    return sorted(p for p in named if not str(p).startswith(JOB_PREFIX))


def service_names(job: dict[str, Any]) -> list[str]:
    """The job's id and its services' names (those without interpolation): what its certificates
    may name."""
    names = {str(job.get("ID") or "")}
    for group in job.get("TaskGroups") or []:
        for svc in [
            *(group.get("Services") or []),
            *(s for t in group.get("Tasks") or [] for s in t.get("Services") or []),
        ]:
            name = str(svc.get("Name") or "")
            if name and "${" not in name:
                names.add(name)
    return sorted(n for n in names if n)


def policy_hcl(job_id: str, names: list[str]) -> str:
    """The run's job policy: as the pki role's job-policy.hcl.j2 writes one."""
    fqdns = json.dumps([f"{n}.{DOMAIN}" for n in names])
    parts = [f"# {JOB_PREFIX}{job_id}: created by an e2e scenario run for the report's own policies\n"]
    for role in CERT_ROLES:
        parts.append(
            f'path "pki_int/issue/{role}" {{\n  capabilities = ["update"]\n  allowed_parameters = {{\n'
            f'    "common_name" = {fqdns}\n    "alt_names"   = {fqdns}\n    "ttl"         = []\n  }}\n}}\n'
        )
    parts.append(f'path "{KV_MOUNT}/data/fieldlab/jobs/{job_id}/*" {{\n  capabilities = ["read"]\n}}\n')
    parts.append(f'path "{KV_MOUNT}/data/fieldlab/shared" {{\n  capabilities = ["read"]\n}}\n')
    return "\n".join(parts)


def substitute_policies(job: dict[str, Any], policy: str) -> tuple[dict[str, Any], list[str]]:
    """The job with every report policy replaced by `policy` (the run's): the substitutions, as
    `task: old -> new` lines."""
    done: list[str] = []
    groups = []
    for group in job.get("TaskGroups") or []:
        tasks = []
        for task in group.get("Tasks") or []:
            vault = task.get("Vault") or {}
            named: list[str] = list(vault.get("Policies") or [])
            old = [p for p in named if not p.startswith(JOB_PREFIX)]
            if old:
                done.append(f"{task.get('Name')}: vault policies {', '.join(old)} -> {policy}")
                kept = [p for p in named if p.startswith(JOB_PREFIX)]
                tasks.append({**task, "Vault": {**vault, "Policies": sorted({*kept, policy})}})
            else:
                tasks.append(task)
        groups.append({**group, "Tasks": tasks})
    return {**job, "TaskGroups": groups}, done


@dataclass
class RunPolicies:
    """The run's policies in OpenBao: `create` one per job, `undo` everything it did."""

    addr: str  # http://<server>:8200
    token_file: Path  # the lab's openbao-init.json (mode 0600)
    created: list[str] = field(default_factory=list)
    _granted: list[str] = field(default_factory=list)

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        token = json.loads(self.token_file.read_text())["root_token"]
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.addr}/v1/{path}", data=data, method=method)
        req.add_header("X-Vault-Token", token)
        try:
            with urllib.request.urlopen(req, timeout=15) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"OpenBao {method} {path}: HTTP {exc.code}") from None
        return json.loads(raw) if raw else None

    def create(self, job_id: str, names: list[str]) -> str:
        """The policy for `job_id`, granted by the token role for the run; its name."""
        name = f"{JOB_PREFIX}{job_id}"
        self._request("PUT", f"sys/policies/acl/{name}", {"policy": policy_hcl(job_id, names)})
        self.created.append(name)
        role = self._role()
        allowed = list(role.get("allowed_policies") or [])
        if name not in allowed:
            self._write_role(role, sorted([*allowed, name]))
            self._granted.append(name)
        return name

    def _role(self) -> dict[str, Any]:
        return dict((self._request("GET", f"auth/token/roles/{TOKEN_ROLE}") or {}).get("data") or {})

    def _write_role(self, role: dict[str, Any], allowed: list[str]) -> None:
        """The role written back whole (every setting as read) with only its allowed policies changed."""
        body = {k: v for k, v in role.items() if k != "name"}
        self._request("POST", f"auth/token/roles/{TOKEN_ROLE}", {**body, "allowed_policies": allowed})

    def undo(self) -> None:
        if self._granted:
            role = self._role()
            self._write_role(role, [p for p in role.get("allowed_policies") or [] if p not in self._granted])
            self._granted.clear()
        for name in self.created:
            self._request("DELETE", f"sys/policies/acl/{name}")
        self.created.clear()
