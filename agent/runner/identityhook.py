"""The task's workload identities (Nomad's identity hook): each `identity` block with `file` or
`env` gets a JWT the agent signs (agent.identity), written before the task's first start to
secrets/nomad_token (the default identity) or secrets/nomad_<name>.jwt (`filepath`: that path in
the task dir instead), mode 0600, owned by the task's user (agent.runner.owner), through the
task sandbox's writer (no link followed: the task owns its dirs); and put in the task's
environment as NOMAD_TOKEN or NOMAD_TOKEN_<name>. Every token expires (an identity without a `ttl`
gets the client's identity_default_ttl, where Nomad signs no `exp`) and is signed again half way to
its expiry, and the task hears of it by its `change_mode` (restart, signal, noop), as Nomad's. After
an agent restart a reattached task's tokens are signed and written again (not a change)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.allocdir.sandbox import SandboxError, sandbox_path, write_file
from agent.decide.decisions import StartCause
from agent.errors import AgentError
from agent.identity.claims import Workload, effective_ttl, identity_claims, renew_at, workload_job_id
from agent.runner.deps import RunnerDeps
from agent.runner.interfaces import AllocContext, StartRequest, TaskLifecycle, Then
from agent.runner.owner import task_file_owner
from agent.structs.model import Task, WorkloadIdentity

if TYPE_CHECKING:
    from agent.drivers.base import TaskHandle

log = logging.getLogger(__name__)
TOKEN_FILE = "secrets/nomad_token"  # noqa: S105 - a file name (Nomad's wiTokenFile in secrets/)
ENV_VAR = "NOMAD_TOKEN"


def token_path(wid: WorkloadIdentity) -> str:
    """Where the token goes, relative to the task dir."""
    if wid.filepath:
        return wid.filepath
    return TOKEN_FILE if wid.name == "default" else f"secrets/nomad_{wid.name}.jwt"


def env_name(wid: WorkloadIdentity) -> str:
    return ENV_VAR if wid.name == "default" else f"{ENV_VAR}_{wid.name}"


class IdentityError(AgentError):
    pass


def identity_signer(d: RunnerDeps, ar: AllocContext, task: str) -> Callable[[WorkloadIdentity], str]:
    """What signs a fresh JWT of one of the task's identities with the agent's key (the identity
    hook's, and the Vault login's of the workload identity workflow)."""

    def sign(wid: WorkloadIdentity) -> str:
        keyring = d.keyring
        if keyring is None:
            raise IdentityError(f"identity {wid.name}: this agent has no workload identity key")
        job_id = workload_job_id(ar.job.id, ar.job.parent_id, d.bugs)
        workload = Workload(job_id, ar.group.name, ar.id, task)
        claims = identity_claims(workload, wid, d.clock(), str(uuid.uuid4()), d.identity_ttl)
        return keyring.sign(claims)

    return sign


@dataclass(frozen=True)
class IdentityPorts:
    """What the identity hook is handed: its task's lifecycle, how it signs, where it writes, the
    alloc's turn (a renewal runs in it) and the timer and clock it renews on."""

    lifecycle: TaskLifecycle
    sign: Callable[[WorkloadIdentity], str]
    task_dir: Path
    in_turn: Callable[[Callable[[], None]], None]
    schedule: Callable[[float, Callable[[], None]], None]
    clock: Callable[[], float]
    default_ttl: float
    alloc_id: str = ""


class IdentityHook:
    """Made only for a task with an identity it exposes (`file` or `env`); the tokens it signed for
    the environment are its own (`env`)."""

    name = "identity"

    def __init__(self, task: Task, ports: IdentityPorts) -> None:
        self.task, self.p = task, ports
        self.exposed = tuple(w for w in task.identities if w.file or w.env)
        self.tokens: dict[str, str] = {}  # NOMAD_TOKEN[_<name>]: the identities with env = true
        self.generation = 0  # moves on at a stop or exit: a renewal timer of before does nothing
        self.signed = False  # by this agent process (after a restart: at the reattach or the start)

    def env(self) -> dict[str, str]:
        return dict(self.tokens)

    def setup(self, then: Then) -> None:
        self._sign_all()
        then(None)

    def prestart(self, req: StartRequest) -> None:
        if not self.signed:
            self._sign_all()  # started by a restore: no token signed by this agent process yet

    def reattached(self, handle: TaskHandle) -> None:
        self._sign_all()

    def exited(self) -> None:
        self.generation += 1

    def stop(self) -> None:
        self.generation += 1

    def _sign_all(self) -> None:
        self.generation += 1
        self.signed = True
        for wid in self.exposed:
            self._sign(wid)
            self._arm(wid, self.generation)

    def _sign(self, wid: WorkloadIdentity) -> None:
        token = self.p.sign(wid)
        if wid.env:
            self.tokens[env_name(wid)] = token
        if wid.file:
            owner = task_file_owner(self.task)
            try:
                write_file(self.p.task_dir, sandbox_path(token_path(wid)), token.encode(), 0o600, owner)
            except SandboxError as exc:
                raise IdentityError(f"identity {wid.name}: {exc}") from None

    def _arm(self, wid: WorkloadIdentity, generation: int) -> None:
        p = self.p
        at = renew_at(p.clock(), effective_ttl(wid.ttl, p.default_ttl))  # none lives forever
        if at is None:
            return

        def fire() -> None:
            if generation != self.generation:
                return
            try:
                self._sign(wid)
            except (AgentError, OSError) as exc:
                log.warning(
                    "alloc=%s task=%s: identity %s not renewed: %s",
                    p.alloc_id[:8],
                    self.task.name,
                    wid.name,
                    exc,
                )
                return
            self._arm(wid, generation)
            if p.lifecycle.running():  # a task waiting for its restart starts with the new token anyway
                self._changed(wid)

        p.schedule(max(0.0, at - p.clock()), lambda: p.in_turn(fire))

    def _changed(self, wid: WorkloadIdentity) -> None:
        lifecycle = self.p.lifecycle
        if wid.change_mode == "signal":
            lifecycle.event("Signaling", f"Identity[{wid.name}]: new Identity token acquired")
            lifecycle.signal(wid.change_signal)
        elif wid.change_mode == "restart":
            lifecycle.event("Restart Signaled", f"Identity[{wid.name}]: new token acquired")
            lifecycle.stop_then_restart(StartCause.CHANGE_MODE, f"identity {wid.name} renewed")
