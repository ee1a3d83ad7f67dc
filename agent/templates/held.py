"""The dynamic secrets a task's templates hold between render passes, each renewed on its own clock.

consul-template watches every dependency on its own: a secret without a renewable lease is fetched
again at a random point late in its life, so secrets issued together drift apart and a task with a
hundred certificates never issues them all again in one burst. Here a dynamic secret (TTL > 0) is
due at a random fraction (RENEW_FRACTION, uniform) of its TTL after the pass that fetched it began;
a periodic pass fetches only what is due and renders the rest from what it holds. A secret without
a TTL (a KV read) is never held: every pass reads it again. Pure: times are plain numbers (the
monotonic clock), the jitter is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

RENEW_FRACTION = (0.6, 0.8)  # of a secret's TTL, measured from the start of the pass that fetched it


@dataclass(frozen=True)
class Held:
    data: dict[str, Any]
    ttl: float  # seconds it had to live when fetched
    fetched_at: float  # clock at the start of the pass that fetched it
    due: float  # clock from which the next pass fetches it again


def hold(data: dict[str, Any], ttl: float, fetched_at: float, jitter: float) -> Held:
    """A secret fetched by the pass that began at `fetched_at`; `jitter` in [0, 1] picks its point."""
    lo, hi = RENEW_FRACTION
    return Held(data, ttl, fetched_at, fetched_at + ttl * (lo + (hi - lo) * jitter))


def reusable(held: Mapping[str, Held], now: float) -> dict[str, tuple[dict[str, Any], float]]:
    """What a pass beginning at `now` renders from without fetching: every held secret not due yet,
    with the seconds it has left to live (what a template's `.LeaseDuration` shows)."""
    return {key: (h.data, h.ttl - (now - h.fetched_at)) for key, h in held.items() if h.due > now}


def after_pass(
    held: Mapping[str, Held],
    used: Iterable[str],
    cache: Mapping[str, tuple[dict[str, Any], float]],
    reused: Iterable[str],
    started: float,
    jitter: Callable[[], float],
) -> dict[str, Held]:
    """What the task holds after a pass that began at `started`: of the secrets its templates read
    (`used`), those it reused keep their schedule, those it fetched with a TTL get one of their own;
    a secret no template read any more is let go."""
    kept = set(reused)
    out: dict[str, Held] = {}
    for key in sorted(set(used)):
        if key in kept and key in held:
            out[key] = held[key]
        elif key in cache and cache[key][1] > 0:
            data, ttl = cache[key]
            out[key] = hold(data, ttl, started, jitter())
    return out


def next_due(held: Mapping[str, Held]) -> float | None:
    """When the next pass must run (the earliest due secret); None: nothing to renew."""
    return min((h.due for h in held.values()), default=None)
