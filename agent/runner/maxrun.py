"""A batch or sysbatch group's `max_run_duration` (Nomad's max_run_duration alloc hook): the alloc is
stopped once that long has passed since it was created (the deadline anchored to its creation, as
Nomad's, so an agent restart or a task's restart does not move it), with Nomad's client
description. An alloc stopped, finished or failed before the deadline is left alone."""

from __future__ import annotations

import time

from agent.runner.interfaces import AllocHost
from agent.structs.records import DesiredStatus

EXCEEDED = "allocation exceeded max_run_duration"  # structs.AllocTimeoutReasonMaxRunDuration


def arm_max_run_duration(ar: AllocHost, now: float | None = None) -> float | None:
    """Put the alloc's deadline on the loop's timer; the seconds until it (None: the group has none)."""
    seconds = ar.group.max_run_duration
    if seconds is None:
        return None
    left = max(0.0, ar.rec.created + seconds - (time.time() if now is None else now))

    def fire() -> None:
        enforce_max_run_duration(ar)

    ar.d.schedule(left, fire)
    return left


def enforce_max_run_duration(ar: AllocHost) -> bool:
    """Stop the alloc past its deadline when it still runs or is being set up; whether it did."""
    rec = ar.rec
    if not rec.live or rec.desired is not DesiredStatus.RUN:
        return False
    ar.stop(EXCEEDED)  # the tasks' Killing events and the alloc's description say why
    return True
