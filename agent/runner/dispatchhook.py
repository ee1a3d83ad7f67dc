"""A dispatched job's payload, written before the task's first start (Nomad's dispatch_payload hook):
a task with `dispatch_payload { file }` of a job made by `job dispatch` finds the dispatch's payload
(empty when it had none, as Nomad writes it) at local/<file>, through the task sandbox's writer (no
link followed: the task owns its dirs), mode 0755 (Nomad writes 0777 under the usual umask 022)."""

from __future__ import annotations

import base64
import binascii

from agent.allocdir.sandbox import SandboxError, sandbox_path, write_file
from agent.errors import AgentError
from agent.runner.interfaces import TaskHost, Then
from agent.runner.owner import task_file_owner

PAYLOAD_PERMS = 0o755


class DispatchPayloadError(AgentError):
    pass


class DispatchPayloadHook:
    name = "dispatch_payload"

    def setup(self, tr: TaskHost, then: Then) -> None:
        job, file = tr.ar.job, tr.t.dispatch_payload
        if job.dispatched and file:
            try:
                data = base64.b64decode(job.payload, validate=True)
                where = sandbox_path(f"local/{file}")
                if where.shared or where.parts[:1] != ("local",):  # the jobspec reader refused it already
                    raise SandboxError(f"{file}: destination escapes the task's local/ dir")
                write_file(tr.task_dir, where, data, PAYLOAD_PERMS, task_file_owner(tr.t))
            except (SandboxError, binascii.Error) as exc:
                raise DispatchPayloadError(f"dispatch_payload: {exc}") from None
        then(None)
