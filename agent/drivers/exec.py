"""The exec driver: a plain process, isolated as Nomad's exec driver isolates it by default, and
stricter where that is cheap. Nothing but util-linux, coreutils and /bin/sh is used (no helper binary):

    agent --Popen(new session)--> P  /bin/sh: joins the task's cgroups; `trap ''` on the signals the
                                     agent sends; exec nsenter --net=<alloc netns> (joined by path);
                                     exec unshare --mount --pid --ipc --uts --fork --kill-child.
                                     P is the pid the agent tracks (TaskHandle.id), and its process group.
    P (unshare, waiting) --fork--> C  pid 1 of the new pid namespace (pid_mode/ipc_mode "host": no pid
                                     or ipc namespace), /bin/sh with the setup script:
                                     a tmpfs root at <task dir>/chroot holding the chroot_env allowlist
                                     (bind, ro,nosuid,nodev), /local, /secrets, /alloc (if the alloc has
                                     one) and /tmp (<task dir>/tmp) rw,nosuid,nodev, a fresh /proc
                                     (/proc/sys read-only), a minimal /dev (null zero full random
                                     urandom tty, fd links, a small /dev/shm); the root is remounted
                                     read-only, pivot_root'ed into, and the host's root detached; cd to
                                     config.work_dir; then exec /bin/sh -c INIT (inside the new root):
                                     the task's init.
    C --fork--> W                    env --default-signal setpriv --reuid --regid --groups
                                     --inh-caps=-all --bounding-set --no-new-privs -- <command> <args>:
                                     the workload, as `user` (nobody by default). C waits for it and
                                     exits with its status; pid 1 exiting takes the namespace down.

The mounts exist only in the task's private mount namespace (propagation private): the host's mount
table never sees them and they go with the task's last process, so teardown (`unmount_below`) and the
sweeper find nothing of them to unmount; <task dir>/chroot is an empty directory on the host.

Signals: `os.killpg(P, sig)` reaches P, C, W and W's children (no job control anywhere, so all stay
in P's process group). P (unshare) and C ignore the agent's signals, inherited SIG_IGN from P's
`trap ''` (C is also pid 1 of its namespace, which drops signals it has no handler for); W starts
with every signal reset to its default (`env --default-signal`), so a workload's own handlers (or
default actions) see exactly what the agent sends. Exit: W's exit code, or 128+N if a signal N killed
it (as docker reports it); SIGKILL to the group (stop after kill_timeout) kills P itself (-9).

A restarted agent finds P again by pid plus the process start time (which a reused pid would not
have); exits are watched with a pidfd (no polling), the agent's own children reaped for their code.
The session, cgroups, handle, exits, signals and stop are agent.drivers.process's, shared with raw_exec.
`exec` (change_mode script) enters C's namespaces and root with nsenter, joins the task's cgroups
and runs the command through the same setpriv as the workload (read back from C's command line).

Users: `user` is resolved on the node (nobody when unset); uid 0 only when the client config allows
it (exec_allow_root), otherwise, and for an unknown user, start is a DriverError. local/ and secrets/
are chowned to the user at every start (files the agent writes there keep their owner and perms);
root keeps ROOT_CAPS only, any other user no capability; the task's cap_add / cap_drop change that
within the exec plugin config's allow_caps (agent.drivers.execopts: a user's added caps are ambient).
The chroot must hold sh, env, setpriv and umount (DEFAULT_CHROOT_ENV does, through /bin and /usr);
start checks that. A setup that fails is a
DriverError carrying the setup's stderr; start returns once the init runs inside the new root.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import select
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.allocdir.hostvolumes import dir_identity
from agent.command.plugins import DEFAULT_CHROOT_ENV, ExecPlugin
from agent.drivers.base import DriverError, ExitReport, Mount, TaskContext, TaskHandle, inside_env
from agent.drivers.cgroups import cgroup_procs_of
from agent.drivers.execopts import ExecOpts, caps_in_mask, exec_plan, exec_refusals
from agent.drivers.hostproc import (
    ENTER_TASK_ENV,
    carried_env,
    carry_env,
    children,
    host_tool,
    read_environ,
    read_log_tail,
)
from agent.drivers.keeperclient import EXITS_DIR, KeptProcess
from agent.drivers.process import ProcessDriver
from agent.drivers.session import ExecPlan
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.structs.model import Task

log = logging.getLogger(__name__)
DEFAULT_USER = "nobody"
CHROOT_DIR = "chroot"  # the task's root (a mount point inside its mount namespace only)
TMP_DIR = "tmp"  # <task dir>/tmp, the task's /tmp
INIT_NAME = "fieldlab-task"  # $0 of the task's init (C): how exec and start recognise it
SETUP_NAME = "fieldlab-setup"
SETUP_POLL = 0.005  # seconds between looks for the task's init during setup
SETUP_TIMEOUT = 15.0  # seconds for the chroot to be built
# The signals the agent may send (change_signal, kill_signal) that would end P or C by default.
SHIELDED_SIGNALS = tuple(
    int(getattr(signal, name))
    for name in [
        *("SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE"),
        *("SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGTSTP", "SIGTTIN"),
        *("SIGTTOU", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSYS"),
    ]
    if hasattr(signal, name)
)
# What a task running as root may keep: docker's default set without mknod and sys_chroot (a chroot
# is no boundary to CAP_SYS_CHROOT). Any other user keeps no capability at all.
ROOT_CAPS = (
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "net_bind_service",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
)
DEV_SHM = "/dev/shm"  # noqa: S108 - inside the chroot: a tmpfs of the task's own
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
# The task's init (C), run by /bin/sh inside the new root as
#   sh -c INIT fieldlab-task <env> <setpriv> <uid> <gid> <groups> <caps> <sh> <command> <args...>
# C runs with HOST_ENV and the task's variables carried (agent.drivers.hostproc.carry_env): they become
# the environment only after setpriv has dropped to the task's user, through `sh -c ENTER_TASK_ENV`.
# `amb`: the inheritable and ambient caps of a task that is not root (its cap_add, as Nomad's executor
# gives them: agent.drivers.execopts), "-all" for root.
INIT = (
    'env=$1 setpriv=$2 uid=$3 gid=$4 groups=$5 caps=$6 sh=$7 amb=$8; shift 8; "$env" --default-signal '
    '"$setpriv" --reuid="$uid" --regid="$gid" --groups="$groups" --inh-caps="$amb" --ambient-caps="$amb" '
    f'--bounding-set="$caps" --no-new-privs -- "$sh" -c {shlex.quote(ENTER_TASK_ENV)} "$env" "$@" & wait $!'
)
# The init of a task an agent before the exec options started (no ambient caps): still recognised.
INIT_V2 = (
    'env=$1 setpriv=$2 uid=$3 gid=$4 groups=$5 caps=$6 sh=$7; shift 7; "$env" --default-signal "$setpriv" '
    '--reuid="$uid" --regid="$gid" --groups="$groups" --inh-caps=-all --bounding-set="$caps" '
    f'--no-new-privs -- "$sh" -c {shlex.quote(ENTER_TASK_ENV)} "$env" "$@" & wait $!'
)
# The init of a task an agent before issue 32 started (its environment was the task's own): still
# recognised, so `alloc exec` and restore work on it after an upgrade.
INIT_V1 = (
    'env=$1 setpriv=$2 uid=$3 gid=$4 groups=$5 caps=$6; shift 6; "$env" --default-signal "$setpriv" '
    '--reuid="$uid" --regid="$gid" --groups="$groups" --inh-caps=-all --bounding-set="$caps" '
    '--no-new-privs -- "$@" & wait $!'
)
# A setup step that fails exits with SETUP_FAILED and says SETUP_FAILED_LINE on stderr (the EXIT trap),
# so a task that ends at once (with any code) is told from a setup that never reached it.
SETUP_FAILED = 199
SETUP_FAILED_LINE = "fieldlab-setup: isolation setup failed"
SETUP_ERR = ".setup-stderr"  # in the task dir (root's): the setup's stderr, truncated at each start


@dataclass(frozen=True)
class TaskUser:
    """Who an exec task runs as, resolved on the node (the chroot's /etc/passwd is the node's)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    @property
    def basis(self) -> tuple[str, ...]:
        """The caps the task has before its cap_add / cap_drop: none for a user, ROOT_CAPS for root."""
        return ROOT_CAPS if self.uid == 0 else ()


def agent_bounding_set() -> tuple[str, ...]:
    """The capabilities in the agent's own bounding set (what a task could be given at most)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return caps_in_mask(int(line.split()[1], 16))
    return ()


def resolve_user(task: Task, allow_root: bool) -> TaskUser:
    """The task's `user` (nobody when unset); root only when the client config allows it."""
    name = task.user or DEFAULT_USER
    try:
        pw = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError, OverflowError):
        raise DriverError("exec", f"task {task.name}", f'user "{name}" does not exist on this node') from None
    if pw.pw_uid == 0 and not allow_root:
        raise DriverError(
            "exec",
            f"task {task.name}",
            f'user "{name}" (uid 0) is not allowed: exec tasks run as root only when the client '
            "config sets exec_allow_root = true",
        )
    groups = tuple(dict.fromkeys([pw.pw_gid, *os.getgrouplist(pw.pw_name, pw.pw_gid)]))
    return TaskUser(pw.pw_name, pw.pw_uid, pw.pw_gid, groups)


@dataclass(frozen=True)
class InitArgs:
    """The task's init (C) as read back from its command line: what `exec` needs after a restart."""

    env: str
    setpriv: str
    uid: str
    gid: str
    groups: str
    caps: str
    sh: str = ""  # "": an init of INIT_V1, whose environment is the task's own
    ambient: str = "-all"  # the inheritable and ambient caps ("-all": an init of INIT_V2 or V1)

    @classmethod
    def of(cls, pid: int) -> InitArgs | None:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if len(argv) >= 12 and argv[1:4] == [b"-c", INIT.encode(), INIT_NAME.encode()]:
            return cls(*(a.decode() for a in argv[4:12]))
        if len(argv) >= 11 and argv[1:4] == [b"-c", INIT_V2.encode(), INIT_NAME.encode()]:
            return cls(*(a.decode() for a in argv[4:11]))
        if len(argv) >= 10 and argv[1:4] == [b"-c", INIT_V1.encode(), INIT_NAME.encode()]:
            return cls(*(a.decode() for a in argv[4:10]))
        return None

    def setpriv_argv(self) -> list[str]:
        """The same privileges as the workload (INIT), for a command run in the task."""
        return [
            self.env,
            "--default-signal",
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            f"--groups={self.groups}",
            f"--inh-caps={self.ambient}",
            f"--ambient-caps={self.ambient}",
            f"--bounding-set={self.caps}",
            "--no-new-privs",
            "--",
        ]


def task_init(pid: int) -> tuple[int, InitArgs] | None:
    """The init (C) of the task whose tracked pid is `pid`, once it runs inside the new root."""
    for child in children(pid):
        args = InitArgs.of(child)
        if args is not None:
            return child, args
    return None


def _host_tool(name: str) -> str:
    return host_tool(name, "exec", "isolation")


@dataclass(frozen=True)
class Bind:
    """One chroot_env entry that exists on the node."""

    host: str
    inside: str
    is_dir: bool


class ExecDriver(ProcessDriver):
    name = "exec"
    joins_container_netns = False
    keeps_exit_status = False  # the task was a child of the agent that started it

    def __init__(
        self,
        on_exit: ExitReport | None = None,
        *,
        allow_root: bool = False,
        chroot_env: tuple[tuple[str, str], ...] = DEFAULT_CHROOT_ENV,
        exits_dir: Path | None = EXITS_DIR,
        plugin: ExecPlugin | None = None,
        bugs: Bugs = NO_BUGS,
    ) -> None:
        super().__init__(on_exit, exits_dir=exits_dir)
        self.bugs = bugs  # the fault flags its option mapping takes (execopts.exec_plan)
        self.allow_root = allow_root  # a task may ask for user "root" (client config exec_allow_root)
        self.chroot_env = chroot_env  # (host path, path in the chroot) (client config chroot_env)
        self.plugin = plugin or ExecPlugin()  # Nomad's plugin "exec" config: allow_caps, default modes

    def refusals(self, task: Task, group_network: str) -> list[tuple[str, str]]:
        """(config key, why) of each option of the task this node refuses, at submission."""
        del group_network  # an exec task's options do not depend on it
        return exec_refusals(task.config, self.plugin)

    # -- the chroot -------------------------------------------------------------------------------
    def binds(self) -> list[Bind]:
        """chroot_env entries whose host path exists, parents first (missing ones are skipped, as
        Nomad does: /lib64 is not on every node)."""
        out = []
        for host, inside in self.chroot_env:
            if os.path.exists(host):
                out.append(Bind(host, os.path.normpath(inside), os.path.isdir(host)))
        return sorted(out, key=lambda b: b.inside)

    def inside_path(self, tool: str) -> str:
        """Where a node tool the init needs is inside the chroot (through chroot_env)."""
        for base in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
            host = f"{base}/{tool}"
            if not os.path.exists(host):
                continue
            for b in self.binds():
                if host == b.host or host.startswith(b.host.rstrip("/") + "/"):
                    return b.inside.rstrip("/") + host[len(b.host.rstrip("/")) :] or "/"
        raise DriverError(
            "exec",
            "chroot_env",
            f"{tool} is not inside the chroot (the task's init needs sh, env, setpriv and umount)",
        )

    def setup_script(
        self,
        task_dir: Path,
        mounts: tuple[Mount, ...] = (),
        work_dir: str = "",
        oom_score_adj: int | None = 0,
    ) -> str:
        """The script C runs (as pid 1 of the new namespaces, still on the host's root): build the
        root, pivot into it, detach the host's root, exec the init given as "$@". `mounts`: the
        task's host volumes, bound (nosuid, nodev; ro when read only) after the task's own dirs,
        private to the task's mount namespace whatever their propagation_mode. `work_dir`: the
        task's cwd (config.work_dir), entered inside the new root only (a link there resolves inside
        it), made when missing where the root lets it be (local/, tmp/, ...), as runc makes it.
        `oom_score_adj`: the task's, written before its init runs (None: the agent's is inherited)."""
        mount, mkdir, ln, pivot, stat = (
            _host_tool(t) for t in ("mount", "mkdir", "ln", "pivot_root", "stat")
        )
        umount = self.inside_path("umount")
        q = shlex.quote

        def at(inside: str) -> str:
            return '"$R"' + q(inside)

        lines = [
            # The setup's own stderr goes to SETUP_ERR (read when it fails); the init gets the task's.
            f"exec 3>&2 2>{q(str(task_dir / SETUP_ERR))}",
            "set -e",
            f'trap \'rc=$?; if [ $rc -ne 0 ]; then echo "{SETUP_FAILED_LINE} ($rc)" >&2; '
            f"exit {SETUP_FAILED}; fi' EXIT",
            f"R={q(str(task_dir / CHROOT_DIR))}",
            f'{mount} -t tmpfs -o mode=0755,size=1m,nr_inodes=4096,nosuid,nodev fieldlab-root "$R"',
        ]
        for b in self.binds():
            if b.is_dir:
                lines.append(f"{mkdir} -p {at(b.inside)}")
            else:
                lines += [f"{mkdir} -p {at(os.path.dirname(b.inside))}", f": > {at(b.inside)}"]
            lines.append(f"{mount} -o bind,ro,nosuid,nodev {q(b.host)} {at(b.inside)}")
        shared = task_dir.parent / "alloc"
        task_mounts = [(task_dir / "local", "/local"), (task_dir / "secrets", "/secrets")]
        task_mounts += [(task_dir / TMP_DIR, "/tmp")]  # noqa: S108 - the chroot's /tmp
        if shared.is_dir():
            task_mounts.append((shared, "/alloc"))
        for host_dir, inside in task_mounts:
            lines += [
                f"{mkdir} -p {at(inside)}",
                f"{mount} -o bind,nosuid,nodev {q(str(host_dir))} {at(inside)}",
            ]
        for m in mounts:
            ro = "ro," if m.read_only else ""
            lines += [
                f"{mkdir} -p {at(m.task_path)}",
                f"{mount} -o bind,{ro}nosuid,nodev {q(m.host_path)} {at(m.task_path)}",
            ]
            if m.fd >= 0:  # the dir mounted is the one the runner checked and holds, or no task runs
                want = dir_identity(m.fd)
                why = f"host volume {m.host_path} at {m.task_path} changed while it was mounted: refused"
                found = f'"$({stat} -c %d:%i {at(m.task_path)})"'
                lines.append(f"[ {found} = {want} ] || {{ echo {q(why)} >&2; exit 1; }}")
        lines += [
            f"{mkdir} -p {at('/proc')} {at('/dev')}",
            f"{mount} -t proc -o nosuid,nodev,noexec proc {at('/proc')}",
            f"{mount} -o bind,ro {at('/proc/sys')} {at('/proc/sys')}",
            f"if [ -e {at('/proc/sysrq-trigger')} ]; then "
            f"{mount} -o bind /dev/null {at('/proc/sysrq-trigger')}; fi",
            f"{mount} -t tmpfs -o mode=0755,size=64k,nosuid,noexec fieldlab-dev {at('/dev')}",
        ]
        for node in DEV_NODES:
            lines += [f": > {at('/dev/' + node)}", f"{mount} -o bind /dev/{node} {at('/dev/' + node)}"]
        lines += [f"{ln} -s {q(target)} {at('/dev/' + name)}" for name, target in DEV_LINKS]
        lines += [
            f"{mkdir} -m 1777 {at(DEV_SHM)}",
            f"{mount} -t tmpfs -o mode=1777,size=64m,nosuid,nodev,noexec shm {at(DEV_SHM)}",
            f"{mount} -o remount,ro {at('/dev')}",
            f"{mkdir} {at('/.oldroot')}",
            f'{mount} -o remount,ro "$R"',
            'cd "$R"',
            f"{pivot} . .oldroot",
            "cd /",
            f"{q(umount)} -l /.oldroot",
            *self._enter_work_dir(work_dir),
            *([f"echo {int(oom_score_adj)} > /proc/self/oom_score_adj"] if oom_score_adj is not None else []),
            "trap - EXIT",
            "exec 2>&3 3>&-",
            'exec "$@"',
        ]
        return "\n".join(lines) + "\n"

    def _enter_work_dir(self, work_dir: str) -> list[str]:
        if not work_dir or work_dir == "/":
            return []
        q = shlex.quote
        try:
            mkdir = [f"{q(self.inside_path('mkdir'))} -p -- {q(work_dir)} 2>/dev/null || true"]
        except DriverError:
            mkdir = []  # no mkdir inside the chroot: the dir must exist
        return [
            *mkdir,
            f"cd -- {q(work_dir)} || {{ echo {q(f'work_dir {work_dir}: not a directory in the chroot')} >&2; "
            "exit 1; }",
        ]

    def _prepare_dirs(self, task_dir: Path, user: TaskUser) -> None:
        """The chroot's mount point, /tmp, and local/ + secrets/ owned by the task's user."""
        (task_dir / CHROOT_DIR).mkdir(mode=0o755, exist_ok=True)
        tmp = task_dir / TMP_DIR
        tmp.mkdir(exist_ok=True)
        tmp.chmod(0o1777)
        for d in ("local", "secrets"):
            os.chown(task_dir / d, user.uid, user.gid)

    # -- start --------------------------------------------------------------------------------------
    def start(self, ctx: TaskContext) -> TaskHandle:
        alloc_id, task, netns, task_dir = ctx.alloc_id, ctx.task, ctx.netns, ctx.task_dir
        cmd = str(task.config.get("command", ""))
        args = [str(a) for a in task.config.get("args", [])]
        user = resolve_user(task, self.allow_root)
        held = agent_bounding_set() if self.bugs.exec_user_full_caps else ()
        root = user.uid == 0
        opts = exec_plan(task.config, self.plugin, basis=user.basis, root=root, bugs=self.bugs, held=held)
        if opts.refused:
            key, why = opts.refused[0]
            raise DriverError("exec", f"task {task.name}", f"config.{key}: {why}")
        init = [
            self.inside_path("sh"),
            "-c",
            INIT,
            INIT_NAME,
            self.inside_path("env"),
            self.inside_path("setpriv"),
            str(user.uid),
            str(user.gid),
            ",".join(str(g) for g in user.groups),
            ExecOpts.setpriv_set(opts.caps),
            self.inside_path("sh"),
            ExecOpts.setpriv_set(opts.ambient),
            cmd,
            *args,
        ]
        setup = self.setup_script(task_dir, ctx.mounts, opts.work_dir, opts.oom_score_adj)
        argv = [
            _host_tool("unshare"),
            "--mount",
            "--propagation=private",
            *([] if opts.pid_host else ["--pid"]),
            *([] if opts.ipc_host else ["--ipc"]),
            "--uts",
            "--fork",
            "--kill-child",
            "--",
            "/bin/sh",
            "-c",
            setup,
            SETUP_NAME,
            *init,
        ]
        if netns is not None:
            argv = [_host_tool("nsenter"), f"--net={netns}", "--", *argv]
        try:
            self._prepare_dirs(task_dir, user)
        except OSError as exc:
            raise DriverError("exec", f"task {task.name}", f"task dir: {exc}") from None
        cg = self.task_cgroups(alloc_id, task)
        # P joins the cgroups before exec'ing anything, so no child escapes them; it ignores the
        # signals the agent sends (they are the workload's: see the module docstring).
        shield = " ".join(str(s) for s in SHIELDED_SIGNALS)
        script = f"{cg.join_script()}trap '' {shield}; exec {shlex.join(argv)}"
        env = carry_env(inside_env(ctx.env))
        p_argv = ["/bin/sh", "-c", script]
        proc = self.spawn(alloc_id, task, p_argv, env=env, cwd="/", output=ctx.output, what=cmd)
        self._wait_for_init(proc, task, task_dir)
        return self.adopt(alloc_id, task, proc)

    def _wait_for_init(self, proc: subprocess.Popen[bytes] | KeptProcess, task: Task, task_dir: Path) -> None:
        """Until the init runs inside the finished root. A setup that fails is a DriverError that
        says why (the setup's stderr), not a task that exits; a task that ended before the init was
        seen (it ran and exited at once, with any code) is a task exit: P is left unreaped for
        `adopt`, which reports its code."""
        deadline = time.monotonic() + SETUP_TIMEOUT
        pidfd = os.pidfd_open(proc.pid)
        try:
            while task_init(proc.pid) is None:
                ended, code = self.ended(proc)
                if ended:
                    said = read_log_tail(task_dir, SETUP_ERR, 0)
                    if code == SETUP_FAILED and SETUP_FAILED_LINE in said:
                        self.reap(proc)
                        said = said.replace(SETUP_FAILED_LINE, "").strip()
                        raise DriverError(
                            "exec", f"task {task.name}", f"isolation setup failed: {said or 'no output'}"
                        )
                    return  # the task ran and ended: its exit is reported like any other
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    self.reap(proc)
                    raise DriverError(
                        "exec", f"task {task.name}", f"isolation setup took over {SETUP_TIMEOUT}s"
                    )
                # Wait on the setup process itself: wakes at once when it ends, else re-checks the init.
                select.select([pidfd], [], [], SETUP_POLL)
        finally:
            os.close(pidfd)

    def _exec_plan(
        self, handle: TaskHandle, argv: list[str], env: Mapping[str, str] | None
    ) -> ExecPlan | str:
        """The command line and environment that run argv inside the task, in the task's environment
        (`env` as the runner recorded it, else the one the task's init carries: a root process the
        task cannot change); why not, as text. Every host-side step runs with HOST_ENV only."""
        if not self._alive(handle):
            return "task is not running"
        found = task_init(int(handle.id))
        if found is None:
            if _isolated(int(handle.id)):
                return "the task's init is gone"
            # A task started by an agent without isolation (before an upgrade): as that agent did.
            nsenter = [_host_tool("nsenter"), f"--target={handle.id}", "--net", "--mount", "--"]
            enter_env = ["/bin/sh", "-c", ENTER_TASK_ENV, _host_tool("env")]
            return ExecPlan([*nsenter, *enter_env, *argv], carry_env(dict(env or {})))
        init, spec = found
        if env is None:
            environ = read_environ(init)
            env = carried_env(environ) or environ  # an INIT_V1 init holds the task's environment as is
        task_env = carry_env(inside_env(env))
        enter = [
            _host_tool("nsenter"),
            f"--target={init}",
            "--mount",
            "--pid",
            "--net",
            "--ipc",
            "--uts",
            "--root",
            "--wd",
            "--",
            *spec.setpriv_argv(),
        ]
        enter += [spec.sh or self.inside_path("sh"), "-c", ENTER_TASK_ENV, spec.env]
        joins = "".join(f'echo "$$" > {shlex.quote(str(p))}; ' for p in cgroup_procs_of(init))
        # With a tty the pty becomes the controlling terminal inside the task's pid namespace (the
        # chroot's setsid), so a shell there can hand the terminal to its jobs and take it back.
        tty = [*enter, _host_tool("setsid"), "--ctty", "--wait", *argv]
        return ExecPlan(
            ["/bin/sh", "-c", f"{joins}exec {shlex.join([*enter, *argv])}"],
            task_env,
            tty_argv=["/bin/sh", "-c", f"{joins}exec {shlex.join(tty)}"],
        )


def _isolated(pid: int) -> bool:
    """Whether the tracked process is the unshare of an isolated task (not a pre-isolation task)."""
    try:
        return SETUP_NAME.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
