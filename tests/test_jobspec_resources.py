"""A task's resources beyond cpu and memory (issue 52 item 6), as Nomad's client takes them:
memory_max (the docker driver's and the executor's memoryLimits), secrets (the secrets/ tmpfs's
size), cores refused with the reason (no reserved cores here), extra_claims and selinux_label."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent.allocdir import fsutil
from agent.command.plugins import DockerPlugin
from agent.drivers.cgroups import Cgroups, memory_limits
from agent.drivers.dockeropts import plan
from agent.drivers.dockervalues import TaskFacts
from agent.jobspec import JobspecError, ParsedJob, parse_jobspec
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, Resources, Task
from agent.structs.records import AllocRecord
from tests.fakes import FakeNode

MIB = 1024 * 1024


def _parse(resources: str = "", extra: str = "") -> ParsedJob:
    return parse_jobspec(
        f"""
job "j" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image = "x"
      }}
      resources {{
        {resources}
      }}
      {extra}
    }}
  }}
}}
""",
        source="<t>",
    )


def _problems(resources: str = "", extra: str = "") -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        _parse(resources, extra)
    return list(info.value.problems)


# --- memory_max -----------------------------------------------------------------------------------


def test_memory_max_is_read_and_checked_as_nomads_resources_validate() -> None:
    parsed = _parse("memory = 128\nmemory_max = 512\nsecrets = 16")
    res = parsed.job.groups[0].tasks[0].resources
    assert (res.memory, res.memory_max, res.secrets) == (128, 512, 16) and parsed.warnings == ()
    assert _parse("memory = 128\nmemory_max = -1").job.groups[0].tasks[0].resources.memory_max == -1
    assert _problems("memory = 256\nmemory_max = 128") == [
        (
            "job.j.group.g.task.t.resources.memory_max",
            "MemoryMaxMB value (128) should be larger than MemoryMB value (256)",
        )
    ]


def _docker(facts: TaskFacts, config: dict[str, Any] | None = None) -> dict[str, Any]:
    out = plan({"image": "x", **(config or {})}, DockerPlugin(), facts)
    assert out.refused == []
    return out.kwargs


def test_docker_takes_memory_max_as_the_hard_limit_and_memory_as_the_reservation() -> None:
    kw = _docker(TaskFacts(memory_mb=128, memory_max_mb=512))
    assert (kw["mem_limit"], kw["mem_reservation"], kw["memswap_limit"]) == ("512m", "128m", "512m")
    # the larger of memory_hard_limit and memory_max, as Nomad's memoryLimits
    kw = _docker(TaskFacts(memory_mb=128, memory_max_mb=256), {"memory_hard_limit": 1024})
    assert (kw["mem_limit"], kw["mem_reservation"]) == ("1024m", "128m")
    kw = _docker(TaskFacts(memory_mb=128, memory_max_mb=-1))  # no hard limit at all
    assert (kw["mem_limit"], kw["mem_reservation"], kw["memswap_limit"]) == (0, "128m", 0)
    assert "mem_reservation" not in _docker(TaskFacts(memory_mb=128))  # memory alone: the hard limit


def test_the_executor_takes_memory_max_as_nomads_does(tmp_path: Path) -> None:
    assert memory_limits(128, 0) == (128 * MIB, 0)
    assert memory_limits(128, 512) == (512 * MIB, 128 * MIB)
    assert memory_limits(128, -1) == (-1, 128 * MIB)
    (tmp_path / "cgroup.controllers").write_text("memory cpu\n")
    cg = Cgroups("a1.t", tmp_path, "fieldlab.slice")
    (d,) = cg.dirs
    d.mkdir(parents=True)
    for f in ("memory.max", "memory.low", "cpu.weight"):
        (d / f).write_text("")
    assert cg.create(128, 100, 512) == []
    assert ((d / "memory.max").read_text(), (d / "memory.low").read_text()) == (
        str(512 * MIB),
        str(128 * MIB),
    )
    assert cg.create(128, 100, -1) == []
    assert (d / "memory.max").read_text() == "max"


# --- secrets --------------------------------------------------------------------------------------


def test_secrets_is_checked_as_nomads_resources_validate() -> None:
    assert _problems("memory = 64\nsecrets = 128") == [
        (
            "job.j.group.g.task.t.resources.secrets",
            "SecretsMB value (128) cannot be larger than MemoryMB value (64)",
        )
    ]
    assert _problems("secrets = -1") == [
        ("job.j.group.g.task.t.resources.secrets", "SecretsMB value (-1) cannot be negative")
    ]


def test_the_secrets_tmpfs_is_mounted_with_the_tasks_size(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[list[str]] = []

    def run(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)  # what fsutil runs
    assert fsutil.mount_secrets(tmp_path / "a", 16)
    assert fsutil.mount_secrets(tmp_path / "b")
    assert [c[4].split(",")[0] for c in ran] == ["size=16m", f"size={fsutil.SECRETS_TMPFS_SIZE}"]


def test_a_task_dir_is_prepared_with_its_secrets_size(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    task = Task(name="t", driver="docker", config={"image": "x"}, resources=Resources(memory=64, secrets=8))
    group = Group(name="g", tasks=(task,))
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-00000000000b", job="j", group="g")
    runner = AllocRunner(node.deps(), rec, Job(id="j", groups=(group,)), group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    assert node.dirs.secrets_mb == {"t": 8}


# --- cores, extra_claims, selinux_label -----------------------------------------------------------


def test_reserved_cores_are_refused_with_the_reason_and_zero_is_nomads_default() -> None:
    ((where, why),) = _problems("cores = 2")
    assert where == "job.j.group.g.task.t.resources.cores"
    assert why.startswith("refused: fieldlab-agent does not reserve whole CPU cores")
    assert _parse("cores = 0").warnings == ()


def test_extra_claims_are_read_and_none_is_added_in_the_default_namespace() -> None:
    parsed = _parse(extra='identity {\nname = "x"\naud = ["a"]\nttl = "1h"\nextra_claims = ["team"]\n}')
    assert parsed.warnings == ()
    ((where, why),) = _problems(extra='identity {\nname = "x"\naud = ["a"]\nttl = "1h"\nextra_claims = 3\n}')
    assert where.endswith("identity[0].extra_claims") and "expected" in why


def test_a_volume_mounts_selinux_label_is_checked_and_said_to_be_ignored_as_by_nomads_drivers() -> None:
    text = """
job "j" {
  group "g" {
    volume "v" {
      type = "host"
      source = "data"
    }
    task "t" {
      driver = "docker"
      config {
        image = "x"
      }
      volume_mount {
        volume = "v"
        destination = "/data"
        selinux_label = "%s"
      }
    }
  }
}
"""
    (warning,) = parse_jobspec(text % "Z", source="<t>").warnings
    assert warning.startswith("job.j.group.g.task.t.volume_mount[0].selinux_label: ignored: Nomad's docker")
    with pytest.raises(JobspecError) as info:
        parse_jobspec(text % "q", source="<t>")
    assert info.value.problems == [
        (
            "job.j.group.g.task.t.volume_mount[0].selinux_label",
            'volume mount has an invalid SELinux label: "q"',
        )
    ]


# --- artifact insecure ---------------------------------------------------------------------


def test_an_insecure_artifact_is_fetched_over_https_without_certificate_checks(tmp_path: Path) -> None:
    """go-getter's insecure: the server's certificate (of a CA the agent does not trust, naming another
    host) is not checked; without it the same fetch is refused. The jobspec's field reaches the getter."""
    import io
    import ssl

    from agent.getter.fetch import ArtifactUnavailable, FetchLimits, download
    from tests.pki import TestCA
    from tests.test_artifact_fetch import Server

    issued = TestCA(tmp_path).issue("artifacts", server=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)
    server = Server(context)
    limits = FetchLimits(allowed_hosts=("127.0.0.0/8",))
    url = f"https://127.0.0.2:{server.port}/conf"  # the certificate names localhost and 127.0.0.1
    try:
        server.files["/conf"] = b"unchecked"
        out = io.BytesIO()
        download(url, "127.0.0.2", {}, out, limits, None, insecure=True)
        assert out.getvalue() == b"unchecked"
        with pytest.raises(ArtifactUnavailable, match="certificate verify failed"):
            download(url, "127.0.0.2", {}, io.BytesIO(), limits, None)
    finally:
        server.close()
    parsed = _parse(extra='artifact {\nsource = "https://example.com/x"\ninsecure = true\n}')
    assert parsed.job.groups[0].tasks[0].artifacts[0].insecure and parsed.warnings == ()
