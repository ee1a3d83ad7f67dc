"""Host volumes as Nomad's client has them: the client's `host_volumes` config, a group's `volume` of
type host, a task's `volume_mount`, the placement that refuses a node without the volume, the mounts
the runner gives a driver (read only when any of the three says so), and the docker bind. The
drivers mounting them for real: tests/test_volumes_agent.py (root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.command.config import load_config
from agent.decide.placement import NodeFacts, refusals
from agent.drivers.base import Mount
from agent.drivers.docker import volume_bind
from agent.errors import ConfigError
from agent.jobspec import JobspecError, parse_jobspec
from agent.jobspec.volumes import CSI_REFUSAL
from agent.nomadapi.jobjson import parsed_job_json
from agent.runner.alloc import AllocRunner
from agent.structs.model import HostVolume, VolumeMount
from agent.structs.records import AllocRecord, AllocStatus
from tests.fakes import FakeNode

SPEC = """
job "vol" {
  group "g" {
    volume "data" {
      type      = "host"
      source    = "%(source)s"
      read_only = %(group_ro)s
    }
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
      volume_mount {
        volume      = "data"
        destination = "%(dest)s"
        read_only   = %(mount_ro)s
      }
    }
  }
}
"""


def _spec(
    source: str = "scratch", dest: str = "/data", group_ro: str = "false", mount_ro: str = "false"
) -> str:
    return SPEC % {"source": source, "dest": dest, "group_ro": group_ro, "mount_ro": mount_ro}


def _errors(text: str) -> list[str]:
    with pytest.raises(JobspecError) as caught:
        parse_jobspec(text, source="vol.hcl")
    return caught.value.lines()


# -- the jobspec -----------------------------------------------------------------------------------
def test_a_host_volume_and_its_mount_are_read_and_shown_in_nomads_json() -> None:
    parsed = parse_jobspec(_spec(mount_ro="true"), source="vol.hcl")
    group = parsed.job.groups[0]
    assert group.volumes == (HostVolume("data", "scratch", False),)
    assert group.tasks[0].volume_mounts == (VolumeMount("data", "/data", True, "private"),)
    assert not any("volume" in w for w in parsed.warnings), parsed.warnings
    shown = parsed_job_json(parsed.job)["TaskGroups"][0]
    assert shown["Volumes"]["data"] | {} == {
        "Name": "data",
        "Type": "host",
        "Source": "scratch",
        "ReadOnly": False,
        "AccessMode": "",
        "AttachmentMode": "",
        "MountOptions": None,
        "PerAlloc": False,
        "Sticky": False,
    }
    assert shown["Tasks"][0]["VolumeMounts"] == [
        {
            "Volume": "data",
            "Destination": "/data",
            "ReadOnly": True,
            "PropagationMode": "private",
            "SELinuxLabel": "",
        }
    ]
    again = parse_jobspec(json.dumps({"Job": parsed_job_json(parsed.job)}), source="vol.json")
    assert again.job.groups[0].volumes == group.volumes
    assert again.job.groups[0].tasks[0].volume_mounts == group.tasks[0].volume_mounts


@pytest.mark.parametrize(
    ("dest", "says"),
    [
        ("data", "is not an absolute path"),
        ("/a/../etc", 'may not contain ".."'),
        ("/local/x", "the task's own /local"),
        ("/alloc", "the task's own /alloc"),
        ("/tmp/x", "the task's own /tmp"),
        ("/", "the task's own /"),
        ("/proc/sys", "the task's own /proc"),
    ],
)
def test_a_mount_destination_that_could_cover_the_tasks_own_dirs_is_refused(dest: str, says: str) -> None:
    (line,) = _errors(_spec(dest=dest))
    assert "volume_mount[0].destination" in line and says in line, line


def test_a_mount_of_an_undefined_volume_and_nested_mounts_are_refused() -> None:
    text = _spec().replace('volume      = "data"', 'volume      = "other"')
    (line,) = _errors(text)
    assert 'volume_mount[0].volume: references undefined volume "other"' in line
    sub = '      volume_mount {\n        volume = "data"\n        destination = "/data/sub"\n      }\n'
    nested = _spec().replace("      volume_mount {", sub + "      volume_mount {", 1)
    (line,) = _errors(nested)
    assert "volume_mount[1].destination" in line and "nest or repeat" in line, line


def test_a_csi_volume_is_refused_with_the_reason_and_its_mounts_with_it() -> None:
    lines = _errors(_spec().replace('type      = "host"', 'type      = "csi"'))
    assert lines == ["vol.hcl: job.vol.group.g.volume.data.type: " + CSI_REFUSAL], lines


def test_a_volume_without_type_or_source_or_per_alloc_is_refused() -> None:
    lines = _errors(
        _spec().replace('      type      = "host"\n', "").replace('source    = "scratch"', 'source = ""')
    )
    assert any("volume.data.type: required" in x for x in lines), lines
    per_alloc = _errors(
        _spec().replace("read_only = false\n    }", "read_only = false\n      per_alloc = true\n    }", 1)
    )
    assert any("per_alloc: per-alloc host volumes are not implemented" in x for x in per_alloc), per_alloc


# -- the node ----------------------------------------------------------------------------------------
def test_a_node_without_the_host_volume_is_refused_naming_it() -> None:
    job = parse_jobspec(_spec(source="pgdata"), source="vol.hcl").job
    node = NodeFacts("n", "client1", "dc1", host_volumes={"scratch": ("/srv/scratch", False)})
    ((path, why),) = refusals(job, node)
    assert path == "job.vol.group.g.volume.data.source"
    assert 'no host volume "pgdata"' in why and "host_volumes: scratch" in why
    assert refusals(parse_jobspec(_spec(), source="vol.hcl").job, node) == []


def test_the_clients_host_volumes_config_is_checked(tmp_path: Path) -> None:
    def load(volumes: object) -> object:
        p = tmp_path / "config.json"
        p.write_text(json.dumps({"node_name": "client1", "host_volumes": volumes}))
        return load_config(p).host_volumes

    (tmp_path / "v").mkdir()
    assert load({"scratch": {"path": str(tmp_path / "v"), "read_only": True}}) == (
        ("scratch", str(tmp_path / "v"), True),
    )
    for bad, says in [
        ({"x": {"path": "relative"}}, "must be an absolute path"),
        ({"a/b": {"path": str(tmp_path / "v")}}, "a name of letters"),
        ({"x": {"path": str(tmp_path / "v"), "mode": 1}}, 'must be {"path"'),
    ]:
        with pytest.raises(ConfigError, match=says):
            load(bad)


def test_a_host_volume_that_is_not_a_directory_stops_the_agents_start(tmp_path: Path) -> None:
    from agent.command.wiring import CoreSettings, build_core
    from agent.errors import AgentError
    from agent.fieldbugs.faults import Faults
    from agent.state import SqliteStore

    settings = CoreSettings(
        data_dir=tmp_path / "data",
        bridge="fl0",
        host_volumes=(("pg", str(tmp_path / "missing"), False),),
        docker_enabled=False,
    )
    store = SqliteStore(tmp_path / "state.db")
    try:
        with pytest.raises(AgentError, match=r"host_volumes\.pg\.path: .*missing is not a directory"):
            build_core(settings, store, None, Faults())
    finally:
        store.close()


# -- the runner and the docker bind ---------------------------------------------------------------------
def _runner(node: FakeNode, text: str, volumes: dict[str, tuple[str, bool]]) -> AllocRunner:
    job = parse_jobspec(text, source="vol.hcl").job
    group = job.groups[0]
    deps = node.deps()
    deps.host_volumes = volumes
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-00000000000a", job="vol", group="g")
    runner = AllocRunner(deps, rec, job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


@pytest.mark.parametrize(
    ("client_ro", "group_ro", "mount_ro", "read_only"),
    [
        (False, "false", "false", False),
        (True, "false", "false", True),
        (False, "true", "false", True),
        (False, "false", "true", True),
    ],
)
def test_the_driver_gets_the_mount_read_only_when_any_of_the_three_says_so(
    tmp_path: Path, client_ro: bool, group_ro: str, mount_ro: str, read_only: bool
) -> None:
    node = FakeNode(tmp_path)
    scratch = tmp_path / "srv" / "scratch"
    scratch.mkdir(parents=True)
    r = _runner(node, _spec(group_ro=group_ro, mount_ro=mount_ro), {"scratch": (str(scratch), client_ro)})
    assert r.rec.status is AllocStatus.RUNNING
    (ctx,) = node.exec.starts
    assert ctx.mounts == (Mount(str(scratch.resolve()), "/data", read_only, "private"),)


def test_a_volume_the_node_no_longer_has_fails_the_setup_naming_it(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, _spec(), {})
    assert r.rec.status is AllocStatus.FAILED and node.exec.starts == []
    assert "host volume validation error: missing scratch" in r.rec.reason


def test_a_docker_bind_says_read_only_and_nomads_propagation() -> None:
    assert volume_bind(Mount("/srv/a", "/data", True, "private")) == "/srv/a:/data:ro,rprivate"
    assert volume_bind(Mount("/srv/a", "/data", False, "host-to-task")) == "/srv/a:/data:rw,rslave"
    assert volume_bind(Mount("/srv/a", "/data", False, "bidirectional")) == "/srv/a:/data:rw,rshared"


# -- host volume paths that lead into the agent's own dirs (issue 51) --------------------------------------
def test_a_host_volume_that_is_a_link_to_the_data_dir_is_refused_at_mount(tmp_path: Path) -> None:
    """A docker task with such a volume listed `alloc client cni server state` and read the state
    database's header: the path was checked once at start and handed to the driver unresolved."""
    node = FakeNode(tmp_path)
    data_dir = node.deps().data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    link = tmp_path / "srv" / "scratch"
    link.parent.mkdir()
    link.symlink_to(data_dir)
    r = _runner(node, _spec(), {"scratch": (str(link), False)})
    assert node.exec.starts == [], "the task never started with the agent's data dir mounted"
    assert r.rec.status is AllocStatus.FAILED
    assert (
        f'host volume "scratch": {link} (resolved: {data_dir.resolve()}) leads into the agent' in r.rec.reason
    )


def test_a_host_volume_that_becomes_a_link_later_is_refused_at_the_next_start(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    data_dir = node.deps().data_dir
    state = data_dir / "state"
    state.mkdir(parents=True, exist_ok=True)
    scratch = tmp_path / "srv" / "scratch"
    scratch.mkdir(parents=True)
    volumes = {"scratch": (str(scratch), False)}
    first = _runner(node, _spec(), volumes)
    assert first.rec.status is AllocStatus.RUNNING
    assert node.exec.starts[0].mounts[0].host_path == str(scratch.resolve())
    scratch.rmdir()
    scratch.symlink_to(state)  # after the agent started, and after a first mount
    (hid,) = node.exec.running()
    node.exec.exit(hid, 1)
    first.on_task_exit(hid)
    node.run_timers()  # the restart policy's restart: the volume is resolved again
    assert len(node.exec.starts) == 1, [c.mounts for c in node.exec.starts]
    events = [e.message for e in node.store.events(first.id, "t")]
    assert any("leads into the agent's own" in m for m in events), events
    second = AllocRunner(
        node.deps(),
        AllocRecord(id="a1b2c3d4-0000-4000-8000-00000000000b", job="vol", group="g"),
        first.job,
        first.group,
    )
    second.d.host_volumes = volumes
    node.store.put("alloc", second.id, second.rec.to_record())
    second.start()
    assert second.rec.status is AllocStatus.FAILED and "leads into the agent's own" in second.rec.reason
    assert len(node.exec.starts) == 1


def test_the_driver_is_handed_the_resolved_path_never_the_link(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    real = tmp_path / "disks" / "one"
    real.mkdir(parents=True)
    link = tmp_path / "scratch"
    link.symlink_to(real)
    _runner(node, _spec(), {"scratch": (str(link), False)})
    (ctx,) = node.exec.starts
    assert ctx.mounts[0].host_path == str(real.resolve())


def test_host_volume_paths_that_hold_or_enter_the_agents_own_dirs() -> None:
    from agent.allocdir.hostvolumes import own_path_problem

    own = [Path("/var/lib/fieldlab-agent"), Path("/etc/fieldlab-agent")]
    assert own_path_problem(Path("/srv/data"), own) is None
    assert own_path_problem(Path("/var/lib/fieldlab-agent-other"), own) is None
    assert "leads into" in str(own_path_problem(Path("/var/lib/fieldlab-agent"), own))
    assert "leads into" in str(own_path_problem(Path("/var/lib/fieldlab-agent/state"), own))
    assert "holds" in str(own_path_problem(Path("/var/lib"), own))
    assert "holds" in str(own_path_problem(Path("/"), own))


def test_a_host_volume_that_links_into_the_data_dir_stops_the_agents_start(tmp_path: Path) -> None:
    from agent.command.wiring import CoreSettings, build_core
    from agent.errors import AgentError
    from agent.fieldbugs.faults import Faults
    from agent.state import SqliteStore

    data_dir = tmp_path / "data"
    (data_dir / "state").mkdir(parents=True)
    link = tmp_path / "pg"
    link.symlink_to(data_dir / "state")
    settings = CoreSettings(
        data_dir=data_dir, bridge="fl0", host_volumes=(("pg", str(link), False),), docker_enabled=False
    )
    store = SqliteStore(tmp_path / "state.db")
    try:
        with pytest.raises(AgentError, match=r"host_volumes\.pg\.path: .* leads into the agent's own"):
            build_core(settings, store, None, Faults())
    finally:
        store.close()


def test_the_agents_own_paths_are_its_config_certs_credentials_and_code(tmp_path: Path) -> None:
    import agent
    from agent.allocdir.hostvolumes import own_paths
    from agent.command.config import Config, TLSConfig, VaultConfig

    conf = tmp_path / "nomad.d"
    cfg = Config(
        node_name="n",
        tls=TLSConfig(conf / "tls" / "agent.crt", conf / "tls" / "agent.key", conf / "tls" / "ca.pem"),
        vault=VaultConfig(approle_file=conf / "approle.json"),
    )
    got = own_paths(cfg)
    assert {Path("/etc/fieldlab-agent"), conf / "tls", conf, Path(agent.__file__).resolve().parent} <= set(
        got
    )


def test_the_dir_of_the_config_file_the_agent_started_with_is_its_own(tmp_path: Path) -> None:
    """A config outside /etc/fieldlab-agent (an own-hosts layout: `--config /opt/agent/agent.json`)
    keeps its dir out of every host volume, as the default one is."""
    from agent.allocdir.hostvolumes import own_paths
    from agent.command.config import load_config
    from agent.errors import ConfigError

    conf = tmp_path / "opt-agent"
    conf.mkdir()
    (conf / "agent.json").write_text('{"node_name": "n"}')
    cfg = load_config(conf / "agent.json")
    assert cfg.config_file == conf / "agent.json"
    assert conf in own_paths(cfg)
    (conf / "agent.json").write_text('{"node_name": "n", "config_file": "/tmp/x"}')
    with pytest.raises(ConfigError, match="config_file: unknown key"):
        load_config(conf / "agent.json")
