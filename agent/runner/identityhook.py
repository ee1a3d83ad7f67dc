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
from typing import TYPE_CHECKING

from agent.allocdir.sandbox import SandboxError, sandbox_path, write_file
from agent.decide.decisions import StartCause
from agent.errors import AgentError
from agent.identity.claims import Workload, effective_ttl, identity_claims, renew_at, workload_job_id
from agent.runner.interfaces import StartRequest, TaskHost, Then
from agent.runner.owner import task_file_owner
from agent.structs.model import WorkloadIdentity

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


def sign_identity(tr: TaskHost, wid: WorkloadIdentity) -> str:
    """A fresh JWT of the task's identity `wid`, signed with the agent's key."""
    keyring = tr.d.keyring
    if keyring is None:
        raise IdentityError(f"identity {wid.name}: this agent has no workload identity key")
    ar = tr.ar
    job_id = workload_job_id(ar.job.id, ar.job.parent_id, tr.d.bugs)
    workload = Workload(job_id, ar.group.name, ar.id, tr.t.name)
    claims = identity_claims(workload, wid, tr.d.clock(), str(uuid.uuid4()), tr.d.identity_ttl)
    return keyring.sign(claims)


class IdentityHook:
    name = "identity"

    def __init__(self) -> None:
        self.generation = 0  # moves on at a stop or exit: a renewal timer of before does nothing
        self.signed = False  # by this agent process (after a restart: at the reattach or the start)

    @staticmethod
    def _exposed(tr: TaskHost) -> tuple[WorkloadIdentity, ...]:
        return tuple(w for w in tr.t.identities if w.file or w.env)

    def setup(self, tr: TaskHost, then: Then) -> None:
        self._sign_all(tr)
        then(None)

    def prestart(self, tr: TaskHost, req: StartRequest) -> None:
        if not self.signed:
            self._sign_all(tr)  # started by a restore: no token signed by this agent process yet

    def reattached(self, tr: TaskHost, handle: TaskHandle) -> None:
        self._sign_all(tr)

    def exited(self, tr: TaskHost) -> None:
        self.generation += 1

    def stop(self, tr: TaskHost) -> None:
        self.generation += 1

    def _sign_all(self, tr: TaskHost) -> None:
        self.generation += 1
        self.signed = True
        for wid in self._exposed(tr):
            self._sign(tr, wid)
            self._arm(tr, wid, self.generation)

    def _sign(self, tr: TaskHost, wid: WorkloadIdentity) -> None:
        token = sign_identity(tr, wid)
        if wid.env:
            tr.workload_env[env_name(wid)] = token
        if wid.file:
            owner = task_file_owner(tr.t)
            try:
                write_file(tr.task_dir, sandbox_path(token_path(wid)), token.encode(), 0o600, owner)
            except SandboxError as exc:
                raise IdentityError(f"identity {wid.name}: {exc}") from None

    def _arm(self, tr: TaskHost, wid: WorkloadIdentity, generation: int) -> None:
        at = renew_at(tr.d.clock(), effective_ttl(wid.ttl, tr.d.identity_ttl))  # none lives forever
        if at is None:
            return

        def fire() -> None:
            if generation != self.generation:
                return
            try:
                self._sign(tr, wid)
            except (AgentError, OSError) as exc:
                log.warning(
                    "alloc=%s task=%s: identity %s not renewed: %s", tr.ar.id[:8], tr.t.name, wid.name, exc
                )
                return
            self._arm(tr, wid, generation)
            if tr.running():  # a task waiting for its restart starts with the new token anyway
                self._changed(tr, wid)

        tr.d.schedule(max(0.0, at - tr.d.clock()), lambda: tr.ar.serial.run(fire))

    @staticmethod
    def _changed(tr: TaskHost, wid: WorkloadIdentity) -> None:
        if wid.change_mode == "signal":
            tr.event("Signaling", f"Identity[{wid.name}]: new Identity token acquired")
            tr.signal(wid.change_signal)
        elif wid.change_mode == "restart":
            tr.event("Restart Signaled", f"Identity[{wid.name}]: new token acquired")
            tr.stop_then_restart(StartCause.CHANGE_MODE, f"identity {wid.name} renewed")
