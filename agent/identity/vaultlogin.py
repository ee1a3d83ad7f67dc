"""Which way a task's Vault token is had, as Nomad's client decides it (pure).

- **Workload identity** (Nomad 1.7+): the task has a Vault identity, `identity "vault_default"` in
  its jobspec or the agent's `vault.default_identity` (Nomad's servers add that one to every task
  with a vault block): the agent signs that identity's JWT and logs in with it to the JWT auth
  method at `vault.jwt_auth_backend_path` (Nomad's default `jwt-nomad`), with the vault block's
  `role`, else the agent's `vault.jwt_role` (Nomad's `create_from_role`), else the method's
  default role. The role, not the vault block, decides the policies (Nomad ignores `policies` then).
- **Token role** (Nomad before 1.7, the lab's default): the agent's own token creates the task's
  token through its token role with the vault block's `policies` (none: Vault's `default` only).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agent.structs.model import Job, Task, Vault, WorkloadIdentity

VAULT_IDENTITY = "vault_default"  # Nomad: WorkloadIdentityVaultPrefix + the cluster ("default")
DEFAULT_JWT_MOUNT = "jwt-nomad"  # Nomad's vault.jwt_auth_backend_path default
DEFAULT_AUDIENCE = "vault.io"  # what `nomad setup vault` binds its role to


@dataclass(frozen=True)
class VaultJwt:
    """The agent's side of the workload identity workflow (its config's vault block)."""

    mount: str = DEFAULT_JWT_MOUNT
    role: str = ""  # the login role when the vault block names none ("": the method's default_role)
    default_identity: WorkloadIdentity | None = None  # given to a task with a vault block and none


@dataclass(frozen=True)
class JwtLogin:
    """A task logs in with the JWT of `identity` to auth/<mount>/login as `role`."""

    mount: str
    role: str
    identity: WorkloadIdentity


def vault_identity(task: Task, jwt: VaultJwt) -> WorkloadIdentity | None:
    """The task's Vault identity: its own `vault_default`, else the agent's default one, else none."""
    for wid in task.identities:
        if wid.name == VAULT_IDENTITY:
            return wid
    return jwt.default_identity


def with_implicit_identities(job: Job, jwt: VaultJwt) -> Job:
    """The job as Nomad's servers store it at register (their implicit identities hook): a task with
    a vault block and no `vault_default` identity gets the agent's default one under that name, so
    `job inspect` shows the identity the task logs in with. Without a default, the job as it is."""
    default = jwt.default_identity
    if default is None:
        return job

    def task(t: Task) -> Task:
        if t.vault is None or any(w.name == VAULT_IDENTITY for w in t.identities):
            return t
        return replace(t, identities=(*t.identities, replace(default, name=VAULT_IDENTITY)))

    groups = tuple(replace(g, tasks=tuple(task(t) for t in g.tasks)) for g in job.groups)
    return job if groups == job.groups else replace(job, groups=groups)


def plan_vault_login(task: Task, jwt: VaultJwt) -> JwtLogin | None:
    """JWT login when the task has a vault block and a Vault identity; None: the token role."""
    if task.vault is None:
        return None
    wid = vault_identity(task, jwt)
    if wid is None:
        return None
    return JwtLogin(jwt.mount, task.vault.role or jwt.role, wid)


def token_role_policies(vault: Vault) -> tuple[str, ...]:
    """What the token role is asked to grant: the block's policies, or Vault's `default` alone
    (through a role, an empty list would grant every policy the role allows)."""
    return vault.policies or ("default",)
