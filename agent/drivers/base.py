"""What every driver offers the alloc runner, and the handle it leaves in the state store."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agent.errors import AgentError

# Labels on everything the agent creates in docker: the sweeper only ever looks at these.
LABEL_MANAGED = "org.fieldlab.managed"
LABEL_ALLOC = "org.fieldlab.alloc"
LABEL_JOB = "org.fieldlab.job"
LABEL_GROUP = "org.fieldlab.group"
LABEL_TASK = "org.fieldlab.task"
LABEL_ROLE = "org.fieldlab.role"  # "pause" or "task"


class DriverError(AgentError):
    def __init__(self, driver: str, what: str, reason: str) -> None:
        self.driver, self.what, self.reason = driver, what, reason
        super().__init__(f"{driver}: {what}: {reason}")


@dataclass(frozen=True)
class TaskHandle:
    """Enough to find a running task again after an agent restart."""

    driver: str
    id: str  # container id, or pid for exec
    started_at: str  # docker's StartedAt, or the process start time in clock ticks

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TaskHandle:
        return cls(str(rec["driver"]), str(rec["id"]), str(rec["started_at"]))


@dataclass(frozen=True)
class TaskStatus:
    running: bool
    exit_code: int | None = None
    detail: str = ""
