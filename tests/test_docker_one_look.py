"""The docker driver's read window at restore (`one_look`), on a real dockerd: one listing of the
managed containers, each existing container inspected once however many questions are asked about it,
a gone one not inspected at all, and the answers the same as outside the window (root)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent.drivers.base import LABEL_MANAGED, TaskHandle
from agent.drivers.docker import DockerDriver
from lab.waits import wait_until
from tests.agent_lab import build_workload_images, why_not_ready

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

IMAGE = "fieldlab/busybox:lab"
EXITED = 30.0  # seconds for a container whose command is `exit 3` to be seen exited


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> None:
    build_workload_images(tmp_path_factory.mktemp("images"))


class Counting:
    """Counts the calls of one method of the driver's real docker API client."""

    def __init__(self, api: Any, name: str) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        real: Callable[..., Any] = getattr(api, name)

        def counted(*a: Any, **kw: Any) -> Any:
            with self.lock:
                self.calls += 1
            return real(*a, **kw)

        setattr(api, name, counted)


@pytest.fixture
def containers(images: None) -> Iterator[tuple[DockerDriver, dict[str, TaskHandle]]]:
    driver = DockerDriver()
    tag = uuid.uuid4().hex[:8]
    labels = {LABEL_MANAGED: "true", "fieldlab.test": tag}
    run = driver.client.containers.run
    running = run(IMAGE, ["sleep", "300"], detach=True, labels=labels, name=f"fl-look-run-{tag}")
    exited = run(IMAGE, ["sh", "-c", "exit 3"], detach=True, labels=labels, name=f"fl-look-exit-{tag}")
    gone = run(IMAGE, ["sleep", "300"], detach=True, labels=labels, name=f"fl-look-gone-{tag}")
    gone.remove(force=True)

    def has_exited() -> tuple[bool | None, str]:
        exited.reload()
        return (True if exited.status == "exited" else None), exited.status

    wait_until(has_exited, timeout=EXITED, what="the `exit 3` container to exit")
    running.reload()
    handles = {
        "running": TaskHandle("docker", running.id, running.attrs["State"]["StartedAt"]),
        "exited": TaskHandle("docker", exited.id, exited.attrs["State"]["StartedAt"]),
        "gone": TaskHandle("docker", gone.id, ""),
    }
    try:
        yield driver, handles
    finally:
        for c in (running, exited):
            c.remove(force=True)


def test_inside_one_look_each_container_is_inspected_once_and_a_gone_one_never(
    containers: tuple[DockerDriver, dict[str, TaskHandle]],
) -> None:
    driver, handles = containers
    outside = {k: (driver.status(h), driver.pid(h)) for k, h in handles.items()}
    assert outside["running"][0].running and outside["running"][1] > 0
    assert outside["exited"][0].exit_code == 3 and outside["exited"][1] == 0
    assert outside["gone"][0].detail == "container is gone" and outside["gone"][1] == 0

    inspects = Counting(driver.client.api, "inspect_container")
    listings = Counting(driver.client.api, "containers")
    with driver.one_look():
        # Eight threads asking everything several times, as the restore's observation does.
        def ask(key: str) -> tuple[str, Any, int]:
            h = handles[key]
            return key, driver.status(h), driver.pid(h)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, [k for k in handles for _ in range(5)]))
        assert driver.looks() == (True, 3)  # three known: two inspected, one gone by the listing
    assert all((st, pid) == outside[key] for key, st, pid in answers), answers
    assert listings.calls == 1
    assert inspects.calls == 2  # the running and the exited one, once each; the gone one never
    assert driver.looks() == (False, 0)

    # Outside the window every question asks the engine again (a container may change meanwhile).
    before = inspects.calls
    driver.status(handles["running"])
    driver.status(handles["running"])
    assert inspects.calls == before + 2


def test_inside_a_window_a_short_id_is_inspected_not_declared_gone(
    containers: tuple[DockerDriver, dict[str, TaskHandle]],
) -> None:
    driver, handles = containers
    with driver.one_look():
        # A short id or a name is not in the listing's terms: it is inspected, not declared gone.
        short = TaskHandle("docker", handles["running"].id[:12], handles["running"].started_at)
        assert driver.status(short).running


def test_the_engines_requests_read_no_proxy_from_the_environment(
    containers: tuple[DockerDriver, dict[str, TaskHandle]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's client never asks the environment for proxies (requests does for every call
    unless told not to: a third of an inspect's CPU at restore); its answers are the same."""
    import requests.sessions

    driver, handles = containers
    monkeypatch.setattr(requests.sessions, "get_environ_proxies", requests.sessions.get_environ_proxies)
    asked = Counting(requests.sessions, "get_environ_proxies")  # put back by monkeypatch
    assert driver.status(handles["running"]).running
    assert asked.calls == 0
