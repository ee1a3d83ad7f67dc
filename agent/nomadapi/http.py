"""How Nomad's HTTP API talks, beside what it says: query options, blocking queries, the
`X-Nomad-*` headers and errors as plain text.

- Every answer carries `X-Nomad-Index` (the change index of what was read, agent.state.changes),
  `X-Nomad-KnownLeader: true` and `X-Nomad-LastContact: 0` (a one-node agent is its own leader).
- A read with `?index=N` waits until what it reads changes past N, or `wait` (a Go duration,
  default 5m, at most 5m, plus Nomad's jitter of up to wait/16: nomad/rpc.go's blockingRPC). Served
  by the API server it parks on the server's loop (agent.api.waiters: no thread while it waits, as
  many at once as connections allow) and the read runs when it is woken; called outside a server
  (a test calling a handler) it waits in the calling thread.
- Errors are the status code with a plain-text body, as Nomad's agent answers them.
- `namespace` other than `default` (or `*` on lists) and `region` other than the agent's are
  errors naming them: the agent has one namespace and one region. `X-Nomad-Token` is read by no
  one: the agent has no ACL system (the mTLS identity check is the gate).
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

from agent.api.handler import Response, Streamed, parking, query_params, response_header
from agent.api.waiters import Park, parked_now
from agent.command.logs import LogsGone, LogsUnavailable
from agent.errors import AgentError, Conflict, InProgress, NotFound, NotRun
from agent.jobspec import JobspecError
from agent.state.changes import ChangeIndex

NAMESPACE = "default"
DEFAULT_WAIT = 300.0  # seconds: Nomad's default blocking wait (DefaultBlockingRPCQueryTime)
MAX_WAIT = 300.0  # Nomad caps a blocking wait at 5 minutes (MaxBlockingRPCQueryTime)
JITTER_FRACTION = 16  # a wait is stretched by up to wait/16 at random (Nomad's JitterFraction)

_T = TypeVar("_T")
_DURATION = re.compile(r"((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+")
_PART = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_waiting = [0]  # blocking queries waiting in a thread now (outside a server)
_waiting_lock = threading.Lock()


def blocked_now() -> int:
    """Blocking queries waiting now (a gauge in /v1/metrics): parked by a server, or in a thread."""
    return parked_now() + _waiting[0]


class HttpError(AgentError):
    """An answer with this status and the message as its plain-text body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def go_duration(text: str, what: str) -> float:
    """Seconds of a Go duration ("5s", "1m30s", "250ms"); a bare number is seconds, as Nomad's
    `wait` takes it."""
    if re.fullmatch(r"[0-9]{1,9}", text):
        return float(text)
    if len(text) > 64 or not _DURATION.fullmatch(text):
        raise HttpError(400, f"{what}={text[:64]!r}: a duration like 5s, 1m30s or 250ms")
    return sum(float(n or 0) * _UNIT[u] for n, u in _PART.findall(text))


def text(status: int, message: str) -> Response:
    return status, "text/plain; charset=utf-8", (message.rstrip("\n") + "\n").encode()


def answer(data: Any, status: int = 200) -> Response:
    return status, "application/json", json.dumps(data, separators=(",", ":")).encode()


def answer_list(items: Iterable[Any]) -> Response:
    """A JSON array encoded item by item, as `items` makes them: a listing of 10,000 allocs never
    holds every one shaped at once (that, and the text of all of them, took the agent 200 MB)."""
    body = b",".join(json.dumps(item, separators=(",", ":")).encode() for item in items)
    return 200, "application/json", b"[" + body + b"]"


def meta_headers(index: int) -> None:
    response_header("X-Nomad-Index", str(max(index, 1)))
    response_header("X-Nomad-KnownLeader", "true")
    response_header("X-Nomad-LastContact", "0")


def check_scope(params: dict[str, str], region: str, *, listing: bool = False) -> None:
    """Refuse a namespace or region this agent does not have, naming it."""
    ns = params.get("namespace", NAMESPACE)
    if ns not in (NAMESPACE, "") and not (listing and ns == "*"):
        raise HttpError(400, f'namespace "{ns[:64]}" not found: this agent has only the "default" namespace')
    reg = params.get("region", region)
    if reg not in (region, ""):
        raise HttpError(400, f'region "{reg[:64]}" is not this agent\'s: it is in region "{region}" only')


def blocking(changes: ChangeIndex, kinds: Collection[str], read: Callable[[], _T]) -> _T:
    """A read as Nomad serves it: wait first if `?index=` asks to, then `read`, then the headers.
    In a server's handler the wait is a `Park` (the server holds the request with no thread and
    calls the handler again when it is woken, and then this reads at once)."""
    params = query_params()
    raw = params.get("index", "")
    if raw:
        if not re.fullmatch(r"[0-9]{1,20}", raw):
            raise HttpError(400, f"index={raw[:32]!r}: a change index (X-Nomad-Index of an earlier answer)")
        wait = min(go_duration(params["wait"], "wait") if params.get("wait") else DEFAULT_WAIT, MAX_WAIT)
        wait += random.uniform(0, wait / JITTER_FRACTION)  # noqa: S311 - a stagger, not a secret
        after = int(raw)
        park = parking()
        if park is None:
            with _waiting_lock:
                _waiting[0] += 1
            try:
                changes.wait(after, wait, kinds)
            finally:
                with _waiting_lock:
                    _waiting[0] -= 1
        elif park and changes.current(kinds) <= after:
            raise Park(changes, kinds, after, wait)
    index = changes.current(kinds)
    out = read()
    meta_headers(index)
    return out


# Exceptions and the status each answers with (the first that matches).
_STATUS: tuple[tuple[type[AgentError], int], ...] = (
    (LogsGone, 404),  # a task's log went with its container
    (LogsUnavailable, 503),  # the engine holding a log did not answer: a retry may find it
    (NotFound, 404),
    (Conflict, 409),
    (NotRun, 503),
    (InProgress, 504),
    (AgentError, 400),
)


def guard(
    fn: Callable[[tuple[str, ...], bytes], Response | Streamed],
) -> Callable[[tuple[str, ...], bytes], Response | Streamed]:
    """A Nomad route's errors as Nomad answers them: the status code and a plain-text reason."""

    def wrapped(groups: tuple[str, ...], body: bytes) -> Response | Streamed:
        try:
            return fn(groups, body)
        except HttpError as exc:
            return text(exc.status, str(exc))
        except JobspecError as exc:  # one line per problem, each once
            return text(400, "\n".join(dict.fromkeys(exc.lines())))
        except AgentError as exc:
            return text(next(code for kind, code in _STATUS if isinstance(exc, kind)), str(exc))

    return wrapped


def body_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise HttpError(400, f"request body is not JSON: {exc}") from None
    except RecursionError:
        raise HttpError(400, "request body is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise HttpError(400, "request body must be a JSON object")
    return data
