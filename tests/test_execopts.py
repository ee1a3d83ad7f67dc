"""The exec and raw_exec drivers' task `config` as Nomad's drivers read it (agent.drivers.execopts):
every option of Nomad's exec and raw_exec TaskConfig honoured or refused with the reason, the plugin
gates (allow_caps, default_pid_mode, default_ipc_mode, denied_envvars) read with Nomad's names and
defaults, and the client's refusal at submission. The effect on a running process: the root tests
(tests/test_exec_options.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.command.config import load_config
from agent.command.plugins import NOMAD_DEFAULT_CAPS, ExecPlugin, RawExecPlugin
from agent.drivers.exec import ROOT_CAPS, ExecDriver
from agent.drivers.execopts import (
    EXEC_HONOURED,
    EXEC_REFUSED,
    RAW_EXEC_HONOURED,
    RAW_EXEC_REFUSED,
    exec_plan,
    exec_refusals,
    glob_match,
    raw_exec_plan,
    raw_exec_refusals,
)
from agent.drivers.raw_exec import RawExecDriver, p_script
from agent.drivers.registry import DriverRegistry, build_registry
from agent.errors import AgentError, ConfigError
from agent.jobspec.fields import IMPLEMENTED, UNIMPLEMENTED
from agent.structs.model import Task
from tests.fakes import FakeNode

ROOT = Path(__file__).resolve().parent.parent
OFF = ExecPlugin()
# Nomad's exec and raw_exec TaskConfig (drivers/exec/driver.go, drivers/rawexec/driver.go)
NOMAD_EXEC = {"command", "args", "pid_mode", "ipc_mode", "cap_add", "cap_drop", "work_dir"}
NOMAD_RAW_EXEC = {"command", "args", "cgroup_v2_override", "cgroup_v1_override", "oom_score_adj", "work_dir"}
NOMAD_RAW_EXEC |= {"denied_envvars"}


def _keys(refused: list[tuple[str, str]]) -> list[str]:
    return [k for k, _ in refused]


def test_every_option_is_honoured_or_refused_and_none_is_only_warned_about() -> None:
    assert NOMAD_EXEC <= EXEC_HONOURED
    assert RAW_EXEC_HONOURED | RAW_EXEC_REFUSED.keys() >= NOMAD_RAW_EXEC
    assert not EXEC_HONOURED & EXEC_REFUSED.keys() and not RAW_EXEC_HONOURED & RAW_EXEC_REFUSED.keys()
    # the parser's field list: every one of them known, none left as "not implemented" (a warning)
    assert IMPLEMENTED["config.exec"] == EXEC_HONOURED | EXEC_REFUSED.keys()
    assert IMPLEMENTED["config.raw_exec"] == RAW_EXEC_HONOURED | RAW_EXEC_REFUSED.keys()
    assert UNIMPLEMENTED["config.exec"] == UNIMPLEMENTED["config.raw_exec"] == frozenset()
    for key, why in EXEC_REFUSED.items():
        assert len(why) > 40 and exec_refusals({"command": "x", key: "1"}, OFF) == [(key, why)]
    for key, why in RAW_EXEC_REFUSED.items():
        assert len(why) > 40 and raw_exec_refusals({"command": "x", key: "a"}, RawExecPlugin()) == [
            (key, why)
        ]
    doc = (ROOT / "docs" / "drivers.md").read_text()
    for driver, honoured, refused in (
        ("exec", EXEC_HONOURED, EXEC_REFUSED),
        ("raw_exec", RAW_EXEC_HONOURED, RAW_EXEC_REFUSED),
    ):
        table = doc.split(f"\n### {driver}\n", 1)[1].split("\n#", 1)[0]
        rows = re.findall(r"^\| `([a-z_0-9]+)` \| (honoured|refused)", table, re.M)
        assert sorted(rows) == sorted([(k, "honoured") for k in honoured] + [(k, "refused") for k in refused])
    assert _keys(exec_refusals({"command": "x", "image": "y"}, OFF)) == ["image"]
    assert _keys(
        raw_exec_refusals({"command": "x", "cgroup_v2_override": "custom.slice/x"}, RawExecPlugin())
    ) == ["cgroup_v2_override"]


def test_caps_as_nomads_calculate_within_allow_caps() -> None:
    # a user: no capability unless added; what is added goes to the ambient set too (Nomad's executor)
    opts = exec_plan({"cap_add": ["CAP_NET_BIND_SERVICE", "chown"]}, OFF, basis=())
    assert (opts.refused, opts.caps, opts.ambient) == (
        [],
        ("chown", "net_bind_service"),
        ("chown", "net_bind_service"),
    )
    assert exec_plan({}, OFF, basis=()).caps == ()
    # root: the agent's set, less the drops, plus the adds; nothing ambient (root has them effective)
    opts = exec_plan({"cap_drop": ["chown", "KILL"], "cap_add": ["mknod"]}, OFF, basis=ROOT_CAPS, root=True)
    assert opts.refused == [] and opts.ambient == ()
    assert set(opts.caps) == (set(ROOT_CAPS) - {"chown", "kill"}) | {"mknod"}
    # the basis stays within allow_caps (Nomad: defaults intersect allow)
    narrow = ExecPlugin(allow_caps=("CHOWN", "KILL"))
    assert exec_plan({}, narrow, basis=ROOT_CAPS, root=True).caps == ("chown", "kill")
    # an add outside allow_caps is refused with Nomad's words; the plugin may allow it
    refused = exec_refusals({"cap_add": ["sys_admin", "net_raw", "chown"]}, OFF)
    assert _keys(refused) == ["cap_add"]
    assert "driver does not allow the following capabilities: net_raw, sys_admin" in refused[0][1]
    wide = ExecPlugin(allow_caps=(*NOMAD_DEFAULT_CAPS, "SYS_ADMIN", "NET_RAW"))
    assert exec_plan({"cap_add": ["sys_admin", "net_raw"]}, wide, basis=()).caps == ("net_raw", "sys_admin")
    # "all", as Nomad's capabilities.New: every capability (a drop of all empties the set first)
    opts = exec_plan({"cap_drop": ["all"], "cap_add": ["net_bind_service"]}, OFF, basis=ROOT_CAPS, root=True)
    assert (opts.refused, opts.caps) == ([], ("net_bind_service",))
    assert "sys_admin" in exec_refusals({"cap_add": ["ALL"]}, OFF)[0][1]
    everything = exec_plan({"cap_add": ["all"]}, ExecPlugin(allow_caps=("all",)), basis=())
    assert everything.refused == [] and len(everything.caps) > 40 and "sys_admin" in everything.ambient
    # a name the kernel has not: Nomad's validate
    assert "not supported by system: bogus" in exec_refusals({"cap_drop": ["bogus"]}, OFF)[0][1]


def test_pid_and_ipc_modes_host_only_where_the_plugin_defaults_to_host() -> None:
    assert exec_refusals({"pid_mode": "private", "ipc_mode": "private"}, OFF) == []
    opts = exec_plan({"pid_mode": "private", "ipc_mode": "private"}, OFF, basis=())
    assert (opts.pid_host, opts.ipc_host) == (False, False)
    refused = exec_refusals({"pid_mode": "host", "ipc_mode": "host"}, OFF)
    assert _keys(refused) == ["pid_mode", "ipc_mode"]
    assert 'default_pid_mode = "host"' in refused[0][1]
    plugin = ExecPlugin(default_pid_mode="host")
    assert _keys(exec_refusals({"pid_mode": "host", "ipc_mode": "host"}, plugin)) == ["ipc_mode"]
    assert exec_plan({}, plugin, basis=()).pid_host is True  # the plugin's default applies unasked
    assert exec_plan({"pid_mode": "private"}, plugin, basis=()).pid_host is False  # the task's wins
    bad = exec_refusals({"ipc_mode": "shareable"}, OFF)
    assert bad == [("ipc_mode", 'must be "private" or "host", not "shareable" (Nomad\'s driver validation)')]


def test_work_dir_absolute_and_kept_inside() -> None:
    assert exec_plan({"work_dir": "/local/app"}, OFF, basis=()).work_dir == "/local/app"
    assert exec_plan({"work_dir": "/local/../../etc"}, OFF, basis=()).work_dir == "/etc"  # never above /
    assert _keys(exec_refusals({"work_dir": "local"}, OFF)) == ["work_dir"]
    assert exec_refusals({"work_dir": "${NOMAD_TASK_DIR}"}, OFF) == []  # checked at start, interpolated
    assert _keys(raw_exec_refusals({"work_dir": "rel"}, RawExecPlugin())) == ["work_dir"]
    script = ExecDriver(exits_dir=None).setup_script(Path("/d/a/t"), (), "/local/my app")
    tail = script.split("-l /.oldroot", 1)[1]  # inside the new root, after the host's is gone
    assert "cd -- '/local/my app' ||" in tail and "-p -- '/local/my app'" in tail
    assert "cd --" not in ExecDriver(exits_dir=None).setup_script(Path("/d/a/t"))


def test_raw_exec_oom_score_adj_and_denied_envvars() -> None:
    plugin = RawExecPlugin(denied_envvars=("AWS_*",))
    opts = raw_exec_plan({"oom_score_adj": 500, "denied_envvars": ["SECRET", "*_TOKEN"]}, plugin)
    assert (opts.refused, opts.oom_score_adj) == ([], 500)
    env = {"AWS_KEY": "1", "SECRET": "2", "SECRETS": "3", "VAULT_TOKEN": "4", "PATH": "/bin"}
    assert opts.env(env) == {"SECRETS": "3", "PATH": "/bin"}
    assert raw_exec_plan({"oom_score_adj": "7"}, RawExecPlugin()).oom_score_adj == 7
    for bad, why in ((-1, "must not be negative"), (1001, "at most 1000"), ("x", "whole number")):
        assert why in raw_exec_refusals({"oom_score_adj": bad}, RawExecPlugin())[0][1]
    assert p_script("J; ", 500) == 'J; echo 500 > /proc/self/oom_score_adj; exec "$@"'
    assert p_script("J; ") == 'J; exec "$@"'
    assert glob_match("a*b*", "axxbyy") and not glob_match("a*b", "axbc") and glob_match("a.b", "a.b")
    assert not glob_match("a.b", "axb")


def _config(tmp_path: Path, plugin: object) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"node_name": "n1", "data_dir": str(tmp_path / "d"), "plugin": plugin}))
    return p


def test_the_plugin_configs_are_read_with_nomads_names_and_defaults(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, {"exec": {"config": {}}, "raw_exec": {"config": {}}}))
    assert cfg.exec_plugin == ExecPlugin() and cfg.raw_exec_plugin == RawExecPlugin()
    assert (cfg.exec_plugin.default_pid_mode, cfg.exec_plugin.default_ipc_mode) == ("private", "private")
    assert cfg.exec_plugin.allow_caps == NOMAD_DEFAULT_CAPS and not cfg.raw_exec_enabled
    body: dict[str, Any] = {"exec": {"config": {"default_ipc_mode": "host", "allow_caps": ["CHOWN"]}}}
    body["raw_exec"] = {"config": {"enabled": True, "denied_envvars": ["X_*"]}}
    cfg = load_config(_config(tmp_path, body))
    assert cfg.exec_plugin == ExecPlugin(default_ipc_mode="host", allow_caps=("CHOWN",))
    assert cfg.raw_exec_plugin == RawExecPlugin(denied_envvars=("X_*",)) and cfg.raw_exec_enabled
    for bad, where in (
        ({"exec": {"config": {"default_pid_mode": "shared"}}}, "plugin.exec.config.default_pid_mode"),
        ({"exec": {"config": {"no_pivot_root": True}}}, "plugin.exec.config.no_pivot_root"),
        ({"raw_exec": {"config": {"enabled": "yes"}}}, "plugin.raw_exec.config.enabled"),
        ({"raw_exec": {"config": {"denied_envvars": [1]}}}, "plugin.raw_exec.config.denied_envvars"),
    ):
        with pytest.raises(ConfigError, match=re.escape(where)):
            load_config(_config(tmp_path, bad))


JOB = """
job "opts" {
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command  = "/bin/true"
        cap_add  = ["sys_admin"]
        pid_mode = "host"
        work_dir = "local"
      }
    }
  }
}
"""


def test_the_client_refuses_at_submission_what_its_plugin_config_does_not_allow(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    gate = ExecDriver(exits_dir=None)
    node.registry = DriverRegistry(
        [node.docker, node.exec],
        container_netns=node.pause,
        path_netns=node.named,
        config_checks={"exec": gate.refusals},
    )
    core = node.core()
    with pytest.raises(AgentError) as exc:
        core.job_registry.submit(JOB, None, source="opts.hcl")
    for key in ("cap_add", "pid_mode", "work_dir"):
        assert f"job.opts.group.g.task.t.config.{key}:" in str(exc.value), exc.value
    assert core.runners == {}, "a refused job started allocs"
    # the agent's own registry wires both drivers' checks (raw_exec only when enabled)
    raw = RawExecDriver(exits_dir=None, plugin=RawExecPlugin())
    registry = build_registry(None, gate, raw_exec_enabled=True, raw_exec=raw)
    task = Task("t", "raw_exec", config={"command": "x", "oom_score_adj": -5})
    assert _keys(registry.config_refusals(task, "host")) == ["oom_score_adj"]
    task = Task("t", "exec", config={"command": "x", "ipc_mode": "host"})
    assert _keys(registry.config_refusals(task, "host")) == ["ipc_mode"]
