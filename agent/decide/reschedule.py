"""Rescheduling a failed alloc, as Nomad's scheduler does on the one node there is: when its
replacement is placed (NextRescheduleTime, the delay functions) and what the replacement's tracker
carries of the failed alloc's reschedules. Pure: the time is an argument."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.structs.model import ReschedulePolicy
from agent.structs.records import RescheduleEvent

RESCHEDULE_WINDOW = 1.0  # Nomad's rescheduleWindowSize: due this close to now, placed at once
PAST_RESCHEDULE_EVENTS = 5  # Nomad's maxPastRescheduleEvents, what an unlimited policy carries


@dataclass(frozen=True)
class Reschedule:
    delay: float  # seconds the replacement waits after the failure (Nomad's NextDelay)
    due: float  # when it is placed (failure time + delay, unix seconds)
    now: bool  # due within RESCHEDULE_WINDOW: placed by the failure's own evaluation


def next_reschedule_delay(
    policy: ReschedulePolicy, events: Sequence[RescheduleEvent], fail_time: float
) -> float:
    """Nomad's Allocation.NextDelay: the policy's delay, grown by its delay function over the
    previous reschedules' delays, capped at max_delay; once capped, a failure more than the cap
    after the last reschedule starts the series again at `delay`."""
    delay = policy.delay
    if not events:
        return delay
    if policy.delay_function == "exponential":
        delay = events[-1].delay * 2
    elif policy.delay_function == "fibonacci":
        if len(events) > 1:  # the two previous delays
            n1, n2 = events[-1].delay, events[-2].delay
            delay = n1 if (n2 == policy.max_delay and n1 == policy.delay) else n1 + n2
    else:
        return delay
    if policy.max_delay > 0 and delay > policy.max_delay:
        delay = policy.max_delay
        if fail_time - events[-1].time > delay:
            delay = policy.delay
    return delay


def plan_reschedule(
    policy: ReschedulePolicy | None, events: Sequence[RescheduleEvent], fail_time: float, now: float
) -> Reschedule | None:
    """A failed alloc (its reschedules so far `events`, failed at `fail_time`): when its replacement
    is placed, or None when the policy owes none (disabled, a system job's, its attempts used up in
    the interval), as Nomad's NextRescheduleTime and its reconciler's reschedule now/later."""
    if policy is None or not policy.enabled:
        return None
    delay = next_reschedule_delay(policy, events, fail_time)
    eligible = policy.unlimited or not events
    if policy.attempts > 0 and events:
        attempted = sum(1 for e in events if fail_time - e.time < policy.interval)
        eligible = attempted < policy.attempts and delay < policy.interval
    if not eligible:
        return None
    due = fail_time + delay
    return Reschedule(delay, due, due - now <= RESCHEDULE_WINDOW)


def carried_reschedule_events(
    policy: ReschedulePolicy | None, events: Sequence[RescheduleEvent], now: float
) -> tuple[RescheduleEvent, ...]:
    """What a replacement's tracker keeps of the failed alloc's (Nomad's UpdateRescheduleTracker,
    before the new event): with attempts, those within the interval; else the last few."""
    if policy is not None and policy.attempts > 0:
        return tuple(e for e in events if policy.interval > 0 and now - e.time <= policy.interval)
    return tuple(events[-PAST_RESCHEDULE_EVENTS:])
