"""Artifacts as Nomad's client fetches them (its artifact hook and go-getter's rules for http(s)): the
jobspec's `artifact` block and its Nomad JSON, the pure plan (agent.getter.plan), the getter against
a real HTTP server on loopback (checksums, archives, limits, hosts the client does not allow), and
the task runner's hook on the fake node (fetched before the first start, not again at a restore, a
failed download an event that fails the setup). Hostile archives try to write outside their
destination."""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import hashlib
import http.server
import io
import json
import lzma
import os
import pwd
import tarfile
import threading
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.allocdir.sandbox import sandbox_path
from agent.command.config import Config
from agent.getter.fetch import ArtifactUnavailable, FetchLimits
from agent.getter.getter import HttpGetter, chown_tree
from agent.getter.plan import DEFAULT_ALLOWED, ArtifactError, Checksum, host_allowed, plan_fetch
from agent.getter.unpack import UnpackLimits, unpack
from agent.jobspec import JobspecError, parse_jobspec
from agent.nomadapi.jobjson import parsed_job_json
from agent.runner.alloc import AllocRunner
from agent.structs.model import Artifact, Group, Job, RestartPolicy, Task
from agent.structs.records import AllocRecord, AllocStatus, TaskState
from tests.fakes import FakeNode

SHA = hashlib.sha256


# -- a real HTTP server on loopback ----------------------------------------------------------------
class Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: list[str] = []
        self.status: dict[str, int] = {}
        self.redirects: dict[str, str] = {}
        files, hits, status, redirects = self.files, self.hits, self.status, self.redirects

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                hits.append(self.path)
                if path in redirects:
                    self.send_response(302)
                    self.send_header("Location", redirects[path])
                    self.end_headers()
                    return
                code = status.get(path, 200 if path in files else 404)
                body = files.get(path, b"") if code == 200 else b"no"
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _tar(members: dict[str, bytes], *, link: tuple[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o4755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname = tarfile.SYMTYPE, link[1]
            tar.addfile(info)
    return buf.getvalue()


LOOPBACK = ("127.0.0.0/8",)  # the test server's; named explicitly (the default allows no host)


def _fetch(task_dir: Path, artifact: Artifact, **kw: object) -> int:
    kw.setdefault("allowed_hosts", LOOPBACK)
    return HttpGetter(**kw).fetch(task_dir, artifact, {"NOMAD_TASK_NAME": "t"})  # type: ignore[arg-type]


# -- the plan --------------------------------------------------------------------------------------
def test_the_plan_follows_go_getters_rules_for_modes_archives_and_options() -> None:
    env = {"VERSION": "1.2"}
    plain = plan_fetch("http://h/app-${VERSION}.txt", "local/", "any", {"x": "1"}, {}, env)
    assert (plain.url, plain.file_dest, plain.archive) == (
        "http://h/app-1.2.txt?x=1",
        "local/app-1.2.txt",
        "",
    )
    tgz = plan_fetch("http://h/a.tgz", "local/x", "any", {"checksum": "sha256:" + "a" * 64}, {}, {})
    assert (tgz.archive, tgz.dir_dest, tgz.checksum) == ("tar.gz", "local/x", Checksum("sha256", "a" * 64))
    assert "checksum" not in tgz.url, "go-getter's own options never reach the server"
    assert plan_fetch("http://h/a.tgz", "local/", "any", {"archive": "false"}, {}, {}).archive == ""
    assert plan_fetch("http://h/f.gz", "local/", "any", {}, {}, {}).file_dest == "local/f"
    assert plan_fetch("http://h/f", "local/conf", "file", {}, {}, {}).file_dest == "local/conf"
    for source, mode, says in [
        ("ftp://h/f", "any", "ftp is not supported"),
        ("http://h/a.zip", "file", 'mode "file" cannot hold'),
        ("http://h/f.txt", "dir", 'mode "dir" needs an archive'),
    ]:
        with pytest.raises(ArtifactError, match=says):
            plan_fetch(source, "local/", mode, {}, {}, {})


def test_only_allowed_hosts_are_fetched_from() -> None:
    assert host_allowed("127.0.0.1", ["127.0.0.1"], ["127.0.0.0/8"]) is None
    assert host_allowed("server1", ["10.77.0.2"], ["10.77.0.0/24"]) is None
    why = host_allowed("example.com", ["192.0.2.7"], ["127.0.0.0/8"])
    assert why and "not in the client's artifact_allowed_hosts" in why
    assert host_allowed("mixed", ["10.77.0.2", "192.0.2.7"], ["10.77.0.0/24"]), "every address counts"
    assert host_allowed("server1", ["10.77.0.2"], ["server1"]) is None, "a host named in the list as is"
    assert host_allowed("server1", [], ["server1"]) == "server1 does not resolve", "nothing to connect to"


@pytest.mark.parametrize(
    ("host", "address", "allowed"),
    [
        ("127.0.0.1", "127.0.0.1", DEFAULT_ALLOWED),  # Consul's 127.0.0.1:8500, as the issue found it
        ("localhost", "::1", DEFAULT_ALLOWED),
        ("169.254.169.254", "169.254.169.254", DEFAULT_ALLOWED),  # a cloud's metadata service
        ("fe80::1", "fe80::1", DEFAULT_ALLOWED),
        ("consul", "127.0.0.1", ("0.0.0.0/0", "::/0")),  # a wide network does not let loopback in
        ("mapped", "::ffff:127.0.0.1", ("0.0.0.0/0", "::/0")),  # nor an IPv4-mapped address
        ("any", "0.0.0.0", ("0.0.0.0/0",)),  # connecting to 0.0.0.0 reaches loopback
        ("localhost", "127.0.0.1", ("localhost",)),  # nor a name that resolves to loopback
        ("rebound", "127.0.0.1", ("10.77.0.0/24", "rebound")),
    ],
)
def test_loopback_and_link_local_are_refused_unless_such_a_network_is_named(
    host: str, address: str, allowed: tuple[str, ...]
) -> None:
    """Issue 51: loopback and link-local are out of the default list (the agent is root on the host's
    network: Consul's loopback binding was undone), and in only through an entry that is itself a
    loopback or link-local network, as the unit tests' loopback server is allowed below."""
    why = host_allowed(host, [address], allowed)
    assert why and "loopback or link-local" in why, why
    assert Config.__dataclass_fields__["artifact_allowed_hosts"].default == ()
    assert host_allowed("127.0.0.1", ["127.0.0.1"], ["127.0.0.1/32"]) is None
    assert host_allowed("metadata", ["169.254.169.254"], ["169.254.0.0/16"]) is None


def test_the_default_getter_fetches_nothing_from_loopback(server: Server, tmp_path: Path) -> None:
    server.files["/v1/kv/"] = b"secrets"
    with pytest.raises(ArtifactError, match="loopback or link-local address"):
        HttpGetter().fetch(tmp_path, Artifact(server.url + "/v1/kv/"), {})
    assert server.hits == [], "nothing sent"


# -- the jobspec -----------------------------------------------------------------------------------
SPEC = """
job "art" {
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
      artifact {
        source      = "%(source)s"
        destination = "%(dest)s"
        %(extra)s
      }
    }
  }
}
"""


def _spec(source: str = "https://server1:8089/app.tar.gz", dest: str = "local/app", extra: str = "") -> str:
    return SPEC % {"source": source, "dest": dest, "extra": extra}


def test_an_artifact_is_read_and_shown_in_nomads_json() -> None:
    extra = 'options { checksum = "sha256:%s" }\n        headers { X-Lab = "1" }\n        chown = true' % (
        "b" * 64
    )
    parsed = parse_jobspec(_spec(extra=extra), source="art.hcl")
    (artifact,) = parsed.job.groups[0].tasks[0].artifacts
    assert artifact == Artifact(
        "https://server1:8089/app.tar.gz",
        "local/app",
        "any",
        {"checksum": "sha256:" + "b" * 64},
        {"X-Lab": "1"},
        chown=True,
    )
    assert not any("artifact" in w for w in parsed.warnings), parsed.warnings
    (shown,) = parsed_job_json(parsed.job)["TaskGroups"][0]["Tasks"][0]["Artifacts"]
    assert shown == {
        "GetterSource": "https://server1:8089/app.tar.gz",
        "GetterOptions": {"checksum": "sha256:" + "b" * 64},
        "GetterHeaders": {"X-Lab": "1"},
        "GetterMode": "any",
        "GetterInsecure": False,
        "RelativeDest": "local/app",
        "Chown": True,
    }
    again = parse_jobspec(json.dumps({"Job": parsed_job_json(parsed.job)}), source="art.json")
    assert again.job.groups[0].tasks[0].artifacts == (artifact,)
    assert not any("Artifacts" in w or "artifact" in w for w in again.warnings), again.warnings


def test_a_file_mode_artifact_defaults_to_local_and_its_name() -> None:
    text = _spec(source="http://server1/conf.json").replace('destination = "local/app"', 'mode = "file"')
    (artifact,) = parse_jobspec(text, source="art.hcl").job.groups[0].tasks[0].artifacts
    assert (artifact.mode, artifact.destination) == ("file", "local/conf.json")


@pytest.mark.parametrize(
    ("source", "dest", "extra", "says"),
    [
        (
            "git::https://github.com/x/y",
            "local/",
            "",
            'artifact[0].source: the "git::" getter is not supported',
        ),
        ("s3://bucket/key", "local/", "", 'artifact[0].source: "s3" is not supported'),
        ("http://h/a", "/../../etc", "", 'artifact[0].destination: "/../../etc" escapes the alloc directory'),
        ("http://h/a", "../other/x", "", 'artifact[0].destination: "../other/x" leaves the task dir'),
        (
            "http://h/a",
            "local/",
            'options { checksum = "sha256:beef" }',
            "options.checksum: checksum sha256:beef",
        ),
        ("http://h/a", "local/", 'options { checksum = "crc:1" }', 'checksum type "crc" is not one of'),
        ("http://h/a", "local/", 'mode = "tree"', "artifact[0].mode"),
    ],
)
def test_a_bad_artifact_is_refused_with_its_path(source: str, dest: str, extra: str, says: str) -> None:
    with pytest.raises(JobspecError) as caught:
        parse_jobspec(_spec(source, dest, extra), source="art.hcl")
    lines = caught.value.lines()
    assert any(says in line for line in lines), lines


# -- the getter, against a real server -------------------------------------------------------------
def test_a_file_and_an_archive_land_in_the_sandbox_checked_and_without_setuid(
    server: Server, tmp_path: Path
) -> None:
    task_dir = tmp_path / "alloc" / "t"
    server.files["/motd.txt"] = b"hello"
    server.files["/app.tgz"] = body = _tar({"bin/run.sh": b"#!/bin/sh\n", "conf/a.conf": b"a=1"})
    assert _fetch(task_dir, Artifact(server.url + "/motd.txt")) == 1
    assert (task_dir / "local" / "motd.txt").read_bytes() == b"hello"
    checksum = {"checksum": "sha256:" + SHA(body).hexdigest()}
    assert _fetch(task_dir, Artifact(server.url + "/app.tgz", "local/app", options=checksum)) == 2
    run = task_dir / "local" / "app" / "bin" / "run.sh"
    assert run.read_bytes() == b"#!/bin/sh\n" and run.stat().st_mode & 0o7777 == 0o755, "setuid dropped"
    assert (task_dir / "local" / "app" / "conf" / "a.conf").read_bytes() == b"a=1"
    server.files["/shared.gz"] = gzip.compress(b"unzipped")
    _fetch(task_dir, Artifact(server.url + "/shared.gz", "alloc/data"))
    assert (tmp_path / "alloc" / "alloc" / "data" / "shared").read_bytes() == b"unzipped"


def test_a_checksum_mismatch_is_refused_and_writes_nothing(server: Server, tmp_path: Path) -> None:
    server.files["/app.tgz"] = _tar({"a": b"1"})
    wrong = {"checksum": "sha256:" + "0" * 64}
    with pytest.raises(ArtifactError, match="checksums did not match: expected sha256:0000"):
        _fetch(tmp_path / "t", Artifact(server.url + "/app.tgz", options=wrong))
    assert not (tmp_path / "t" / "local" / "a").exists()


@pytest.mark.parametrize(
    ("archive", "says"),
    [
        (_tar({"../../escaped": b"x"}), 'archive member "../../escaped" would land outside'),
        (_tar({"/abs/escaped": b"x"}), 'archive member "/abs/escaped" would land outside'),
        (_tar({"ok": b"1"}, link=("link", "/etc/shadow")), 'archive member "link" is a link: refused'),
    ],
)
def test_a_hostile_archive_never_writes_outside_its_destination(
    server: Server, tmp_path: Path, archive: bytes, says: str
) -> None:
    server.files["/evil.tar.gz"] = archive
    task_dir = tmp_path / "alloc" / "t"
    with pytest.raises(ArtifactError, match=says):
        _fetch(task_dir, Artifact(server.url + "/evil.tar.gz", "local/x"))
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "alloc" / "escaped").exists()
    assert not (task_dir / "local" / "x" / "link").exists()


def test_a_planted_link_in_the_destination_is_not_followed(server: Server, tmp_path: Path) -> None:
    """A sticky ephemeral disk hands the task's earlier data over: a link it planted there is refused."""
    task_dir = tmp_path / "alloc" / "t"
    (task_dir / "local").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (task_dir / "local" / "app").symlink_to(outside)
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("conf", "x")
    server.files["/app.zip"] = zbuf.getvalue()
    with pytest.raises(ArtifactError, match="symbolic link"):
        _fetch(task_dir, Artifact(server.url + "/app.zip", "local/app"))
    assert list(outside.iterdir()) == []


def test_limits_and_hosts_the_client_does_not_allow(server: Server, tmp_path: Path) -> None:
    server.files["/big"] = b"x" * 5000
    with pytest.raises(ArtifactError, match="more than the client's limit of 1000"):
        _fetch(tmp_path, Artifact(server.url + "/big"), fetch_limits=FetchLimits(max_bytes=1000))
    many = _tar({f"f{i}": b"1" for i in range(5)})
    server.files["/many.tgz"] = many
    with pytest.raises(ArtifactError, match="more than the client's limit of 3 files"):
        _fetch(tmp_path, Artifact(server.url + "/many.tgz"), unpack_limits=UnpackLimits(max_files=3))
    # an address the list leaves out is refused before any connection is made: 127.0.0.3 with the list
    # 127.0.0.1/32 (loopback, so nothing would leave this machine were the check missing)
    narrow = ("127.0.0.1/32",)
    with pytest.raises(ArtifactError, match=r"127\.0\.0\.3 .* allowed only by such a network"):
        _fetch(tmp_path, Artifact("http://127.0.0.3/x"), allowed_hosts=narrow)
    server.redirects["/away"] = "http://127.0.0.3/x"
    with pytest.raises(ArtifactError, match=r"127\.0\.0\.3 .* allowed only by such a network"):
        _fetch(tmp_path, Artifact(server.url + "/away"), allowed_hosts=narrow)
    assert server.hits == ["/big", "/many.tgz", "/away"]


def _dir_bomb(headers: int) -> bytes:
    """Issue 51: a .tar.gz of one directory header repeated (a 0.9 MB one holds 400,000: 205 MB)."""
    info = tarfile.TarInfo("d/")
    info.type = tarfile.DIRTYPE
    return gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT) * headers + b"\0" * 1024, mtime=0)


def test_a_directory_bomb_is_refused_at_the_file_count_limit(server: Server, tmp_path: Path) -> None:
    """Every member counts against decompression_file_count_limit, a directory too (go-getter counts
    every header): the 4097th is refused, the rest of the archive never read."""
    server.files["/bomb.tar.gz"] = _dir_bomb(5000)
    with pytest.raises(ArtifactError, match=r"more than the client's limit of 4096 files \(at d\)"):
        _fetch(tmp_path, Artifact(server.url + "/bomb.tar.gz", "local/x"))


def test_decompressed_bytes_are_capped_headers_included(tmp_path: Path) -> None:
    """decompression_size_limit counts everything the decompressor yields, not the members' sizes
    (1,000 directory headers declare 0 bytes and decompress to 512 KB)."""
    limits = UnpackLimits(max_files=10**6, max_bytes=100_000)
    with pytest.raises(ArtifactError, match="decompresses to more than the client's limit of 100000 bytes"):
        unpack(tmp_path, io.BytesIO(_dir_bomb(1000)), "tar.gz", "local/x", limits)


def test_an_archive_is_read_as_a_stream_keeping_no_member(tmp_path: Path) -> None:
    """tarfile keeps every member it read (TarFile.members): 5,000 headers held 1.9 MB before."""
    data = _dir_bomb(5000)
    tracemalloc.start()
    try:
        unpack(tmp_path, io.BytesIO(data), "tar.gz", "local/x", UnpackLimits(max_files=10**6))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"peak traced while reading 5,000 headers: {peak / 1e6:.2f} MB")
    assert peak < 1_000_000, f"{peak} bytes held while reading the archive"


def _zip_of_dirs(count: int, *, says: int | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(count):
            z.writestr(zipfile.ZipInfo(f"{i:x}/"), b"")
    data = bytearray(buf.getvalue())
    if says is not None:  # the end record lies about its entries (zipfile reads by the size)
        end = data.rindex(b"PK\x05\x06")
        data[end + 8 : end + 12] = says.to_bytes(2, "little") * 2
    return bytes(data)


@pytest.mark.parametrize(
    ("data", "limits", "says"),
    [
        (_zip_of_dirs(20_000), UnpackLimits(), r"limit of 4096 files \(20000 in the zip\)"),
        (_zip_of_dirs(20_000, says=1), UnpackLimits(max_files=100), "a zip central directory of"),
    ],
)
def test_a_zip_of_many_members_is_refused_before_its_directory_is_read(
    tmp_path: Path, data: bytes, limits: UnpackLimits, says: str
) -> None:
    """ZipFile parses the whole central directory first (a 26 MB zip of 300,000 members: +158 MB):
    its end record's entries and size are checked against the limits before."""
    tracemalloc.start()
    try:
        with pytest.raises(ArtifactError, match=says):
            unpack(tmp_path, io.BytesIO(data), "zip", "local/x", limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{peak} bytes held before the zip was refused"


def test_a_pax_header_larger_than_go_allows_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """tarfile reads a pax header's data whole (a 204 KB .tar.gz carrying a 200 MiB comment held
    +614 MB): above 1 MiB it is refused from its header, as Go's archive/tar refuses it."""
    info = tarfile.TarInfo("f")
    info.pax_headers = {"comment": "a" * (2 << 20)}
    data = gzip.compress(info.tobuf(format=tarfile.PAX_FORMAT) + b"\0" * 1024)
    with pytest.raises(ArtifactError, match=r"a tar header of 20971\d\d bytes: more than the 1048576"):
        unpack(tmp_path, io.BytesIO(data), "tar.gz", "local/x", UnpackLimits())


def test_a_chain_of_long_name_headers_is_refused_not_a_traceback(tmp_path: Path) -> None:
    """tarfile reads GNU long-name (and pax) headers recursively: 3,000 in a row overflowed its stack."""
    chain = b"".join(
        tarfile.TarInfo("n" * 200 + str(i)).tobuf(format=tarfile.GNU_FORMAT)[:-512] for i in range(3000)
    )
    data = chain + tarfile.TarInfo("f").tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 1024
    with pytest.raises(ArtifactError, match="not a tar archive: headers chained too deep"):
        unpack(tmp_path, io.BytesIO(data), "tar", "local/x", UnpackLimits())


@pytest.mark.parametrize(("kind", "compress"), [("bz2", bz2.compress), ("xz", lzma.compress)])
def test_a_bz2_or_xz_file_is_decompressed(
    server: Server, tmp_path: Path, kind: str, compress: Callable[[bytes], bytes]
) -> None:
    """go-getter's bz2 and xz decompressors (BZ2File and LZMAFile take no `fileobj`: a TypeError)."""
    server.files[f"/conf.{kind}"] = compress(b"conf")
    assert _fetch(tmp_path, Artifact(server.url + f"/conf.{kind}", "local/")) == 1
    assert (tmp_path / "local" / "conf").read_bytes() == b"conf"


def test_a_server_error_is_worth_a_retry_and_a_404_is_not(server: Server, tmp_path: Path) -> None:
    server.status["/flaky"] = 503
    with pytest.raises(ArtifactUnavailable, match="bad response code: 503"):
        _fetch(tmp_path, Artifact(server.url + "/flaky"))
    with pytest.raises(ArtifactError, match="bad response code: 404") as caught:
        _fetch(tmp_path, Artifact(server.url + "/missing"))
    assert not isinstance(caught.value, ArtifactUnavailable)


# -- the task runner's hook ------------------------------------------------------------------------
def _runner(node: FakeNode, server: Server, artifact: Artifact, user: str = "") -> AllocRunner:
    task = Task(name="t", driver="exec", artifacts=(artifact,), user=user)
    group = Group(name="g", tasks=(task,), network=None, restart=RestartPolicy(attempts=0, mode="fail"))
    job = Job(id="art", groups=(group,), type="batch")
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-0000000000a7", job="art", group="g")
    deps = dataclasses.replace(node.deps(), getter=HttpGetter(allowed_hosts=LOOPBACK))
    runner = AllocRunner(deps, rec, job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


def test_the_artifact_is_in_the_task_dir_before_the_first_start_and_not_fetched_again_on_restore(
    server: Server, tmp_path: Path
) -> None:
    node = FakeNode(tmp_path)
    server.files["/conf.txt"] = b"v1"
    r = _runner(node, server, Artifact(server.url + "/conf.txt", "local/"))
    assert r.rec.status is AllocStatus.RUNNING and [c.task.name for c in node.exec.starts] == ["t"]
    assert (r.tasks[r.group.tasks[0].name].task_dir / "local" / "conf.txt").read_bytes() == b"v1"
    events = [e.type for e in node.store.events(r.id, "t")]
    assert events.index("Downloading Artifacts") < events.index("Started"), events
    again = AllocRunner(
        node.deps(), AllocRecord.from_record(node.store.get("alloc", r.id) or {}), r.job, r.group
    )
    again.restore()
    assert server.hits == ["/conf.txt"], "a restore does not fetch again"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives files to another user")
def test_chown_gives_what_the_artifact_wrote_to_the_tasks_user(server: Server, tmp_path: Path) -> None:
    """Nomad's `chown = true`: the artifact's destination, recursively, to the task's `user`."""
    server.files["/app.tar.gz"] = _tar({"app/bin/run.sh": b"echo\n", "app/README": b"r"})
    nobody = pwd.getpwnam("nobody")
    r = _runner(
        FakeNode(tmp_path), server, Artifact(server.url + "/app.tar.gz", "local/x", chown=True), "nobody"
    )
    assert r.rec.status is AllocStatus.RUNNING, r.rec.reason
    dest = r.tasks[r.group.tasks[0].name].task_dir / "local" / "x"
    for p in (dest, dest / "app", dest / "app" / "bin" / "run.sh", dest / "app" / "README"):
        st = p.lstat()
        assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid), p
    plain = _runner(
        FakeNode(tmp_path / "n2"), server, Artifact(server.url + "/app.tar.gz", "local/x"), "nobody"
    )
    st = (plain.tasks[plain.group.tasks[0].name].task_dir / "local" / "x" / "app" / "README").lstat()
    assert st.st_uid == os.geteuid(), "without chown the files stay the agent's"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives files to another user")
def test_chown_follows_no_link(tmp_path: Path) -> None:
    """Unlike Nomad's os.Chown walk, a link in the destination is given away itself, never what it
    points at, and the walk does not go through it."""
    host_dir = tmp_path / "host"
    (host_dir / "sub").mkdir(parents=True)
    (host_dir / "file").write_text("host")
    task_dir = tmp_path / "t"
    dest = task_dir / "local" / "dest"
    dest.mkdir(parents=True)
    (dest / "to-file").symlink_to(host_dir / "file")
    (dest / "to-dir").symlink_to(host_dir)
    chown_tree(task_dir, sandbox_path("local/dest"), (65534, 65534))
    assert (dest / "to-file").lstat().st_uid == 65534 and (dest / "to-dir").lstat().st_uid == 65534
    for p in (host_dir, host_dir / "sub", host_dir / "file"):
        assert p.stat().st_uid == os.geteuid(), p
    chown_tree(task_dir, sandbox_path("local/dest/to-dir"), (65534, 65534))  # itself a link
    assert host_dir.stat().st_uid == os.geteuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives files to another user")
def test_chown_follows_no_link_planted_during_the_walk(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51: a directory of the destination swapped for a link to the host while `chown = true`
    walks it. The walk by path (os.walk) checked `islink`, then listed the path and lchown'ed
    "sub/secret" through the link planted in between: the host's file changed owner. By fd, each
    directory is opened below its parent with O_NOFOLLOW: the link is given away itself."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "secret").write_text("host")
    task_dir = tmp_path / "alloc" / "t"
    sub = task_dir / "local" / "app" / "sub"
    server.files["/app.tgz"] = _tar({"sub/secret": b"artifact"})
    planted: list[str] = []

    def plant() -> None:  # once the artifact is written, at the walk's last moment before `sub`
        if not planted and (sub / "secret").exists() and not sub.is_symlink():
            sub.rename(sub.with_name("sub.old"))
            sub.symlink_to(outside)
            planted.append("sub")

    real_islink, real_open = os.path.islink, os.open

    def islink(path: object) -> bool:  # the walk by path: checked, then planted
        seen = real_islink(path)  # type: ignore[arg-type]
        if os.fspath(path) == str(sub):  # type: ignore[arg-type]
            plant()
        return seen

    def open_(path: object, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "sub" and dir_fd is not None:  # the walk by fd: planted just before the open
            plant()
        return real_open(path, flags, mode, dir_fd=dir_fd)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "islink", islink)
    monkeypatch.setattr(os, "open", open_)
    artifact = Artifact(server.url + "/app.tgz", "local/app", chown=True)
    HttpGetter(allowed_hosts=LOOPBACK).fetch(task_dir, artifact, {}, (65534, 65534))
    monkeypatch.undo()
    assert planted, "the link was planted during the walk"
    for p in (outside, outside / "secret"):
        assert p.stat().st_uid == os.geteuid(), f"{p} given away through a planted link"
    assert sub.lstat().st_uid == 65534, "the link itself is the task's"


def test_a_failed_download_is_an_event_and_fails_the_setup(server: Server, tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    server.files["/conf.txt"] = b"v1"
    wrong = {"checksum": "md5:" + "0" * 32}
    r = _runner(node, server, Artifact(server.url + "/conf.txt", options=wrong))
    assert r.rec.status is AllocStatus.FAILED and node.exec.starts == []
    (failed,) = [e for e in node.store.events(r.id, "t") if e.type == "Failed Artifact Download"]
    assert failed.message.startswith(
        f'failed to download artifact "{server.url}/conf.txt": checksums did not'
    )
    record = r.state.task("t")
    assert (record.state, record.failed) == (TaskState.DEAD, True)
    assert "failed to download artifact" in r.rec.reason


def test_a_server_that_does_not_answer_is_tried_again_with_the_setup(server: Server, tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    server.status["/conf.txt"] = 503
    r = _runner(node, server, Artifact(server.url + "/conf.txt"))
    assert r.rec.status is AllocStatus.PENDING and node.timers, "the setup waits to be tried again"
    server.files["/conf.txt"], server.status["/conf.txt"] = b"v2", 200
    node.run_timers()
    assert r.rec.status is AllocStatus.RUNNING
    assert (r.tasks[r.group.tasks[0].name].task_dir / "local" / "conf.txt").read_bytes() == b"v2"
