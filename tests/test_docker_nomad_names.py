"""The docker driver names and labels containers as Nomad's docker driver does, on a real dockerd:
the pause container `nomad_init_<alloc>` with `com.hashicorp.nomad.alloc_id`, task containers with
Nomad's labels; a pause container this agent started under its earlier name is found, not doubled
(root)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import docker
import pytest

from agent.drivers.docker import DockerDriver
from agent.drivers.dockernames import NOMAD_LABEL_ALLOC, legacy_pause_name, pause_name
from agent.network import netns
from tests.agent_lab import build_workload_images, why_not_ready

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> DockerDriver:
    build_workload_images(tmp_path_factory.mktemp("images"))
    return DockerDriver(node_name="client9")


@pytest.fixture
def alloc_id(driver: DockerDriver) -> Iterator[str]:
    alloc = str(uuid.uuid4())
    yield alloc
    for name in (pause_name(alloc), legacy_pause_name(alloc)):
        with contextlib.suppress(docker.errors.NotFound):
            driver.client.containers.get(name).remove(force=True)


def test_the_pause_container_has_nomads_name_and_alloc_label(driver: DockerDriver, alloc_id: str) -> None:
    handle = driver.start_pause("web", "g", alloc_id)
    c = driver.client.containers.get(handle.id)
    assert c.name == f"nomad_init_{alloc_id}"
    assert c.labels[NOMAD_LABEL_ALLOC] == alloc_id
    assert driver.start_pause("web", "g", alloc_id).id == handle.id, "started again: the same container"


def test_a_pause_netns_is_dockers_sandbox_key(driver: DockerDriver, alloc_id: str) -> None:
    """CNI is handed docker's SandboxKey (as Nomad's network hook), not /proc/<pid>/ns/net: the
    sandbox file names that netns only and goes with the container, where a pid can come back as a
    host process's (a CNI DEL run there took the host's lo down)."""
    handle = driver.start_pause("web", "g", alloc_id)
    path = driver.netns_path(handle)
    key = driver.client.api.inspect_container(handle.id)["NetworkSettings"]["SandboxKey"]
    assert str(path) == key and key.startswith("/var/run/docker/netns/"), path
    assert netns.same_netns(path, f"/proc/{driver.pid(handle)}/ns/net")
    driver.remove_container(handle.id)
    assert not netns.is_netns(path), "the sandbox's netns outlived its container"


def test_the_managed_list_shows_a_container_as_inspect_does(driver: DockerDriver, alloc_id: str) -> None:
    """The sweeper and the adoption read docker's list, not an inspect per container: the same id,
    name, labels, state and creation time (the sweeper's grace counts from it)."""
    handle = driver.start_pause("web", "g", alloc_id)
    inspected = driver.client.api.inspect_container(handle.id)
    (listed,) = [c for c in driver.managed_containers() if c.id == handle.id]
    assert listed.name == inspected["Name"].lstrip("/") == pause_name(alloc_id)
    assert listed.labels == inspected["Config"]["Labels"] and listed.labels[NOMAD_LABEL_ALLOC] == alloc_id
    assert listed.status == inspected["State"]["Status"] == "running"
    assert 0 <= time.time() - listed.created < 120, listed.created


def test_a_pause_container_of_the_earlier_name_is_kept(driver: DockerDriver, alloc_id: str) -> None:
    """A node upgraded under running allocs: their pause containers keep their name and netns."""
    from agent.drivers.docker import PAUSE_IMAGE

    old = driver.client.containers.run(
        PAUSE_IMAGE, name=legacy_pause_name(alloc_id), detach=True, network_mode="none", init=True
    )
    old.stop(timeout=1)
    handle = driver.start_pause("web", "g", alloc_id)
    assert handle.id == old.id, "a second pause container was made beside the old one"
    assert driver.client.containers.get(old.id).status == "running"
    with pytest.raises(docker.errors.NotFound):
        driver.client.containers.get(pause_name(alloc_id))


def test_a_task_container_carries_nomads_labels(driver: DockerDriver) -> None:
    labels = driver._labels("web", "g", "a1", "nginx", "task")
    assert {k: v for k, v in labels.items() if k.startswith("com.hashicorp.nomad.")} == {
        "com.hashicorp.nomad.alloc_id": "a1",
        "com.hashicorp.nomad.job_name": "web",
        "com.hashicorp.nomad.job_id": "web",
        "com.hashicorp.nomad.task_group_name": "g",
        "com.hashicorp.nomad.task_name": "nginx",
        "com.hashicorp.nomad.namespace": "default",
        "com.hashicorp.nomad.node_name": "client9",
    }
    assert labels["org.fieldlab.alloc"] == "a1", "the agent's own labels stay: restore reads them"


def test_an_image_not_on_the_node_is_pulled_and_a_failed_pull_is_the_starts_error(
    driver: DockerDriver, alloc_id: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An image the node does not have is pulled, as Nomad's driver does (the `Driver` event
    "Downloading image"); a registry that cannot be reached (loopback, nothing listening: no traffic
    leaves the machine) fails the start with the pull's error, recoverable (the restart policy
    retries it, as Nomad's recoverablePullError), and no container is made."""
    from agent.drivers.base import DriverError, TaskContext
    from agent.structs.model import Task

    image = "127.0.0.1:1/fieldlab-no-such/redis:7"
    events: list[tuple[str, object]] = []
    task = Task("redis", "docker", config={"image": image})
    ctx = TaskContext(
        job="web", group="g", alloc_id=alloc_id, task=task, task_dir=tmp_path_factory.mktemp("t"), env={},
        driver_event=lambda message, details: events.append((message, dict(details))),
    )  # fmt: skip
    with pytest.raises(DriverError) as failed:
        driver.start(ctx)
    assert failed.value.reason.startswith(f"Failed to pull `{image}`: ") and failed.value.recoverable
    assert events == [("Downloading image", {"image": image})]
    assert not driver.client.containers.list(all=True, filters={"label": f"{NOMAD_LABEL_ALLOC}={alloc_id}"})


def test_the_no_image_message_lists_what_the_node_has() -> None:
    from agent.drivers.dockernames import no_image

    many = [f"img{i:02d}:latest" for i in range(15)]
    said = no_image("redis:7", many, shown=3)
    assert "img00:latest, img01:latest, img02:latest and 12 more" in said
    assert "the node has no images" in no_image("redis:7", [])
    assert "removed since it was found or pulled" in said
