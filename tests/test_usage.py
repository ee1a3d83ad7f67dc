"""A task's memory and CPU from its cgroup files (v2 and v1) and from the engine's stats answer."""

from __future__ import annotations

from pathlib import Path

from agent.drivers.usage import cgroup_usage, docker_usage, percent
from agent.nomadapi.usage import CpuSamples, alloc_usage


def test_cgroup_v2_files_read_as_nomads_memory_and_cpu(tmp_path: Path) -> None:
    d = tmp_path / "fieldlab" / "a.web"
    d.mkdir(parents=True)
    (d / "memory.current").write_text("4096000\n")
    (d / "memory.peak").write_text("8192000\n")
    (d / "memory.stat").write_text("anon 3000000\nfile 1000000\nkernel 96000\n")
    (d / "cpu.stat").write_text(
        "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_throttled 3\nthrottled_usec 7\n"
    )
    u = cgroup_usage([d], v2=True)
    assert u is not None
    assert (u.rss, u.cache, u.usage, u.max_usage) == (3000000, 1000000, 4096000, 8192000)
    assert (u.cpu_total_ns, u.cpu_user_ns, u.cpu_system_ns) == (2_500_000, 2_000_000, 500_000)
    assert (u.throttled_periods, u.throttled_ns) == (3, 7000)


def test_a_gone_cgroup_is_none_not_zeros(tmp_path: Path) -> None:
    assert cgroup_usage([tmp_path / "gone"], v2=True) is None
    assert cgroup_usage([tmp_path / "memory" / "gone", tmp_path / "cpu" / "gone"], v2=False) is None


def test_cgroup_v1_reads_the_memory_controller(tmp_path: Path) -> None:
    mem = tmp_path / "memory" / "fieldlab" / "a.web"
    mem.mkdir(parents=True)
    (mem / "memory.usage_in_bytes").write_text("500\n")
    (mem / "memory.max_usage_in_bytes").write_text("900\n")
    (mem / "memory.stat").write_text("cache 100\nrss 400\nswap 0\n")
    u = cgroup_usage([mem, tmp_path / "cpu" / "fieldlab" / "a.web"], v2=False)
    assert u is not None and (u.rss, u.cache, u.usage, u.max_usage) == (400, 100, 500, 900)


def test_docker_stats_on_cgroup_v2_and_v1() -> None:
    v2 = docker_usage(
        {
            "memory_stats": {"usage": 10, "stats": {"anon": 6, "file": 3}},
            "cpu_stats": {"cpu_usage": {"total_usage": 5}},
        }
    )
    v1 = docker_usage({"memory_stats": {"usage": 10, "max_usage": 12, "stats": {"rss": 7, "cache": 2}}})
    assert (v2.rss, v2.cache, v2.usage, v2.cpu_total_ns) == (6, 3, 10, 5)
    assert (v1.rss, v1.cache, v1.max_usage) == (7, 2, 12)


def test_cpu_percent_is_measured_between_two_reads() -> None:
    assert percent(None, (1.0, 10**9)) == 0.0
    assert percent((1.0, 0), (2.0, 5 * 10**8)) == 50.0  # half a core for a second
    samples = CpuSamples()
    from agent.drivers.usage import Usage

    first = alloc_usage("a", {"web": Usage(usage=1, cpu_total_ns=0)}, samples)
    assert first["Tasks"]["web"]["ResourceUsage"]["CpuStats"]["Percent"] == 0.0
    second = alloc_usage("a", {"web": Usage(usage=1, cpu_total_ns=10**12)}, samples)
    assert second["Tasks"]["web"]["ResourceUsage"]["CpuStats"]["Percent"] > 0
    assert second["ResourceUsage"]["MemoryStats"]["Usage"] == 1
