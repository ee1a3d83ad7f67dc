"""An exec or raw_exec task's `config` as Nomad's drivers read it (pure: plain data in, what the driver
applies or the refusals out; drivers/exec/driver.go and drivers/rawexec/driver.go, their TaskConfig
and validate, and drivers/shared/executor for the effect). Every option is honoured here or refused
with the reason; `exec_refusals` / `raw_exec_refusals` are the client's check at submission (they
depend on the node's plugin config), `exec_plan` / `raw_exec_plan` the same again at start, with what
to apply. docs/drivers.md lists them all.

exec, as Nomad's driver: `work_dir` the workload's cwd inside the chroot (absolute; created when
missing where the task may write); `cap_add` / `cap_drop` as Nomad's capabilities.Calculate: the
basis kept within plugin `allow_caps` (Nomad's default list), less the drops, plus the adds, each add
within `allow_caps`; a task of another user than root gets them as Nomad's executor gives them
(bounding, permitted, inheritable, ambient). The basis is this agent's own, stricter than Nomad's
(docs: no capability for a user, ROOT_CAPS for root). `pid_mode` / `ipc_mode`: "private" or "host",
the plugin's `default_pid_mode` / `default_ipc_mode` when unset (Nomad's executor.IsolationMode);
"host" is this agent's isolation given up, so a task may ask for it only where the plugin's default
for that namespace is "host" (Nomad's driver lets every task ask).

raw_exec, as Nomad's driver: `work_dir` the process's cwd (absolute), `oom_score_adj` written to the
process's /proc/self/oom_score_adj (not negative), `denied_envvars` (and the plugin's) remove the
variables whose name matches one of the globs (`*` any run of characters, as go-glob).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.command.plugins import ExecPlugin, RawExecPlugin
from agent.drivers.dockervalues import read_str, read_strs
from agent.fieldbugs.bugs import NO_BUGS, Bugs

PRIVATE, HOST = "private", "host"
EXEC_HONOURED = frozenset({"command", "args", "work_dir", "cap_add", "cap_drop", "pid_mode", "ipc_mode"})
RAW_EXEC_HONOURED = frozenset({"command", "args", "work_dir", "oom_score_adj", "denied_envvars"})
_NOT_EXECS = (
    "not a config field of Nomad's exec driver (its TaskConfig: command, args, pid_mode, ipc_mode, "
    "cap_add, cap_drop, work_dir); Nomad's raw_exec has it"
)
_CGROUP_OVERRIDE = (
    "running the task in a cgroup made outside the agent is not implemented: this agent accounts, "
    "limits and stops a raw_exec task through its own cgroup (Nomad: 'all resource isolation "
    "guarantees are lost for all tasks if set')"
)
EXEC_REFUSED: Mapping[str, str] = {
    "cgroup_v1_override": _NOT_EXECS,
    "cgroup_v2_override": _NOT_EXECS,
    "oom_score_adj": _NOT_EXECS + " (Nomad's exec executor sets 0 for every task)",
}
RAW_EXEC_REFUSED: Mapping[str, str] = {
    "cgroup_v1_override": _CGROUP_OVERRIDE,
    "cgroup_v2_override": _CGROUP_OVERRIDE,
}
# The kernel's capability names (capability(7), to CAP_CHECKPOINT_RESTORE): Nomad's validate refuses
# a cap_add or cap_drop the system does not support.
CAP_NUMBERS = (
        "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
        "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
        "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
        "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
        "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
        "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
)  # fmt: skip
KNOWN_CAPS = frozenset(CAP_NUMBERS)  # CAP_NUMBERS in the kernel's order: a name's index is its number


def caps_in_mask(mask: int) -> tuple[str, ...]:
    """The names of the capabilities set in a /proc/<pid>/status mask (CapBnd, CapEff, ...)."""
    return tuple(sorted(name for n, name in enumerate(CAP_NUMBERS) if mask >> n & 1))


def cap_name(name: str) -> str:
    """Nomad's capability spelling made one: lower case, no CAP_ prefix."""
    n = name.strip().lower()
    return n[4:] if n.startswith("cap_") else n


@dataclass
class ExecOpts:
    """What start applies to an exec task: its caps (setpriv's bounding set; `ambient` also the
    inheritable and ambient sets, for a task that is not root), namespaces, cwd; or the refusals."""

    work_dir: str = ""
    caps: tuple[str, ...] = ()
    ambient: tuple[str, ...] = ()
    pid_host: bool = False
    ipc_host: bool = False
    # written as the task's own before it runs (Nomad's executor: 0, never the agent's, PR #10698);
    # None: inherited from the agent (nomad-10663's bug, `exec-inherits-oom-score-adj`)
    oom_score_adj: int | None = 0
    refused: list[tuple[str, str]] = field(default_factory=list)

    def refuse(self, key: str, why: str) -> None:
        self.refused.append((key, why))

    @staticmethod
    def setpriv_set(caps: Iterable[str]) -> str:
        """setpriv's form of a set: -all, then each cap added."""
        return ",".join(["-all", *(f"+{c}" for c in caps)])


@dataclass
class RawExecOpts:
    work_dir: str = ""
    oom_score_adj: int = 0  # always written, 0 unless set: never the agent's (Nomad's PR #19515)
    denied_envvars: tuple[str, ...] = ()
    refused: list[tuple[str, str]] = field(default_factory=list)

    def refuse(self, key: str, why: str) -> None:
        self.refused.append((key, why))

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The task's environment without the denied variables (Nomad's buildEnvList)."""
        return {k: v for k, v in env.items() if not any(glob_match(g, k) for g in self.denied_envvars)}


def glob_match(pattern: str, name: str) -> bool:
    """go-glob's Glob: `*` matches any run of characters, nothing else is special."""
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), name) is not None


def _expand(names: Iterable[str]) -> set[str]:
    """A set of capability names as Nomad's capabilities.New makes it: "all" is every one."""
    out = set(names)
    return (out - {"all"}) | KNOWN_CAPS if "all" in out else out


def _whole(v: object) -> int | None:
    if isinstance(v, str):
        return int(v) if re.fullmatch(r"-?\d+", v.strip()) else None
    if isinstance(v, int | float) and not isinstance(v, bool) and int(v) == v:
        return int(v)
    return None


def _interpolated(value: object) -> bool:
    return "${" in repr(value)


def _work_dir(config: Mapping[str, Any], out: ExecOpts | RawExecOpts, submission: bool) -> str:
    wd = read_str(config, "work_dir", out)
    if not wd or (submission and _interpolated(wd)):
        return ""
    if not wd.startswith("/"):
        out.refuse("work_dir", f'must be an absolute path, not "{wd}" (Nomad\'s driver validation)')
        return ""
    return posixpath.normpath(wd).replace("//", "/")


def _unknown(
    config: Mapping[str, Any], honoured: frozenset[str], refused: Mapping[str, str], driver: str
) -> list[tuple[str, str]]:
    out = []
    for key in config:
        if key in refused:
            out.append((key, refused[key]))
        elif key not in honoured:
            out.append((key, f"not a config field of Nomad's {driver} driver"))
    return out


# -- exec --------------------------------------------------------------------------------------------


def exec_refusals(config: Mapping[str, Any], plugin: ExecPlugin) -> list[tuple[str, str]]:
    """(config key, why) of each option an exec task may not have on this node, at submission (values
    still holding `${...}` are checked again at start, interpolated)."""
    return exec_plan(config, plugin, basis=(), submission=True).refused


def exec_plan(
    config: Mapping[str, Any],
    plugin: ExecPlugin,
    *,
    basis: Sequence[str],
    root: bool = False,
    submission: bool = False,
    bugs: Bugs = NO_BUGS,
    held: Sequence[str] = (),
) -> ExecOpts:
    """What start applies for the task's options: `basis` the caps the task has without any (the
    agent's: none for a user, ROOT_CAPS for root), `root` whether it runs as uid 0. `bugs`: the
    driver's fault flags: `exec-shared-pid-namespace` (nomad-9911: no PID or IPC namespace of its
    own), `exec-caps-bounding-only` (nomad-16642: a user's caps in the bounding set only),
    `exec-user-full-caps` (nomad-5783, CVE-2019-12618: a user with every capability the agent holds,
    `held`; all of them when not given), `exec-inherits-oom-score-adj` (nomad-10663: the agent's
    oom_score_adj left to the task)."""
    out = ExecOpts()
    out.refused += _unknown(config, EXEC_HONOURED, EXEC_REFUSED, "exec")
    out.work_dir = _work_dir(config, out, submission)
    for key, default in (("pid_mode", plugin.default_pid_mode), ("ipc_mode", plugin.default_ipc_mode)):
        mode = read_str(config, key, out)
        if submission and _interpolated(mode):
            continue
        if mode not in ("", PRIVATE, HOST):
            out.refuse(key, f'must be "{PRIVATE}" or "{HOST}", not "{mode}" (Nomad\'s driver validation)')
            continue
        if mode == HOST and default != HOST:
            out.refuse(
                key,
                f'"{HOST}" gives up this agent\'s {key[:3]} namespace isolation: allowed only where the '
                f'exec plugin config sets default_{key} = "{HOST}" (Nomad\'s default: "{PRIVATE}")',
            )
            continue
        if (mode or default) == HOST or bugs.exec_shared_pid_namespace:
            setattr(out, f"{key[:3]}_host", True)
    allow = _expand(cap_name(c) for c in plugin.allow_caps)
    adds, drops = (_expand(cap_name(c) for c in read_strs(config, k, out)) for k in ("cap_add", "cap_drop"))
    for key, named in (("cap_add", adds), ("cap_drop", drops)):
        if submission and _interpolated(named):
            continue
        if bad := sorted(c for c in set(named) if c not in KNOWN_CAPS):
            out.refuse(key, f"configured with capabilities not supported by system: {', '.join(bad)}")
    if not_allowed := sorted(c for c in set(adds) if c in KNOWN_CAPS and c not in allow):
        out.refuse(
            "cap_add",
            f"driver does not allow the following capabilities: {', '.join(not_allowed)} (the exec "
            "plugin config's allow_caps; Nomad's default list)",
        )
    caps = ({cap_name(c) for c in basis} & allow) - drops | (adds & KNOWN_CAPS)
    out.caps = tuple(sorted(caps))
    if bugs.exec_user_full_caps and not root:
        out.caps = tuple(sorted(set(held) or KNOWN_CAPS))
    out.ambient = () if root or bugs.exec_caps_bounding_only else out.caps
    if bugs.exec_inherits_oom_score_adj:
        out.oom_score_adj = None
    return out


# -- raw_exec ----------------------------------------------------------------------------------------


def raw_exec_refusals(config: Mapping[str, Any], plugin: RawExecPlugin) -> list[tuple[str, str]]:
    return raw_exec_plan(config, plugin, submission=True).refused


def raw_exec_plan(
    config: Mapping[str, Any], plugin: RawExecPlugin, *, submission: bool = False
) -> RawExecOpts:
    out = RawExecOpts()
    out.refused += [
        (k, why) for k, why in _unknown(config, RAW_EXEC_HONOURED, RAW_EXEC_REFUSED, "raw_exec")
        if not (k in RAW_EXEC_REFUSED and config[k] in (None, "", [], {}))
    ]  # fmt: skip
    out.work_dir = _work_dir(config, out, submission)
    v = config.get("oom_score_adj")
    if v is not None and not (submission and _interpolated(v)):
        n = _whole(v)
        if n is None:
            out.refuse("oom_score_adj", f"must be a whole number, not {v!r}")
        elif n < 0:
            out.refuse("oom_score_adj", "must not be negative (Nomad's driver validation)")
        elif n > 1000:
            out.refuse("oom_score_adj", f"must be at most 1000 (the kernel's range), not {n}")
        else:
            out.oom_score_adj = n
    out.denied_envvars = (*plugin.denied_envvars, *read_strs(config, "denied_envvars", out))
    return out
