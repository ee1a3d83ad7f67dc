"""A docker task's options as Nomad's docker driver honours them, on the real dockerd: one container
created by the agent's driver with most of the honoured options of agent.drivers.dockeropts, then
inspected (Config, HostConfig): each option is where Nomad's driver puts it (root).

Each check is one entry of CHECKS, so that one option dropped from the mapping fails its own check
(how this was shown: docs/drivers.md)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from agent.command.plugins import NOMAD_DEFAULT_CAPS, DockerPlugin
from agent.drivers.base import TaskContext
from agent.drivers.docker import DockerDriver
from agent.structs.model import Resources, Task
from tests.agent_lab import why_not_ready

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

IMAGE = "fieldlab/busybox:lab"  # on every node of the lab (the workload_images role); never pulled

CONFIG: dict[str, Any] = {
    "image": IMAGE,
    "entrypoint": ["/bin/sh", "-c"],
    "command": "sleep 300",
    "hostname": "opt-host",
    "dns_servers": ["10.9.8.7"],
    "dns_search_domains": ["lab.internal"],
    "dns_options": ["ndots:3"],
    "extra_hosts": ["db.lab:10.9.8.6"],
    "work_dir": "/tmp",
    "labels": [{"team": "fieldlab"}],
    "readonly_rootfs": True,
    "cap_add": ["NET_ADMIN"],
    "cap_drop": ["MKNOD"],
    "security_opt": ["apparmor=unconfined"],
    "sysctl": [{"net.core.somaxconn": "321"}],
    "ulimit": [{"nofile": "1024:2048"}],
    "shm_size": 33554432,
    "memory_hard_limit": 96,
    "oom_score_adj": 321,
    "init": True,
    "interactive": True,
    "tty": True,
    "ipc_mode": "shareable",
    "group_add": ["1234"],
    "mac_address": "02:42:ac:11:00:99",
    "healthchecks": [{"disable": True}],
    "logging": [{"type": "json-file", "config": [{"max-size": "1m", "max-file": "2"}]}],
    "pids_limit": 77,
    "volumes": ["local/conf:/etc/app:ro"],
    "mount": [{"type": "tmpfs", "target": "/scratch", "tmpfs_options": [{"size": 1048576}]}],
    "devices": [{"host_path": "/dev/null", "container_path": "/dev/opt-null", "cgroup_permissions": "rw"}],
}
PLUGIN = DockerPlugin(allow_privileged=True, allow_caps=(*NOMAD_DEFAULT_CAPS, "NET_ADMIN"))

Attrs = dict[str, Any]
CHECKS: dict[str, Callable[[Attrs], object]] = {
    "entrypoint": lambda a: (
        a["Config"]["Entrypoint"] == ["/bin/sh", "-c"] and a["Config"]["Cmd"] == ["sleep 300"]
    ),
    "hostname": lambda a: a["Config"]["Hostname"] == "opt-host",
    "dns_servers": lambda a: a["HostConfig"]["Dns"] == ["10.9.8.7"],
    "dns_search_domains": lambda a: a["HostConfig"]["DnsSearch"] == ["lab.internal"],
    "dns_options": lambda a: a["HostConfig"]["DnsOptions"] == ["ndots:3"],
    "extra_hosts": lambda a: a["HostConfig"]["ExtraHosts"] == ["db.lab:10.9.8.6"],
    "work_dir": lambda a: a["Config"]["WorkingDir"] == "/tmp",
    "labels": lambda a: (
        a["Config"]["Labels"].get("team") == "fieldlab"
        and a["Config"]["Labels"].get("com.hashicorp.nomad.task_name") == "opts"
    ),
    "readonly_rootfs": lambda a: a["HostConfig"]["ReadonlyRootfs"] is True,
    "cap_add": lambda a: a["HostConfig"]["CapAdd"] == ["net_admin"],
    "cap_drop": lambda a: sorted(a["HostConfig"]["CapDrop"] or []) == ["mknod", "net_raw"],
    "security_opt": lambda a: a["HostConfig"]["SecurityOpt"] == ["apparmor=unconfined", "no-new-privileges"],
    "sysctl": lambda a: a["HostConfig"]["Sysctls"] == {"net.core.somaxconn": "321"},
    "ulimit": lambda a: a["HostConfig"]["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 2048}],
    "shm_size": lambda a: a["HostConfig"]["ShmSize"] == 33554432,
    "memory_hard_limit": lambda a: (
        (a["HostConfig"]["Memory"], a["HostConfig"]["MemoryReservation"]) == (96 << 20, 64 << 20)
    ),
    "oom_score_adj": lambda a: a["HostConfig"]["OomScoreAdj"] == 321,
    "init": lambda a: a["HostConfig"].get("Init") is True,
    "interactive": lambda a: a["Config"]["OpenStdin"] is True,
    "tty": lambda a: a["Config"]["Tty"] is True,
    "ipc_mode": lambda a: a["HostConfig"]["IpcMode"] == "shareable",
    "group_add": lambda a: a["HostConfig"]["GroupAdd"] == ["1234"],
    "mac_address": lambda a: (
        a["Config"].get("MacAddress") == "02:42:ac:11:00:99"
        or a["NetworkSettings"]["MacAddress"] == "02:42:ac:11:00:99"
    ),
    "healthchecks": lambda a: (a["Config"].get("Healthcheck") or {}).get("Test") == ["NONE"],
    "logging": lambda a: (
        a["HostConfig"]["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}}
    ),
    "pids_limit": lambda a: a["HostConfig"]["PidsLimit"] == 77,
    # the task's own bind is made through the checked dir's fd on a staged mount point (hostvolumes:
    # no window between the check and dockerd's bind), so its source is the stage, read-only at /etc/app
    "volumes": lambda a: any(
        b.endswith(":/etc/app:ro") and ("/local/conf:" in b or "/hostvolumes/bind-" in b)
        for b in a["HostConfig"]["Binds"]
    ),
    "mount": lambda a: (
        [(m["Type"], m["Target"], m.get("TmpfsOptions")) for m in a["HostConfig"]["Mounts"] or []]
        == [("tmpfs", "/scratch", {"SizeBytes": 1048576})]
    ),
    "devices": lambda a: (
        a["HostConfig"]["Devices"]
        == [{"PathOnHost": "/dev/null", "PathInContainer": "/dev/opt-null", "CgroupPermissions": "rw"}]
    ),
}


@pytest.fixture(scope="module")
def created(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attrs]:
    driver = DockerDriver(plugin=PLUGIN, pids_limit=4096)
    alloc = str(uuid.uuid4())
    task_dir = tmp_path_factory.mktemp("alloc") / "opts"
    (task_dir / "local" / "conf").mkdir(parents=True)
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    task = Task("opts", "docker", config=CONFIG, resources=Resources(cpu=100, memory=64))
    ctx = TaskContext(
        job="opts", group="g", alloc_id=alloc, task=task, task_dir=task_dir, env={}, network_mode="host"
    )
    handle = driver.start(ctx)
    try:
        yield driver.client.api.inspect_container(handle.id)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            driver.client.containers.get(handle.id).remove(force=True)


@pytest.mark.parametrize("option", sorted(CHECKS))
def test_the_option_is_on_the_container_as_nomads_driver_sets_it(created: Attrs, option: str) -> None:
    assert CHECKS[option](created), f"{option}: Config={created['Config']} HostConfig={created['HostConfig']}"


def test_the_container_runs_with_them(created: Attrs) -> None:
    assert created["State"]["Running"] is True, created["State"]
    assert Path(created["HostConfig"]["Binds"][0].split(":")[0]).exists()


def test_a_plain_task_is_created_with_nomads_defaults(tmp_path: Path) -> None:
    """Nomad's createContainerConfig on an image with an ENTRYPOINT (fieldlab/pause: /pause, a shell
    script): the command is the entrypoint's argument (Cmd), no docker-init is PID 1 (init is off
    unless asked), the task's user is Config.User, memory is the hard limit with no swap past it, and
    a port_map's port is NOMAD_PORT_<label>."""
    driver = DockerDriver()
    task = Task(
        "plain",
        "docker",
        config={
            "image": "fieldlab/pause:lab",
            "command": "first-arg",
            "args": ["second"],
            "port_map": [{"http": 8080}],
        },
        resources=Resources(cpu=100, memory=64),
        user="65534:65534",
    )
    task_dir = tmp_path / "alloc1" / "plain"
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    ctx = TaskContext(
        job="plain", group="g", alloc_id=str(uuid.uuid4()), task=task, task_dir=task_dir, env={},
        network_mode="host",
    )  # fmt: skip
    handle = driver.start(ctx)
    try:
        a = driver.client.api.inspect_container(handle.id)
        assert (a["Path"], a["Args"]) == ("/pause", ["first-arg", "second"]), (a["Path"], a["Args"])
        assert a["Config"]["Entrypoint"] == ["/pause"] and a["Config"]["Cmd"] == ["first-arg", "second"]
        assert not a["HostConfig"].get("Init"), a["HostConfig"].get("Init")
        assert a["Config"]["User"] == "65534:65534"
        assert "NOMAD_PORT_http=8080" in a["Config"]["Env"], "Nomad's SetPortMapEnvs"
        host = a["HostConfig"]
        assert host["Memory"] == host["MemorySwap"] == 64 << 20, (host["Memory"], host["MemorySwap"])
        # PID 1 of the container is the image's entrypoint itself (sh running /pause), as the task's user
        pid = a["State"]["Pid"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"/pause" in argv[:2] and b"docker-init" not in argv[0], argv
        uid = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("Uid:"))
        assert uid.split()[1] == "65534", uid
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            driver.client.containers.get(handle.id).remove(force=True)


def test_a_kill_signal_is_sent_at_the_stop_not_set_on_the_container(tmp_path: Path) -> None:
    """Nomad's taskHandle.Kill: the container carries no StopSignal of the task's; the stop sends the
    kill_signal (a task trapping it exits 0 at once), and one that ignores it is SIGKILLed after the
    timeout (137)."""
    driver = DockerDriver()
    script = "trap 'exit 0' USR1; while true; do sleep 0.1; done"
    handles = []
    try:
        for name, args in (("traps", ["-c", script]), ("ignores", ["-c", "trap '' USR1; sleep 300"])):
            task = Task(
                name,
                "docker",
                config={"image": IMAGE, "command": "/bin/sh", "args": args},
                resources=Resources(cpu=100, memory=32),
                kill_signal="SIGUSR1",
            )
            task_dir = tmp_path / name / name
            (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
            ctx = TaskContext(
                job=name, group="g", alloc_id=str(uuid.uuid4()), task=task, task_dir=task_dir, env={},
                network_mode="host",
            )  # fmt: skip
            handles.append(driver.start(ctx))
        traps, ignores = handles
        assert not driver.client.api.inspect_container(traps.id)["Config"].get("StopSignal")
        driver.stop(traps, 10.0, "SIGUSR1")
        assert driver.status(traps).exit_code == 0, "the trapped kill_signal ended it"
        driver.stop(ignores, 1.0, "SIGUSR1")
        assert driver.status(ignores).exit_code == 137, "SIGKILL after the timeout"
    finally:
        for h in handles:
            with contextlib.suppress(docker.errors.NotFound):
                driver.client.containers.get(h.id).remove(force=True)


def test_extra_hosts_of_a_bridge_group_task_are_in_its_etc_hosts(tmp_path: Path) -> None:
    """Nomad's GenerateEtcHostsMount: a task joining its group's pause container gets the /etc/hosts
    the driver writes, its extra_hosts in it (the engine refuses ExtraHosts in a joined namespace)."""
    driver = DockerDriver()
    alloc = str(uuid.uuid4())
    task_dir = tmp_path / "alloc" / "web"
    task_dir.mkdir(parents=True)
    (task_dir.parent / "alloc" / "logs").mkdir(parents=True)
    config = {"image": IMAGE, "command": "cat", "args": ["/etc/hosts"], "extra_hosts": ["db.lab:10.9.8.6"]}
    task = Task("web", "docker", config=config, resources=Resources(cpu=100, memory=32))
    try:
        pause = driver.start_pause("web", "g", alloc, image="fieldlab/pause:lab")
        ctx = TaskContext(
            job="web", group="g", alloc_id=alloc, task=task, task_dir=task_dir,
            env={"NOMAD_ALLOC_IP": "10.9.0.7"}, network_mode="bridge", netns_owner=pause,
        )  # fmt: skip
        c = driver.client.containers.get(driver.start(ctx).id)
        c.wait(timeout=30)
        lines = c.logs().decode().splitlines()
        assert not c.attrs["HostConfig"].get("ExtraHosts"), c.attrs["HostConfig"].get("ExtraHosts")
    finally:
        for name in (f"nomad_init_{alloc}", f"web-{alloc}"):
            with contextlib.suppress(docker.errors.NotFound):
                driver.client.containers.get(name).remove(force=True)
    assert "10.9.8.6 db.lab" in lines and "127.0.0.1 localhost" in lines, lines
    assert lines.index("10.9.8.6 db.lab") > lines.index("127.0.0.1 localhost"), lines
