"""The docker driver pulls as Nomad's driver pulls, from a real registry (root): Debian's
docker-registry (Distribution 2.8) on 127.0.0.1 with a temporary CA and htpasswd auth, a lab image
pushed into it; the driver's start pulls it with the `Driver` event "Downloading image", uses it
without a pull the next time, pulls it again with force_pull, fails on bad credentials (with and
without auth_soft_fail) and on a registry that never answers (image_pull_timeout). Nothing here
reaches past the loopback interface."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import docker
import pytest
import requests

from agent.command.plugins import DockerPlugin
from agent.drivers.base import DriverError, TaskContext
from agent.drivers.docker import DockerDriver
from agent.drivers.pullconfig import PullConfig
from agent.structs.model import Task
from lab.waits import wait_until
from tests.agent_lab import build_workload_images, why_not_ready

pytestmark = [pytest.mark.root]
REASON = why_not_ready() or (None if shutil.which("docker-registry") else "docker-registry is not installed")
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

SOURCE = "fieldlab/busybox:latest"  # built here by the lab's workload_images role
USER, PASSWORD = "fieldlab", "s3cret-" + uuid.uuid4().hex[:8]
READY = 20.0  # seconds the registry may take to answer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tls(d: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 (openssl)."""

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=d)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "1", "-subj", "/CN=fieldlab test registry CA")  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "registry.key", "-out", "registry.csr",
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    run("openssl", "x509", "-req", "-in", "registry.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "registry.crt", "-days", "1", "-extfile", "san.ext")  # fmt: skip


@dataclass
class Registry:
    port: int
    proc: subprocess.Popen[bytes]
    ca: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    build_workload_images(tmp_path_factory.mktemp("images"))
    d = tmp_path_factory.mktemp("registry")
    _tls(d)
    (d / "htpasswd").write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()}\n")
    port = _free_port()
    (d / "config.yml").write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {d / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {d / 'registry.crt'}\n"
        f"    key: {d / 'registry.key'}\n"
        f"auth:\n  htpasswd:\n    realm: test\n    path: {d / 'htpasswd'}\n"
    )
    log = (d / "registry.log").open("wb")
    proc = subprocess.Popen(["docker-registry", "serve", str(d / "config.yml")], stdout=log, stderr=log)
    reg = Registry(port, proc, d / "ca.pem")

    def answering() -> tuple[bool | None, str]:
        assert proc.poll() is None, (d / "registry.log").read_text()[-2000:]
        try:
            code = requests.get(f"https://{reg.host}/v2/", verify=str(reg.ca), timeout=2).status_code
        except requests.ConnectionError as exc:
            return None, str(exc)
        return (code == 401) or None, f"HTTP {code}"

    wait_until(answering, timeout=READY, what="the registry to answer /v2/ (401: auth on)", interval=0.1)
    try:
        yield reg
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@dataclass
class Pushed:
    image: str
    driver: DockerDriver
    events: list[tuple[str, dict[str, str]]] = field(default_factory=list)


@pytest.fixture(scope="module")
def pushed(registry: Registry) -> Iterator[Pushed]:
    """The lab's busybox pushed to the registry, then removed from the engine under that name."""
    client = docker.from_env(timeout=60)
    repo = f"{registry.host}/fieldlab/pulled"
    client.images.get(SOURCE).tag(repo, "v1")
    out = client.images.push(repo, "v1", auth_config={"username": USER, "password": PASSWORD})
    assert '"error"' not in out, out
    client.images.remove(f"{repo}:v1")
    driver = DockerDriver(node_name="client9", plugin=DockerPlugin(pull=PullConfig()))
    try:
        yield Pushed(f"{repo}:v1", driver)
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(f"{repo}:v1", force=True)


def _ctx(tmp: Path, config: dict[str, Any], events: list[tuple[str, dict[str, str]]]) -> TaskContext:
    def emit(message: str, details: Mapping[str, str]) -> None:
        events.append((message, dict(details)))

    task = Task("t", "docker", config={"command": "sleep", "args": ["300"], **config})
    return TaskContext(
        job="pull", group="g", alloc_id=str(uuid.uuid4()), task=task, task_dir=tmp, env={}, driver_event=emit
    )


@contextlib.contextmanager
def started(driver: DockerDriver, ctx: TaskContext) -> Iterator[str]:
    handle = driver.start(ctx)
    try:
        yield handle.id
    finally:
        driver.remove_container(handle.id)


AUTH = [{"username": USER, "password": PASSWORD}]


def test_a_missing_image_is_pulled_with_nomads_event_then_used_without_a_pull(
    pushed: Pushed, tmp_path: Path
) -> None:
    events: list[tuple[str, dict[str, str]]] = []
    with started(pushed.driver, _ctx(tmp_path, {"image": pushed.image, "auth": AUTH}, events)) as cid:
        assert pushed.driver.client.containers.get(cid).status == "running"
    assert events == [("Downloading image", {"image": pushed.image})]
    again: list[tuple[str, dict[str, str]]] = []
    with started(pushed.driver, _ctx(tmp_path, {"image": pushed.image, "auth": AUTH}, again)):
        pass
    assert again == [], "an image on the node whose tag is not latest is not pulled again"
    forced: list[tuple[str, dict[str, str]]] = []
    with started(
        pushed.driver, _ctx(tmp_path, {"image": pushed.image, "auth": AUTH, "force_pull": True}, forced)
    ):
        pass
    assert forced == [("Downloading image", {"image": pushed.image})]


def test_bad_credentials_fail_the_pull_whatever_auth_soft_fail_says(pushed: Pushed, tmp_path: Path) -> None:
    """The registry refusing them is the pull's error (recoverable, as Nomad's recoverablePullError);
    auth_soft_fail covers only credentials that cannot be found (the next test)."""
    image = pushed.image.replace(":v1", ":absent-locally")
    for soft in (False, True):
        bad = {"image": image, "auth": [{"username": USER, "password": "wrong"}], "auth_soft_fail": soft}
        events: list[tuple[str, dict[str, str]]] = []
        with pytest.raises(DriverError) as info:
            pushed.driver.start(_ctx(tmp_path, bad, events))
        assert info.value.reason.startswith(f"Failed to pull `{image}`: ")
        assert "unauthorized" in info.value.reason or "authentication required" in info.value.reason
        assert info.value.recoverable and events[0][0] == "Downloading image"


def test_credentials_that_cannot_be_found_fail_unless_auth_soft_fail(pushed: Pushed, tmp_path: Path) -> None:
    driver = DockerDriver(plugin=DockerPlugin(pull=PullConfig(auth_config=str(tmp_path / "absent.json"))))
    events: list[tuple[str, dict[str, str]]] = []
    with pytest.raises(DriverError, match="Failed to find docker auth for repo") as info:
        driver.start(_ctx(tmp_path, {"image": pushed.image, "force_pull": True}, events))
    assert events == [] and not info.value.recoverable
    with pytest.raises(DriverError) as soft:
        driver.start(
            _ctx(tmp_path, {"image": pushed.image, "force_pull": True, "auth_soft_fail": True}, events)
        )
    assert events == [("Downloading image", {"image": pushed.image})], "the pull went on without credentials"
    assert soft.value.reason.startswith(f"Failed to pull `{pushed.image}`: ")
    # the registry's 401 (dockerd treats a loopback registry as insecure and then tries plain HTTP
    # too, whose reset is the error it reports); never the missing credentials file
    assert "Failed to find docker auth" not in soft.value.reason


class Stall:
    """A TCP server on loopback that accepts and never answers (a registry that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                self.conns.append(self.sock.accept()[0])

    def close(self) -> None:
        self.stop.set()
        for c in [*self.conns, self.sock]:
            c.close()


def test_image_pull_timeout_ends_a_pull_from_a_registry_that_never_answers(
    pushed: Pushed, tmp_path: Path
) -> None:
    stall = Stall()
    image = f"127.0.0.1:{stall.port}/fieldlab/hang:1"
    events: list[tuple[str, dict[str, str]]] = []
    start = time.monotonic()
    try:
        with pytest.raises(DriverError) as info:
            pushed.driver.start(_ctx(tmp_path, {"image": image, "image_pull_timeout": "2s"}, events))
    finally:
        stall.close()
    took = time.monotonic() - start
    assert info.value.reason == f"Failed to pull `{image}`: context deadline exceeded (image_pull_timeout 2s)"
    assert info.value.recoverable and events == [("Downloading image", {"image": image})]
    assert 2.0 <= took < 8.0, took
    assert stall.conns, "the engine did reach the stalled registry"
