"""Polling with a named timeout: the only way the lab and the e2e harness wait for anything."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from lab.errors import LabError

T = TypeVar("T")


class WaitTimeout(LabError):
    """A condition did not hold within its named timeout; the message says what and the last state seen."""

    def __init__(self, what: str, timeout: float, last: str) -> None:
        self.what = what
        self.timeout = timeout
        self.last = last
        super().__init__(f"timed out after {timeout:.0f}s waiting for {what} (last seen: {last})")


def wait_until(
    condition: Callable[[], tuple[T | None, str]], *, timeout: float, what: str, interval: float = 0.5
) -> T:
    """Call `condition` every `interval` seconds until it returns a value that is not None.

    `condition` returns (value, observation): value None means "not yet", and the observation is
    kept so that a timeout says what was last seen rather than just "False".
    """
    deadline = time.monotonic() + timeout
    last = "never checked"
    while True:
        value, last = condition()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(what, timeout, last)
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
