"""A hostile workload's files on the node (issue 34): what a job brings with it, an artifact or a host
volume, tried as an attacker would. An artifact's archive climbs out of its destination or plants a
link to write through, or is a 0.9 MB bomb of 400,000 directory headers (issue 51); an artifact
names the node's loopback (Consul's 127.0.0.1:8500) or a link-local address (issue 51); a
volume_mount's destination points into the task's own dirs or climbs out with ".."; one job plants
links in a read-write host volume to the agent's config and data dir, and another job that mounts
the volume read-only follows them, writes, and tries to remount it read-write. Each attempt is
refused or goes nowhere, and the node's files are unchanged.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time

import pytest

from agent.errors import AgentError
from e2e.harness.checkers import FileSeen, unchanged_problems
from e2e.harness.cluster import AGENT_DATA_DIR, Agent, Cluster
from e2e.harness.hostile import CANARY, HOST_FILES, alloc_events
from e2e.harness.jobs import running_job
from e2e.harness.probes import observe_files
from e2e.harness.waits import wait_until

# The agent's own files are what these workloads attack.
pytestmark = [pytest.mark.e2e, pytest.mark.agent_own]

ARTIFACT_JOB = """
job "hostile-artifact-{kind}" {{
  group "g" {{
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sleep"
        args    = ["3600"]
      }}
      artifact {{
        source      = "{source}"
        destination = "local/app"
      }}
    }}
  }}
}}
"""


BOMB_HEADERS = 400_000  # 205 MB of directory headers in 0.89 MB of gzip (issue 51)


def _dir_bomb() -> bytes:
    info = tarfile.TarInfo("d/")
    info.type = tarfile.DIRTYPE
    block = info.tobuf(format=tarfile.GNU_FORMAT) * 1000
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        for _ in range(BOMB_HEADERS // 1000):
            gz.write(block)
        gz.write(b"\0" * 1024)
    return buf.getvalue()


def _hostile_tar(kind: str) -> bytes:
    if kind == "dir-bomb":
        return _dir_bomb()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        if kind == "traversal":  # from the task dir's local/app up to the node's /etc
            info = tarfile.TarInfo("../../../../../../../../../../.." + CANARY)
            data = b"owned by an artifact\n"
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        else:  # a link to the canary, then a write through it
            link = tarfile.TarInfo("conf")
            link.type, link.linkname = tarfile.SYMTYPE, CANARY
            tar.addfile(link)
            data = b"owned through a link\n"
            info = tarfile.TarInfo("conf")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


HOSTILE_ARCHIVES = {
    "traversal": "would land outside",
    "link": "is a link: refused",
    # every member counts against decompression_file_count_limit, a directory too (issue 51: the
    # directories were skipped, and 0.9 MB held the agent 18 s of CPU and +150 MB)
    "dir-bomb": "more than the client's limit of 4096 files",
}


REPORT_WAIT = 60.0  # seconds from submission to the alloc's end (a setup or start refused)


def ended_with_events(agent: Agent, alloc: str, what: str) -> tuple[str, list[tuple[str, str]]]:
    """The alloc's client status once it is no longer pending, and its events (type, message)."""

    def ended() -> tuple[str | None, str]:
        status = agent.raw_alloc(alloc)["ClientStatus"]
        return (status if status != "pending" else None), status

    status = wait_until(ended, timeout=REPORT_WAIT, what=what)
    return status, alloc_events(agent, alloc)


@pytest.mark.parametrize("kind", sorted(HOSTILE_ARCHIVES))
def test_a_hostile_artifact_never_writes_outside_its_destination(
    cluster: Cluster, canary: list[FileSeen], kind: str
) -> None:
    """Issues 34 and 51: an archive from a field report whose members climb out of their destination,
    plant a link or are a bomb of directory headers is refused with Nomad's event; the node's files
    are unchanged."""
    agent = cluster.agent(cluster.clients[0])
    server = cluster.servers[0]
    name = f"hostile-{kind}.tar.gz"
    server.put(f"/srv/fieldlab-artifacts/{name}", _hostile_tar(kind))
    job = f"hostile-artifact-{kind}"
    source = f"http://{server.address}:8089/{name}"
    started = time.monotonic()
    allocs = agent.run_job(ARTIFACT_JOB.format(kind=kind, source=source), f"hostile: {name}")
    try:
        status, events = ended_with_events(agent, allocs[0], f"{job} to fail its setup")
        said = [m for t, m in events if t == "Failed Artifact Download"]
        assert status == "failed" and said, events
        assert HOSTILE_ARCHIVES[kind] in said[0], said
        print(f"{name}: setup failed {time.monotonic() - started:.1f} s after submission")
        node = cluster.clients[0]
        assert not unchanged_problems(node.name, canary, observe_files(node, HOST_FILES))
    finally:
        agent.stop_job(job)
        server.run(f"rm -f /srv/fieldlab-artifacts/{name}", check=False)


LINK_LOCAL = "169.254.77.1"  # given to the node's lo for the link-local case, and taken back


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        ("loopback", "http://127.0.0.1:8500/v1/kv/?recurse"),  # Consul's HTTP API, bound to loopback
        # a cloud's metadata service would be 169.254.169.254: never a lab address, so the node is given
        # a link-local address of its own on lo (LINK_LOCAL) and the artifact names that one: were the
        # agent to connect, the packets would stay on the node
        ("link-local", f"http://{LINK_LOCAL}/latest/meta-data/"),
    ],
)
def test_an_artifact_from_the_nodes_own_addresses_is_refused(
    cluster: Cluster, kind: str, source: str
) -> None:
    """Issue 51: the agent is root on the host's network, so an artifact that names the node's loopback
    or a link-local address would hand a task what only the node may read. The lab's role allows its
    servers only: the setup fails with the reason, before any connection is made."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    job = f"hostile-artifact-{kind}"
    if kind == "link-local":
        node.run(f"ip addr replace {LINK_LOCAL}/32 dev lo")
    allocs = agent.run_job(ARTIFACT_JOB.format(kind=kind, source=source), f"hostile: {kind} artifact")
    try:
        status, events = ended_with_events(agent, allocs[0], f"{job} to fail its setup")
        said = [m for t, m in events if t == "Failed Artifact Download"]
        assert status == "failed" and said, events
        assert "a loopback or link-local address" in said[0], said
    finally:
        agent.stop_job(job)
        if kind == "link-local":
            node.run(f"ip addr del {LINK_LOCAL}/32 dev lo", check=False)


# --- host volumes -------------------------------------------------------------------------------------
SCRATCH = "/srv/fieldlab-volumes/scratch"  # the lab's one host volume (fieldlab_agent role's default)
VOLUME_JOB = """
job "{job}" {{
  group "g" {{
    volume "scratch" {{
      type      = "host"
      source    = "scratch"
      read_only = {read_only}
    }}
    task "t" {{
      driver = "{driver}"
      config {{
{image}        command = "/bin/sh"
        args    = ["-c", <<EOS
{script}
EOS
        ]
      }}
      volume_mount {{
        volume      = "scratch"
        destination = "{destination}"
        read_only   = {read_only}
      }}
    }}
  }}
}}
"""
BUSYBOX = '        image   = "fieldlab/busybox:latest"\n'
# Links in the shared volume to the agent's config and data dir, left for the next job that mounts it.
PLANT = (
    "ln -sfn /etc/fieldlab-agent /vol/hostile-conf && ln -sfn {data_dir} /vol/hostile-data && "
    "echo planted > /vol/hostile-planted && exec sleep 3600"
)
# Follow the links, write through the read-only mount, remount it read-write and write again.
FOLLOW = """exec > /local/report 2>&1
cat /vol/hostile-conf/*.json || echo "conf: unreadable"
ls /vol/hostile-data/state || echo "state: unreadable"
echo owned > /vol/hostile-owned || echo "write: read-only"
mount -o remount,rw /vol || echo "remount: refused"
echo owned > /vol/hostile-owned || echo "write again: read-only"
echo done
exec sleep 3600"""


def _volume_job(
    job: str, driver: str, script: str, destination: str = "/vol", read_only: str = "false"
) -> str:
    image = BUSYBOX if driver == "docker" else ""
    return VOLUME_JOB.format(
        job=job, driver=driver, image=image, script=script, destination=destination, read_only=read_only
    )


@pytest.mark.parametrize(
    ("destination", "said"),
    [
        ("/alloc/hostile", "is the task's own /alloc"),
        ("/local", "is the task's own /local"),
        ("/vol/../../etc/cron.d", 'may not contain ".."'),
    ],
)
def test_a_volume_mount_into_the_tasks_own_dirs_or_out_of_its_root_is_refused(
    cluster: Cluster, destination: str, said: str
) -> None:
    """A destination in the task's own dirs (a link the task planted there would be followed by the
    mount) or climbing out with ".." is refused at submission, naming the field; nothing is stored."""
    agent = cluster.agent(cluster.clients[0])
    before = agent.jobs()
    with pytest.raises(AgentError) as refused:
        agent.run_job(_volume_job("hostile-volume-dest", "exec", "sleep 3600", destination), "hostile: mount")
    assert said in str(refused.value) and "volume_mount" in str(refused.value), str(refused.value)
    assert agent.jobs() == before, "a refused job must store nothing"


@pytest.mark.parametrize("driver", ["exec", "docker"])
def test_links_planted_in_a_host_volume_lead_nowhere_and_a_read_only_mount_stays_so(
    cluster: Cluster, canary: list[FileSeen], driver: str
) -> None:
    """One job plants links in the shared read-write volume to the agent's config and data dir; a
    second mounts it read-only and follows them (they resolve inside its own root, not the node's),
    writes, remounts read-write and writes again: nothing is read, nothing is written, and the
    node's files are unchanged."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    plant = _volume_job("hostile-volume-plant", "docker", PLANT.format(data_dir=AGENT_DATA_DIR))
    follow = _volume_job(f"hostile-volume-{driver}", driver, FOLLOW, read_only="true")
    try:
        with running_job(agent, plant, "hostile: plant links in a volume"):
            wait_until(
                lambda: (node.run(f"test -L {SCRATCH}/hostile-conf", check=False).rc == 0 or None, "no link"),
                timeout=REPORT_WAIT,
                what=f"{node.name}: the links planted in {SCRATCH}",
            )
            with running_job(agent, follow, "hostile: follow them read-only") as job:
                report = f"{AGENT_DATA_DIR}/alloc/{job.alloc_id}/t/local/report"

                def reported() -> tuple[str | None, str]:
                    out = node.run(f"cat {report}", check=False).stdout
                    return (out if "done" in out else None), out

                out = wait_until(
                    reported, timeout=REPORT_WAIT, what=f"{node.name}: the {driver} task's report"
                )
        said = ("conf: unreadable", "state: unreadable", "write: read-only", "remount: refused")
        for line in (*said, "write again: read-only"):
            assert line in out, f"{line!r} not in the {driver} task's report: {out}"
        # The mount refused both writes (not the directory's permissions, which refuse an exec task's
        # nobody on a read-write mount too): the shell's own error lines say why.
        assert out.count("Read-only file system") >= 2, f"the {driver} task's writes: {out}"
        role_id = json.loads(node.run("cat /etc/fieldlab-agent/approle.json").stdout)["role_id"]
        assert role_id not in out, f"the {driver} task read the agent's AppRole through a planted link"
        assert node.run(f"test -e {SCRATCH}/hostile-owned", check=False).rc != 0, "written through a ro mount"
        assert not unchanged_problems(node.name, canary, observe_files(node, HOST_FILES))
    finally:
        node.run(f"rm -rf {SCRATCH}/hostile-*", check=False)


LIST = "exec > /local/report 2>&1; ls /vol; echo done; exec sleep 3600"


@pytest.mark.parametrize("driver", ["exec", "docker"])
def test_a_host_volume_that_became_a_link_to_the_data_dir_is_not_mounted(
    cluster: Cluster, canary: list[FileSeen], driver: str
) -> None:
    """Issue 51: the client's host volume is a directory when the agent starts and later a link to the
    agent's data dir (a docker task listed `alloc client cni server state` and read the state
    database's header). The path is resolved at the mount: the start fails naming the volume and
    where it leads, the task never runs, and the node's files are unchanged."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    aside = f"{SCRATCH}.hostile-aside"
    job = f"hostile-volume-link-{driver}"
    node.run(f"mv {SCRATCH} {aside} && ln -s {AGENT_DATA_DIR} {SCRATCH}")
    try:
        allocs = agent.run_job(_volume_job(job, driver, LIST), "hostile: a host volume become a link")
        status, events = ended_with_events(agent, allocs[0], f"{job} to fail its start")
        said = [m for _, m in events if "leads into the agent's own" in m]
        assert status == "failed" and said, events
        report = node.run(f"cat {AGENT_DATA_DIR}/alloc/{allocs[0]}/t/local/report", check=False).stdout
        assert "state" not in report, f"the {driver} task listed the agent's data dir: {report}"
        assert not unchanged_problems(node.name, canary, observe_files(node, HOST_FILES))
    finally:
        agent.stop_job(job)
        node.run(f"test -L {SCRATCH} && rm {SCRATCH} && mv {aside} {SCRATCH}", check=False)
