"""The agent's exceptions: one root, narrow subclasses carrying context."""

from __future__ import annotations


class AgentError(Exception):
    """Root of every error the agent reports."""


class ConfigError(AgentError):
    """The agent's config file is missing, unreadable or invalid; the message names the file and key."""

    def __init__(self, path: str, key: str, reason: str) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {reason}")
