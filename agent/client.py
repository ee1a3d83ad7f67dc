"""A small client for the agent's mTLS API, used by the `fieldlab-agent job|alloc|node` commands."""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

from agent.errors import AgentError

NOT_CARRIED_OUT = 503  # the agent withdrew the request before acting: a retry is safe
RETRY_PAUSE = 0.5  # seconds, times the attempt number


class ApiError(AgentError):
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.body = status, body
        msg = body.get("error") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {msg}")


@dataclass(frozen=True)
class ApiClient:
    address: str  # https://host:4646
    ca_file: str
    cert_file: str
    key_file: str
    timeout: float = 60.0
    attempts: int = 3  # tries of a write (same Idempotency-Key) on a broken connection or a 503

    @classmethod
    def from_env(
        cls,
        *,
        address: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> ApiClient:
        """From FIELDLAB_AGENT_ADDR, _CACERT, _CLIENT_CERT and _CLIENT_KEY; an argument given (the
        CLI's -address, -ca-cert, -client-cert, -client-key) wins over its variable."""
        env = os.environ
        given = {
            "FIELDLAB_AGENT_ADDR": address,
            "FIELDLAB_AGENT_CACERT": ca_file,
            "FIELDLAB_AGENT_CLIENT_CERT": cert_file,
            "FIELDLAB_AGENT_CLIENT_KEY": key_file,
        }
        value = {k: v if v else env.get(k, "") for k, v in given.items()}
        flags = {
            "FIELDLAB_AGENT_CACERT": "-ca-cert",
            "FIELDLAB_AGENT_CLIENT_CERT": "-client-cert",
            "FIELDLAB_AGENT_CLIENT_KEY": "-client-key",
        }
        missing = [f"{k} (or {flag})" for k, flag in flags.items() if not value[k]]
        if missing:
            raise AgentError(f"set {', '.join(missing)} (the lab's ca.pem, operator.crt, operator.key)")
        return cls(
            value["FIELDLAB_AGENT_ADDR"] or "https://127.0.0.1:4646",
            value["FIELDLAB_AGENT_CACERT"],
            value["FIELDLAB_AGENT_CLIENT_CERT"],
            value["FIELDLAB_AGENT_CLIENT_KEY"],
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(self.request_raw(method, path, body)[1] or b"null")

    def request_raw(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """The status and body of a response as they came (for answers that are not JSON: metrics).

        A write carries an Idempotency-Key and is tried up to `attempts` times when the connection
        fails or times out or the agent answers 503 (not carried out): every try has the same key,
        so the agent acts once however many reach it (agent.idempotency).
        An empty `cert_file` presents no client certificate (to check that the agent refuses that)."""
        if not self.address.startswith("https://"):
            raise AgentError(f"agent address {self.address!r} must be an https:// URL (the API is mTLS only)")
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        write = method != "GET"
        if write:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        tries = self.attempts if write else 1
        for attempt in range(1, tries + 1):
            req = urllib.request.Request(  # noqa: S310 - https only, checked above
                self.address + path, data=data, method=method, headers=headers
            )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=self.timeout) as resp:  # noqa: S310
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError:
                    parsed = raw.decode(errors="replace")
                if exc.code == NOT_CARRIED_OUT and attempt < tries:
                    time.sleep(RETRY_PAUSE * attempt)  # backoff between tries, not a synchronisation
                    continue
                raise ApiError(exc.code, parsed) from None
            except (urllib.error.URLError, OSError) as exc:
                broken = isinstance(getattr(exc, "reason", exc), ConnectionError | TimeoutError)
                if broken and attempt < tries:  # not a TLS refusal: that answer would not change
                    time.sleep(RETRY_PAUSE * attempt)
                    continue
                raise AgentError(f"cannot reach the agent at {self.address}: {exc}") from None
        raise AssertionError("unreachable: the last try returns or raises")
