"""Bounds on what a jobspec may ask for: the client's `max_count`, `max_kill_timeout`,
`max_shutdown_delay` and `template_max_per_task`, and the parser's own limits on size and nesting.
Defaults are the agent's; a client config may change the first four (agent.config), the CLI's
offline `job validate` uses the defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from agent.bugs import NO_BUGS, Bugs
from agent.identity.claims import DEFAULT_IDENTITY_TTL

MIB = 1 << 20
DEFAULT_MAX_SHUTDOWN_DELAY = 30.0
"""Seconds of shutdown_delay a jobspec may ask for (config max_shutdown_delay). Nomad's client has no
such limit; 30 s is its max_kill_timeout default: a stop waits no longer for its delay than for its
kill."""


@dataclass(frozen=True)
class Limits:
    max_count: int = 1000  # a group's count
    max_kill_timeout: float = 30.0  # seconds; Nomad's client max_kill_timeout default
    max_shutdown_delay: float = DEFAULT_MAX_SHUTDOWN_DELAY  # seconds; a longer shutdown_delay is refused
    identity_ttl: float = DEFAULT_IDENTITY_TTL  # seconds an identity without a ttl lives (its warning says)
    max_templates: int = 256  # template blocks of one task (the client's template_max_per_task)
    max_bytes: int = MIB  # a jobspec's text (the API answers 413 above it)
    max_depth: int = 64  # nesting of blocks, lists and objects
    bugs: Bugs = NO_BUGS  # the fault flags of the validation (agent.taskdecisions.plan_validation)


DEFAULT_LIMITS = Limits()


def stored_limits(limits: Limits) -> Limits:
    """The limits a job already stored is read again with (a restore parsing an old record's source):
    its shutdown_delay was accepted once, so it is not refused now; the runner caps it at the stop."""
    return replace(limits, max_shutdown_delay=math.inf)
