"""Retried requests act once: the answer to a write that carried an `Idempotency-Key` header is kept
for a while, and a retry with the same key (a client whose connection broke, or whose call timed out)
gets that answer instead of a second action. The first request may still be running when the retry
arrives: the retry waits for its answer. A request the agent did not carry out (503, withdrawn before
the main loop took it) keeps no answer, so its retry runs.

- **Kept from the answer on.** An entry lives `ttl` seconds from the moment its answer was given,
  not from the moment the request came in: a request that runs longer than `ttl` (a job stop waiting
  on its tasks' kill timeouts) is never forgotten under a retry that arrives just after it finished.
  An entry whose request is still running is never expired nor pushed out by the `max_entries` cap.
- **Bound to the caller.** Keys are kept per caller (the client cert identity the API authorized):
  the same key from another caller is another request, carried out for that caller, and never gets
  the first caller's answer. A key seen in a log cannot be used to read someone else's response.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

Response = tuple[int, str, bytes]
KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
NOT_CARRIED_OUT = 503

_Slot = tuple[str, str]  # (caller, key)


@dataclass
class _Entry:
    fingerprint: str
    answer: Future[Response]
    answered_at: float | None = None  # None while the first request is still being carried out


class Replays:
    def __init__(
        self, ttl: float = 600.0, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ):
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[_Slot, _Entry] = {}
        self._answered: OrderedDict[_Slot, None] = OrderedDict()  # answered entries, oldest answer first
        self.replayed = 0  # answers given to retries (agent metrics)

    @staticmethod
    def fingerprint(method: str, path: str, body: bytes) -> str:
        return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()

    def answer(
        self, key: str, fingerprint: str, carry_out: Callable[[], Response], *, caller: str
    ) -> tuple[Response, bool]:
        """The answer for this request of `caller` (True: a retry, given the first one's answer).
        Raises ValueError for a malformed key or a key the caller reused for a different request."""
        if not KEY.fullmatch(key):
            raise ValueError("Idempotency-Key must be 1-128 characters of A-Z a-z 0-9 . _ : -")
        slot = (caller, key)
        with self._lock:
            self._expire()
            entry = self._entries.get(slot)
            if entry is not None:
                if entry.fingerprint != fingerprint:
                    raise ValueError(f"Idempotency-Key {key!r} was used for a different request")
                self.replayed += 1
                first = entry.answer
            else:
                first = None
                entry = _Entry(fingerprint, Future())
                self._entries[slot] = entry
        if first is not None:
            return first.result(), True
        try:
            response = carry_out()
        except BaseException as exc:
            self._forget(slot, entry)
            entry.answer.set_exception(exc)
            raise
        if response[0] == NOT_CARRIED_OUT:
            self._forget(slot, entry)
        else:
            self._answered_now(slot, entry)
        entry.answer.set_result(response)
        return response, False

    def _answered_now(self, slot: _Slot, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(slot) is entry:
                entry.answered_at = self._clock()
                self._answered[slot] = None
                self._answered.move_to_end(slot)

    def _forget(self, slot: _Slot, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(slot) is entry:
                del self._entries[slot]

    def _expire(self) -> None:
        """Answered entries past their ttl, and the oldest answered ones over the cap. Entries still
        being answered are not in `_answered`: they stay whatever their age."""
        now = self._clock()
        while self._answered:
            slot = next(iter(self._answered))
            answered_at = self._entries[slot].answered_at
            assert answered_at is not None  # in _answered only once answered
            if now - answered_at < self.ttl and len(self._entries) < self.max_entries:
                return
            del self._answered[slot]
            del self._entries[slot]

    def __len__(self) -> int:
        return len(self._entries)
