"""Bounds on what a jobspec may ask for: the client's `max_count`, `max_kill_timeout` and
`template_max_per_task`, and the parser's own limits on size and nesting. Defaults are the agent's;
a client config may change the first three (agent.config), the CLI's offline `job validate` uses
the defaults."""

from __future__ import annotations

from dataclasses import dataclass

from agent.bugs import NO_BUGS, Bugs

MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    max_count: int = 1000  # a group's count
    max_kill_timeout: float = 30.0  # seconds; Nomad's client max_kill_timeout default
    max_templates: int = 256  # template blocks of one task (the client's template_max_per_task)
    max_bytes: int = MIB  # a jobspec's text (the API answers 413 above it)
    max_depth: int = 64  # nesting of blocks, lists and objects
    bugs: Bugs = NO_BUGS  # the fault flags of the validation (agent.taskdecisions.plan_validation)


DEFAULT_LIMITS = Limits()
