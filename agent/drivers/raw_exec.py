"""The raw_exec driver: Nomad's raw_exec, a task run without isolation, off unless the client config
enables it (`raw_exec_enabled`, Nomad's `plugin "raw_exec" { config { enabled = true } }`); a disabled
driver is not registered at all (agent.drivers.registry says why a job that asks for it is refused).

What it shares with exec (agent.drivers.process) is everything but the isolation:

    agent --Popen(new session, cwd = config.work_dir or the task dir)--> P  /bin/sh: joins the task's
                                     cgroups (memory and cpu limits), sets config.oom_score_adj,
                                     then exec [nsenter --net=<alloc netns> --] env --default-signal
                                     [setpriv --reuid --regid --groups --] <command>
                                     <args>: P *is* the workload, with every signal at its default.

No chroot, no mount/pid/ipc/uts namespace, no capability or no_new_privs change: the workload sees
the node as the agent does. It runs as the agent's user (root) unless the task sets `user`, which
(as in Nomad) is honoured only when the agent is root; local/ and secrets/ are then chowned to that
user, as exec does. A bridge group's task joins the alloc's network namespace, as Nomad's raw_exec
joins the group's. The environment is the runner's task environment (nothing of the agent's own),
with Nomad's task-dir variables as host paths (NOMAD_TASK_DIR = <task dir>/local, NOMAD_SECRETS_DIR,
NOMAD_ALLOC_DIR) and a default PATH, less config.denied_envvars and the plugin's (agent.drivers.execopts).

Signals go to P's process group; stop is kill_signal (Nomad's default for raw_exec is SIGINT, set by
the jobspec), SIGKILL after kill_timeout, and then SIGKILL to whatever of the task is still in its
cgroup (a child that left the process group): without a pid namespace nothing else would take it
down. Exit codes: the workload's, or 128+N when signal N killed it (as docker and exec report it).
Reattach by pid plus start time, exits watched by pidfd, orphans found by the sweeper through the
cgroup names: all as exec (agent.drivers.process). `exec` (change_mode script) runs the command with
the task's environment, cwd, user, cgroups and network namespace.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.command.plugins import RawExecPlugin
from agent.drivers.base import DriverError, ExitReport, TaskContext, TaskHandle
from agent.drivers.cgroups import Cgroups, cgroup_procs_of
from agent.drivers.execopts import raw_exec_plan, raw_exec_refusals
from agent.drivers.hostproc import HOST_ENV, TOOL_PATH, carry_env, enter_task_env, exit_code_of, host_tool
from agent.drivers.keeperclient import EXITS_DIR
from agent.drivers.process import ProcessDriver
from agent.drivers.session import ExecPlan
from agent.structs.model import Task

NAME = "raw_exec"
DISABLED = (
    f'driver {NAME} is disabled on this client: enable it with "raw_exec_enabled": true in the agent\'s '
    f'config file (a Nomad client: plugin "{NAME}" {{ config {{ enabled = true }} }}); a lab: make lab-up '
    "RAW_EXEC=1 (no isolation: trusted jobspecs only)"
)
SHELL_NAME = "fieldlab-raw-exec"  # $0 of P until it exec's the workload


@dataclass(frozen=True)
class RawUser:
    """Another user than the agent's that a raw_exec task runs as (its `user`)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    def setpriv_argv(self, setpriv: str) -> list[str]:
        groups = ",".join(str(g) for g in self.groups)
        return [setpriv, f"--reuid={self.uid}", f"--regid={self.gid}", f"--groups={groups}", "--"]


def resolve_user(task: Task, agent_uid: int) -> RawUser | None:
    """The task's `user`, or None to run as the agent's own user (unset, or the agent's user). Only an
    agent running as root can run a task as someone else (Nomad's raw_exec has the same rule)."""
    if not task.user:
        return None
    name = task.user
    try:
        pw = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError, OverflowError):
        raise DriverError(NAME, f"task {task.name}", f'user "{name}" does not exist on this node') from None
    if pw.pw_uid == agent_uid:
        return None
    if agent_uid != 0:
        raise DriverError(
            NAME,
            f"task {task.name}",
            f'user "{name}": the agent runs as uid {agent_uid}, and only an agent running as root '
            "can run a raw_exec task as another user",
        )
    groups = tuple(dict.fromkeys([pw.pw_gid, *os.getgrouplist(pw.pw_name, pw.pw_gid)]))
    return RawUser(pw.pw_name, pw.pw_uid, pw.pw_gid, groups)


def task_env(env: Mapping[str, str], task_dir: Path) -> dict[str, str]:
    """The runner's task environment plus Nomad's task-dir variables (host paths) and a PATH."""
    out = {"PATH": TOOL_PATH, **env}
    out.setdefault("NOMAD_ALLOC_DIR", str(task_dir.parent / "alloc"))
    out["NOMAD_TASK_DIR"] = str(task_dir / "local")
    out["NOMAD_SECRETS_DIR"] = str(task_dir / "secrets")
    return out


def workload_argv(
    command: str,
    args: list[str],
    *,
    env_tool: str,
    user: RawUser | None = None,
    setpriv: str = "",
    netns: Path | None = None,
    nsenter: str = "",
) -> list[str]:
    """What P exec's: [nsenter --net] env --default-signal [setpriv ...] sh -c ENTER_TASK_ENV env
    command args: the task's environment (carried in P's) is set only by the last `env -i`, after
    the drop to the task's user."""
    argv = [env_tool, "--default-signal"]
    if user is not None:
        argv += user.setpriv_argv(setpriv)
    argv += [*enter_task_env("/bin/sh", env_tool), command, *args]
    if netns is not None:
        argv = [nsenter, f"--net={netns}", "--", *argv]
    return argv


def p_script(cgroup_join: str, oom_score_adj: int | None = None) -> str:
    """P's shell: join the task's cgroups, set its oom_score_adj (config.oom_score_adj, as Nomad's
    executor writes /proc/self/oom_score_adj), then become the workload (argv in "$@")."""
    oom = "" if oom_score_adj is None else f"echo {int(oom_score_adj)} > /proc/self/oom_score_adj; "
    return f'{cgroup_join}{oom}exec "$@"'


def find_command(command: str, task_dir: Path, path: str) -> str | None:
    """Where `command` is (a path: absolute, or relative to the task dir; a name: on `path`), None
    when there is no executable file there."""
    if "/" in command:
        found = Path(command) if command.startswith("/") else task_dir / command
        return str(found) if found.is_file() and os.access(found, os.X_OK) else None
    return shutil.which(command, path=path)


def credentials(pid: int) -> tuple[int, int, tuple[int, ...]] | None:
    """(uid, gid, supplementary groups) of process `pid`, from /proc/<pid>/status."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    fields = {k: v.split() for k, _, v in (ln.partition(":") for ln in lines)}
    try:
        return int(fields["Uid"][0]), int(fields["Gid"][0]), tuple(int(g) for g in fields["Groups"])
    except (KeyError, IndexError, ValueError):
        return None


class RawExecDriver(ProcessDriver):
    name = NAME
    joins_container_netns = False
    keeps_exit_status = False  # the task was a child of the agent that started it

    def __init__(
        self,
        on_exit: ExitReport | None = None,
        *,
        agent_uid: int | None = None,
        exits_dir: Path | None = EXITS_DIR,
        plugin: RawExecPlugin | None = None,
    ) -> None:
        super().__init__(on_exit, exits_dir=exits_dir)
        self.agent_uid = os.geteuid() if agent_uid is None else agent_uid
        self.plugin = plugin or RawExecPlugin()  # Nomad's plugin "raw_exec" config: denied_envvars

    def refusals(self, task: Task, group_network: str) -> list[tuple[str, str]]:
        """(config key, why) of each option of the task this node refuses, at submission."""
        del group_network  # a raw_exec task's options do not depend on it
        return raw_exec_refusals(task.config, self.plugin)

    def exit_code(self, returncode: int) -> int:
        return exit_code_of(returncode)

    def start(self, ctx: TaskContext) -> TaskHandle:
        task, task_dir = ctx.task, ctx.task_dir
        what = f"task {task.name}"
        if ctx.mounts:  # no filesystem isolation: nothing to mount into (Nomad's MountConfigSupportNone)
            why = f'task driver "{NAME}" for "{task.name}" does not support host volumes'
            raise DriverError(NAME, what, why)
        cmd = str(task.config.get("command", ""))
        if not cmd:
            raise DriverError(NAME, what, "config.command is required")
        args = [str(a) for a in task.config.get("args", [])]
        opts = raw_exec_plan(task.config, self.plugin)
        if opts.refused:
            key, why = opts.refused[0]
            raise DriverError(NAME, what, f"config.{key}: {why}")
        cwd = Path(opts.work_dir) if opts.work_dir else task_dir
        if not cwd.is_dir():
            raise DriverError(NAME, what, f"config.work_dir: {cwd} is not a directory on this node")
        user = resolve_user(task, self.agent_uid)
        env = task_env(ctx.env, task_dir)
        found = find_command(cmd, task_dir, env["PATH"])
        if found is None:
            raise DriverError(NAME, what, f"command {cmd!r} not found (or not executable)")
        if "/" in cmd and not cmd.startswith("/"):
            cmd = found  # relative to the task dir, as Nomad's lookupBin, whatever the work_dir
        env = opts.env(env)  # Nomad's denied_envvars (the plugin's and the task's): after the lookup
        argv = workload_argv(
            cmd,
            args,
            env_tool=host_tool("env", NAME, "start"),
            user=user,
            setpriv=host_tool("setpriv", NAME, "start") if user else "",
            netns=ctx.netns,
            nsenter=host_tool("nsenter", NAME, "start") if ctx.netns else "",
        )
        if user is not None:
            try:
                for d in ("local", "secrets"):
                    os.chown(task_dir / d, user.uid, user.gid)
            except OSError as exc:
                raise DriverError(NAME, what, f"task dir: {exc}") from None
        cg = self.task_cgroups(ctx.alloc_id, task)
        shell = ["/bin/sh", "-c", p_script(cg.join_script(), opts.oom_score_adj), SHELL_NAME, *argv]
        proc = self.spawn(ctx.alloc_id, task, shell, env=carry_env(env), cwd=cwd, output=ctx.output, what=cmd)
        return self.adopt(ctx.alloc_id, task, proc)

    def stop(self, handle: TaskHandle, timeout: float, sig: str = "SIGINT") -> None:
        """kill_signal to the process group, SIGKILL after kill_timeout, then SIGKILL to what is left
        of the task in its cgroup (children that left the process group)."""
        cg = Cgroups.of_pid(int(handle.id)) if self._alive(handle) else None
        super().stop(handle, timeout, sig)
        if cg is not None:
            cg.kill_pids()

    def remove_cgroups(self, alloc_id: str, task: str) -> None:
        """Whatever still runs in the task's cgroup goes with it (nothing else would end it)."""
        Cgroups.of_task(alloc_id, task).kill_all()

    def _exec_plan(
        self, handle: TaskHandle, argv: list[str], env: Mapping[str, str] | None
    ) -> ExecPlan | str:
        """The command line, environment and dir that run argv as the task runs; why not, as text.
        The environment is `env`, the one the runner recorded at the task's start, never the task's
        /proc/<pid>/environ (the task can rewrite that: issue 32); without it, HOST_ENV only."""
        if not self._alive(handle):
            return "task is not running"
        pid = int(handle.id)
        creds = credentials(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return "the task's process is gone"
        if creds is None:
            return "the task's process is gone"
        uid, gid, groups = creds
        inner = [host_tool("nsenter", NAME, "exec"), f"--target={pid}", "--net", "--"]
        if uid != self.agent_uid:
            user = RawUser(str(uid), uid, gid, groups or (gid,))
            inner += user.setpriv_argv(host_tool("setpriv", NAME, "exec"))
        inner += [*enter_task_env("/bin/sh", host_tool("env", NAME, "exec")), *argv]
        joins = "".join(f'echo "$$" > {shlex.quote(str(p))}; ' for p in cgroup_procs_of(pid))
        carried = carry_env(env if env is not None else HOST_ENV)
        return ExecPlan(["/bin/sh", "-c", f"{joins}exec {shlex.join(inner)}"], carried, cwd)
