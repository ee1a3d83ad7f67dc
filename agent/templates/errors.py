"""The one error of a render: it names the template by its destination, and the line and column
of the action that failed when a template error is the cause. A render that failed because Vault
(or the agent's own cap) refused a request over its rate limit keeps that refusal as
`rate_limited`: the runner retries such a pass with its own backoff (agent.templates.runner). One
that failed because a server could not answer at all (agent.errors.Unavailable) says so in
`unavailable`: a task's first render is retried then (agent.decisions.plan_setup_retry)."""

from __future__ import annotations

from agent.errors import AgentError, RateLimited


class TemplateRenderError(AgentError):
    def __init__(
        self,
        destination: str,
        reason: str,
        at: tuple[int, int] | None = None,
        *,
        rate_limited: RateLimited | None = None,
        unavailable: bool = False,
    ) -> None:
        self.destination, self.reason, self.at = destination, reason, at
        self.rate_limited = rate_limited
        # Vault (or Consul) could not answer: retryable, where a template error or a denial is not.
        self.unavailable = unavailable or rate_limited is not None
        where = f"{destination}:{at[0]}:{at[1]}" if at else destination
        super().__init__(f"template {where}: {reason}")


def rate_limited_cause(exc: BaseException) -> RateLimited | None:
    """The rate-limit refusal behind a failure (itself, or the one a render error keeps), or None."""
    if isinstance(exc, RateLimited):
        return exc
    if isinstance(exc, TemplateRenderError):
        return exc.rate_limited
    return None
