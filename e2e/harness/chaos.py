"""The seeded chaos schedule (pure): the fault kinds, a step, the endless schedule of a seed, and a
step's text form, which the run's history records ("chaos step N: <step>") and `--chaos-schedule`
and the shrinker (e2e/drivers/shrink.py) read back."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

KINDS = (
    "agent-sigterm",
    "agent-sigkill",
    "clean-reboot",
    "hard-reboot",
    "docker-restart",
    "kill-pause",
    "kill-task",
    "kill-both",
    "kill-exec",
    "partition",
    "vault-outage",
)
STEP_NOTE = "chaos step "  # the history note of each step: "chaos step N: <step>"
_STEP = re.compile(
    r"^(?P<kind>[a-z-]+) client#(?P<client>[0-9]+) hold (?P<hold>[0-9.]+)s job#(?P<job>[0-9]+)$"
)


@dataclass(frozen=True)
class Step:
    kind: str
    client: int  # index into cluster.clients
    hold: float  # seconds the fault stays injected (partition, outage)
    job: int  # which of the client's docker jobs a container kill aims at

    def __str__(self) -> str:
        return f"{self.kind} client#{self.client + 1} hold {self.hold:.0f}s job#{self.job}"


class ScheduleError(ValueError):
    """A step's text that is not one: the message says which and why."""


def parse_step(text: str, clients: int | None = None) -> Step:
    """A step from its text form (`str(step)`); ScheduleError names what is wrong."""
    m = _STEP.match(text.strip())
    if not m:
        raise ScheduleError(f"chaos step {text!r}: not '<kind> client#N hold Ss job#J'")
    kind, client, job = m["kind"], int(m["client"]) - 1, int(m["job"])
    if kind not in KINDS:
        raise ScheduleError(f"chaos step {text!r}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if client < 0 or (clients is not None and client >= clients):
        raise ScheduleError(f"chaos step {text!r}: no client#{client + 1} (the lab has {clients})")
    if not 0 <= job < 3:
        raise ScheduleError(f"chaos step {text!r}: job#{job}: 0, 1 or 2 (a client's docker jobs)")
    return Step(kind, client, float(m["hold"]), job)


def parse_schedule(text: str, clients: int | None = None) -> list[Step]:
    """Steps separated by ';' or new lines (blank items ignored)."""
    items = [i for i in re.split(r"[;\n]", text) if i.strip()]
    if not items:
        raise ScheduleError("an explicit chaos schedule needs at least one step")
    return [parse_step(i, clients) for i in items]


def schedule(seed: int, clients: int) -> Iterator[Step]:
    """The endless, reproducible sequence of faults for a seed."""
    rng = random.Random(seed)
    while True:
        yield Step(rng.choice(KINDS), rng.randrange(clients), rng.uniform(3.0, 20.0), rng.randrange(3))


def steps_run(notes: list[str]) -> list[Step]:
    """The steps a run did, in order, from its "chaos step N: <step>" notes."""
    out = []
    for note in notes:
        if note.startswith(STEP_NOTE) and ": " in note:
            out.append(parse_step(note.split(": ", 1)[1]))
    return out
