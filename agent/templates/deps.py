"""What a task's template runner (agent.templates.runner) is given: its host (`TaskHost`, the task
runner), what every task's runner shares (`TemplateDeps`) and a setup pass in flight (`SetupPass`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.client.offload import Offload, run_inline
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.state import StateStore
from agent.templates.budget import DEFAULT_MAX_TEMPLATES, DEFAULT_PASS_BUDGET
from agent.templates.nomadfuncs import NomadSource
from agent.templates.render import ConsulSource, RenderContext, SecretSource
from agent.templates.wake import VaultWake


class TaskHost(Protocol):
    """What the template runner needs of its task's runner (agent.runner.taskrunner.TaskRunner, as
    Nomad's template hook is handed its task's lifecycle and event emitter)."""

    @property
    def alloc_id(self) -> str: ...

    def alloc_running(self) -> bool: ...

    def env(self) -> Mapping[str, str]: ...

    @property
    def task_dir(self) -> Path: ...

    def task_vault(self) -> SecretSource | None:
        """The task's own Vault access (its token, never the agent's); None: no Vault configured."""
        ...

    def event(self, type_: str, message: str) -> None: ...

    def running(self) -> bool: ...

    def signal(self, sig: str) -> None: ...

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        """Run argv in the task off the main loop; `then(exit code, output)` on it when done."""
        ...

    def restart_for_template(self) -> None: ...


@dataclass(frozen=True)
class TemplateDeps:
    """What every task's template runner shares: the store, the timer, Consul, Nomad's own data, the
    bugs. Vault is per task: its host gives it (`TaskHost.task_vault`)."""

    store: StateStore
    schedule: Callable[[float, Callable[[], None]], None]
    consul: ConsulSource | None = None
    bugs: Bugs = NO_BUGS
    render_timeout: float = 2.0  # seconds one template may take (client config template_render_timeout)
    max_bytes: int = 4 * 1024 * 1024  # largest rendered template (client config template_max_bytes)
    # Where a periodic pass's renders run (agent.client.offload): worker threads (the agent) or at
    # once (tests of the fakes).
    offload: Offload = run_inline
    clock: Callable[[], float] = time.time  # wall clock: the re-issue times kept in the templates' states
    # The held secrets' schedule (agent.templates.held): in memory only, so a clock that a step of the
    # wall clock does not move.
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep  # render_all's wait after a rate limit
    # Where in its RENEW_FRACTION window each fetched secret is renewed (uniform in [0, 1]).
    jitter: Callable[[], float] = random.random  # spreading load, not crypto
    # Seconds all of one task's renders of one pass may take together (client config
    # template_pass_budget), and the templates a task may have (template_max_per_task):
    # agent.templates.budget.
    pass_budget: float = DEFAULT_PASS_BUDGET
    max_templates: int = DEFAULT_MAX_TEMPLATES
    # Renders that failed because Vault could not answer subscribe here, and are retried as soon as
    # Vault answers again (agent.templates.wake); None: they wait out their backoff.
    vault_wake: VaultWake | None = None
    # This node's Nomad variables and native services (nomadVar, nomadService...), and the watch that
    # re-renders a task when what it read of them changes (agent.templates.nomadwatch); None: the
    # Nomad functions fail the render.
    nomad: NomadSource | None = None


@dataclass
class SetupPass:
    """A pass that renders every template and fetches every secret (a task's setup, a restore),
    begun on the main loop (`TaskTemplates.begin_render_all`), run off it (`run_render_all`) and
    finished on it (`finish_render_all`). What must happen on the loop meanwhile (the rate-limit
    events) waits in `events`."""

    ctx: RenderContext
    started: float  # time.monotonic
    began: float  # deps.monotonic
    events: list[tuple[str, str]] = field(default_factory=list)
    rate_limited: int = 0
