"""A task's own Vault token, as Nomad's client derives it for a task with a `vault` block.

- **Derive**: the agent's token creates a token through the token role (`auth/token/create/<role>`)
  with exactly the task's policies; the role's allowed_policies bound what may be granted, and make
  the token orphan, renewable and periodic. The accessor (not a secret) is written to the state store
  before anything else, so a crash at any later point still lets the next agent revoke it.
- **Job policies are the job's**: the token role grants any of the lab's job policies to any token
  it creates, and only the agent knows which job asks, so the agent checks: a vault block naming a
  per-job policy (vault.job_policy_prefix, `fieldlab-job-` in the lab) of another job is refused with
  a "Vault Policy Refused" task event naming the policy and the job, and no token is asked for
  (`JobPolicies`, set from the config at start by `bind_job_policies`).
- **Where it goes**: `secrets/vault_token` (mode 0600, on the task's 0700 tmpfs) when `vault.file`
  is true, `VAULT_TOKEN` in the task's environment when `vault.env` is true, and the task's
  templates' `secret()` calls (this object is the task's SecretSource). Never the agent's token.
- **Renew**: at 2/3 of its TTL (`plan_token`, pure), with renew-self by the task's own token; a token
  that cannot be renewed (refused, expired by our clock, not renewable, capped by its max TTL) is
  replaced by a new one, and the task's `vault.change_mode` says what the task is told. With
  `allow_token_expiration` (Nomad's vault hook then runs no renewal loop) it is neither renewed nor
  replaced while the task lives, restarts included: it expires and the task keeps running. An
  agent restart still checks the stored token and derives one when it no longer works (Nomad's
  client reads the file back unchecked).
- **Restore**: after an agent restart the token is read back from `secrets/vault_token` and kept if
  the server still knows it under the recorded accessor (lookup-self); otherwise the old accessor is
  revoked and a new token derived. A task with `file = false` keeps no token anywhere the agent can
  read it back, so it gets a new one after every agent restart.
- **Rate limits**: a 429 (or the agent's own cap refusing) at a renewal or derivation is retried
  with full jitter after the server's Retry-After (`plan_rate_limit_retry`), as a "Vault Rate
  Limited" event; the token is the task's templates' source and passes on the agent's restart window
  (`restart_delay`) so that its re-issue after a restart is spread (agent.templates.runner).
- **Revoke**: when the task stops for good or the alloc is torn down, by accessor with the agent's
  token (`auth/token/revoke-accessor`); the record and the file go with it.

The clock and the Vault client are behind small protocols (`Clock`, `TokenIssuer`), so the runner's
tests drive this with fakes; the one decision with a policy in it, `plan_token`, is a pure function.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.allocdir.sandbox import SandboxError
from agent.allocdir.sandbox import read_file as read_task_file
from agent.decide.vaultrate import plan_rate_limit_retry
from agent.errors import AgentError, RateLimited
from agent.identity.vaultlogin import JwtLogin, token_role_policies
from agent.runner.owner import task_file_owner
from agent.runner.vaultlease import TokenAction, TokenLease, plan_token
from agent.state import StateStore
from agent.structs.model import Task, WorkloadIdentity
from agent.templates.render import RestartPaced
from agent.vault import (
    TokenGrant,
    VaultDenied,
    VaultError,
    VaultUnavailable,
    backoff,
)

log = logging.getLogger(__name__)

KIND_VAULT_TOKEN = "vault_token"  # noqa: S105 - a record kind: key alloc_id/task, the token's lease
TOKEN_FILE = "vault_token"  # noqa: S105 - a file name, in the task's secrets/ dir
TOKEN_FILE_MAX = 16 * 1024  # a token is ~100 bytes; anything larger is not one

Clock = Callable[[], float]


class TaskTokenClient(Protocol):
    """Requests with a task's token (agent.vault.TokenClient)."""

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]: ...

    def list_keys(self, path: str) -> list[str]: ...

    def lookup_self(self) -> TokenGrant: ...

    def renew_self(self) -> TokenGrant: ...


class TokenIssuer(Protocol):
    """What the agent's own Vault client does for tasks (agent.vault.VaultClient)."""

    @property
    def address(self) -> str: ...

    def create_token(
        self,
        role: str,
        policies: Sequence[str],
        *,
        meta: dict[str, str] | None = None,
        display_name: str = "",
    ) -> TokenGrant: ...

    def login_jwt(self, mount: str, role: str, jwt: str) -> TokenGrant: ...

    def revoke_accessor(self, accessor: str) -> None: ...

    def token_client(self, token: str) -> TaskTokenClient: ...


# --- which job may name which policy -----------------------------------------------------------------


def _job_matches(job: str, pattern: str) -> bool:
    """A job id against one entry of a policy's jobs: the id itself, or a prefix ending in `*`."""
    return job.startswith(pattern[:-1]) if pattern.endswith("*") else job == pattern


@dataclass(frozen=True)
class JobPolicies:
    """Per-job policies (client config vault.job_policy_prefix and vault.job_policies): a policy whose
    name starts with `prefix` belongs to jobs, and a vault block may name it only in a job it
    belongs to: the jobs listed for it in `jobs` (ids, or prefixes ending in `*`), or, when it is
    not listed, the one job whose id is the rest of its name (fieldlab-job-web: job web). No prefix:
    every policy may be named (the agent's default; the lab sets the prefix and the jobs of each of
    its pki role's job policies)."""

    prefix: str = ""
    jobs: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (policy, job ids or prefixes*)

    def refusal(self, policies: Sequence[str], job: str) -> str | None:
        """Why the job may not name one of `policies` (naming the policy and the job), or None."""
        if not self.prefix:
            return None
        listed = dict(self.jobs)
        for policy in policies:
            if not policy.startswith(self.prefix):
                continue
            allowed = listed.get(policy, (policy[len(self.prefix) :],))
            if not any(_job_matches(job, pattern) for pattern in allowed):
                return (
                    f"vault policy {policy} belongs to job {', '.join(allowed)}, "
                    f"not to job {job}: a job may only name its own {self.prefix}* policies"
                )
        return None


_job_policies = JobPolicies()


def bind_job_policies(bound: JobPolicies) -> None:
    """Set which jobs may name which per-job policies (the daemon, from its config, at start)."""
    global _job_policies  # noqa: PLW0603 - one per agent process, set once at start (as the render worker's)
    _job_policies = bound


def job_policies() -> JobPolicies:
    return _job_policies


class PolicyRefused(VaultError):
    """The task's vault block names another job's policy: no token is asked for, and none is kept."""


# --- sources for tasks without a token ---------------------------------------------------------------


class NoVaultBlock:
    """The SecretSource of a task without a `vault` block: its templates cannot read Vault (Nomad
    refuses them too), rather than borrowing the agent's token."""

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        raise AgentError(
            f"secret({path!r}): the task has no vault block, so it has no Vault token "
            '(add vault { policies = ["..."] } to the task)'
        )

    def list_keys(self, path: str) -> list[str]:
        raise AgentError(
            f"secrets({path!r}): the task has no vault block, so it has no Vault token "
            '(add vault { policies = ["..."] } to the task)'
        )


# --- one task's token over time ----------------------------------------------------------------------


class TaskVaultToken:
    """One task's token: derived before its templates render, renewed on the agent's timers, read
    back after an agent restart, revoked at teardown. Runs on the agent's main loop; also the task's
    SecretSource (`fetch`), so its templates use this token and no other."""

    def __init__(
        self,
        *,
        alloc_id: str,
        job: str,
        task: Task,
        issuer: TokenIssuer,
        role: str,
        store: StateStore,
        secrets_dir: Path,
        schedule: Callable[[float, Callable[[], None]], None],
        event: Callable[[str, str], None],
        on_new_token: Callable[[str], None],
        clock: Clock,
        jwt: JwtLogin | None = None,
        sign: Callable[[WorkloadIdentity], str] | None = None,
    ) -> None:
        if task.vault is None:
            raise ValueError(f"task {task.name} has no vault block")
        self.vault = task.vault
        self.alloc_id, self.job, self.task = alloc_id, job, task.name
        self.issuer, self.role, self.store = issuer, role, store
        # The workload identity workflow (agent.identity.vaultlogin): log in with the signed identity.
        self.jwt: JwtLogin | None = jwt if sign is not None else None
        self.sign: Callable[[WorkloadIdentity], str] | None = sign
        self.secrets_dir = secrets_dir
        self.owner = task_file_owner(task)  # the file is the task's user's before its first start
        self.schedule, self.event, self.on_new_token, self.clock = schedule, event, on_new_token, clock
        self.key = f"{alloc_id}/{task.name}"
        self._token = ""
        self._client: TaskTokenClient | None = None
        self.lease = self._load_lease()
        self.generation = 0  # invalidates the timers of an earlier schedule
        self.failures = 0  # renewals or derivations in a row that Vault did not answer
        self.derived = 0
        self.renewals = 0

    def __repr__(self) -> str:  # never shows the token
        accessor = self.lease.accessor if self.lease else ""
        return f"TaskVaultToken({self.key}, accessor={accessor!r})"

    @property
    def token(self) -> str:
        """The token itself ("" before it is derived or read back): for VAULT_TOKEN and nothing else."""
        return self._token

    @property
    def token_file(self) -> Path:
        return self.secrets_dir / TOKEN_FILE

    # -- the task's SecretSource ----------------------------------------------------------------------
    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        if self._client is None:
            raise VaultDenied("read", path, "the task's Vault token is not derived yet")
        return self._client.fetch(path, params)

    def list_keys(self, path: str) -> list[str]:
        if self._client is None:
            raise VaultDenied("list", path, "the task's Vault token is not derived yet")
        return self._client.list_keys(path)

    def restart_delay(self) -> float | None:
        """The task's point of the agent's restart window (agent.templates.render.RestartPaced), from
        the agent's Vault client; None when it has none."""
        return self.issuer.restart_delay() if isinstance(self.issuer, RestartPaced) else None

    # -- life cycle -----------------------------------------------------------------------------------
    def ensure(self) -> bool:
        """Before the task's templates render or its process starts: a token valid by our clock,
        derived when there is none (or it expired while the task was down). Returns whether a new
        token was derived. Raises VaultError when none can be had (PolicyRefused when the vault
        block names another job's policy)."""
        self._check_policies()
        if self._client is not None and self.lease is not None:
            plan = plan_token(self.lease, self.clock())
            if plan.action is not TokenAction.DERIVE or self.vault.allow_token_expiration:
                return False  # allowed to expire: a restart keeps it (Nomad derives at the first start only)
        self._replace("the task starts" if self.lease is None else "the token expired")
        return True

    def restore(self) -> bool:
        """After an agent restart: keep the stored token if the server still knows it under the
        recorded accessor, else revoke that accessor and derive a new one. Returns whether the token
        changed. Vault being unreachable keeps the stored token (its renewal retries), or, with none
        stored, schedules the derivation; it does not raise. A vault block that names another job's
        policy (the agent's config changed since) keeps nothing: the stored token is revoked."""
        try:
            self._check_policies()
        except PolicyRefused:
            self.revoke()
            return False
        stored = self._read_file()
        if stored and self.lease is not None:
            client = self.issuer.token_client(stored)
            try:
                grant = client.lookup_self()
            except VaultUnavailable as exc:
                log.warning(
                    "alloc=%s task=%s vault token kept unchecked: %s", self.alloc_id[:8], self.task, exc
                )
                self._adopt(stored, client, self.lease)
                return False
            except VaultError:
                grant = None  # revoked or expired
            if grant is not None and grant.accessor == self.lease.accessor:
                self._adopt(stored, client, self.lease.looked_up(grant))
                self._save()
                return False
        why = "the stored token no longer works" if stored else "no token was stored for the task"
        try:
            self._replace(why)
        except VaultError as exc:
            self.event("Vault Token Failed", f"cannot derive a Vault token ({why}): {exc}; retrying")
            self._retry(exc)
            return False
        return True

    def revoke(self) -> None:
        """The task is done: revoke its token by accessor (the agent's token may, the task's need not
        still work) and forget it. A failure is reported, not raised: the token expires by itself
        within its TTL once nobody renews it."""
        self.generation += 1
        lease, self.lease = self.lease, None
        self._token, self._client = "", None
        try:
            self.token_file.unlink(missing_ok=True)
        except OSError as exc:  # the secrets tmpfs may be gone already
            log.debug("alloc=%s task=%s token file: %s", self.alloc_id[:8], self.task, exc)
        if lease is None:
            return
        self._revoke_accessor(lease, "the task stopped")
        self.store.delete(KIND_VAULT_TOKEN, self.key)

    # -- renewal --------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        self.generation += 1
        gen = self.generation
        if self.vault.allow_token_expiration:
            return  # Nomad's vault hook starts no renewal loop: the token expires, the task runs on
        plan = plan_token(self.lease, self.clock())
        if plan.action is TokenAction.NEVER:
            return
        self.schedule(max(0.0, plan.at - self.clock()), lambda: self._tick(gen))

    def _retry(self, exc: Exception | None = None) -> None:
        """Try again with backoff, but never later than halfway to the token's expiry (at least 1 s).
        After a rate limit (`exc` a RateLimited): full jitter after the server's Retry-After."""
        self.failures += 1
        self.generation += 1
        gen = self.generation
        limited = exc if isinstance(exc, RateLimited) else None
        if limited is not None:
            delay = plan_rate_limit_retry(self.failures, limited.retry_after, random.random())  # noqa: S311
        else:
            delay = backoff(self.failures - 1)
        if self.lease is not None and self.lease.ttl > 0:
            left = self.lease.expires_at - self.clock()
            if left > 0:
                delay = min(delay, max(1.0, left / 2))
        if limited is not None:
            self.event("Vault Rate Limited", f"{limited}: rate limited by Vault, retrying in {delay:.1f}s")
        self.schedule(delay, lambda: self._tick(gen))

    def _tick(self, gen: int) -> None:
        if gen != self.generation:
            return
        plan = plan_token(self.lease, self.clock())
        try:
            if plan.action is TokenAction.RENEW:
                self._renew()
            elif plan.action is TokenAction.DERIVE:
                self._replace(plan.reason)
                self.on_new_token(plan.reason)
        except VaultDenied as exc:
            if plan.action is not TokenAction.RENEW:
                self.event("Vault Token Failed", f"cannot derive a Vault token: {exc}; retrying")
                self._retry()
                return
            try:  # the renewal was refused: the token was revoked or expired behind our back
                self._replace(f"renewal refused ({exc.reason})")
            except VaultError as again:
                self.event("Vault Token Failed", f"cannot derive a Vault token: {again}; retrying")
                self._retry(again)
                return
            self.on_new_token("the token's renewal was refused")
        except VaultError as exc:
            log.warning(
                "alloc=%s task=%s vault token %s: %s", self.alloc_id[:8], self.task, plan.action.value, exc
            )
            self._retry(exc)
            return
        self.failures = 0
        self._schedule()

    def _renew(self) -> None:
        assert self._client is not None and self.lease is not None  # RENEW is planned only then
        grant = self._client.renew_self()
        self.lease = self.lease.renewed(grant)
        self._save()
        self.renewals += 1
        log.debug("alloc=%s task=%s vault token renewed (ttl %.0fs)", self.alloc_id[:8], self.task, grant.ttl)

    # -- deriving -------------------------------------------------------------------------------------
    def _replace(self, why: str) -> None:
        """Derive a new token and put it in place; the old one (if any) is revoked afterwards."""
        self._check_policies()
        old = self.lease
        if self.jwt is not None and self.sign is not None:
            grant = self.issuer.login_jwt(self.jwt.mount, self.jwt.role, self.sign(self.jwt.identity))
            how = f"logged in with identity {self.jwt.identity.name} at auth/{self.jwt.mount}"
            why = f"{how}{f' as role {self.jwt.role}' if self.jwt.role else ''}; {why}"
        else:
            grant = self.issuer.create_token(
                self.role,
                token_role_policies(self.vault),
                meta={"alloc_id": self.alloc_id, "job": self.job, "task": self.task},
                display_name=f"{self.job}-{self.task}",
            )
        lease = TokenLease.from_grant(grant)
        self.lease = lease
        self._save()  # the accessor first: a crash from here on leaves a token the next agent revokes
        self._adopt(grant.token, self.issuer.token_client(grant.token), lease)
        self._write_file()
        self.derived += 1
        self.event(
            "Vault Token",
            f"derived a Vault token with policies {', '.join(lease.policies)} (ttl {lease.ttl:.0f}s): {why}",
        )
        if old is not None and old.accessor != lease.accessor:
            self._revoke_accessor(old, "replaced")

    def _check_policies(self) -> None:
        """Refuse (with a task event naming the policy and the job) a vault block that names a
        per-job policy of another job: the token role would grant it, only the agent knows the job.
        (A JWT login's policies are its role's: OpenBao binds them to the job's claims.)"""
        if self.jwt is not None:
            return
        why = job_policies().refusal(self.vault.policies, self.job)
        if why is None:
            return
        self.event("Vault Policy Refused", f"{why}; no Vault token for task {self.task}")
        raise PolicyRefused("create", f"auth/token/create/{self.role}", why)

    def _adopt(self, token: str, client: TaskTokenClient, lease: TokenLease) -> None:
        self._token, self._client, self.lease = token, client, lease
        self._schedule()

    def _revoke_accessor(self, lease: TokenLease, why: str) -> None:
        try:
            self.issuer.revoke_accessor(lease.accessor)
        except VaultError as exc:
            self.event(
                "Vault Token", f"could not revoke the Vault token ({why}): {exc}; it expires unrenewed"
            )

    # -- storage --------------------------------------------------------------------------------------
    def _load_lease(self) -> TokenLease | None:
        rec = self.store.get(KIND_VAULT_TOKEN, self.key)
        if rec is None:
            return None
        try:
            return TokenLease.from_record(rec)
        except AgentError as exc:
            log.warning("alloc=%s task=%s: %s", self.alloc_id[:8], self.task, exc)
            return None

    def _save(self) -> None:
        if self.lease is not None:
            self.store.put(KIND_VAULT_TOKEN, self.key, self.lease.to_record())

    def _read_file(self) -> str:
        """secrets/vault_token as the task left it, read through the task sandbox's reader (dir fd,
        no link followed, never blocking, regular files only, TOKEN_FILE_MAX bytes): the task owns
        secrets/, so a FIFO there must not hang the agent's restore and a link must not make it read
        a host file and send it to Vault as a token. Anything else reads as no token."""
        if not self.vault.file:
            return ""
        try:
            return read_task_file(self.secrets_dir.parent, f"secrets/{TOKEN_FILE}", TOKEN_FILE_MAX).strip()
        except (SandboxError, OSError) as exc:
            if not str(exc).endswith("no such file"):
                log.warning(
                    "alloc=%s task=%s: %s not read: %s", self.alloc_id[:8], self.task, TOKEN_FILE, exc
                )
            return ""

    def _write_file(self) -> None:
        """secrets/vault_token, 0600, owned by the task's user (agent.runner.owner; else the owner of
        secrets/), replaced atomically. The task can write to secrets/, so the temp file has a random
        name and is created O_EXCL|O_NOFOLLOW: a symlink the task planted is never followed."""
        if not self.vault.file:
            return
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        st = os.stat(self.secrets_dir, follow_symlinks=False)
        uid, gid = self.owner or (st.st_uid, st.st_gid)
        tmp = self.secrets_dir / f".{TOKEN_FILE}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600)
        try:
            os.write(fd, self._token.encode())
            os.fchmod(fd, 0o600)
            os.fchown(fd, uid, gid)
            os.fsync(fd)
        except OSError:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, self.token_file)
