"""A task's hook list, made for it from its spec (agent.runner.taskhooks.task_hooks, as Nomad's
initHooks): each hook only when the task needs it, in Nomad's order, each at the points it
implements. Over the hooks' port fakes (tests/hook_fakes.py): no AllocRunner, no TaskRunner."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from agent.runner.interfaces import HookPoints, TaskHost
from agent.runner.taskhooks import task_hooks
from agent.structs.model import (
    Artifact,
    Check,
    Group,
    HostVolume,
    Job,
    LogConfig,
    Service,
    Task,
    Template,
    Vault,
    VolumeMount,
    WorkloadIdentity,
)
from tests.fakes import FakeNode, FakeVault
from tests.hook_fakes import Task_

POINTS = ("setup", "prestart", "env", "poststart", "exited", "restore", "reattached", "stop")


def hooks_of(node: FakeNode, t: Task, job: Job | None = None, **deps: object) -> HookPoints:
    tr = Task_(node, t, job, **deps)
    return HookPoints.of(task_hooks(cast(TaskHost, tr)))


def names(points: HookPoints) -> list[str]:
    return [h.name for h in points.all]


def docker_like(node: FakeNode) -> None:
    """The fake docker driver with the real one's logs: files through logmon, a container log."""
    node.docker.log_files = node.docker.container_log = True


def test_a_plain_docker_task_gets_its_dir_its_logmon_and_its_logger_only(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    docker_like(node)
    t = Task(name="web", driver="docker", config={"image": "busybox"})
    assert names(hooks_of(node, t)) == ["task_dir", "logmon", "docker_logger"]
    quiet = Task(name="web", driver="docker", config={"image": "busybox"}, logs=LogConfig(disabled=True))
    assert names(hooks_of(node, quiet)) == ["task_dir"]
    # a driver that keeps no log (the fakes'): no logmon either
    assert names(hooks_of(node, Task(name="x", driver="exec"))) == ["task_dir"]


def test_a_template_and_vault_task_gets_their_hooks_and_vault_only_with_an_agent_vault(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    docker_like(node)
    t = Task(
        name="app",
        driver="docker",
        config={"image": "busybox"},
        vault=Vault(policies=("app",)),
        templates=(Template(destination="local/app.env", data="A=1", env=True),),
    )
    with_vault = ["task_dir", "logmon", "docker_logger", "vault", "template"]
    assert names(hooks_of(node, t, vault=FakeVault())) == with_vault
    assert names(hooks_of(node, t)) == ["task_dir", "logmon", "docker_logger", "template"]  # no agent Vault


def test_a_task_needing_every_hook_gets_each_at_its_points_in_nomads_order(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    docker_like(node)
    t = Task(
        name="all",
        driver="docker",
        config={"image": "busybox"},
        identities=(WorkloadIdentity(env=True),),
        dispatch_payload="input.txt",
        artifacts=(Artifact(source="https://example.invalid/a.tgz"),),
        vault=Vault(policies=("app",)),
        templates=(Template(destination="local/a", data="x"),),
        volume_mounts=(VolumeMount(volume="data", destination="/data"),),
        services=(Service(name="web", provider="nomad", checks=(Check(name="up", type="tcp"),)),),
    )
    group = Group(name="g", tasks=(t,), volumes=(HostVolume(alias="data", source="data"),))
    job = Job(id="j/dispatch-1", groups=(group,), dispatched=True, payload="")
    points = hooks_of(node, t, job, vault=FakeVault())
    assert names(points) == [
        "task_dir",
        "identity",
        "logmon",
        "docker_logger",
        "dispatch_payload",
        "artifacts",
        "vault",
        "template",
        "volumes",
        "checks",
    ]
    assert {p: [h.name for h in getattr(points, p)] for p in POINTS} == {
        "setup": ["task_dir", "identity", "dispatch_payload", "artifacts", "vault", "template"],
        "prestart": ["identity", "logmon", "vault", "volumes"],
        "env": ["identity", "vault"],
        "poststart": ["docker_logger", "checks"],
        "exited": ["identity", "logmon", "checks"],
        "restore": ["task_dir", "vault"],
        "reattached": ["identity", "logmon", "docker_logger", "checks"],
        "stop": ["identity", "vault", "checks"],
    }


def test_each_conditional_hook_is_left_out_without_its_need(tmp_path: Path) -> None:
    """An identity not exposed, a payload file of a job not dispatched, a service without checks:
    none of their hooks."""
    node = FakeNode(tmp_path)
    t = Task(
        name="t",
        driver="exec",
        identities=(WorkloadIdentity(name="vault_default"),),
        dispatch_payload="input.txt",
        services=(Service(name="web", provider="nomad"),),
    )
    assert names(hooks_of(node, t)) == ["task_dir"]


def test_a_task_of_a_driver_the_agent_does_not_run_gets_its_hooks_and_fails_at_its_start(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    assert names(hooks_of(node, Task(name="vm", driver="qemu"))) == ["task_dir"]
