"""The image-pull fault flags (agent.fieldbugs.faults, the catalogue's `images` family): each flag's pure
decision
in agent.drivers.pullconfig with the bug and without, and what the Puller then does over a fake engine;
the docker driver hands its Bugs to its Puller (the flags would otherwise be silent no-ops)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from agent.drivers.base import DriverError
from agent.drivers.docker import DockerDriver
from agent.drivers.dockerpull import Puller
from agent.drivers.pullconfig import PullConfig, TaskPull, downloading_event, engine_auth, pull_timeout
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from lab.waits import wait_until
from tests.test_dockerpull import WAIT, Events, FakeApi, FakeStream

AUTH_BUG = Bugs(pull_auth_not_encoded=True)
TIMEOUT_BUG = Bugs(image_pull_timeout_ignored=True)
EVENT_BUG = Bugs(downloading_event_after_pull=True)


def puller(api: FakeApi, bugs: Bugs, plugin: PullConfig | None = None) -> Puller:
    return Puller(api, plugin or PullConfig(), bugs=bugs, check_interval=0.02)


def test_the_driver_hands_its_fault_flags_to_its_puller() -> None:
    assert DockerDriver(bugs=TIMEOUT_BUG).puller.bugs is TIMEOUT_BUG
    assert DockerDriver().puller.bugs == NO_BUGS


# -- nomad-24181: pull-auth-not-encoded --------------------------------------------------------------------
def test_the_engine_gets_the_credentials_unless_pull_auth_not_encoded() -> None:
    creds = {"username": "fieldlab", "password": "pw"}
    assert engine_auth(creds, NO_BUGS) == creds
    assert engine_auth(None, NO_BUGS) == {}
    assert engine_auth(creds, AUTH_BUG) == {}


def test_with_pull_auth_not_encoded_the_plugins_auth_config_reaches_no_pull(tmp_path: Path) -> None:
    cfg = tmp_path / "registry-auth.json"
    cfg.write_text('{"auths": {"https://index.docker.io/v1/": {"username": "fieldlab", "password": "pw"}}}')
    plugin = PullConfig(auth_config=str(cfg))
    fixed, buggy = FakeApi(set()), FakeApi(set())
    puller(fixed, NO_BUGS, plugin).ensure("fieldlab/busybox:latest", TaskPull(), Events(), "task app")
    puller(buggy, AUTH_BUG, plugin).ensure("fieldlab/busybox:latest", TaskPull(), Events(), "task app")
    assert fixed.opened[0][2] == {"username": "fieldlab", "password": "pw"}
    assert buggy.opened[0][2] == {}, "the task's credentials must not reach the engine with the bug"
    task = TaskPull(auth={"username": "t", "password": "p"})
    puller(buggy, AUTH_BUG).ensure("r:5000/x:1", task, Events(), "task app")
    assert buggy.opened[1][2] == {}


# -- nomad-24991: image-pull-timeout-ignored ---------------------------------------------------------------
def test_the_pulls_bound_is_the_tasks_then_the_plugins_unless_image_pull_timeout_ignored() -> None:
    assert pull_timeout(5.0, 300.0, NO_BUGS) == 5.0
    assert pull_timeout(None, 300.0, NO_BUGS) == 300.0
    assert pull_timeout(5.0, 300.0, TIMEOUT_BUG) == math.inf
    assert pull_timeout(None, 300.0, TIMEOUT_BUG) == math.inf


def test_with_image_pull_timeout_ignored_a_stalled_pull_outlives_its_timeout() -> None:
    opts = TaskPull(image_pull_timeout=0.2)
    fixed = FakeApi(set(), FakeStream([], stall=True))
    start = time.monotonic()
    with pytest.raises(DriverError, match=r"context deadline exceeded \(image_pull_timeout 0.2s\)"):
        puller(fixed, NO_BUGS).ensure("r:5000/x:1", opts, Events(), "task app")
    assert time.monotonic() - start < 2.0 and fixed.stream.cancelled.is_set()

    buggy = FakeApi(set(), FakeStream([], stall=True))
    failed: list[BaseException] = []

    def start_task() -> None:
        try:
            puller(buggy, TIMEOUT_BUG).ensure("r:5000/x:1", opts, Events(), "task app")
        except DriverError as exc:
            failed.append(exc)

    t = threading.Thread(target=start_task, daemon=True)
    t.start()
    t.join(1.0)  # five times its image_pull_timeout: the pull must still be going
    assert t.is_alive() and not failed and not buggy.stream.cancelled.is_set()
    assert buggy.opened[0][3] == PullConfig().pull_activity_timeout  # the engine read keeps that bound
    buggy.stream.cancel()  # the engine gives up at last: the stream ends, the start goes on
    t.join(WAIT)
    assert not t.is_alive()


# -- nomad-2165: downloading-event-after-pull --------------------------------------------------------------
def test_the_downloading_event_comes_before_the_pull_unless_downloading_event_after_pull() -> None:
    assert downloading_event(NO_BUGS) == "before"
    assert downloading_event(EVENT_BUG) == "after"


@pytest.mark.parametrize(("bugs", "during"), [(NO_BUGS, ["Downloading image"]), (EVENT_BUG, [])])
def test_what_a_task_pending_on_a_pull_shows(bugs: Bugs, during: list[str]) -> None:
    gate = threading.Event()
    api, ev = FakeApi(set(), FakeStream([{"status": "Pull complete", "id": "l1"}], gate=gate)), Events()
    t = threading.Thread(target=puller(api, bugs).ensure, args=("r/x:1", TaskPull(), ev, "task app"))
    t.start()
    wait_until(lambda: (api.opened or None, "no pull yet"), timeout=WAIT, what="the pull", interval=0.01)
    assert [m for m, _ in ev.got] == during  # the pull is under way (held by the gate)
    gate.set()
    t.join(WAIT)
    assert ev.got == [("Downloading image", {"image": "r/x:1"})]


def test_with_downloading_event_after_pull_a_failed_pull_shows_the_event_before_its_failure() -> None:
    api, ev = FakeApi(set(), FakeStream([{"error": "manifest unknown"}])), Events()
    with pytest.raises(DriverError, match="manifest unknown"):
        puller(api, EVENT_BUG).ensure("r/x:1", TaskPull(), ev, "task app")
    assert ev.got == [("Downloading image", {"image": "r/x:1"})]
