"""An artifact's download (agent.getter.fetch) against real servers on loopback, as an attacker
serves it (issue 51): a name that resolves to a checked address is connected to at that address,
never resolved again (DNS rebinding), with the Host header, TLS server name and certificate check of
the name; a redirect is checked and connected the same way and takes the jobspec's credentials to
another host only as Go's client does; a server trickling a byte at a time meets the whole
download's deadline (Nomad's artifact `http_read_timeout`), not only the per-read timeout.

The servers listen on 127.0.0.2 while the URLs name `localhost` (127.0.0.1 to the system's
resolver): only a download that connects to the address it checked reaches them."""

from __future__ import annotations

import dataclasses
import http.server
import io
import json
import queue
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.client.offload import threaded
from agent.command.config import load_config
from agent.command.wiring import CoreSettings
from agent.errors import ConfigError
from agent.getter.fetch import ArtifactUnavailable, FetchLimits, download
from agent.getter.getter import HttpGetter
from agent.getter.plan import ArtifactError
from agent.runner.alloc import AllocRunner
from agent.structs.model import Artifact, Group, Job, RestartPolicy, Task
from agent.structs.records import AllocRecord, AllocStatus
from lab.waits import wait_until
from tests.fakes import FakeNode
from tests.pki import TestCA

LOOPBACK = ("127.0.0.0/8",)  # named explicitly: the default list allows no host
ADDRESS = "127.0.0.2"
TRICKLE_BYTES = 30  # one every TRICKLE_PERIOD: the server wants 3 s
TRICKLE_PERIOD = 0.1


class Server:
    """Serves `files`, answers `redirects`, trickles /slow (body) and /slow-headers; records every
    request's path and headers."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        files, redirects, seen = self.files, self.redirects, self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, dict(self.headers.items())))
                if self.path in redirects:
                    self.send_response(302)
                    self.send_header("Location", redirects[self.path])
                    self.end_headers()
                elif self.path == "/slow-headers":
                    self._trickle(b"HTTP/1.1 200 OK\r\nX-Padding: " + b"x" * TRICKLE_BYTES)
                elif self.path == "/slow":
                    self.send_response(200)
                    self.send_header("Content-Length", str(TRICKLE_BYTES))
                    self.end_headers()
                    self._trickle(b"x" * TRICKLE_BYTES)
                else:
                    body = files.get(self.path)
                    self.send_response(200 if body is not None else 404)
                    self.send_header("Content-Length", str(len(body or b"")))
                    self.end_headers()
                    self.wfile.write(body or b"")

            def _trickle(self, data: bytes) -> None:
                """The attack: a byte per read, never a pause as long as a read timeout."""
                try:
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        time.sleep(TRICKLE_PERIOD)
                except OSError:  # the download gave up
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((ADDRESS, 0), Handler)
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


class Lookups:
    """The resolver: `localhost` to 127.0.0.2, counted."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, host: str) -> list[str]:
        self.asked.append(host)
        return [ADDRESS] if host == "localhost" else [host]


def _get(url: str, limits: FetchLimits | None = None, **kw: object) -> tuple[bytes, Lookups]:
    out, lookups = io.BytesIO(), Lookups()
    limits = limits or FetchLimits(allowed_hosts=LOOPBACK)
    host = urllib.parse.urlsplit(url).hostname or ""
    download(url, host, dict(kw.pop("headers", {})), out, limits, None, lookup=lookups, **kw)  # type: ignore[arg-type]
    return out.getvalue(), lookups


def test_the_checked_address_is_the_one_connected_to(server: Server) -> None:
    """One resolution for the check and the connect: `localhost` resolved (once) to 127.0.0.2 is
    fetched from 127.0.0.2, with `Host: localhost:<port>`; a second resolution would reach
    127.0.0.1, where nothing listens."""
    server.files["/conf"] = b"checked"
    body, lookups = _get(f"http://localhost:{server.port}/conf")
    assert body == b"checked"
    assert lookups.asked == ["localhost"]
    assert server.seen[0][1]["Host"] == f"localhost:{server.port}"


def test_a_redirect_is_checked_and_connected_the_same_way(server: Server) -> None:
    """Every hop is resolved once, checked and connected to its checked address; the jobspec's
    Authorization goes along to the same host, not to another one (Go's client)."""
    server.files["/there"] = b"followed"
    server.redirects["/here"] = f"http://localhost:{server.port}/there"
    body, lookups = _get(f"http://{ADDRESS}:{server.port}/here", headers={"Authorization": "Bearer t"})
    assert body == b"followed" and lookups.asked == [ADDRESS, "localhost"]
    assert [path for path, _ in server.seen] == ["/here", "/there"]
    assert server.seen[0][1].get("Authorization") == "Bearer t"
    assert "Authorization" not in server.seen[1][1], "credentials to another host"
    # a hop to an address the list leaves out is refused before any connection: 127.0.0.3, outside the
    # list 127.0.0.2/32 (loopback, so nothing could leave this machine were it connected to)
    server.redirects["/away"] = "http://127.0.0.3/x"
    narrow = FetchLimits(allowed_hosts=(f"{ADDRESS}/32",))
    with pytest.raises(ArtifactError, match=r"127\.0\.0\.3 .* allowed only by such a network named in"):
        _get(f"http://localhost:{server.port}/away", narrow)


def test_tls_checks_the_urls_name_on_the_checked_address(tmp_path: Path) -> None:
    """https to `localhost` at 127.0.0.2: the server name sent and the certificate checked are the
    URL's name (the certificate names localhost and 127.0.0.1, not 127.0.0.2)."""
    ca = TestCA(tmp_path)
    issued = ca.issue("artifacts", server=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)
    server = Server(context)
    try:
        server.files["/conf"] = b"over tls"
        body, _ = _get(f"https://localhost:{server.port}/conf", cafile=str(ca.ca_file))
        assert body == b"over tls"
        with pytest.raises(ArtifactUnavailable, match=r"hostname '127\.0\.0\.2' doesn't match"):
            _get(f"https://{ADDRESS}:{server.port}/conf", cafile=str(ca.ca_file))
    finally:
        server.close()


@pytest.mark.parametrize("path", ["/slow", "/slow-headers"])
def test_a_trickling_server_meets_the_whole_downloads_deadline(server: Server, path: str) -> None:
    """A byte every 0.1 s never trips the per-read timeout: the download's deadline ends it (Nomad's
    artifact http_read_timeout: the duration in which a download must complete)."""
    limits = FetchLimits(allowed_hosts=LOOPBACK, timeout=5.0, deadline=0.5)
    started = time.monotonic()
    says = r"did not complete within the client's artifact_http_read_timeout of 0\.5s"
    with pytest.raises(ArtifactUnavailable, match=says):
        _get(f"http://localhost:{server.port}{path}", limits)
    held = time.monotonic() - started
    print(f"{path}: refused after {held:.2f} s (the server wanted {TRICKLE_BYTES * TRICKLE_PERIOD:.1f} s)")


def test_the_deadline_is_the_client_configs_artifact_http_read_timeout(tmp_path: Path) -> None:
    """Nomad's client `artifact { http_read_timeout = "30m" }`: the agent's config key, in seconds."""
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"node_name": "c"}))
    assert CoreSettings.from_config(load_config(path)).artifacts.fetch_limits.deadline == 1800.0
    path.write_text(json.dumps({"node_name": "c", "artifact_http_read_timeout": 90}))
    assert CoreSettings.from_config(load_config(path)).artifacts.fetch_limits.deadline == 90.0
    path.write_text(json.dumps({"node_name": "c", "artifact_http_read_timeout": "30m"}))
    with pytest.raises(ConfigError, match=r"agent\.json: artifact_http_read_timeout: '30m' is not a number"):
        load_config(path)


def test_a_cancel_ends_a_download_at_once(server: Server) -> None:
    """The alloc's stop sets the download's cancel event (Nomad cancels the artifact hook's context):
    the trickle, which would complete after 3 s well within its 60 s deadline, ends as cancelled."""
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    limits = FetchLimits(allowed_hosts=LOOPBACK, timeout=5.0, deadline=60.0)
    with pytest.raises(ArtifactError, match="cancelled: the alloc is being stopped") as caught:
        _get(f"http://localhost:{server.port}/slow", limits, cancel=cancel)
    assert not isinstance(caught.value, ArtifactUnavailable), "a cancel is not worth a retry"


def test_a_stop_ends_the_artifact_download_it_would_wait_behind(server: Server, tmp_path: Path) -> None:
    """A job stop while its artifact trickles in: the download is cancelled, the alloc completes,
    the task never starts and no "Failed Artifact Download" is reported. Before, the stop waited in
    the alloc's queue behind the download (up to its deadline, 30 minutes by default), which then
    finished and wrote the file."""
    node = FakeNode(tmp_path)
    posted: queue.Queue[Callable[[], None]] = queue.Queue()
    task = Task(
        name="t", driver="exec", artifacts=(Artifact(f"http://{ADDRESS}:{server.port}/slow", "local/"),)
    )
    group = Group(name="g", tasks=(task,), network=None, restart=RestartPolicy(attempts=0, mode="fail"))
    job = Job(id="art", groups=(group,), type="batch")
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-0000000000b8", job="art", group="g")
    getter = HttpGetter(allowed_hosts=(f"{ADDRESS}/32",), fetch_limits=FetchLimits(deadline=60.0))
    deps = dataclasses.replace(node.deps(), getter=getter, offload=threaded(posted.put))
    runner = AllocRunner(deps, rec, job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()  # the download goes on in a thread; its continuation comes back through `posted`
    wait_until(lambda: (True if server.seen else None, "no request yet"), timeout=10, what="the download")
    runner.stop()

    def stopped() -> tuple[bool | None, str]:
        while not posted.empty():
            posted.get()()  # this test's main loop
        return (True if runner.rec.status is AllocStatus.COMPLETE else None), str(runner.rec.status)

    wait_until(stopped, timeout=TRICKLE_BYTES * TRICKLE_PERIOD * 3, interval=0.05, what="the alloc complete")
    events = [e.type for e in node.store.events(runner.id, "t")]
    assert "Failed Artifact Download" not in events and "Started" not in events, events
    assert not node.exec.starts
    assert not (runner.tasks[task.name].task_dir / "local" / "slow").exists(), (
        "the download was not cancelled"
    )
