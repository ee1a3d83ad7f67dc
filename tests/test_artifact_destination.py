"""An artifact's destination as Nomad's client takes it (TaskEnv.ClientPath): relative to the task
dir; an absolute one ("/local/x", "/tmp/x") joined onto the task dir; `${NOMAD_TASK_DIR}/x`, which the
task's variables make the task dir's host path, kept where it is. What still leaves the alloc dir is
refused, at submission and at fetch, and nothing lands outside the task dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.getter.getter import HttpGetter
from agent.getter.plan import ArtifactError, destination_in_task, plan_fetch
from agent.jobspec import JobspecError, parse_jobspec
from agent.structs.model import Artifact
from tests.test_artifacts import LOOPBACK, Server, _spec, server

__all__ = ["server"]  # the fixture, shared


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("local/x", "local/x"),
        ("/local/x", "local/x"),  # Nomad's README example: joined onto the task dir
        ("/tmp/x", "tmp/x"),
        ("/", "."),
        ("/srv/alloc/t/local/x", "local/x"),  # the task dir's host path: `${NOMAD_TASK_DIR}/x`
        ("/srv/alloc/alloc/data", "alloc/data"),  # the shared dir's: `${NOMAD_ALLOC_DIR}/data`
        ("/srv/alloc/t", "."),
        ("/../alloc/x", "../alloc/x"),  # joined, then into the shared dir
        ("/srv/alloc/other/local", "srv/alloc/other/local"),  # another task's dir: not this sandbox
    ],
)
def test_a_destination_is_relative_to_the_task_dir_as_nomads_client_path(given: str, expected: str) -> None:
    assert destination_in_task(given, "/srv/alloc/t") == expected


@pytest.mark.parametrize("given", ["/../../etc", "/a/../../../x", "../other/x", "../../x"])
def test_a_destination_that_leaves_the_alloc_dir_is_refused(given: str) -> None:
    with pytest.raises(ArtifactError, match=f'destination "{given}" escapes the alloc directory'):
        destination_in_task(given, "/srv/alloc/t")


def test_the_plan_writes_an_absolute_destination_below_the_task_dir() -> None:
    env = {"NOMAD_TASK_DIR": "/srv/alloc/t/local"}
    assert (
        plan_fetch("http://h/f", "/local/conf", "file", {}, {}, env, "/srv/alloc/t").file_dest == "local/conf"
    )
    plan = plan_fetch("http://h/a.tgz", "${NOMAD_TASK_DIR}/app", "any", {}, {}, env, "/srv/alloc/t")
    assert plan.dir_dest == "local/app"


@pytest.mark.parametrize(
    ("dest", "stored"),
    [
        ("/local/app", "/local/app"),
        ("/tmp/foo", "/tmp/foo"),
        ("${NOMAD_TASK_DIR}/app", "${NOMAD_TASK_DIR}/app"),
    ],
)
def test_an_absolute_destination_is_accepted_as_nomad_accepts_it(dest: str, stored: str) -> None:
    (artifact,) = parse_jobspec(_spec(dest=dest), source="art.hcl").job.groups[0].tasks[0].artifacts
    assert artifact.destination == stored  # shown as written (Nomad's RelativeDest)


@pytest.mark.parametrize("dest", ["/../../etc", "/local/../../../x"])
def test_an_absolute_destination_leaving_the_alloc_dir_is_refused_at_submission(dest: str) -> None:
    with pytest.raises(JobspecError) as caught:
        parse_jobspec(_spec(dest=dest), source="art.hcl")
    assert any(
        "destination" in line and "escapes the alloc directory" in line for line in caught.value.lines()
    )


def test_absolute_and_variable_destinations_land_in_the_task_dir(server: Server, tmp_path: Path) -> None:
    alloc_dir = tmp_path / "alloc"
    task_dir = alloc_dir / "t"
    env = {"NOMAD_TASK_DIR": str(task_dir / "local"), "NOMAD_ALLOC_DIR": str(alloc_dir / "alloc")}
    server.files["/motd.txt"] = b"hello"
    getter = HttpGetter(allowed_hosts=LOOPBACK)
    assert getter.fetch(task_dir, Artifact(server.url + "/motd.txt", "/local/a"), env) == 1
    assert (task_dir / "local" / "a" / "motd.txt").read_bytes() == b"hello"
    getter.fetch(task_dir, Artifact(server.url + "/motd.txt", "/tmp/foo", "file"), env)
    assert (task_dir / "tmp" / "foo").read_bytes() == b"hello"
    getter.fetch(task_dir, Artifact(server.url + "/motd.txt", "${NOMAD_TASK_DIR}/b"), env)
    assert (task_dir / "local" / "b" / "motd.txt").read_bytes() == b"hello"
    getter.fetch(task_dir, Artifact(server.url + "/motd.txt", "${NOMAD_ALLOC_DIR}/c"), env)
    assert (alloc_dir / "alloc" / "c" / "motd.txt").read_bytes() == b"hello"
    with pytest.raises(ArtifactError, match="escapes the alloc directory"):
        getter.fetch(task_dir, Artifact(server.url + "/motd.txt", "/../../escaped"), env)
    assert not (tmp_path / "escaped").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alloc"]
