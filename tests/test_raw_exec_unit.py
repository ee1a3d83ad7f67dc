"""The raw_exec driver's pure parts (no root): who a task runs as, its environment and argv, where its
command is, exit codes, cgroup names, and the registry's refusal of a disabled driver. The driver on
the real thing: tests/test_raw_exec.py (root)."""

from __future__ import annotations

import os
import pwd
import threading
from pathlib import Path

import pytest

from agent.drivers.base import DriverError, TaskHandle
from agent.drivers.cgroups import task_cgroup_name
from agent.drivers.docker import DockerDriver
from agent.drivers.exec import ExecDriver
from agent.drivers.hostproc import ENTER_TASK_ENV, exit_code_of, proc_start_time
from agent.drivers.raw_exec import (
    DISABLED,
    RawExecDriver,
    RawUser,
    credentials,
    find_command,
    p_script,
    resolve_user,
    task_env,
    workload_argv,
)
from agent.drivers.registry import DriverRegistry, build_registry
from agent.structs.model import Task

NOBODY = pwd.getpwnam("nobody")


def _task(user: str = "") -> Task:
    return Task("t", "raw_exec", config={"command": "/bin/true"}, user=user)


# -- user ------------------------------------------------------------------------------------------------
def test_no_user_runs_as_the_agent() -> None:
    assert resolve_user(_task(), agent_uid=0) is None
    assert resolve_user(_task(), agent_uid=1000) is None


def test_the_agents_own_user_needs_no_switch() -> None:
    assert resolve_user(_task("root"), agent_uid=0) is None
    assert resolve_user(_task("0"), agent_uid=0) is None
    assert resolve_user(_task(str(NOBODY.pw_uid)), agent_uid=NOBODY.pw_uid) is None


def test_a_root_agent_runs_a_task_as_its_user_by_name_or_uid() -> None:
    for name in ("nobody", str(NOBODY.pw_uid)):
        user = resolve_user(_task(name), agent_uid=0)
        assert user is not None
        assert (user.name, user.uid, user.gid) == ("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
        assert user.groups[0] == NOBODY.pw_gid and len(set(user.groups)) == len(user.groups)


def test_only_a_root_agent_may_switch_users() -> None:
    with pytest.raises(DriverError, match="only an agent running as root"):
        resolve_user(_task("nobody"), agent_uid=1000)


def test_an_unknown_user_is_a_driver_error() -> None:
    with pytest.raises(DriverError, match='user "no-such-user-4711" does not exist'):
        resolve_user(_task("no-such-user-4711"), agent_uid=0)


# -- environment and argv --------------------------------------------------------------------------------
def test_task_env_adds_nomads_task_dir_variables_as_host_paths(tmp_path: Path) -> None:
    task_dir = tmp_path / "alloc-1" / "t"
    env = task_env({"NOMAD_TASK_NAME": "t", "NOMAD_TASK_DIR": "/local"}, task_dir)
    assert env["NOMAD_TASK_NAME"] == "t"
    assert env["NOMAD_TASK_DIR"] == str(task_dir / "local")  # not the chroot's /local: no chroot here
    assert env["NOMAD_SECRETS_DIR"] == str(task_dir / "secrets")
    assert env["NOMAD_ALLOC_DIR"] == str(tmp_path / "alloc-1" / "alloc")
    assert "/usr/bin" in env["PATH"].split(":")


def test_task_env_keeps_the_runners_alloc_dir_and_the_jobs_path(tmp_path: Path) -> None:
    env = task_env({"NOMAD_ALLOC_DIR": "/data/a/alloc", "PATH": "/opt/bin"}, tmp_path / "t")
    assert env["NOMAD_ALLOC_DIR"] == "/data/a/alloc"
    assert env["PATH"] == "/opt/bin"


ENTER = ["/bin/sh", "-c", ENTER_TASK_ENV, "/usr/bin/env"]


def test_workload_argv_resets_signals_and_execs_the_command() -> None:
    argv = workload_argv("/bin/sleep", ["60"], env_tool="/usr/bin/env")
    # The task's environment is set by the last step only (`sh -c ENTER_TASK_ENV env`), never by a
    # host-side step that runs before the drop to the task's user.
    assert argv == ["/usr/bin/env", "--default-signal", *ENTER, "/bin/sleep", "60"]


def test_workload_argv_switches_user_and_joins_the_netns() -> None:
    user = RawUser("nobody", 65534, 65534, (65534, 100))
    argv = workload_argv(
        "/bin/sleep",
        ["60"],
        env_tool="/usr/bin/env",
        user=user,
        setpriv="/usr/bin/setpriv",
        netns=Path("/run/netns/fl-a"),
        nsenter="/usr/bin/nsenter",
    )
    assert argv == [
        *("/usr/bin/nsenter", "--net=/run/netns/fl-a", "--"),
        *("/usr/bin/env", "--default-signal"),
        *("/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--groups=65534,100", "--"),
        *ENTER,
        *("/bin/sleep", "60"),
    ]


def test_p_joins_its_cgroups_then_becomes_the_workload() -> None:
    join = 'echo "$$" > /sys/fs/cgroup/fieldlab/a.t/cgroup.procs; '
    assert p_script(join) == join + 'exec "$@"'
    assert p_script("") == 'exec "$@"'


def test_find_command(tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    tool = local / "tool"
    tool.write_text("#!/bin/sh\n")
    assert find_command("local/tool", tmp_path, "/usr/bin") is None, "not executable yet"
    tool.chmod(0o755)
    assert find_command("local/tool", tmp_path, "/usr/bin") == str(tool)  # relative to the task dir
    assert find_command(str(tool), Path("/"), "") == str(tool)
    assert find_command("sh", tmp_path, "/usr/bin:/bin") in ("/usr/bin/sh", "/bin/sh")
    assert find_command("no-such-tool-4711", tmp_path, "/usr/bin:/bin") is None
    assert find_command("/no/such/tool", tmp_path, "/usr/bin") is None
    assert find_command("local", tmp_path, "/usr/bin") is None, "a directory is no command"


# -- process facts ----------------------------------------------------------------------------------------
def test_exit_codes_as_docker_reports_them() -> None:
    assert exit_code_of(0) == 0
    assert exit_code_of(3) == 3
    assert exit_code_of(-15) == 143
    assert exit_code_of(-9) == 137


def test_task_cgroup_name_on_v1_and_v2() -> None:
    v1 = ["12:memory:/fieldlab/a1.web", "11:cpu,cpuacct:/fieldlab/a1.web", "1:name=systemd:/user.slice"]
    assert task_cgroup_name(v1) == "a1.web"
    assert task_cgroup_name(["0::/fieldlab/a2.db"]) == "a2.db"
    assert task_cgroup_name(["0::/system.slice/docker.service"]) is None
    assert task_cgroup_name(["0::/fieldlab/"]) is None
    assert task_cgroup_name([]) is None


def test_credentials_of_this_process() -> None:
    creds = credentials(os.getpid())
    assert creds is not None
    assert creds[:2] == (os.getuid(), os.getgid())
    assert credentials(2**22 + 12345) is None


# -- a handle whose pid is not the task's process ---------------------------------------------------------
def test_a_reused_pid_is_not_adopted() -> None:
    """This test's own pid with another start time stands for a pid some other process took over."""
    started = proc_start_time(os.getpid())
    assert started is not None
    exits: list[tuple[str, str]] = []
    driver = RawExecDriver(lambda a, h: exits.append((a, h)))
    reused = TaskHandle("raw_exec", str(os.getpid()), str(int(started) + 1))
    assert driver.status(reused).running is False
    assert driver.pid(reused) == 0
    with pytest.raises(DriverError, match="is gone"):
        driver.signal(reused, "SIGUSR1")
    driver.stop(reused, 0.1, "SIGKILL")  # nothing is sent: this process is still here
    assert driver.exec(reused, ["true"], 1.0) == (-1, "task is not running")
    driver.reattach("alloc-1", reused)
    assert exits == [("alloc-1", str(os.getpid()))], "reported as exited at once, never watched"


def test_watch_takes_the_report() -> None:
    driver = RawExecDriver()
    seen: list[str] = []
    driver.watch(lambda a, h: seen.append(a), threading.Event())
    driver.reattach("gone", TaskHandle("raw_exec", str(2**22 + 12345), "1"))
    assert seen == ["gone"]
    assert driver.alloc_labels("gone") is None


# -- the registry -----------------------------------------------------------------------------------------
def test_raw_exec_is_not_registered_unless_enabled() -> None:
    off = build_registry(DockerDriver(), ExecDriver())
    assert off.names == ("docker", "exec")
    assert not off.enabled("raw_exec")
    assert off.refusal("raw_exec") == DISABLED
    assert DISABLED.startswith("driver raw_exec is disabled on this client: enable it with ")
    assert 'plugin "raw_exec" { config { enabled = true } }' in DISABLED and "RAW_EXEC=1" in DISABLED
    assert off.refusal("docker") is None and off.refusal("exec") is None
    with pytest.raises(DriverError, match="raw_exec_enabled"):
        off.get("raw_exec")
    unknown = off.refusal("java")
    assert unknown is not None and "not run by this agent" in unknown


def test_raw_exec_is_registered_when_enabled() -> None:
    mine = RawExecDriver()
    on = build_registry(DockerDriver(), ExecDriver(), raw_exec_enabled=True, raw_exec=mine)
    assert on.names == ("docker", "exec", "raw_exec")
    assert on.enabled("raw_exec") and on.refusal("raw_exec") is None
    assert on.get("raw_exec") is mine
    made = build_registry(DockerDriver(), ExecDriver(), raw_exec_enabled=True).get("raw_exec")
    assert isinstance(made, RawExecDriver) and made.joins_container_netns is False


def test_a_driver_cannot_be_both_registered_and_disabled() -> None:
    with pytest.raises(ValueError, match="both registered and disabled"):
        DriverRegistry([RawExecDriver()], disabled={"raw_exec": DISABLED})
