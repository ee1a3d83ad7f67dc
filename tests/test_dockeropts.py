"""A docker task's `config` as Nomad's docker driver maps it (agent.drivers.dockeropts, pure): each
honoured option's create kwarg, each refusal's text, the plugin gates (allow_privileged, allow_caps,
volumes { enabled }, allow_runtimes) read from the agent's config and applied at submission by the
client (Core.refusals), and docs/drivers.md listing every option of Nomad's driver."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.command.config import load_config
from agent.command.plugins import NOMAD_DEFAULT_CAPS, DockerPlugin
from agent.drivers.base import Sandbox, TaskContext
from agent.drivers.docker import DockerDriver
from agent.drivers.dockernames import etc_hosts
from agent.drivers.dockeropts import (
    HONOURED,
    IGNORED_AS_NOMAD,
    PULL_OPTIONS,
    REFUSED,
    capabilities,
    from_task,
    plan,
    port_map_env,
    published,
    refusals,
)
from agent.drivers.dockervalues import TaskFacts
from agent.drivers.registry import DriverRegistry
from agent.errors import AgentError, ConfigError
from agent.jobspec import parse_jobspec
from agent.jobspec.fields import IMPLEMENTED, UNIMPLEMENTED
from agent.structs.model import Resources, Task
from tests.fakes import FakeNode

ROOT = Path(__file__).resolve().parent.parent
OFF = DockerPlugin()
FACTS = TaskFacts(network_mode="host", memory_mb=256, task_dir="/d/alloc1/web", alloc_dir="/d/alloc1")


def kw(config: dict[str, Any], plugin: DockerPlugin = OFF, facts: TaskFacts = FACTS) -> dict[str, Any]:
    out = plan({"image": "x", **config}, plugin, facts)
    assert out.refused == [], out.refused
    return out.kwargs


def why(config: dict[str, Any], plugin: DockerPlugin = OFF, facts: TaskFacts = FACTS) -> dict[str, str]:
    return dict(plan({"image": "x", **config}, plugin, facts).refused)


@pytest.mark.parametrize(
    ("config", "kwarg", "value"),
    [
        ({"hostname": "web1"}, "hostname", "web1"),
        ({"dns_servers": ["10.0.0.2"]}, "dns", ["10.0.0.2"]),
        ({"dns_search_domains": ["lab"]}, "dns_search", ["lab"]),
        ({"dns_options": ["ndots:2"]}, "dns_opt", ["ndots:2"]),
        ({"extra_hosts": ["db:10.0.0.9"]}, "extra_hosts", ["db:10.0.0.9"]),
        ({"entrypoint": ["/bin/sh", "-c"]}, "entrypoint", ["/bin/sh", "-c"]),
        ({"work_dir": "/srv"}, "working_dir", "/srv"),
        ({"labels": [{"team": "a"}, {"tier": "b"}]}, "labels", {"team": "a", "tier": "b"}),
        ({"labels": {"team": "a"}}, "labels", {"team": "a"}),
        ({"readonly_rootfs": True}, "read_only", True),
        ({"interactive": True}, "stdin_open", True),
        ({"tty": True}, "tty", True),
        ({"sysctl": [{"net.core.somaxconn": "512"}]}, "sysctls", {"net.core.somaxconn": "512"}),
        (
            {"ulimit": [{"nofile": "1024:2048", "nproc": "64"}]},
            "ulimits",
            [{"name": "nofile", "soft": 1024, "hard": 2048}, {"name": "nproc", "soft": 64, "hard": 64}],
        ),
        ({"shm_size": 67108864}, "shm_size", 67108864),
        ({"oom_score_adj": 500}, "oom_score_adj", 500),
        ({"init": True}, "init", True),
        ({"group_add": ["audio"]}, "group_add", ["audio"]),
        ({"mac_address": "02:42:ac:11:00:99"}, "mac_address", "02:42:ac:11:00:99"),
        ({"healthchecks": [{"disable": True}]}, "healthcheck", {"test": ["NONE"]}),
        ({"cgroupns": "private"}, "cgroupns", "private"),
        ({"pids_limit": 64}, "pids_limit", 64),
        ({"runtime": "runc"}, "runtime", "runc"),
        (
            {"logging": [{"type": "json-file", "config": [{"max-size": "1m"}]}]},
            "log_config",
            {"type": "json-file", "config": {"max-size": "1m"}},
        ),
        ({"devices": [{"host_path": "/dev/fuse"}]}, "devices", ["/dev/fuse:/dev/fuse:rwm"]),
        (
            {"devices": [{"host_path": "/dev/null", "container_path": "/dev/n", "cgroup_permissions": "r"}]},
            "devices",
            ["/dev/null:/dev/n:r"],
        ),
        ({"volumes": ["local/conf:/etc/app:ro"]}, "volumes", ["/d/alloc1/web/local/conf:/etc/app:ro"]),
        ({"volumes": ["../alloc/data:/data"]}, "volumes", ["/d/alloc1/alloc/data:/data"]),
        (
            {"mount": [{"type": "tmpfs", "target": "/scratch", "tmpfs_options": [{"size": 1048576}]}]},
            "mounts",
            [
                {
                    "Target": "/scratch",
                    "Source": "",
                    "Type": "tmpfs",
                    "ReadOnly": False,
                    "TmpfsOptions": {"SizeBytes": 1048576},
                }
            ],
        ),
        (
            {"mounts": [{"type": "bind", "source": "local", "target": "/l", "readonly": True}]},
            "mounts",
            [{"Target": "/l", "Source": "/d/alloc1/web/local", "Type": "bind", "ReadOnly": True}],
        ),
    ],
)
def test_each_honoured_option_becomes_its_create_kwarg(
    config: dict[str, Any], kwarg: str, value: object
) -> None:
    assert kw(config)[kwarg] == value


def test_memory_hard_limit_makes_memory_the_soft_reservation_as_nomad() -> None:
    got = kw({"memory_hard_limit": 512})
    assert (got["mem_limit"], got["mem_reservation"], got["memswap_limit"]) == ("512m", "256m", "512m")
    alone = kw({})
    assert (alone["mem_limit"], alone["memswap_limit"]) == ("256m", "256m"), "memory alone: the hard limit"
    assert "mem_reservation" not in alone
    assert why({"memory_hard_limit": 128})["memory_hard_limit"] == (
        "task memory requirements exceed driver hard limit of 128 MB"
    )


@pytest.mark.parametrize(
    ("config", "entrypoint", "cmd"),
    [
        # the image's ENTRYPOINT stays (none in the kwargs) and the command is Cmd's first word
        ({"command": "sleep", "args": ["30"]}, None, ["sleep", "30"]),
        ({"command": "/bin/run.sh"}, None, ["/bin/run.sh"]),
        ({"args": ["--port", "8080"]}, None, ["--port", "8080"]),
        ({"args": ["-n", 3, True]}, None, ["-n", "3", "true"]),  # HCL's list(string) takes them as strings
        ({"entrypoint": ["/bin/sh", "-c"], "command": "echo hi"}, ["/bin/sh", "-c"], ["echo hi"]),
        ({"entrypoint": ["/bin/sh"], "args": ["-c", "true"]}, ["/bin/sh"], ["-c", "true"]),
        ({}, None, None),  # the image's CMD
    ],
)
def test_command_and_args_are_cmd_and_only_entrypoint_replaces_the_images(
    config: dict[str, Any], entrypoint: list[str] | None, cmd: list[str] | None
) -> None:
    """Nomad's createContainerConfig: Config.Entrypoint is the task's `entrypoint` only; Config.Cmd is
    `[command] + args`, or `args` (an image with an ENTRYPOINT takes the command as its argument)."""
    got = kw(config)
    assert got.get("entrypoint") == entrypoint
    assert got.get("command") == cmd


def test_a_command_validate_command_refuses() -> None:
    assert why({"command": "   "})["command"] == "command empty: '   '"
    assert why({"command": " sleep"})["command"] == "command contains extra white space: ' sleep'"
    assert why({"args": "-c true"})["args"] == "must be a list of strings"


def test_init_and_swap_are_nomads_defaults_and_the_task_gives_user_and_cpu_shares() -> None:
    """Nomad's driver: no HostConfig.Init unless `init = true`; MemorySwap = Memory and swappiness 0
    (docker's own default would double the memory as swap); Config.User the task's `user`."""
    got = kw({})
    assert "init" not in got
    assert (got["mem_limit"], got["memswap_limit"], got["mem_swappiness"]) == ("256m", "256m", 0)
    assert kw({"init": False}).get("init") is None
    assert from_task("nobody", 500) == {"user": "nobody", "cpu_shares": 500}
    assert from_task("", 1) == {"cpu_shares": 2}, "no user: the image's USER; shares at least 2"


def test_the_driver_gives_the_engine_the_tasks_user(tmp_path: Path) -> None:
    """DockerDriver.options (no engine call) carries the task's user and its cpu shares beside the
    config's kwargs: what `_start` hands to the engine."""
    task = Task(
        "app", "docker", config={"image": "x"}, resources=Resources(cpu=300, memory=64), user="1000:1000"
    )
    ctx = TaskContext(
        job="j", group="g", alloc_id="a1", task=task, task_dir=tmp_path / "app", env={}, network_mode="host"
    )
    got = DockerDriver(client=object()).options(ctx).kwargs
    assert (got["user"], got["cpu_shares"], got["mem_limit"]) == ("1000:1000", 300, "64m")


def test_caps_as_nomads_delta_net_raw_dropped_unless_allowed() -> None:
    assert kw({})["cap_drop"] == ["net_raw"]
    got = kw({"cap_add": ["CAP_CHOWN"], "cap_drop": ["all"]})
    assert (got["cap_add"], got["cap_drop"]) == (["chown"], ["all"])
    assert capabilities([*NOMAD_DEFAULT_CAPS, "NET_RAW"], [], []) == ([], [], [])
    assert capabilities(["all"], ["sys_admin"], []) == (["sys_admin"], [], [])
    refused = why({"cap_add": ["net_admin", "sys_time"]})["cap_add"]
    assert refused.startswith("driver does not allow the following capabilities: net_admin, sys_time")
    assert kw({"cap_add": ["NET_ADMIN"]}, DockerPlugin(allow_caps=(*NOMAD_DEFAULT_CAPS, "NET_ADMIN")))[
        "cap_add"
    ] == ["net_admin"]


def test_privileged_only_with_allow_privileged_and_then_without_no_new_privileges() -> None:
    assert why({"privileged": True})["privileged"] == (
        "Docker privileged mode is disabled on this Nomad agent (plugin docker allow_privileged)"
    )
    got = kw({"privileged": True}, DockerPlugin(allow_privileged=True))
    assert got["privileged"] is True and "no-new-privileges" not in got["security_opt"]
    assert kw({})["security_opt"] == ["no-new-privileges"]
    assert kw({"security_opt": ["apparmor=unconfined"]})["security_opt"] == [
        "apparmor=unconfined",
        "no-new-privileges",
    ]


def test_security_opt_as_nomads_parser() -> None:
    assert why({"security_opt": ["bogus"]})["security_opt"] == "invalid security_opt: 'bogus'"
    assert (
        "a seccomp profile read from a file of the node"
        in why({"security_opt": ["seccomp=/etc/x.json"]})["security_opt"]
    )
    assert "seccomp=unconfined" in kw({"security_opt": ["seccomp=unconfined"]})["security_opt"]


def test_namespace_modes_need_allow_privileged_host_is_the_runners() -> None:
    assert why({"ipc_mode": "shareable"})["ipc_mode"] == (
        'cannot apply "ipc_mode" configuration: only with plugin docker allow_privileged'
    )
    assert kw({"ipc_mode": "shareable", "uts_mode": "private"}, DockerPlugin(allow_privileged=True))[
        "ipc_mode"
    ] == ("shareable")
    # "host" is decided by the runner (taskdecisions.plan_host_namespaces, nomad-28190's flag)
    assert "pid_mode" not in kw({"pid_mode": "host"})
    assert "userns_mode" in why({"userns_mode": "host"})


def test_pids_limit_never_past_the_plugins() -> None:
    capped = DockerPlugin(pids_limit=100)
    assert kw({}, capped)["pids_limit"] == 100
    assert kw({"pids_limit": 50}, capped)["pids_limit"] == 50
    assert why({"pids_limit": 500}, capped)["pids_limit"] == (
        "pids_limit cannot be greater than nomad plugin config pids_limit: 100"
    )


def test_a_log_driver_the_agent_cannot_read_is_refused() -> None:
    refused = why({"logging": {"type": "syslog", "config": {"syslog-address": "udp://x:514"}}})[
        "logging.type"
    ]
    assert "the agent copies a task's output into alloc/logs by reading the engine's log" in refused


def test_host_paths_only_with_volumes_enabled_and_never_the_agents_own() -> None:
    assert why({"volumes": ["/etc:/host-etc"]})["volumes[0]"] == (
        "volumes are not enabled; cannot mount host path: '/etc' (plugin docker volumes)"
    )
    assert "volumes[0]" in why({"volumes": ["../../other-alloc/secrets:/s"]}), "out of its alloc dir"
    on = DockerPlugin(volumes_enabled=True)
    facts = TaskFacts(
        network_mode="host", task_dir="/d/alloc1/web", alloc_dir="/d/alloc1", own_paths=("/d", "/etc/fl")
    )
    assert kw({"volumes": ["/srv/data:/data"]}, on, facts)["volumes"] == ["/srv/data:/data"]
    assert (
        why({"volumes": ["/:/host"]}, on, facts)["volumes[0]"]
        == "'/' (/) reaches the agent's own /d: refused"
    )
    assert "reaches the agent's own /etc/fl" in why({"volumes": ["/etc/fl/x:/x"]}, on, facts)["volumes[0]"]
    bind = {"mount": [{"type": "bind", "source": "/d/alloc2", "target": "/x"}]}
    assert "reaches the agent's own /d" in why(bind, on, facts)["mount[0]"]
    # a link is followed once, then checked: a task's link out of its alloc dir is refused
    linked = TaskFacts(
        network_mode="host",
        task_dir="/d/alloc1/web",
        alloc_dir="/d/alloc1",
        resolve=lambda p: "/etc" if p.endswith("link") else p,
    )
    assert "volumes[0]" in why({"volumes": ["local/link:/l"]}, OFF, linked)
    vol = {"mounts": [{"type": "volume", "source": "cache", "target": "/c"}]}
    assert (
        why(vol)["mounts[0]"]
        == "volumes are not enabled; cannot mount volume: 'cache' (plugin docker volumes)"
    )
    assert kw(vol, on)["mounts"][0]["Type"] == "volume"
    assert why({"mount": [{"type": "nfs", "target": "/n"}]})["mount[0]"].startswith("invalid mount type")


def test_a_bridge_group_task_cannot_take_what_docker_refuses_in_a_joined_namespace() -> None:
    bridge = TaskFacts(network_mode="bridge")
    got = why(
        {"hostname": "h", "dns_servers": ["1.1.1.1"], "extra_hosts": ["a:1.2.3.4"], "port_map": {"http": 80}},
        OFF,
        bridge,
    )
    assert "set the group's network.hostname" in got["hostname"]
    assert "use the group's network.dns" in got["dns_servers"]
    assert "extra_hosts" not in got, "they go into the group network's /etc/hosts, as Nomad's"
    assert got["port_map"] == "'port_map' cannot map group network ports, use 'ports' instead"
    assert plan({"port_map": [{"http": 8080}]}, OFF, FACTS).port_map == {"http": 8080}


def test_extra_hosts_are_checked_as_nomads_and_go_into_a_group_networks_etc_hosts() -> None:
    """Nomad's GenerateEtcHostsMount: in a bridge group the entries are lines of the /etc/hosts the
    driver writes ("<ip> <host>", after the alloc's own), an IP address only; on docker's own network
    the engine takes them (host-gateway too)."""
    bridge = TaskFacts(network_mode="bridge")
    assert kw({"extra_hosts": ["db:10.0.0.9", "v6:fd00::1"]}, OFF, bridge)["extra_hosts"] == [
        "db:10.0.0.9",
        "v6:fd00::1",
    ]
    assert why({"extra_hosts": ["gw:host-gateway"]}, OFF, bridge)["extra_hosts"] == (
        "invalid IP address 'gw:host-gateway'"
    )
    assert kw({"extra_hosts": ["gw:host-gateway"]})["extra_hosts"] == ["gw:host-gateway"]
    assert why({"extra_hosts": ["db"]})["extra_hosts"] == "invalid hosts entry 'db': not \"<host>:<ip>\""
    assert why({"extra_hosts": ["db:10.0.0.300"]})["extra_hosts"] == "invalid IP address 'db:10.0.0.300'"
    text = etc_hosts("10.9.0.7", "web-1", ["db:10.0.0.9", "v6:fd00::1"])
    assert text.endswith(
        "10.9.0.7 web-1\n\n# these entries are extra hosts added by the task config\n"
        "10.0.0.9 db\nfd00::1 v6\n"
    ), text
    assert etc_hosts("10.9.0.7", "web-1").endswith("10.9.0.7 web-1\n"), "none: nothing after the alloc's line"


def test_the_groups_dns_replaces_the_tasks_dns_options_outside_a_bridge_group(tmp_path: Path) -> None:
    """Nomad's createContainerConfig: with the group's network.dns (task.DNS) the resolv.conf is the
    group's and the task's dns_servers/dns_search_domains/dns_options are not used; without it they
    are the container's."""
    task = Task("app", "docker", config={"image": "x"}, resources=Resources(cpu=100, memory=64))
    ctx = TaskContext(
        job="j", group="g", alloc_id="a1", task=task, task_dir=tmp_path / "app", env={},
        network_mode="host", sandbox=Sandbox(dns_servers=("192.0.2.53",)),
    )  # fmt: skip
    driver = DockerDriver(client=object())
    got: dict[str, Any] = {"dns": ["10.0.0.2"], "dns_search": ["task.lab"], "dns_opt": ["ndots:2"]}
    driver._group_network_files(ctx, "default", got)
    assert got == {"dns": ["192.0.2.53"]}
    own = {"dns": ["10.0.0.2"], "dns_search": ["task.lab"]}
    driver._group_network_files(replace(ctx, sandbox=Sandbox()), "default", own)
    assert own == {"dns": ["10.0.0.2"], "dns_search": ["task.lab"]}


def test_a_port_map_sets_nomad_port_to_the_container_port() -> None:
    """Nomad's SetPortMapEnvs: the task sees NOMAD_PORT_<label> = the mapped port (label cleaned)."""
    assert port_map_env({"http": 8080, "my-db": 5432}) == {
        "NOMAD_PORT_http": "8080",
        "NOMAD_PORT_my_db": "5432",
    }
    mapped = plan({"image": "x", "port_map": [{"http": 8080}]}, OFF, FACTS)
    assert port_map_env(mapped.port_map) == {"NOMAD_PORT_http": "8080"}


def test_ports_are_published_to_their_port_map_else_to_else_the_host_port() -> None:
    ports = [("http", 25000, 0), ("admin", 25001, 9000), ("other", 25002, 0)]
    assert published(ports, ["http", "admin"], {}, "10.0.0.5") == {
        "25000/tcp": ("10.0.0.5", 25000),
        "25000/udp": ("10.0.0.5", 25000),
        "9000/tcp": ("10.0.0.5", 25001),
        "9000/udp": ("10.0.0.5", 25001),
    }
    # legacy: no `ports`, the labels of port_map, to its container ports
    assert published(ports, None, {"http": 8080}, "") == {"8080/tcp": 25000, "8080/udp": 25000}


def test_network_mode_host_none_bridge_and_nothing_else() -> None:
    assert kw({"network_mode": "host"}) == kw({"network_mode": "host"})
    assert "network_mode" not in why({"network_mode": "bridge"})
    assert why({"network_mode": "container:db-1234"})["network_mode"].endswith(
        "joining a sibling task's container is not implemented by this agent"
    )
    assert "user-defined docker network" in why({"network_mode": "backend"})["network_mode"]


def test_bad_values_are_refused_naming_the_option() -> None:
    got = why(
        {
            "hostname": 3,
            "tty": "yes",
            "shm_size": "big",
            "dns_servers": ["not-an-ip"],
            "ulimit": {"nofile": "x"},
        }
    )
    assert got["hostname"] == "must be a string, not int"
    assert got["tty"] == "must be a bool, not 'yes'"
    assert got["shm_size"] == "must be a whole number, not 'big'"
    assert got["dns_servers"] == "'not-an-ip' is not an IP address"
    assert got["ulimit.nofile"] == "malformed ulimit specification 'x'"
    assert why({"nonsense": 1})["nonsense"] == "not a config field of Nomad's docker driver"


def test_every_refused_option_says_why() -> None:
    for key, reason in REFUSED.items():
        assert why({key: True})[key] == reason


def test_the_pull_options_are_honoured_and_their_bad_values_refused() -> None:
    """auth, auth_soft_fail, image_pull_timeout and force_pull are read by the pull
    (agent.drivers.dockerpull): not refused, no container option; a bad value is refused naming it. The
    seed job of nomad-12216 (an `auth` block) is not refused."""
    config = {
        "auth": [{"username": "u", "password": "p", "server_address": "r:5000"}],
        "auth_soft_fail": True,
        "image_pull_timeout": "5m",
        "force_pull": True,
    }
    assert set(config) == PULL_OPTIONS <= HONOURED
    assert kw(config) == kw({})
    got = why({"image_pull_timeout": "soon", "force_pull": "yes", "auth": {"token": "t"}})
    assert got["image_pull_timeout"].startswith('Failed to parse image_pull_timeout: invalid duration "soon"')
    assert got["force_pull"] == "must be a bool, not 'yes'"
    assert got["auth.token"].startswith("not a field of the docker auth block")
    seed = parse_jobspec(
        (ROOT / "tests" / "jobspecs" / "pause-container-orphans.hcl").read_text(), source="seed"
    )
    assert seed.job is not None
    (task,) = seed.job.groups[0].tasks
    assert "auth" in task.config and refusals(task.config, OFF, TaskFacts(network_mode="bridge")) == []


def test_values_still_to_interpolate_wait_for_the_start() -> None:
    config = {"image": "x", "volumes": ["${NOMAD_ALLOC_DIR}/../../x:/x"], "dns_servers": ["${attr.dns}"]}
    assert refusals(config, OFF, FACTS) == []
    assert plan(config, OFF, FACTS).refused != [], "at start (interpolated) the value is checked"


def test_every_option_of_nomads_driver_is_listed_once() -> None:
    options = IMPLEMENTED["config.docker"] | UNIMPLEMENTED["config.docker"]
    assert options == HONOURED | set(REFUSED) | IGNORED_AS_NOMAD
    assert not HONOURED & set(REFUSED)
    doc = (ROOT / "docs" / "drivers.md").read_text().split("## exec and raw_exec")[0]  # docker's table
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \| (honoured|refused|as Nomad)", doc, re.M))
    assert set(rows) == set(options), sorted(set(options) ^ set(rows))
    assert {k for k, v in rows.items() if v == "honoured"} == HONOURED
    assert {k for k, v in rows.items() if v == "refused"} == set(REFUSED)


def _config(tmp_path: Path, plugin: object) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"node_name": "n1", "data_dir": str(tmp_path / "d"), "plugin": plugin}))
    return p


def test_the_plugin_config_is_read_with_nomads_names_and_defaults(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, {"docker": {"config": {}}}))
    assert cfg.plugin == DockerPlugin()
    assert (cfg.plugin.allow_privileged, cfg.plugin.volumes_enabled) == (False, False)
    assert cfg.plugin.allow_caps == NOMAD_DEFAULT_CAPS and "NET_RAW" not in cfg.plugin.allow_caps
    body = {"allow_privileged": True, "allow_caps": ["all"], "volumes": {"enabled": True}}
    cfg = load_config(_config(tmp_path, {"docker": {"config": body}}))
    assert cfg.plugin == DockerPlugin(allow_privileged=True, allow_caps=("all",), volumes_enabled=True)
    for bad, where in (
        ({"docker": {"config": {"allow_privileged": "yes"}}}, "plugin.docker.config.allow_privileged"),
        ({"docker": {"config": {"volumes": {"enabled": 1}}}}, "plugin.docker.config.volumes"),
        ({"docker": {"config": {"gpu": 1}}}, "plugin.docker.config.gpu"),
        ({"java": {}}, "plugin"),  # exec and raw_exec are read too (agent.command.plugins.ExecPlugin)
    ):
        with pytest.raises(ConfigError, match=re.escape(where)):
            load_config(_config(tmp_path, bad))


PRIVILEGED = """
job "priv" {
  group "g" {
    network { mode = "host" }
    task "t" {
      driver = "docker"
      config {
        image      = "x"
        privileged = true
        cap_add    = ["net_admin"]
        volumes    = ["/etc:/host-etc"]
      }
    }
  }
}
"""


def test_the_client_refuses_at_submission_what_its_plugin_config_does_not_allow(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    for plugin, refused in (
        (DockerPlugin(), ("privileged", "cap_add", "volumes[0]")),
        (DockerPlugin(allow_privileged=True, allow_caps=("all",), volumes_enabled=True), ()),
    ):
        gate = DockerDriver(client=object(), plugin=plugin)
        node.registry = DriverRegistry(
            [node.docker, node.exec],
            container_netns=node.pause,
            path_netns=node.named,
            config_checks={"docker": gate.refusals},
        )
        core = node.core()
        if not refused:
            assert core.job_registry.refusals(core_job(core)) == []
            continue
        with pytest.raises(AgentError) as exc:
            core.job_registry.submit(PRIVILEGED, None, source="priv.hcl")
        for key in refused:
            assert f"job.priv.group.g.task.t.config.{key}:" in str(exc.value), exc.value
        assert core.runners == {}, "a refused job started allocs"
    # with volumes on, a host path into the agent's own files is still refused at submission
    gate = DockerDriver(client=object(), plugin=DockerPlugin(volumes_enabled=True), own_paths=(Path("/etc"),))
    task = Task("t", "docker", config={"image": "x", "volumes": ["/etc/x:/x", "/srv:/srv"]})
    assert [k for k, _ in gate.refusals(task, "host")] == ["volumes[0]"]


def core_job(core: Any) -> Any:
    return parse_jobspec(PRIVILEGED, source="priv.hcl").job
