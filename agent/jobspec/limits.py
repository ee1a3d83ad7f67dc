"""Bounds on what a jobspec may ask for: the client's `max_count`, `max_kill_timeout`,
`max_shutdown_delay` and `template_max_per_task`, and the parser's own limits on size and nesting.
Defaults are the agent's; a client config may change the first four (agent.command.config), the CLI's
offline `job validate` uses the defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.identity.claims import DEFAULT_IDENTITY_TTL

MIB = 1 << 20
DEFAULT_MAX_SHUTDOWN_DELAY = 30.0
"""Seconds of shutdown_delay a jobspec may ask for (config max_shutdown_delay). Nomad's client has no
such limit; 30 s is its max_kill_timeout default: a stop waits no longer for its delay than for its
kill."""


JOB_MAX_COUNT = 50000
"""Nomad's server `job_max_count` default (structs.JobDefaultMaxCount): the total of a job's group
counts it takes; more is refused at register with its text (total_count_refusal)."""


def count_refusal(count: int, max_count: int) -> str:
    """Why a group's count above the client's `max_count` is refused. Nomad has no per-node count: its
    scheduler places the allocs that fit the node and leaves the rest queued (a blocked evaluation
    with FailedTGAllocs, "Placement Failures" in `job run`), placed when capacity frees. This agent
    places without a resource fit, so max_count is the node's only bound, and it never grows while
    the agent runs: the rest would be queued for ever. Refused at once, naming Nomad's behaviour."""
    return (
        f"count {count} is more than the client's max_count ({max_count}): Nomad's scheduler would place "
        "what fits on the node and leave the rest queued (a blocked evaluation with FailedTGAllocs); "
        "this agent places no more than max_count and does not queue the rest: lower the count, "
        "or raise max_count in the client config"
    )


def total_count_refusal(total: int, job_max_count: int = JOB_MAX_COUNT) -> str:
    """Nomad's register refusal of a job whose group counts add up to more than job_max_count."""
    return f"total count was greater than configured job_max_count: {total} > {job_max_count}"


@dataclass(frozen=True)
class Limits:
    max_count: int = 1000  # a group's count
    max_kill_timeout: float = 30.0  # seconds; Nomad's client max_kill_timeout default
    max_shutdown_delay: float = DEFAULT_MAX_SHUTDOWN_DELAY  # seconds; a longer shutdown_delay is refused
    identity_ttl: float = DEFAULT_IDENTITY_TTL  # seconds an identity without a ttl lives (its warning says)
    max_templates: int = 256  # template blocks of one task (the client's template_max_per_task)
    max_bytes: int = MIB  # a jobspec's text (the API answers 413 above it)
    max_depth: int = 64  # nesting of blocks, lists and objects
    bugs: Bugs = NO_BUGS  # the fault flags of the validation (agent.decide.taskdecisions.plan_validation)


DEFAULT_LIMITS = Limits()


def stored_limits(limits: Limits) -> Limits:
    """The limits a job already stored is read again with (a restore parsing an old record's source):
    its shutdown_delay was accepted once, so it is not refused now; the runner caps it at the stop."""
    return replace(limits, max_shutdown_delay=math.inf)
