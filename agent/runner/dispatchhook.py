"""A dispatched job's payload, written before the task's first start (Nomad's dispatch_payload hook):
a task with `dispatch_payload { file }` of a job made by `job dispatch` finds the dispatch's payload
(empty when it had none, as Nomad writes it) at local/<file>, through the task sandbox's writer (no
link followed: the task owns its dirs), mode 0755 (Nomad writes 0777 under the usual umask 022)."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from agent.allocdir.sandbox import SandboxError, sandbox_path, write_file
from agent.errors import AgentError
from agent.runner.interfaces import Then

PAYLOAD_PERMS = 0o755


class DispatchPayloadError(AgentError):
    pass


class DispatchPayloadHook:
    """Made only for a task with `dispatch_payload` of a dispatched job: `payload` is the job's
    (base64, as Nomad's API carries it), `file` where it goes under local/."""

    name = "dispatch_payload"

    def __init__(self, payload: str, file: str, task_dir: Path, owner: tuple[int, int] | None) -> None:
        self.payload, self.file, self.task_dir, self.owner = payload, file, task_dir, owner

    def setup(self, then: Then) -> None:
        try:
            data = base64.b64decode(self.payload, validate=True)
            where = sandbox_path(f"local/{self.file}")
            if where.shared or where.parts[:1] != ("local",):  # the jobspec reader refused it already
                raise SandboxError(f"{self.file}: destination escapes the task's local/ dir")
            write_file(self.task_dir, where, data, PAYLOAD_PERMS, self.owner)
        except (SandboxError, binascii.Error) as exc:
            raise DispatchPayloadError(f"dispatch_payload: {exc}") from None
        then(None)
