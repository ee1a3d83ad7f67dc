"""volume_mount destinations as Nomad takes them (its volume hook interpolates them with the task's
environment): a docker task may mount under /local, /alloc and /tmp, where its engine resolves the
destination inside the container; an exec task, whose mounts the agent makes in its chroot, may not."""

from __future__ import annotations

import json

import pytest

from agent.jobspec import JobspecError, parse_jobspec

SPEC = """
job "vol" {
  group "g" {
    volume "data" {
      type   = "host"
      source = "scratch"
    }
    task "t" {
      driver = "%(driver)s"
      config { %(config)s }
      volume_mount {
        volume      = "data"
        destination = "%(dest)s"
      }
    }
  }
}
"""
CONFIG = {"docker": 'image = "fieldlab/busybox:latest"', "exec": 'command = "/bin/true"'}


def _spec(driver: str, dest: str) -> str:
    return SPEC % {"driver": driver, "config": CONFIG[driver], "dest": dest}


def _dest(driver: str, dest: str) -> str:
    return (
        parse_jobspec(_spec(driver, dest), source="vol.hcl")
        .job.groups[0]
        .tasks[0]
        .volume_mounts[0]
        .destination
    )


def _refused(driver: str, dest: str) -> str:
    with pytest.raises(JobspecError) as caught:
        parse_jobspec(_spec(driver, dest), source="vol.hcl")
    (line,) = caught.value.lines()
    assert "volume_mount[0].destination" in line, line
    return line


@pytest.mark.parametrize(
    ("dest", "mounted_at"),
    [
        ("${NOMAD_TASK_DIR}/test", "/local/test"),
        ("/tmp/foo", "/tmp/foo"),
        ("/tmp", "/tmp"),
        ("${NOMAD_ALLOC_DIR}/shared", "/alloc/shared"),
        ("/local/a/b", "/local/a/b"),
        ("/data", "/data"),
    ],
)
def test_a_docker_task_mounts_where_nomad_lets_it(dest: str, mounted_at: str) -> None:
    assert _dest("docker", dest) == mounted_at


@pytest.mark.parametrize(
    ("dest", "says"),
    [
        ("/local", "the task's own /local"),
        ("/alloc", "the task's own /alloc"),
        ("/alloc/logs", "the task's own /alloc"),
        ("/alloc/logs/x", "the task's own /alloc"),
        ("${NOMAD_SECRETS_DIR}/x", "the task's own /secrets"),
        ("/", "the task's own /"),
        ("/proc/sys", "the task's own /proc"),
        ("/tmp/a:/etc", "cannot be a docker bind's destination"),
        ("/local/../etc", 'may not contain ".."'),
    ],
)
def test_a_docker_task_still_may_not_cover_the_agents_mounts(dest: str, says: str) -> None:
    assert says in _refused("docker", dest)


@pytest.mark.parametrize(
    ("dest", "says"),
    [
        ("${NOMAD_TASK_DIR}/test", '"/local/test" is the task\'s own /local'),
        ("/tmp/foo", "the task's own /tmp"),
        ("${NOMAD_ALLOC_DIR}/x", "the task's own /alloc"),
    ],
)
def test_an_exec_task_keeps_the_refusal_saying_why(dest: str, says: str) -> None:
    line = _refused("exec", dest)
    assert says in line and "a docker task may" in line, line


def test_the_api_json_is_read_alike() -> None:
    task = {
        "Name": "t",
        "Driver": "docker",
        "Config": {"image": "fieldlab/busybox:latest"},
        "VolumeMounts": [{"Volume": "data", "Destination": "${NOMAD_TASK_DIR}/test"}],
    }
    group = {"Name": "g", "Volumes": {"data": {"Type": "host", "Source": "scratch"}}, "Tasks": [task]}
    job = parse_jobspec(json.dumps({"Job": {"ID": "vol", "TaskGroups": [group]}}), source="vol.json").job
    assert job.groups[0].tasks[0].volume_mounts[0].destination == "/local/test"
