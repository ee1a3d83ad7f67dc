"""The one error a jobspec can raise: every problem found, each with its field path and reason."""

from __future__ import annotations

from collections.abc import Iterable

from agent.errors import AgentError


class JobspecError(AgentError):
    """A jobspec is unreadable or invalid.

    `source` is the file path or "<request>"; `problems` lists every (field path, reason) found, not just
    the first. The message has one line per problem: "<source>: job.example.group.web.count: must not be
    negative". A problem without a path (a syntax error) reads "<source>: <reason>".
    """

    def __init__(self, source: str, problems: Iterable[tuple[str, str]]) -> None:
        self.source = source
        self.problems: list[tuple[str, str]] = [(path, _one_line(reason)) for path, reason in problems]
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {path}: {reason}" if path else f"{self.source}: {reason}"
            for path, reason in self.problems
        ]


def _one_line(text: str) -> str:
    return " ".join(text.split())
