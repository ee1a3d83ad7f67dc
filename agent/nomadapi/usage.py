"""`GET /v1/client/allocation/:id/stats` as Nomad's api.AllocResourceUsage (api/tasks.go): each
running task's memory and CPU (agent.drivers.usage), the alloc's as their sums.

CPU percentages need two samples: `CpuSamples` keeps the last one per task, so the first read of
a task answers 0 % and every later one the use since the read before (Nomad's client samples on a
timer; `nomad alloc status -stats` asks more than once the same way)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from agent.drivers.usage import Usage, percent

_Sample = tuple[float, int, int, int]  # monotonic seconds, total, user, system CPU ns


class CpuSamples:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], _Sample] = {}

    def swap(self, key: tuple[str, str], now: _Sample) -> _Sample | None:
        with self._lock:
            before = self._last.get(key)
            self._last[key] = now
            if len(self._last) > 10_000:  # tasks long gone: forget the oldest half
                for k in list(self._last)[:5_000]:
                    del self._last[k]
            return before


def _resource_usage(u: Usage, before: _Sample | None, now: _Sample) -> dict[str, Any]:
    def pct(i: int) -> float:
        return percent((before[0], before[i]) if before else None, (now[0], now[i]))

    return {
        "MemoryStats": {
            "RSS": u.rss,
            "Cache": u.cache,
            "Swap": u.swap,
            "Usage": u.usage,
            "MaxUsage": u.max_usage,
            "KernelUsage": 0,
            "KernelMaxUsage": 0,
            "Measured": list(u.measured_memory),
        },
        "CpuStats": {
            "SystemMode": pct(3),
            "UserMode": pct(2),
            "TotalTicks": 0.0,
            "ThrottledPeriods": u.throttled_periods,
            "ThrottledTime": u.throttled_ns,
            "Percent": pct(1),
            "Measured": list(u.measured_cpu),
        },
        "DeviceStats": [],
    }


def alloc_usage(alloc_id: str, tasks: Mapping[str, Usage], samples: CpuSamples) -> dict[str, Any]:
    stamp = time.time_ns()
    clock = time.monotonic()
    out: dict[str, Any] = {}
    for name, u in sorted(tasks.items()):
        now: _Sample = (clock, u.cpu_total_ns, u.cpu_user_ns, u.cpu_system_ns)
        before = samples.swap((alloc_id, name), now)
        out[name] = {"ResourceUsage": _resource_usage(u, before, now), "Timestamp": stamp, "Pids": None}
    total = _sum([t["ResourceUsage"] for t in out.values()])
    return {"ResourceUsage": total, "Tasks": out, "Timestamp": stamp}


def _sum(usages: list[dict[str, Any]]) -> dict[str, Any]:
    mem_keys = ("RSS", "Cache", "Swap", "Usage", "MaxUsage", "KernelUsage", "KernelMaxUsage")
    cpu_keys = ("SystemMode", "UserMode", "TotalTicks", "ThrottledPeriods", "ThrottledTime", "Percent")
    measured_m = sorted({m for u in usages for m in u["MemoryStats"]["Measured"]})
    measured_c = sorted({m for u in usages for m in u["CpuStats"]["Measured"]})
    return {
        "MemoryStats": {k: sum(u["MemoryStats"][k] for u in usages) for k in mem_keys}
        | {"Measured": measured_m},
        "CpuStats": {k: sum(u["CpuStats"][k] for u in usages) for k in cpu_keys} | {"Measured": measured_c},
        "DeviceStats": [],
    }


def no_usage() -> dict[str, Any]:
    """api.AllocResourceUsage with no task measured (none runs): Nomad's zero values (nil Measured
    lists, Timestamp 0), as its alloc runner answers for a stopped alloc until it is collected."""
    return {
        "ResourceUsage": {
            "MemoryStats": dict.fromkeys(
                ("RSS", "Cache", "Swap", "Usage", "MaxUsage", "KernelUsage", "KernelMaxUsage"), 0
            )
            | {"Measured": None},
            "CpuStats": dict.fromkeys(
                ("SystemMode", "UserMode", "TotalTicks", "ThrottledPeriods", "ThrottledTime", "Percent"), 0
            )
            | {"Measured": None},
            "DeviceStats": [],
        },
        "Tasks": {},
        "Timestamp": 0,
    }
