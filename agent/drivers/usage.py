"""What a running task uses now (Nomad's `alloc status -stats`, `GET /v1/client/allocation/:id/stats`):
memory and CPU time, read where the kernel keeps them for the task.

- exec and raw_exec tasks: the task's own cgroup (agent.drivers.cgroups.Cgroups): on cgroup v2
  `memory.current`, `memory.peak`, `memory.stat` (anon, file) and `cpu.stat` (usage/user/system
  µs, throttling); on v1 the memory controller's files.
- docker tasks: the engine's one-shot stats of the container (no second sample is waited for).

CPU percent needs two samples: the caller keeps the last one per task (`percent`).
Reads are of the kernel's and the engine's files only, never of a task-owned path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Usage:
    rss: int = 0  # bytes of anonymous memory
    cache: int = 0  # bytes of page cache
    swap: int = 0
    usage: int = 0  # bytes charged in all
    max_usage: int = 0  # the peak, where the kernel keeps one
    cpu_total_ns: int = 0  # CPU time used since start
    cpu_user_ns: int = 0
    cpu_system_ns: int = 0
    throttled_periods: int = 0
    throttled_ns: int = 0
    measured_memory: tuple[str, ...] = field(default_factory=tuple)
    measured_cpu: tuple[str, ...] = field(default_factory=tuple)


def _int(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0


def _keyed(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def _read(d: Path, name: str) -> str | None:
    try:
        return (d / name).read_text()  # node: the kernel's cgroup files
    except OSError:
        return None


def cgroup_usage(dirs: list[Path], v2: bool) -> Usage | None:
    """The usage of a task's cgroup dirs; None when the cgroup is gone."""
    if v2:
        d = dirs[0]
        current = _read(d, "memory.current")
        if current is None:
            return None
        mem = _keyed(_read(d, "memory.stat") or "")
        cpu = _keyed(_read(d, "cpu.stat") or "")
        return Usage(
            rss=mem.get("anon", 0),
            cache=mem.get("file", 0),
            swap=_int(_read(d, "memory.swap.current") or "0"),
            usage=_int(current),
            max_usage=_int(_read(d, "memory.peak") or "0"),
            cpu_total_ns=cpu.get("usage_usec", 0) * 1000,
            cpu_user_ns=cpu.get("user_usec", 0) * 1000,
            cpu_system_ns=cpu.get("system_usec", 0) * 1000,
            throttled_periods=cpu.get("nr_throttled", 0),
            throttled_ns=cpu.get("throttled_usec", 0) * 1000,
            measured_memory=("RSS", "Cache", "Swap", "Usage", "Max Usage"),
            measured_cpu=("System Mode", "User Mode", "Throttled Periods", "Throttled Time", "Percent"),
        )
    memory = next((d for d in dirs if "memory" in d.parts), dirs[0])
    current = _read(memory, "memory.usage_in_bytes")
    if current is None:
        return None
    mem = _keyed(_read(memory, "memory.stat") or "")
    return Usage(
        rss=mem.get("rss", 0),
        cache=mem.get("cache", 0),
        swap=mem.get("swap", 0),
        usage=_int(current),
        max_usage=_int(_read(memory, "memory.max_usage_in_bytes") or "0"),
        measured_memory=("RSS", "Cache", "Swap", "Usage", "Max Usage"),
    )


def docker_usage(stats: dict[str, Any]) -> Usage:
    """A container's usage from the engine's stats answer (`GET /containers/:id/stats?stream=0`)."""
    mem = stats.get("memory_stats") or {}
    detail = mem.get("stats") or {}
    cpu = (stats.get("cpu_stats") or {}).get("cpu_usage") or {}
    throttling = (stats.get("cpu_stats") or {}).get("throttling_data") or {}
    return Usage(
        rss=int(detail.get("anon", detail.get("rss", 0)) or 0),
        cache=int(detail.get("file", detail.get("cache", 0)) or 0),
        usage=int(mem.get("usage", 0) or 0),
        max_usage=int(mem.get("max_usage", 0) or 0),
        cpu_total_ns=int(cpu.get("total_usage", 0) or 0),
        cpu_user_ns=int(cpu.get("usage_in_usermode", 0) or 0),
        cpu_system_ns=int(cpu.get("usage_in_kernelmode", 0) or 0),
        throttled_periods=int(throttling.get("throttled_periods", 0) or 0),
        throttled_ns=int(throttling.get("throttled_time", 0) or 0),
        measured_memory=("RSS", "Cache", "Usage", "Max Usage"),
        measured_cpu=("Throttled Periods", "Throttled Time", "Percent"),
    )


def percent(before: tuple[float, float] | None, now: tuple[float, float]) -> float:
    """CPU percent of one core between two (monotonic seconds, CPU ns) samples; 0 for the first."""
    if before is None or now[0] <= before[0]:
        return 0.0
    return max(0.0, (now[1] - before[1]) / ((now[0] - before[0]) * 1e9) * 100.0)
