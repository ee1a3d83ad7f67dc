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


class NotFound(AgentError):
    """A request names a job, alloc or task the agent does not have (HTTP 404)."""


class Conflict(AgentError):
    """A request conflicts with what the agent holds (HTTP 409)."""


class NotRun(AgentError):
    """The request was withdrawn before the main loop took it: nothing was done (HTTP 503)."""


class InProgress(AgentError):
    """The request was started and has not finished yet: its outcome is unknown (HTTP 504)."""


class Unavailable(AgentError):
    """A server the agent depends on (Vault, Consul) cannot answer now (refused, timeout, sealed,
    5xx): retryable, unlike a denial or a bad request. A task's first render that fails this way is
    retried with backoff before its setup fails (agent.decide.decisions.plan_setup_retry), as Nomad's
    template runner retries Vault (vault_retry)."""


class RateLimited(AgentError):
    """A server refused a request over its rate limit (HTTP 429), or the agent's own cap refused to
    send it: retryable. `retry_after` is what the server said to wait (its Retry-After header, in
    seconds), None when it said nothing; a retry waits at least that long, with backoff and jitter
    on top (agent.decide.vaultrate.plan_rate_limit_retry)."""

    retry_after: float | None = None
