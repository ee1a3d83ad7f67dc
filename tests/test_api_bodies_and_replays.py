"""The API against hostile bodies and reused Idempotency-Keys (issue 32, item 5):

- a request body nested thousands of levels deep is a 400 naming it, never a 500 with a traceback;
- an Idempotency-Key's answer is kept from its answer on, so a request that ran longer than the keep
  time still answers its retry instead of acting twice;
- an Idempotency-Key is the caller's own: another identity reusing it gets its own action, never the
  first caller's answer.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.api.handler import Handler, Response, json_response
from agent.api.idempotency import Replays
from agent.api.server import ApiServer
from agent.command.config import Config, TLSConfig
from tests.pki import Issued, TestCA
from tests.test_agent_api import OPERATOR, _ctx, _decoded, _free_port, stand_in_routes

SECOND = "ci.operator.fieldlab"  # a second identity the config allows
DEEP = 100_000


@dataclass
class Api:
    ca: TestCA
    port: int
    server: ApiServer
    certs: dict[str, Issued]

    def post(self, path: str, body: bytes, *, who: str = OPERATOR, key: str | None = None) -> tuple[int, Any]:
        headers = {"Idempotency-Key": key} if key else {}
        req = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}", data=body, method="POST", headers=headers
        )
        cert = self.certs[who]
        try:
            with urllib.request.urlopen(req, context=_ctx(self.ca, cert.cert, cert.key), timeout=10) as resp:
                return resp.status, _decoded(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decoded(exc.read())


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Callable[[list[tuple[str, str, Handler]]], Api]]:
    servers: list[ApiServer] = []

    def start(handlers: list[tuple[str, str, Handler]]) -> Api:
        ca = TestCA(tmp_path)
        srv = ca.issue("client1.agent.fieldlab", server=True)
        cfg = Config(
            node_name="client1",
            data_dir=tmp_path / "data",
            bind_address="127.0.0.1",
            port=_free_port(),
            tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
            api_allowed_identities=(OPERATOR, SECOND),
        )
        server = ApiServer(cfg, {}, handlers)
        server.start()
        servers.append(server)
        certs = {who: ca.issue(who, server=False) for who in (OPERATOR, SECOND)}
        return Api(ca, server.port, server, certs)

    yield start
    for server in servers:
        server.stop(5)


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert all(r.exc_info is None and r.levelno < logging.ERROR for r in caplog.records), [
        r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
    ]


# -- bodies nested too deeply -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/jobs", b"[" * DEEP + b"]" * DEEP),
        ("/v1/jobs", b'{"a":' * DEEP + b"1" + b"}" * DEEP),
        (
            "/v1/jobs/parse",
            b'{"JobHCL": "job \\"x\\" {}", "Variables": {"v": ' + b"[" * DEEP + b"]" * DEEP + b"}}",
        ),
        ("/v1/validate/job", b'{"Job": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        ("/v1/client/allocation/abcdef12/restart", b'{"TaskName": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        ("/v1/client/allocation/abcdef12/signal", b"[" * DEEP),
    ],
    ids=["array", "object", "variables", "validate", "restart", "signal-unclosed"],
)
def test_a_body_nested_too_deeply_is_a_400_naming_it_not_a_traceback(
    api: Callable[[list[tuple[str, str, Handler]]], Api],
    caplog: pytest.LogCaptureFixture,
    route: str,
    body: bytes,
) -> None:
    # The routes read the body before they touch the core: a stand-in core is enough.
    served = api(stand_in_routes())
    with caplog.at_level(logging.DEBUG, logger="agent"):
        status, out = served.post(route, body)
        # The same with an Idempotency-Key (the path through agent.api.idempotency).
        assert served.post(route, body, key="deep-1") == (status, out)
    assert status == 400 and "nested too deeply" in out, out  # Nomad's error: a plain-text reason
    _no_traceback(caplog)


def test_a_handler_that_recurses_too_deep_on_a_body_is_a_400_with_one_warning(
    api: Callable[[list[tuple[str, str, Handler]]], Api], caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever a handler does with a body (here: its own recursive walk of it), running out of stack
    on it answers 400, not 500, and logs one WARNING line without a traceback."""

    def depth(value: object) -> int:
        return 1 + max((depth(v) for v in value), default=0) if isinstance(value, list) else 0

    def walk(groups: tuple[str, ...], body: bytes) -> Response:
        return json_response(200, {"depth": depth(json.loads(body))})

    served = api([("POST", r"/v1/walk", walk)])
    assert served.post("/v1/walk", b"[[[]]]") == (200, {"depth": 3})
    with caplog.at_level(logging.DEBUG, logger="agent"):
        status, out = served.post("/v1/walk", b"[" * 900 + b"]" * 900)  # json reads it; the walk cannot
    assert status == 400 and "nested too deeply" in out["error"], out
    _no_traceback(caplog)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "/v1/walk" in warnings[0].getMessage()


# -- Idempotency-Key: kept while in flight and from the answer on --------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_kept_from_its_answer_on_so_a_request_longer_than_the_ttl_still_acts_once() -> None:
    """The first request runs 15 s with a 10 s keep time; its client gave up and retries right after
    it finished: the retry gets the first answer (once, not a second action). The entry goes 10 s
    after its answer."""
    clock = Clock()
    replays = Replays(ttl=10.0, clock=clock)
    runs: list[int] = []

    def long_action() -> Response:
        runs.append(1)
        clock.now += 15.0  # longer than the ttl
        return json_response(200, {"run": len(runs)})

    def quick_action() -> Response:
        runs.append(1)
        return json_response(200, {"run": len(runs)})

    fp = Replays.fingerprint("DELETE", "/v1/job/web?", b"")
    first, replayed = replays.answer("k-long", fp, long_action, caller=OPERATOR)
    assert not replayed
    clock.now += 1.0  # the retry, just after the answer
    again, replayed = replays.answer("k-long", fp, quick_action, caller=OPERATOR)
    assert replayed and again == first and len(runs) == 1, "the long request was carried out twice"
    clock.now += 9.5  # 10.5 s after the answer: gone, a new request under the key acts
    _, replayed = replays.answer("k-long", fp, quick_action, caller=OPERATOR)
    assert not replayed and len(runs) == 2


def test_a_key_still_in_flight_is_never_expired_nor_pushed_out_by_the_cap() -> None:
    """While the first request runs past the ttl and the cap is overrun by other keys, its retry
    still finds it and waits for its answer."""
    clock = Clock()
    replays = Replays(ttl=10.0, max_entries=2, clock=clock)
    entered, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow() -> Response:
        runs.append("slow")
        entered.set()
        assert release.wait(10)
        return json_response(200, {"slow": True})

    fp = Replays.fingerprint("PUT", "/v1/jobs?", b"{}")
    out: list[tuple[Response, bool]] = []
    first = threading.Thread(target=lambda: out.append(replays.answer("k-slow", fp, slow, caller=OPERATOR)))
    first.start()
    assert entered.wait(5)
    clock.now += 60.0
    for i in range(5):  # other keys, answered: over the cap of 2
        replays.answer(f"k-{i}", fp, lambda: json_response(200, {}), caller=OPERATOR)
    retry = threading.Thread(target=lambda: out.append(replays.answer("k-slow", fp, slow, caller=OPERATOR)))
    retry.start()
    deadline = 5.0
    while replays.replayed == 0 and deadline > 0:
        threading.Event().wait(0.01)
        deadline -= 0.01
    assert replays.replayed == 1, "the retry did not find the request in flight"
    release.set()
    first.join(5)
    retry.join(5)
    assert runs == ["slow"] and sorted(r for _, r in out) == [False, True]
    assert len(replays) <= 2


# -- Idempotency-Key: bound to the caller -------------------------------------------------------


def test_another_caller_reusing_a_key_gets_its_own_action_never_the_first_callers_answer(
    api: Callable[[list[tuple[str, str, Handler]]], Api],
) -> None:
    runs: list[str] = []

    def secret_for(groups: tuple[str, ...], body: bytes) -> Response:
        runs.append("run")
        return json_response(
            200, {"run": len(runs), "token-of-the-first-caller": "s3cr3t" * (len(runs) == 1)}
        )

    served = api([("POST", r"/v1/act", secret_for)])
    first = served.post("/v1/act", b"{}", key="k-shared")
    assert first == (200, {"run": 1, "token-of-the-first-caller": "s3cr3t"})
    # The same key and body from another identity: its own action, its own answer.
    other = served.post("/v1/act", b"{}", who=SECOND, key="k-shared")
    assert other == (200, {"run": 2, "token-of-the-first-caller": ""}), "another caller got the first answer"
    # Another body under that key from the other caller is not "a different request" of the first's.
    assert served.post("/v1/act", b'{"x": 1}', who=SECOND, key="k-other")[0] == 200
    # Each caller's own retry is still answered once.
    assert served.post("/v1/act", b"{}", key="k-shared") == first
    assert served.post("/v1/act", b"{}", who=SECOND, key="k-shared") == other
    assert runs == ["run"] * 3
    assert served.server.replays.replayed == 2
