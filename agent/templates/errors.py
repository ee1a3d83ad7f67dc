"""The one error of a render: it names the template by its destination, and the line and column
of the action that failed when a template error is the cause. A render that failed because Vault
(or the agent's own cap) refused a request over its rate limit keeps that refusal as
`rate_limited`: the runner retries such a pass with its own backoff (agent.templates.runner). One
that failed because a server could not answer at all (agent.errors.Unavailable) says so in
`unavailable`: a task's first render is retried then (agent.decide.decisions.plan_setup_retry)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.errors import AgentError, RateLimited

MIN_SECRET = 4  # a secret string shorter than this is not looked for (it would match everywhere)
REDACTED = "<redacted>"
CUT_MARK = " [... cut: "  # where the render worker cut a long message (agent.templates.worker)


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

    def redacted(self, secrets: Iterable[str]) -> TemplateRenderError:
        """The same error with every secret string (and its beginning where the message was cut)
        replaced by <redacted>: itself when there was nothing to hide."""
        reason = redact(self.reason, secrets)
        if reason == self.reason:
            return self
        return TemplateRenderError(
            self.destination,
            reason,
            self.at,
            rate_limited=self.rate_limited,
            unavailable=self.unavailable,
        )


def secret_strings(values: Iterable[Any]) -> set[str]:
    """The strings of secret data (Vault's `data`, tokens), walked through maps and lists: every
    string and number of at least MIN_SECRET characters, each line of a multi-line one (a PEM key
    quoted in part), and each as JSON and Go's %q would quote it."""
    out: set[str] = set()
    todo: list[Any] = list(values)
    while todo:
        value = todo.pop()
        if isinstance(value, Mapping):
            todo.extend(value.values())
        elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
            todo.extend(value)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            text = value if isinstance(value, str) else str(value)
            for line in (text, *text.splitlines()):
                piece = line.strip()
                if len(piece) >= MIN_SECRET:
                    out.add(piece)
                    out.add(json.dumps(piece)[1:-1])  # escaped as JSON and %q escape it
    return out


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` without any of `secrets` (longest first); where the render worker cut the message, a
    secret's beginning left just before the cut goes too."""
    ordered = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
    for secret in ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    at = text.rfind(CUT_MARK)
    if at >= 0:
        head = text[:at]
        for secret in ordered:
            if n := _cut_prefix(head, secret):
                head = head[:-n] + REDACTED
        text = head + text[at:]
    return text


def _cut_prefix(head: str, secret: str) -> int:
    """The length of the longest beginning of `secret` (at least MIN_SECRET) that `head` ends with."""
    window = head[-(len(secret) - 1) :] if len(secret) > 1 else ""
    i = window.find(secret[0]) if secret else -1
    while i >= 0 and len(window) - i >= MIN_SECRET:
        if secret.startswith(window[i:]):
            return len(window) - i
        i = window.find(secret[0], i + 1)
    return 0


def rate_limited_cause(exc: BaseException) -> RateLimited | None:
    """The rate-limit refusal behind a failure (itself, or the one a render error keeps), or None."""
    if isinstance(exc, RateLimited):
        return exc
    if isinstance(exc, TemplateRenderError):
        return exc.rate_limited
    return None
