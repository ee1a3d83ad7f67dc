"""Vault under a storm, decided: the backoff of a request Vault refused over its rate limit (with the
server's Retry-After), and the agent's own cap on its Vault requests (a token bucket booking slots in
order). Pure: the time and the random draw are arguments."""

from __future__ import annotations

from dataclasses import dataclass

RATE_LIMIT_RETRY_BASE = 1.0  # seconds: the first retry's window
RATE_LIMIT_RETRY_MAX = 30.0  # no retry waits longer, whatever the attempt or the server's Retry-After
RATE_LIMIT_RETRY_MIN = 0.1  # nor shorter: a draw near 0 does not turn into a busy loop


def plan_rate_limit_retry(
    attempt: int,
    retry_after: float | None,
    draw: float,
    *,
    base: float = RATE_LIMIT_RETRY_BASE,
    cap: float = RATE_LIMIT_RETRY_MAX,
) -> float:
    """Seconds to wait before retrying what Vault refused over its rate limit (HTTP 429), or what the
    agent's own cap refused to send, for the `attempt`-th time in a row (1-based).

    Exponential backoff with full jitter: `draw` (uniform in [0, 1), the caller's random number) picks
    a point of a window that doubles with each attempt (base, 2 base, 4 base, ... capped at `cap`),
    so that clients refused together do not come back together. The server's Retry-After is
    honoured: the wait starts after it (never earlier than the server said), the jitter on top. The
    whole is bounded: between RATE_LIMIT_RETRY_MIN and `cap`."""
    window = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 32))
    floor = min(cap, max(0.0, retry_after or 0.0))
    jitter = min(1.0, max(0.0, draw)) * window
    return max(RATE_LIMIT_RETRY_MIN, min(cap, floor + jitter))


@dataclass(frozen=True)
class RateBucket:
    """The agent's own cap on Vault requests, a token bucket: `tokens` at time `at` (monotonic). Below
    zero, requests have booked slots ahead and are waiting for them."""

    tokens: float
    at: float


@dataclass(frozen=True)
class RateCapPlan:
    bucket: RateBucket  # the bucket after this request
    wait: float  # seconds until the request's slot (0: at once)
    granted: bool  # False: the slot is further than the caller may wait; nothing was booked


def plan_rate_cap(
    bucket: RateBucket, now: float, rate: float, max_wait: float, burst: float = 1.0
) -> RateCapPlan:
    """One request asks the cap for a slot: the bucket refills at `rate` tokens a second up to
    `burst`, and the request takes one token, waiting for it if there is none (the slots are booked in
    order, so concurrent requests are spaced 1/rate apart). With a burst of 1 no window of a second
    ever holds more than rate + 1 requests: a server quota of more than that is never hit. A slot
    further away than `max_wait` is refused and nothing is booked (the caller retries later)."""
    tokens = min(burst, bucket.tokens + max(0.0, now - bucket.at) * rate)
    wait = max(0.0, (1.0 - tokens) / rate)
    if wait > max_wait:
        return RateCapPlan(RateBucket(tokens, now), wait, granted=False)
    return RateCapPlan(RateBucket(tokens - 1.0, now), wait, granted=True)
