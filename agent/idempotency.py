"""Retried requests act once: the answer to a write that carried an `Idempotency-Key` header is kept
for a while, and a retry with the same key (a client whose connection broke, or whose call timed out)
gets that answer instead of a second action. The first request may still be running when the retry
arrives: the retry waits for its answer. A request the agent did not carry out (503, withdrawn before
the main loop took it) keeps no answer, so its retry runs.
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


@dataclass
class _Entry:
    fingerprint: str
    answer: Future[Response]
    created: float


class Replays:
    def __init__(
        self, ttl: float = 600.0, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ):
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.replayed = 0  # answers given to retries (agent metrics)

    @staticmethod
    def fingerprint(method: str, path: str, body: bytes) -> str:
        return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()

    def answer(self, key: str, fingerprint: str, carry_out: Callable[[], Response]) -> tuple[Response, bool]:
        """The answer for this request (True: a retry, given the first one's answer). Raises
        ValueError for a malformed key or a key reused for a different request."""
        if not KEY.fullmatch(key):
            raise ValueError("Idempotency-Key must be 1-128 characters of A-Z a-z 0-9 . _ : -")
        with self._lock:
            self._expire()
            entry = self._entries.get(key)
            if entry is not None:
                if entry.fingerprint != fingerprint:
                    raise ValueError(f"Idempotency-Key {key!r} was used for a different request")
                self.replayed += 1
                first = entry.answer
            else:
                first = None
                entry = _Entry(fingerprint, Future(), self._clock())
                self._entries[key] = entry
        if first is not None:
            return first.result(), True
        try:
            response = carry_out()
        except BaseException as exc:
            self._forget(key, entry)
            entry.answer.set_exception(exc)
            raise
        if response[0] == NOT_CARRIED_OUT:
            self._forget(key, entry)
        entry.answer.set_result(response)
        return response, False

    def _forget(self, key: str, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]

    def _expire(self) -> None:
        now = self._clock()
        while self._entries:
            key, oldest = next(iter(self._entries.items()))
            if now - oldest.created < self.ttl and len(self._entries) < self.max_entries:
                return
            if not oldest.answer.done():
                return  # still being answered: its retries must find it
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
