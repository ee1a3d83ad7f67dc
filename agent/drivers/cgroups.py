"""A process task's cgroups: <cgroup root>/<parent>/<alloc id>.<task> on v2, or that dir below the
memory and cpu controllers on v1 (the parent is the alloc's layout's: agent.structs.layout). P joins them
itself before it exec's the task, so no child escapes them; the orphan sweeper (agent.node.sweeper)
finds tasks of allocs that are gone by these names (every recognised layout's), whichever driver
made them."""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import signal
from pathlib import Path

from agent.structs import layout

CGROUP_ROOT = Path("/sys/fs/cgroup")
KILL_WAIT = 5.0  # seconds to wait for a process after SIGKILL


def _parents() -> list[str]:
    """The task cgroups' parents of every recognised layout (agent.structs.layout.recognised)."""
    return list(dict.fromkeys(lay.cgroup_parent for lay in layout.recognised()))


class Cgroups:
    """A task's cgroup(s): one dir under each v1 controller it uses, or one dir on v2, below the
    parent of its alloc's layout (agent.structs.layout.for_alloc) unless one is given."""

    def __init__(self, name: str, root: Path = CGROUP_ROOT, parent: str | None = None) -> None:
        self.name = name
        self.parent = parent or layout.for_alloc(name.split(".", 1)[0]).cgroup_parent
        self.v2 = (root / "cgroup.controllers").exists()
        self.dirs = (
            [root / self.parent / name]
            if self.v2
            else [root / c / self.parent / name for c in ("memory", "cpu")]
        )

    @classmethod
    def of_task(cls, alloc_id: str, task: str, root: Path = CGROUP_ROOT) -> Cgroups:
        return cls(f"{alloc_id}.{task}", root)

    @classmethod
    def of_pid(cls, pid: int, root: Path = CGROUP_ROOT) -> Cgroups | None:
        """The task cgroups process `pid` is in, None when it is in none (or gone)."""
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        found = _task_cgroup(lines)
        return cls(found[1], root, found[0]) if found else None

    @classmethod
    def found(cls, name: str, root: Path = CGROUP_ROOT) -> Cgroups:
        """The task cgroups called `name` under whichever recognised parent holds them (the sweeper's
        orphans may be an earlier layout's)."""
        for parent in _parents():
            cg = cls(name, root, parent)
            if any(d.is_dir() for d in cg.dirs):
                return cg
        return cls(name, root)

    def create(self, memory_mb: int, cpu_shares: int, memory_max_mb: int = 0) -> list[str]:
        """Create and set limits; return what could not be applied (said in an event, not hidden).
        `memory_max_mb` (resources.memory_max) as Nomad's executor: the hard limit, `memory_mb` then
        the reservation (memory.low, v1's soft limit); -1: no hard limit."""
        problems = []
        for d in self.dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                problems.append(f"cgroup {d}: {exc.strerror}")
        hard, low = memory_limits(memory_mb, memory_max_mb)
        limits = (
            {
                "memory.max": "max" if hard < 0 else str(hard),
                "cpu.weight": str(max(1, min(10000, cpu_shares // 10))),
            }
            if self.v2
            else {
                "memory.limit_in_bytes": str(hard),
                "cpu.shares": str(max(2, cpu_shares)),
            }
        )
        if low:
            limits["memory.low" if self.v2 else "memory.soft_limit_in_bytes"] = str(low)
        for f, value in limits.items():
            target = next((d / f for d in self.dirs if (d / f).exists()), None)
            if target is None:
                problems.append(f"cgroup file {f} not available")
                continue
            try:
                target.write_text(value)
            except OSError as exc:
                problems.append(f"{target}: {exc.strerror}")
        return problems

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs if (d / "cgroup.procs").exists()]

    def join_script(self) -> str:
        """Shell that moves the running shell into these cgroups (P, before it exec's anything)."""
        return "".join(f'echo "$$" > {shlex.quote(str(p))}; ' for p in self.procs_files())

    @classmethod
    def names(cls, root: Path = CGROUP_ROOT) -> list[str]:
        """Names of the task cgroups the agent made (for the orphan sweeper)."""
        v2 = (root / "cgroup.controllers").exists()
        found: set[str] = set()
        for parent in _parents():
            base = root / parent if v2 else root / "memory" / parent
            if base.is_dir():
                found.update(p.name for p in base.iterdir() if p.is_dir())
        return sorted(found)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                found.update(int(x) for x in f.read_text().split())
        return sorted(found)

    def kill_pids(self) -> None:
        """SIGKILL every process in the cgroup and wait (a while) for each to be gone."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids():  # reaped by their parent (init) soon; rmdir needs them gone
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                select.select([fd], [], [], KILL_WAIT)
                os.close(fd)

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, then remove it (an orphaned task)."""
        self.kill_pids()
        self.remove()

    def remove(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


def task_cgroup_name(proc_cgroup_lines: list[str]) -> str | None:
    """The task cgroup's name ("<alloc>.<task>") in the lines of a /proc/<pid>/cgroup, if any."""
    found = _task_cgroup(proc_cgroup_lines)
    return found[1] if found else None


def _task_cgroup(proc_cgroup_lines: list[str]) -> tuple[str, str] | None:
    """(parent, name) of the task cgroup in the lines of a /proc/<pid>/cgroup, under any recognised
    layout's parent."""
    parents = _parents()
    for line in proc_cgroup_lines:
        parts = line.split(":", 2)[-1].split("/")
        if len(parts) > 2 and parts[1] in parents and parts[2]:
            return parts[1], parts[2]
    return None


def cgroup_procs_of(pid: int) -> list[Path]:
    """The cgroup.procs files of the task cgroups process `pid` is in."""
    cg = Cgroups.of_pid(pid)
    return cg.procs_files() if cg is not None else []


def memory_limits(memory_mb: int, memory_max_mb: int) -> tuple[int, int]:
    """(hard limit, reservation) in bytes, as Nomad's executor's memoryLimits: `memory` the hard limit
    and no reservation; with memory_max, that the hard limit and `memory` the reservation; memory_max
    -1: no hard limit (-1) and `memory` the reservation."""
    mib = 1024 * 1024
    if memory_max_mb < 0:
        return -1, memory_mb * mib
    if memory_max_mb == 0:
        return memory_mb * mib, 0
    return memory_max_mb * mib, memory_mb * mib
