"""What a route handler of the agent's HTTP API sees (agent.api.server runs it in a handler thread):
the handler's and a stream opener's types, and the request it answers: its query parameters, the
headers to send back, whether a blocking query may park and whether a stream is pulled by a server.
Route modules (agent.nomadapi) import this, never the server itself."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable

from agent.api.http11 import Response, json_response
from agent.api.stream import FIELDLAB_EXEC, Idle, Streamed, Upgrade
from agent.drivers.session import ExecSession

__all__ = [
    "FIELDLAB_EXEC",
    "Handler",
    "Idle",
    "Response",
    "StreamOpener",
    "Streamed",
    "Upgrade",
    "current_request",
    "json_response",
    "parking",
    "pulled",
    "query_params",
    "query_values",
    "response_header",
]

# A handler gets the path's regex groups and the request body.
Handler = Callable[[tuple[str, ...], bytes], "Response | Streamed"]

# A stream opener (`Upgrade: fieldlab-exec`): the session to carry, or a Response refusing it.
StreamOpener = Callable[[tuple[str, ...], bytes], "Response | ExecSession"]

# The request a handler thread is answering (the server sets query, park and out_headers on it).
current_request = threading.local()


def response_header(name: str, value: str) -> None:
    """In a handler: a header to send with its answer (Nomad's X-Nomad-Index and the like)."""
    headers = getattr(current_request, "out_headers", None)
    if headers is not None:  # None: called outside a request (a test calling a handler directly)
        headers[name] = value


def query_params() -> dict[str, str]:
    """In a handler: the request's query parameters (the last value of each), e.g. {"purge": "true"}."""
    query = getattr(current_request, "query", "")
    return {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}


def parking() -> bool | None:
    """In a handler: whether a blocking query may `Park` (True), has been woken and reads now
    (False), or waits in its thread (None: called outside a server)."""
    park: bool | None = getattr(current_request, "park", None)
    return park


def pulled() -> bool:
    """In a handler: whether the stream it answers is pulled by a server (it may yield `Idle`), or
    in the caller's own thread (a test calling the handler: it waits in that thread instead)."""
    return getattr(current_request, "park", None) is not None


def query_values(name: str) -> list[str]:
    """In a handler: every value of a repeated query parameter (Nomad's `topic=...&topic=...`)."""
    return urllib.parse.parse_qs(getattr(current_request, "query", ""), keep_blank_values=True).get(name, [])
