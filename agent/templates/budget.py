"""What a task's templates may cost the agent, beyond each template's own time and size budgets.

- **Templates per task**: at most `DEFAULT_MAX_TEMPLATES` (client config `template_max_per_task`),
  refused at submission and checked again before a render (a job stored before the limit).
- **One render pass** (a task's setup, a restore, a periodic pass) has `DEFAULT_PASS_BUDGET` seconds
  (client config `template_pass_budget`) for all of its templates' renders together: the render
  worker's time and the agent's own time serving the template's calls, but not the time the agent
  waits on Vault, Consul or a file for it (`RenderMeter.io`, bounded by the Vault client's timeout and
  MAX_FETCHES).
- **Calls back into the agent**: every function the worker asks the agent for (`env` as much as
  `secret`) is one call of at most `MAX_CALLS` per render; a call's frame is at most
  `MAX_CALL_FRAME` bytes and a render's calls at most `MAX_CALL_BYTES` together; no frame of the
  worker's is larger than `MAX_FRAME` (the rendered output comes in chunks). What the agent reads
  from the worker in one render is thus a few MiB at most, however the template loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.jobspec.limits import DEFAULT_LIMITS

DEFAULT_MAX_TEMPLATES = DEFAULT_LIMITS.max_templates  # of one task (client config template_max_per_task)
DEFAULT_PASS_BUDGET = 10.0  # seconds of one render pass of a task (client config template_pass_budget)

MAX_CALLS = 10_000  # calls to the agent in one render
MAX_CALL_FRAME = 64 * 1024  # bytes of one call (a path, a variable name, k=v parameters, a CSR)
MAX_CALL_BYTES = 1024 * 1024  # bytes of one render's calls together
OUTPUT_CHUNK = 16 * 1024  # characters of output per frame (ASCII-escaped JSON: at most 12 bytes each)
MAX_FRAME = 256 * 1024  # bytes of any frame from the worker
MAX_MESSAGE = 4096  # characters of an error message from the worker (a value it quotes is cut)
MAX_ENV_NAME = 256  # an `env` name longer than this is no variable: its render is not held on it


@dataclass
class RenderMeter:
    """One render pass's accounts: `io` is what the agent spent waiting on Vault, Consul, files and
    the host's addresses for the templates (not charged); `charged` is the rest of the renders'
    time, against the pass budget."""

    io: float = 0.0
    charged: float = 0.0


def too_many_templates(task: str, count: int, limit: int) -> str | None:
    """Why a task with `count` templates is refused, or None."""
    if count <= limit:
        return None
    return (
        f"task {task} has {count} templates, more than the {limit} a task may have "
        "(client config template_max_per_task)"
    )
