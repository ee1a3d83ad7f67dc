"""`GET /v1/client/stats`: the node's own figures as Nomad's client reports them (HostStats of
client/hoststats, api/nodes.go): memory from /proc/meminfo, CPU per core from /proc/stat (the
percentages since the read before: the first read answers 0), the disk of the data dir (and of the
alloc dir, the same filesystem here), uptime. Reads the kernel's files only."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_last: dict[str, tuple[int, int, int, int]] = {}  # cpu -> (user, system, idle, total) jiffies


def _meminfo(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024
    return out


def _pct(now: int, was: int, span: int) -> float:
    return 100.0 * (now - was) / span if span > 0 else 0.0


def cpu_stats(proc_stat: str) -> list[dict[str, Any]]:
    """Per-core User/System/Idle percent since the previous call (0 at the first)."""
    out = []
    with _lock:
        for line in proc_stat.splitlines():
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu" or len(fields) < 4:
                continue
            n = [int(f) for f in fields[:8] if f.isdigit()]
            user, system, idle = n[0] + n[1], n[2], n[3] + (n[4] if len(n) > 4 else 0)
            total = sum(n)
            before = _last.get(name)
            _last[name] = (user, system, idle, total)
            span = total - before[3] if before else 0
            out.append(
                {
                    "CPU": name,
                    "User": _pct(user, before[0], span) if before else 0.0,
                    "System": _pct(system, before[1], span) if before else 0.0,
                    "Idle": _pct(idle, before[2], span) if before else 0.0,
                }
            )
    return out


def disk_stats(path: Path) -> dict[str, Any]:
    st = os.statvfs(path)
    size, avail, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, st.f_bfree * st.f_frsize
    used = size - free
    return {
        "Device": "",
        "Mountpoint": str(path),
        "Size": size,
        "Used": used,
        "Available": avail,
        "UsedPercent": 100.0 * used / size if size else 0.0,
        "InodesUsedPercent": 100.0 * (st.f_files - st.f_ffree) / st.f_files if st.f_files else 0.0,
    }


def host_stats(data_dir: Path) -> dict[str, Any]:
    mem = _meminfo(Path("/proc/meminfo").read_text())  # node: the kernel's
    total, free = mem.get("MemTotal", 0), mem.get("MemFree", 0)
    available = mem.get("MemAvailable", free)
    cpus = cpu_stats(Path("/proc/stat").read_text())  # node: the kernel's
    uptime = float(Path("/proc/uptime").read_text().split()[0])  # node: the kernel's
    alloc_dir = data_dir / "alloc" if (data_dir / "alloc").is_dir() else data_dir
    disk = disk_stats(data_dir)
    return {
        "Memory": {"Total": total, "Available": available, "Used": total - available, "Free": free},
        "CPU": cpus,
        "DiskStats": [disk],
        "AllocDirStats": disk_stats(alloc_dir),
        "DeviceStats": [],
        "Uptime": int(uptime),
        "Timestamp": time.time_ns(),
        "CPUTicksConsumed": 0.0,
    }
