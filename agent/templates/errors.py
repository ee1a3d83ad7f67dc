"""The one error of a render: it names the template by its destination, and the line and column
of the action that failed when a template error is the cause."""

from __future__ import annotations

from agent.errors import AgentError


class TemplateRenderError(AgentError):
    def __init__(self, destination: str, reason: str, at: tuple[int, int] | None = None) -> None:
        self.destination, self.reason, self.at = destination, reason, at
        where = f"{destination}:{at[0]}:{at[1]}" if at else destination
        super().__init__(f"template {where}: {reason}")
