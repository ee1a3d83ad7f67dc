"""The agent's Vault (OpenBao) client over hvac: AppRole login, token renewal, KV reads and PKI issue.

- The token is renewed (renew-self) once 2/3 of its TTL have passed; when renewal fails, when the
  token has expired by our clock, or when the server capped the renewal (the token is near its max
  TTL), the client logs in afresh with the AppRole credentials file instead. A token the server no
  longer knows (revoked, or the server's storage was rebuilt) leads to one fresh login and a retry.
- A dynamic secret (a PKI certificate, a leased secret) is fetched again at `reissue_at`: a random
  point between 60 % and 80 % of its TTL, so that many templates do not re-issue in lock step.
- Errors: `VaultUnavailable` (connection refused, timeout, sealed, 5xx) is for the caller to
  retry with `backoff(attempt)`; `VaultDenied` (403) and `VaultNotFound` (404) are not retried.
  `VaultRateLimited` (a VaultUnavailable) is a 429 from a rate-limit quota, with the server's
  Retry-After when it sends one: callers retry it with `agent.decide.vaultrate.plan_rate_limit_retry`
  (exponential backoff, full jitter, after the Retry-After), any request alike (login, renew, reads,
  PKI issue).
- Load (`VaultLoad`, one per agent, shared by its own client and every task's): an optional cap on
  the requests per second (`vault.max_requests_per_second`, a token bucket, `plan_rate_cap`) that
  every request waits its slot under, and counters (requests sent, 429s received, waits). The first
  AppRole login of an agent waits a random part of `vault.restart_jitter`, and `restart_delay()`
  gives each task's re-issue after a restart its own point of that window (docs/vault-load.md).
- Tasks get tokens of their own (agent.runner.vaulttoken): the agent's token only creates them through
  a token role (`create_token`) and revokes them (`revoke_accessor`); a `TokenClient` makes a task's
  requests with the task's token, which renews and looks itself up (renew-self, lookup-self).

- Status: every request the client makes (login, renew, reads, writes, create/revoke) leaves its
  outcome in `last_status` (`VaultCallStatus`: ok, sealed, unreachable, denied or error, when, and
  the error text); `probe()` asks the unauthenticated `sys/health` when there is nothing recent.
  The agent's health reports Vault from these, as it is now, not as it was at start-up.

Tokens and the AppRole secret_id are never logged nor put into an error message.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import hvac
import hvac.adapters
import hvac.exceptions
import requests

from agent.vault.errors import (
    JsonAdapter,
    VaultDenied,
    VaultError,
    VaultNotFound,
    VaultRateLimited,
    VaultUnavailable,
    classify,
)
from agent.vault.load import OPS, VAULT_UNREACHABLE, VaultCallStatus, VaultLoad, health_state, state_of
from agent.vault.results import JITTER_RNG, LOGIN_PATH, RENEW_FRACTION, SecretResult, TokenGrant, grant

log = logging.getLogger(__name__)


class _VaultApi(ABC):
    """Requests to one server, each with the token `_request` picks: reads, writes and what a
    template's `secret()` gets. Subclasses decide which token and what a denial leads to."""

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        hvac_client: hvac.Client | None = None,
        load: VaultLoad | None = None,
    ) -> None:
        self.address = address.rstrip("/")
        self.timeout = timeout
        self.clock = clock
        # Paces and counts every request; shared with the tasks' clients (token_client).
        self.load = load if load is not None else VaultLoad(max_wait=timeout)
        # hvac's client carries no token (token="" also keeps it from reading VAULT_TOKEN or
        # ~/.vault-token): each request passes its token in its headers.
        self._hvac = hvac_client or hvac.Client(
            url=self.address, token="", timeout=timeout, adapter=JsonAdapter
        )
        self.last_status: VaultCallStatus | None = None  # the last request's outcome (None: none yet)
        self.last_probe: VaultCallStatus | None = None  # the last sys/health probe's (None: none yet)

    def _note(self, op: str, path: str, exc: Exception | None = None, at: float | None = None) -> None:
        """Keep the outcome of a request as `last_status` (a frozen value: one assignment, no lock)."""
        error = ""
        if isinstance(exc, hvac.exceptions.RateLimitExceeded):
            self.load.note_rate_limited()
        if exc is not None:
            error = str(exc) if isinstance(exc, VaultError) else str(classify(exc, op, path))
        self.last_status = VaultCallStatus(state_of(exc), self.clock() if at is None else at, op, path, error)

    def probe(self, timeout: float = 2.0) -> VaultCallStatus:
        """Ask `sys/health` (unauthenticated, cheap): is Vault up, unsealed? Kept as `last_probe`."""
        at = self.clock()
        try:
            resp = self._hvac.adapter.request("GET", "/v1/sys/health", raise_exception=False, timeout=timeout)
        except requests.RequestException as exc:
            status = VaultCallStatus(
                VAULT_UNREACHABLE, at, "health", "sys/health", str(classify(exc, "health", "sys/health"))
            )
        else:
            code = resp.status_code if isinstance(resp, requests.Response) else 200
            state, error = health_state(code)
            status = VaultCallStatus(state, at, "health", "sys/health", error)
        self.last_probe = status
        return status

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, token: str, op: str = ""
    ) -> dict[str, Any]:
        """One request with `token`; our error for any failure (naming the path, never the token)."""
        op = op or OPS.get(method, method)
        self.load.take(op, path)
        try:
            adapter = self._hvac.adapter
            call = {"get": adapter.get, "list": adapter.list}.get(method, adapter.post)
            kwargs: dict[str, Any] = {"headers": {"X-Vault-Token": token} if token else {}}
            if body is not None:
                kwargs["json"] = body
            resp = call(f"/v1/{path}", **kwargs)
        except (hvac.exceptions.VaultError, requests.RequestException) as exc:
            err = classify(exc, op, path)
            self._note(op, path, exc)
            raise err from None
        self._note(op, path)
        if isinstance(resp, requests.Response):  # 204 or a non-JSON 200
            return {}
        return dict(resp)

    @abstractmethod
    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One request with this client's token (each subclass holds its own)."""

    def _result(self, resp: dict[str, Any], fetched_at: float) -> SecretResult:
        data = resp.get("data") or {}
        ttl = float(resp.get("lease_duration") or 0)
        renewable = bool(resp.get("renewable"))
        if ttl <= 0 and isinstance(data.get("expiration"), int | float):
            # PKI: no lease unless the role asks for one; the certificate's expiration is its TTL.
            ttl = max(0.0, float(data["expiration"]) - fetched_at)
        return SecretResult(
            data=dict(data),
            ttl=ttl,
            renewable=renewable,
            fetched_at=fetched_at,
            lease_id=str(resp.get("lease_id") or ""),
            warnings=tuple(resp.get("warnings") or ()),
        )

    def read_result(self, path: str) -> SecretResult:
        """GET the path; the whole result, lease information included."""
        fetched_at = self.clock()
        return self._result(self._request("get", path, None), fetched_at)

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """What a template's `secret(path, **params)` gets (agent.templates.render.SecretSource): a write
        when there are params or the path issues (`<mount>/issue/<role>`), otherwise a read; the
        data and its TTL in seconds (0 when it does not expire)."""
        result = self.write(path, **params) if params or "/issue/" in path else self.read_result(path)
        return result.data, result.ttl

    def list_keys(self, path: str) -> list[str]:
        """LIST the path: the key names under it (a template's `secrets`); [] when there are none."""
        try:
            resp = self._request("list", path, None)
        except VaultNotFound:
            return []
        keys = (resp.get("data") or {}).get("keys") or []
        return [str(k) for k in keys]

    def read(self, path: str) -> dict[str, Any]:
        """GET the path and return its `data`. For a KV v2 path (`secret/data/...`, given as such)
        that is {"data": {the secret's keys}, "metadata": {version, created_time, ...}}; for other
        paths, the response's data as it is."""
        return self.read_result(path).data

    def write(self, path: str, **params: Any) -> SecretResult:
        """POST params to the path (e.g. `pki_int/issue/<role>` with common_name, ttl, ...). For a
        certificate, `data` holds certificate, private_key, issuing_ca, ca_chain, serial_number and
        expiration (unix time), and `ttl` is the seconds until that expiration."""
        fetched_at = self.clock()
        return self._result(self._request("post", path, params), fetched_at)


class TokenClient(_VaultApi):
    """Requests with one given token (a task's, from `VaultClient.create_token`): no login, and a
    denial is final (a task's token is never swapped for another behind its back). The token renews
    and looks itself up with the `default` policy every token gets."""

    def __init__(
        self,
        address: str,
        token: str,
        *,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        hvac_client: hvac.Client | None = None,
        load: VaultLoad | None = None,
    ) -> None:
        super().__init__(address, timeout=timeout, clock=clock, hvac_client=hvac_client, load=load)
        self._token = token

    def __repr__(self) -> str:  # never shows the token
        return f"TokenClient({self.address})"

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        return self._send(method, path.strip("/"), body, self._token)

    def lookup_self(self) -> TokenGrant:
        """The token's accessor, policies and remaining TTL; VaultDenied when the server no longer
        knows it (revoked or expired)."""
        granted_at = self.clock()
        resp = self._send("get", "auth/token/lookup-self", None, self._token, op="lookup")
        return grant(resp.get("data") or {}, granted_at)

    def renew_self(self) -> TokenGrant:
        """Renew the token for its TTL again (a periodic token: for its period); the TTL granted, which
        is less than asked when the token's max TTL caps it."""
        granted_at = self.clock()
        resp = self._send("post", "auth/token/renew-self", {}, self._token, op="renew")
        return grant(resp.get("auth") or {}, granted_at, resp.get("warnings"))


class VaultClient(_VaultApi):
    """A Vault client logged in with the AppRole credentials in `approle_file` (JSON with role_id and
    secret_id, as the lab deploys it at /etc/fieldlab-agent/approle.json). Safe to share between
    threads: token state changes under a lock, each request carries the token it was given."""

    def __init__(
        self,
        address: str,
        approle_file: Path | str,
        *,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        max_requests_per_second: float = 0.0,
        restart_jitter: float = 0.0,
        load: VaultLoad | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if restart_jitter < 0:
            raise ValueError(f"restart_jitter {restart_jitter}: need >= 0")
        if load is None:
            load = VaultLoad(max_requests_per_second, max_wait=timeout, sleep=sleep)
        super().__init__(address, timeout=timeout, clock=clock, load=load)
        self.approle_file = Path(approle_file)
        # The restart window: the first login, and each task's re-issue after a restart, wait a
        # random part of it (agents restarted together then reach Vault apart).
        self.restart_jitter = float(restart_jitter)
        self._sleep = sleep
        self._rng = rng or JITTER_RNG
        self._login_spread = restart_jitter > 0  # the first login is still to be spread
        self._lock = threading.RLock()
        self._token = ""
        self._accessor = ""
        self._token_ttl = 0.0  # as granted at the last login or renewal
        self._login_ttl = 0.0  # as granted at the last login
        self._token_at = 0.0  # clock() when that TTL was granted
        self._renewable = False
        self._capped = False  # the server capped a renewal: the token is near its max TTL
        self.logins = 0
        self.renewals = 0

    def __repr__(self) -> str:  # never shows the token
        return f"VaultClient({self.address}, approle_file={self.approle_file})"

    # --- token

    @property
    def token_accessor(self) -> str:
        """The accessor of the current token ("" before the first login): not a secret, it names the
        token for lookup or revocation without granting its use."""
        return self._accessor

    @property
    def token_expires_at(self) -> float:
        return self._token_at + self._token_ttl

    @property
    def token_capped(self) -> bool:
        """The last renewal was capped by the token's max TTL: the next renewal is a fresh login."""
        return self._capped

    def token_needs_renewal(self, now: float | None = None) -> bool:
        """True once RENEW_FRACTION of the token's TTL has passed (or there is no token)."""
        now = self.clock() if now is None else now
        return not self._token or now >= self._token_at + self._token_ttl * RENEW_FRACTION

    def _credentials(self) -> tuple[str, str]:
        try:
            creds = json.loads(self.approle_file.read_text())
            return str(creds["role_id"]), str(creds["secret_id"])
        except OSError as exc:
            reason = f"cannot read the AppRole credentials file {self.approle_file}: {exc.strerror}"
        except (ValueError, KeyError, TypeError):
            reason = f"{self.approle_file}: not a JSON object with role_id and secret_id"
        raise VaultDenied("login", LOGIN_PATH, reason)

    def restart_delay(self) -> float | None:
        """A task's point of the restart window (agent.templates.render.RestartPaced): a random number
        of seconds in [0, restart_jitter]; None when there is no window (restart_jitter 0)."""
        if self.restart_jitter <= 0:
            return None
        return self._rng.uniform(0.0, self.restart_jitter)

    def login(self) -> None:
        """Log in with AppRole; keep the token and its TTL. The first login of the client (the agent's
        start) first waits a random part of the restart window."""
        try:
            role_id, secret_id = self._credentials()
        except VaultDenied as exc:
            self._note("login", LOGIN_PATH, exc)
            raise
        if self._login_spread:
            self._login_spread = False
            delay = self._rng.uniform(0.0, self.restart_jitter)
            log.info("vault: first login in %.1fs (vault.restart_jitter %gs)", delay, self.restart_jitter)
            self._sleep(delay)
        self.load.take("login", LOGIN_PATH)
        with self._lock:
            try:
                resp = self._hvac.auth.approle.login(role_id=role_id, secret_id=secret_id, use_token=False)
            except (hvac.exceptions.InvalidRequest, hvac.exceptions.Unauthorized) as exc:
                # 400 "invalid role or secret ID": the credentials themselves were refused.
                reason = classify(exc, "login", LOGIN_PATH).reason
                denied = VaultDenied("login", LOGIN_PATH, f"AppRole credentials refused ({reason})")
                self._note("login", LOGIN_PATH, denied)
                raise denied from None
            except (hvac.exceptions.VaultError, requests.RequestException) as exc:
                self._note("login", LOGIN_PATH, exc)
                raise classify(exc, "login", LOGIN_PATH) from None
            self._note("login", LOGIN_PATH)
            auth = resp["auth"]
            self._set_token(auth, login=True)
            self.logins += 1
        log.info(
            "vault: logged in to %s with AppRole (token ttl %.0fs, renewable %s)",
            self.address,
            self._token_ttl,
            self._renewable,
        )

    def _set_token(self, auth: dict[str, Any], *, login: bool, warnings: list[str] | None = None) -> None:
        ttl = float(auth.get("lease_duration") or 0)
        if login:
            self._token = str(auth["client_token"])
            self._accessor = str(auth.get("accessor") or "")
            self._login_ttl = ttl
            self._capped = False
        elif ttl < self._login_ttl or any("max_ttl" in w for w in warnings or ()):
            # renew-self returns less than the token's period only when its max TTL caps it (and
            # warns 'TTL of "10s" exceeded the effective max_ttl of "9s"').
            self._capped = True
        self._token_ttl = ttl
        self._renewable = bool(auth.get("renewable"))
        self._token_at = self.clock()

    def renew(self) -> None:
        """Renew the token (renew-self); log in afresh instead when it is not renewable, expired by
        our clock or near its max TTL, and when the renewal is refused."""
        with self._lock:
            now = self.clock()
            if not self._token or not self._renewable or self._capped or now >= self.token_expires_at:
                self.login()
                return
            self.load.take("renew", "auth/token/renew-self")
            try:
                resp = self._hvac.adapter.post(
                    "/v1/auth/token/renew-self", headers={"X-Vault-Token": self._token}
                )
            except (hvac.exceptions.VaultError, requests.RequestException) as exc:
                err = classify(exc, "renew", "auth/token/renew-self")
                self._note("renew", "auth/token/renew-self", exc)
                if isinstance(err, VaultUnavailable):
                    raise err from None
                log.warning("vault: token renewal refused (%s); logging in again", err.reason)
                self.login()
                return
            self._note("renew", "auth/token/renew-self")
            self._set_token(resp["auth"], login=False, warnings=resp.get("warnings"))
            self.renewals += 1
        log.debug("vault: token renewed (ttl %.0fs, capped %s)", self._token_ttl, self._capped)

    def _current_token(self) -> str:
        with self._lock:
            if not self._token or self.clock() >= self.token_expires_at:
                self.login()
            elif self.token_needs_renewal():
                self.renew()
            return self._token

    def _token_is_valid(self, token: str) -> bool:
        """After a 403: does the server still know this token? (It answers 403 to both.)"""
        try:
            self.load.take("lookup", "auth/token/lookup-self")
            self._hvac.adapter.get("/v1/auth/token/lookup-self", headers={"X-Vault-Token": token})
        except hvac.exceptions.Forbidden:
            return False
        except (hvac.exceptions.VaultError, requests.RequestException, VaultRateLimited):
            return True  # cannot tell: report the original denial
        return True

    # --- requests

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        op = OPS.get(method, method)
        path = path.strip("/")
        for attempt in (1, 2):
            token = self._current_token()
            try:
                return self._send(method, path, body, token, op)
            except VaultDenied:
                if attempt == 1 and not self._token_is_valid(token):
                    log.info("vault: the server no longer knows our token; logging in again")
                    with self._lock:
                        if self._token == token:
                            self._token = ""
                    continue
                raise
        raise VaultDenied(op, path, "permission denied")  # pragma: no cover - the loop returns or raises

    # --- tasks' tokens (agent.runner.vaulttoken)

    def create_token(
        self,
        role: str,
        policies: Sequence[str],
        *,
        meta: Mapping[str, str] | None = None,
        display_name: str = "",
    ) -> TokenGrant:
        """A new token for a task, created through the token role `role` (auth/token/create/<role>)
        with exactly `policies`. The role's allowed_policies bound what may be asked for, and make
        the token orphan, renewable and its TTL. No policies is refused here: through a role, an
        empty list would grant every policy the role allows."""
        path = f"auth/token/create/{role}"
        if not policies:
            raise VaultDenied("create token", path, "no policies asked for (a task token needs at least one)")
        body: dict[str, Any] = {"policies": list(policies), "meta": dict(meta or {})}
        if display_name:
            body["display_name"] = display_name
        # A 400 (e.g. a policy outside the role's allowed_policies) is a denial.
        return self._new_token("create token", path, lambda: self._request("post", path, body))

    def login_jwt(self, mount: str, role: str, jwt: str) -> TokenGrant:
        """A task's token from its workload identity (Nomad 1.7+'s way): a JWT auth login at
        auth/<mount>/login as `role` ("": the method's default_role). The login sends no token of
        the agent's: the JWT is the only credential; the role decides the policies. A refused JWT
        or role is VaultDenied."""
        path = f"auth/{mount.strip('/')}/login"
        body: dict[str, Any] = {"jwt": jwt}
        if role:
            body["role"] = role
        # A 400 (a bad audience, an unknown key or role, an expired JWT) is a denial.
        return self._new_token("login", path, lambda: self._send("post", path, body, "", op="login"))

    def _new_token(self, op: str, path: str, call: Callable[[], dict[str, Any]]) -> TokenGrant:
        """The task's token `call` answers with; Vault's 400 is VaultDenied (the request was refused
        for what it asked), anything else as raised."""
        granted_at = self.clock()
        try:
            resp = call()
        except VaultError as exc:
            if type(exc) is VaultError:
                raise VaultDenied(op, path, exc.reason) from None
            raise
        auth = resp.get("auth") or {}
        if not auth.get("client_token"):
            raise VaultError(op, path, "the response holds no token")
        return grant(auth, granted_at, resp.get("warnings"))

    def revoke_accessor(self, accessor: str) -> None:
        """Revoke a task's token by its accessor (auth/token/revoke-accessor). A token the server no
        longer knows is not an error (it answers with a warning)."""
        self._request("post", "auth/token/revoke-accessor", {"accessor": accessor})

    def token_client(self, token: str) -> TokenClient:
        """A client making requests with `token` (a task's), sharing this client's connections."""
        return TokenClient(
            self.address,
            token,
            timeout=self.timeout,
            clock=self.clock,
            hvac_client=self._hvac,
            load=self.load,
        )
