"""The Nomad API calls `fieldlab-agent`'s verbs make, over agent.api.client's mTLS: each call names what
it asked for when the agent refuses it (Nomad's errors are a status and a plain-text reason), an
alloc is found by its id or a prefix as Nomad's CLI finds one (`GET /v1/allocations?prefix=`), and a
streamed answer (a followed log) is read as it comes."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from agent.api.client import ApiClient, ApiError
from agent.errors import AgentError

MIN_PREFIX = 2  # characters of an alloc id that name it (as Nomad's CLI)
SHORT_ID = 8
READ_SIZE = 64 * 1024


def q(part: str) -> str:
    """One path segment or query value, escaped."""
    return quote(part, safe="")


class CallError(AgentError):
    """The agent answered a call with an error: what was asked, the status and the agent's reason."""

    def __init__(self, what: str, status: int, reason: str) -> None:
        self.what, self.status, self.reason = what, status, reason
        super().__init__(f"{what}: HTTP {status}: {reason}")


def reason(body: Any) -> str:
    """An error answer's reason: Nomad's plain text, or the `error` of a JSON one (the API server's
    own refusals: the caller's identity, too many sessions)."""
    if isinstance(body, Mapping):
        text = str(body["error"]) if body.get("error") else json.dumps(body)
    elif isinstance(body, bytes):
        text = body.decode(errors="replace")
    else:
        text = str(body)
    return text.strip() or "(no reason given)"


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


@dataclass(frozen=True)
class Nomad:
    """The verbs' calls to one agent."""

    api: ApiClient

    def call(self, method: str, path: str, what: str, body: Any = None) -> Any:
        try:
            return self.api.request(method, path, body)
        except ApiError as exc:
            raise CallError(what, exc.status, reason(exc.body)) from None

    def get(self, path: str, what: str) -> Any:
        return self.call("GET", path, what)

    def find_alloc(self, ref: str) -> dict[str, Any]:
        """The alloc (api.AllocationListStub) whose id is `ref` or starts with it; AgentError naming
        the candidates when the prefix is not enough, or saying none has it."""
        if len(ref) < MIN_PREFIX:
            raise AgentError(
                f"alloc ID {ref!r}: give the ID, or a prefix of at least {MIN_PREFIX} characters"
            )
        allocs: list[dict[str, Any]] = self.get(f"/v1/allocations?prefix={q(ref)}", f"alloc {ref}")
        exact = [a for a in allocs if a.get("ID") == ref]
        if exact:
            return exact[0]
        if not allocs:
            raise AgentError(f'no allocation with prefix or id "{ref}"')
        if len(allocs) > 1:
            ids = ", ".join(sorted(str(a.get("ID"))[:SHORT_ID] for a in allocs))
            raise AgentError(f'prefix "{ref}" matches {len(allocs)} allocations ({ids}): give more of the id')
        return allocs[0]

    def job_id(self, ref: str) -> str:
        """The ID of the job `ref` names, as Nomad's CLI finds it (`GET /v1/jobs?prefix=`): the job of
        that exact ID, else the one job whose ID starts with it; AgentError naming the candidates
        when several do. None matching: `ref` as given (the agent may know the job only by adopted
        allocs, which the job's own routes answer for)."""
        jobs: list[dict[str, Any]] = self.get(f"/v1/jobs?prefix={q(ref)}", f"jobs with prefix {ref}")
        ids = sorted(str(j.get("ID")) for j in jobs)
        if ref in ids or not ids:
            return ref
        if len(ids) > 1:
            raise AgentError(f'prefix "{ref}" matched multiple jobs ({", ".join(ids)}): give more of the ID')
        return ids[0]

    def alloc(self, ref: str) -> dict[str, Any]:
        """The whole alloc (api.Allocation) `ref` names (an id or a prefix)."""
        alloc_id = str(self.find_alloc(ref)["ID"])
        found: dict[str, Any] = self.get(f"/v1/allocation/{q(alloc_id)}", f"alloc {alloc_id[:SHORT_ID]}")
        return found

    def stream(self, path: str, what: str) -> Iterator[bytes]:
        """A GET's body as it comes (chunked: a followed log), piece by piece; ends with the answer."""
        ctx = self.api._context()
        req = urllib.request.Request(self.api.address + path, method="GET")  # noqa: S310 - https only
        try:
            resp = urllib.request.urlopen(req, context=ctx, timeout=self.api.timeout)  # noqa: S310
        except urllib.error.HTTPError as exc:
            raise CallError(what, exc.code, reason(_parsed(exc.read()))) from None
        except (urllib.error.URLError, OSError) as exc:
            raise AgentError(f"cannot reach the agent at {self.api.address}: {exc}") from None
        with resp:
            while True:
                try:
                    data = resp.read1(READ_SIZE)
                except (OSError, http.client.HTTPException) as exc:
                    raise AgentError(f"{what}: the agent's answer broke off: {exc}") from None
                if not data:
                    return
                yield data
