"""The docker driver's image pull as Nomad's (agent.drivers.dockerpull, agent.drivers.pullconfig): when
it pulls, its events, its timeouts, auth and auth_soft_fail, a failed pull's recoverability; over a fake
engine (the real one: tests/test_registry_pull.py, root)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.command.config import load_config
from agent.drivers.base import DriverError
from agent.drivers.dockerpull import Puller, resolve_auth
from agent.drivers.pullconfig import (
    Progress,
    PullConfig,
    TaskPull,
    needs_pull,
    parse_image,
    pull_plugin,
    recoverable,
    registry_host,
)
from agent.nomadapi.taskstates import task_event
from lab.waits import wait_until

WAIT = 5.0  # seconds any test waits at most for a thread it started


class FakeStream:
    """The engine's pull messages: `messages`, then either the end or a stall until cancelled."""

    def __init__(
        self, messages: list[dict[str, Any]], stall: bool = False, gate: threading.Event | None = None
    ):
        self.messages, self.stall, self.gate = messages, stall, gate
        self.cancelled = threading.Event()
        self.on_end: Callable[[], object] = lambda: None

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        if self.gate is not None:
            self.gate.wait(WAIT)
        yield from self.messages
        if not self.stall and not any(m.get("error") for m in self.messages):
            self.on_end()
        if self.stall:
            self.cancelled.wait(WAIT)

    def cancel(self) -> None:
        self.cancelled.set()


class FakeApi:
    def __init__(self, local: set[str], stream: FakeStream | None = None) -> None:
        self.images = set(local)
        self.stream = stream or FakeStream([{"status": "Pull complete", "id": "l1"}])
        self.opened: list[tuple[str, str, dict[str, str], float]] = []

    def local(self, image: str) -> bool:
        return image in self.images

    def start_pull(self, repo: str, tag: str, auth: Mapping[str, str], activity: float) -> FakeStream:
        self.opened.append((repo, tag, dict(auth), activity))
        self.stream.on_end = lambda: self.images.add(f"{repo}:{tag}" if tag else repo)
        return self.stream


class Events:
    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, str]]] = []

    def __call__(self, message: str, details: Mapping[str, str]) -> None:
        self.got.append((message, dict(details)))


def puller(api: FakeApi, plugin: PullConfig | None = None, **kw: float) -> Puller:
    return Puller(api, plugin or PullConfig(), check_interval=kw.pop("check", 0.02), **kw)  # type: ignore[arg-type]


# -- when to pull -------------------------------------------------------------------------------------
def test_an_image_on_the_node_not_latest_is_used_without_a_pull_or_an_event() -> None:
    api, ev = FakeApi({"registry:5000/redis:7"}), Events()
    puller(api).ensure("registry:5000/redis:7", TaskPull(), ev, "task t")
    assert api.opened == [] and ev.got == []


def test_latest_force_pull_and_a_missing_image_pull_with_nomads_event() -> None:
    for image, opts in (
        ("busybox:latest", TaskPull()),
        ("busybox", TaskPull()),  # no tag: latest
        ("registry:5000/redis:7", TaskPull(force_pull=True)),
        ("registry:5000/absent:1", TaskPull()),
    ):
        api, ev = FakeApi({"busybox:latest", "busybox", "registry:5000/redis:7"}), Events()
        puller(api).ensure(image, opts, ev, "task t")
        repo, tag = parse_image(image)
        assert [(o[0], o[1]) for o in api.opened] == [(repo, tag)], image
        assert ev.got == [("Downloading image", {"image": f"{repo}:{tag}"})], image


def test_the_pull_decision_and_image_references_as_nomads() -> None:
    assert needs_pull("7", False, local=True) is False
    assert needs_pull("latest", False, local=True) is True
    assert needs_pull("7", True, local=True) is True
    assert needs_pull("7", False, local=False) is True
    assert parse_image("redis") == ("redis", "latest")
    assert parse_image("127.0.0.1:5000/a/b:1.2") == ("127.0.0.1:5000/a/b", "1.2")
    assert parse_image("127.0.0.1:5000/a") == ("127.0.0.1:5000/a", "latest")
    digest = "sha256:" + "a" * 64
    assert parse_image(f"r:5000/a@{digest}") == (f"r:5000/a@{digest}", "")
    with pytest.raises(ValueError, match="not a docker image reference"):
        parse_image("bad image")
    assert registry_host("redis") == registry_host("library/redis") == "docker.io"
    assert registry_host("server1.lab:5000/redis") == "server1.lab:5000"
    assert registry_host("localhost/x") == "localhost"


# -- failures, timeouts --------------------------------------------------------------------------------
def test_a_pull_error_is_a_recoverable_driver_error_unless_the_image_was_not_found() -> None:
    for error, ok in (
        ("manifest for r:5000/x:1 not found: manifest unknown: manifest unknown", True),
        ("Error: image library/x:1 not found", False),
        ("unauthorized: authentication required", True),
    ):
        api = FakeApi(set(), FakeStream([{"status": "Pulling"}, {"error": error}]))
        with pytest.raises(DriverError) as info:
            puller(api).ensure("r:5000/x:1", TaskPull(), Events(), "task t")
        assert info.value.reason == f"Failed to pull `r:5000/x:1`: {error}"
        assert info.value.recoverable is ok and recoverable(error) is ok
        assert str(info.value) == f"docker: task t: Failed to pull `r:5000/x:1`: {error}"


def test_image_pull_timeout_ends_a_pull_that_never_finishes() -> None:
    api = FakeApi(set(), FakeStream([], stall=True))
    start = time.monotonic()
    with pytest.raises(DriverError, match=r"context deadline exceeded \(image_pull_timeout 0.3s\)") as info:
        puller(api).ensure("r:5000/x:1", TaskPull(image_pull_timeout=0.3), Events(), "task t")
    assert 0.3 <= time.monotonic() - start < 2.0
    assert info.value.recoverable and api.stream.cancelled.is_set()


def test_the_plugins_image_pull_timeout_is_the_default_and_the_tasks_wins() -> None:
    api = FakeApi(set(), FakeStream([], stall=True))
    with pytest.raises(DriverError, match=r"image_pull_timeout 0.2s"):
        puller(api, PullConfig(image_pull_timeout=0.2)).ensure("r/x:1", TaskPull(), Events(), "t")
    api = FakeApi(set(), FakeStream([], stall=True))
    with pytest.raises(DriverError, match=r"image_pull_timeout 0.1s"):
        puller(api, PullConfig(image_pull_timeout=30)).ensure(
            "r/x:1", TaskPull(image_pull_timeout=0.1), Events(), "t"
        )


def test_pull_activity_timeout_ends_a_pull_with_no_progress_before_the_whole_timeout() -> None:
    api = FakeApi(set(), FakeStream([{"status": "Pulling fs layer", "id": "l1"}], stall=True))
    start = time.monotonic()
    with pytest.raises(DriverError, match=r"no progress for 0.3s: pull_activity_timeout") as info:
        puller(api, PullConfig(pull_activity_timeout=0.3)).ensure(
            "r:5000/x:1", TaskPull(image_pull_timeout=30), Events(), "task t"
        )
    assert time.monotonic() - start < 3.0 and info.value.recoverable
    assert "Pulled 0/1" in info.value.reason and api.stream.cancelled.is_set()
    assert api.opened[0][3] == 0.3, "the engine read times out at the activity timeout too"


def test_a_slow_pull_reports_its_progress_as_nomads_event() -> None:
    gate = threading.Event()
    msgs: list[dict[str, Any]] = [
        {"status": "Downloading", "id": "l1", "progressDetail": {"current": 512, "total": 2048}},
        {"status": "Pull complete", "id": "l2"},
    ]
    api, ev = FakeApi(set(), FakeStream(msgs, gate=gate)), Events()
    p = puller(api, slow_interval=0.1)
    t = threading.Thread(target=p.ensure, args=("r/x:1", TaskPull(), ev, "t"))
    t.start()
    wait_until(
        lambda: (any(m.startswith("Docker image pull progress") for m, _ in ev.got) or None, str(ev.got)),
        timeout=WAIT,
        what="the pull's progress event",
        interval=0.02,
    )
    gate.set()
    t.join(WAIT)
    assert ("Docker image pull progress: No progress", {"image": "r/x:1"}) in ev.got
    prog = Progress()
    for m in msgs:
        prog.add(m)
    assert prog.text() == "Pulled 1/2 (512B/2KiB) layers: 0 waiting/1 pulling"


def test_concurrent_pulls_of_one_image_are_one_pull() -> None:
    gate = threading.Event()
    api = FakeApi(set(), FakeStream([{"status": "Pull complete", "id": "l"}], gate=gate))
    p, evs = puller(api), [Events(), Events()]
    threads = [threading.Thread(target=p.ensure, args=("r/x:1", TaskPull(), e, "t")) for e in evs]
    for t in threads:
        t.start()
    wait_until(
        lambda: (all(e.got for e in evs) or None, str([e.got for e in evs])),
        timeout=WAIT,
        what="both starts' Downloading image events",
        interval=0.01,
    )
    gate.set()
    for t in threads:
        t.join(WAIT)
    assert len(api.opened) == 1 and all(e.got[0][0] == "Downloading image" for e in evs)


# -- auth -------------------------------------------------------------------------------------------------
def test_the_tasks_auth_is_sent_as_nomad_sends_it() -> None:
    api = FakeApi(set())
    opts = TaskPull(auth={"username": "lab", "password": "pw", "server_address": "r:5000"})
    puller(api).ensure("r:5000/x:1", opts, Events(), "t")
    assert api.opened[0][2] == {"username": "lab", "password": "pw"}


def test_the_plugins_docker_config_gives_credentials_by_registry(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    encoded = base64.b64encode(b"lab:secret").decode()
    cfg.write_text(json.dumps({"auths": {"https://r:5000": {"auth": encoded}, "other:1": {"auth": "eDp5"}}}))
    plugin = PullConfig(auth_config=str(cfg))
    assert resolve_auth({}, plugin, "r:5000/x") == {"username": "lab", "password": "secret"}
    assert resolve_auth({}, plugin, "elsewhere:5000/x") is None
    assert resolve_auth({"username": "t"}, plugin, "r:5000/x") == {"username": "t", "password": ""}


def test_auth_that_cannot_be_read_fails_the_start_unless_auth_soft_fail(tmp_path: Path) -> None:
    plugin = PullConfig(auth_config=str(tmp_path / "absent.json"))
    api, ev = FakeApi(set()), Events()
    with pytest.raises(DriverError, match="Failed to find docker auth for repo 'r:5000/x'") as info:
        puller(api, plugin).ensure("r:5000/x:1", TaskPull(), ev, "t")
    assert api.opened == [] and ev.got == [] and not info.value.recoverable
    puller(api, plugin).ensure("r:5000/x:1", TaskPull(auth_soft_fail=True), ev, "t")
    assert api.opened[0][2] == {} and ev.got[0][0] == "Downloading image"


# -- config and the event as Nomad shows it -------------------------------------------------------------
def test_the_plugins_pull_settings_with_nomads_names_defaults_and_checks(tmp_path: Path) -> None:
    assert pull_plugin({}) == (PullConfig(300.0, 120.0), [])
    got, bad = pull_plugin(
        {"image_pull_timeout": "1m", "pull_activity_timeout": "90s", "auth": {"config": "/c"}}
    )
    assert (got, bad) == (PullConfig(60.0, 90.0, "/c", ""), [])
    assert pull_plugin({"pull_activity_timeout": "30s"})[1] == [
        ("pull_activity_timeout", "pull_activity_timeout is less than minimum, 1m0s")
    ]
    assert pull_plugin({"image_pull_timeout": "soon"})[1][0][1].startswith(
        "failed to parse 'image_pull_timeout'"
    )
    p = tmp_path / "config.json"
    docker = {"config": {"pull_activity_timeout": "3m", "auth": {"config": "/etc/docker-auth.json"}}}
    p.write_text(
        json.dumps({"node_name": "n1", "data_dir": str(tmp_path / "d"), "plugin": {"docker": docker}})
    )
    assert load_config(p).plugin.pull == PullConfig(
        pull_activity_timeout=180.0, auth_config="/etc/docker-auth.json"
    )


class _Ev:
    def __init__(self, type_: str, message: str, details: dict[str, Any]) -> None:
        self.type, self.message, self.details, self.time, self.task = type_, message, details, 1.0, "t"


def test_a_driver_event_shows_as_nomads_driver_message() -> None:
    out = task_event(_Ev("Driver", "Downloading image", {"image": "r:5000/x:1"}))
    assert (out["Type"], out["DriverMessage"], out["DisplayMessage"]) == (
        "Driver",
        "Downloading image",
        "Downloading image",
    )
    assert out["Details"] == {"image": "r:5000/x:1"}
