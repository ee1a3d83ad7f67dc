"""The alloc dir's files as Nomad's fs endpoints serve them (agent/nomadapi/allocfs.py): what a task can
plant or swap in its own dirs (links, FIFOs, devices, hard links, huge files, deep trees, names that are
not UTF-8) must never make the agent (root) read outside the alloc dir, follow a link, block, or open a
device. Each hostile case is built so that, without the protection it names, the call would return the
host's (or another alloc's) content or hang: the content is asserted absent and the call prompt.

The layout: `data/alloc/<ALLOC>/` (the shared `alloc/` with logs, and the task dir `web/` with `local/`
and a 0600 `secrets/vault_token`), another alloc `data/alloc/<OTHER>/`, and `host/etc/` standing for
the host's /etc (real /etc is used too where reading it is harmless for the test)."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent.errors import AgentError
from agent.nomadapi import allocfs
from agent.nomadapi.allocfs import Entry, FsError, FsNotFound, FsRefused, clean_path

RACE_FOR = 60.0  # seconds the rename race may take past its 2000 tries to show both outcomes
ALLOC = "8d3f5c2a-1b2c-4d5e-9f00-0123456789ab"
OTHER = "77e1a0b4-0000-4c1d-8e2f-fedcba987654"
PROMPT = 5.0  # seconds: a call that should return at once; a hang fails the test instead of hanging it
HOST_PASSWD = b"root:x:0:0:HOST-PASSWD-SENTINEL:/root:/bin/sh\n"
HOST_SHADOW = b"root:$6$HOST-SHADOW-SENTINEL:19000:0:99999:7:::\n"
OTHER_TOKEN = b"hvs.OTHER-ALLOC-TOKEN"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod)")


@dataclass
class Layout:
    alloc: Path  # data/alloc/<ALLOC>
    other: Path  # data/alloc/<OTHER>
    etc: Path  # host/etc, the host's stand-in


@pytest.fixture
def lay(tmp_path: Path) -> Layout:
    alloc, other = tmp_path / "data" / "alloc" / ALLOC, tmp_path / "data" / "alloc" / OTHER
    for d in ("alloc/logs", "alloc/data", "alloc/tmp", "web/local", "web/secrets", "web/tmp"):
        (alloc / d).mkdir(parents=True)
    (alloc / "alloc" / "logs" / "web.stdout.0").write_bytes(b"listening on :8080\nGET / 200\n")
    (alloc / "alloc" / "logs" / "web.stderr.0").write_bytes(b"")
    (alloc / "web" / "local" / "x").write_bytes(b"0123456789")
    os.utime(alloc / "web" / "local" / "x", (1_700_000_000.5, 1_700_000_000.5))
    token = alloc / "web" / "secrets" / "vault_token"
    token.write_bytes(b"hvs.MY-TOKEN")
    token.chmod(0o600)
    for d in ("web/local", "web/secrets"):
        (other / d).mkdir(parents=True)
    (other / "web" / "local" / "app.cfg").write_bytes(OTHER_TOKEN)
    (other / "web" / "secrets" / "vault_token").write_bytes(OTHER_TOKEN)
    etc = tmp_path / "host" / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_bytes(HOST_PASSWD)
    (etc / "shadow").write_bytes(HOST_SHADOW)
    (etc / "shadow").chmod(0o600)
    return Layout(alloc, other, etc)


def promptly(fn: Callable[[], Any], limit: float = PROMPT) -> Any:
    """fn() in a thread; fails (does not hang) if it has not returned within `limit` seconds."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=run, name="allocfs-promptly", daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"did not return within {limit}s (blocked?)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def refused(fn: Callable[[], Any], *needles: str) -> str:
    """The FsRefused message of fn() (which must return promptly), checked to hold every needle."""
    with pytest.raises(FsRefused) as info:
        promptly(fn)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, msg
    return msg


def names(entries: list[Entry]) -> list[str]:
    return [e.name for e in entries]


class OpenWatch:
    """inotify IN_OPEN on one file: whether anything opened it (an O_PATH look or an lstat is no open,
    so this tells "looked at" from "opened", which for a device runs its driver's open)."""

    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            pytest.skip(f"no inotify here: {os.strerror(ctypes.get_errno())}")
        if self.libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN) < 0:
            os.close(self.fd)
            pytest.skip(f"cannot watch {path}: {os.strerror(ctypes.get_errno())}")

    def opened(self) -> bool:
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def open_watch() -> Iterator[Callable[[Path], OpenWatch]]:
    made: list[OpenWatch] = []

    def watch(path: Path) -> OpenWatch:
        made.append(OpenWatch(path))
        return made[-1]

    yield watch
    for w in made:
        w.close()


def test_open_watch_sees_an_open(lay: Layout, open_watch: Callable[[Path], OpenWatch]) -> None:
    """The control for the "never opened" checks below: a read that opens the file is seen."""
    w = open_watch(lay.alloc / "web" / "local" / "x")
    allocfs.stat(lay.alloc, "web/local/x")
    assert not w.opened()
    allocfs.read(lay.alloc, "web/local/x", 0, 1)
    assert w.opened()


def real_etc_file(name: str) -> bytes:
    p = Path("/etc") / name
    if not os.access(p, os.R_OK):
        pytest.skip(f"{p} is not readable here")
    return p.read_bytes()


# -- clean_path ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("/", ()),
        ("", ()),
        (".", ()),
        ("alloc/logs", ("alloc", "logs")),
        ("/web/local/x", ("web", "local", "x")),
        ("web//local/./x", ("web", "local", "x")),
        ("web/local/x/", ("web", "local", "x")),
        ("web/.../..x/x..", ("web", "...", "..x", "x..")),  # names, not `..`
    ],
)
def test_clean_path(path: str, parts: tuple[str, ...]) -> None:
    assert clean_path(path) == parts


DOTDOT = [
    "..",
    "../",
    "/..",
    "../x",
    "web/..",
    "web/local/../../x",
    "web/local/../local/x",  # `..` anywhere, even one that stays inside
    "/../../etc",
    "/../../etc/passwd",
    "./../" + OTHER,
    "web//..//..//" + OTHER,
    "alloc/logs/./../../../" + OTHER + "/web/local/app.cfg",
]


@pytest.mark.parametrize("path", DOTDOT)
def test_clean_path_refuses_dotdot(path: str) -> None:
    with pytest.raises(FsRefused, match="leaves the alloc dir") as info:
        clean_path(path)
    assert json.dumps(path) in str(info.value)  # the path as asked


def test_clean_path_limits() -> None:
    assert len(clean_path("/".join(["d"] * 64))) == 64
    assert clean_path("a" * 4096) == ("a" * 4096,)
    with pytest.raises(FsRefused, match="more than 64 components"):
        clean_path("/".join(["d"] * 65))
    with pytest.raises(FsRefused, match="longer than 4096"):
        clean_path("a" * 4097)
    with pytest.raises(FsRefused, match="NUL"):
        clean_path("web/local/x\0.png")
    with pytest.raises(FsRefused, match="not a file name"):
        clean_path("web/\ud800")  # a lone surrogate no file name can hold


def test_errors_are_agent_errors_and_name_the_path_and_alloc(lay: Layout) -> None:
    assert issubclass(FsNotFound, FsError) and issubclass(FsRefused, FsError)
    assert issubclass(FsError, AgentError)
    with pytest.raises(FsNotFound) as info:
        allocfs.read(lay.alloc, "web/nope/x", 0, 10)
    assert str(info.value) == f'path "web/nope/x" in alloc {ALLOC}: "web/nope" does not exist'
    msg = refused(lambda: allocfs.stat(lay.alloc, "web/local/../../x"), "leaves the alloc dir")
    assert msg.startswith(f'path "web/local/../../x" in alloc {ALLOC}: ')


# -- happy paths -----------------------------------------------------------------------------------


def test_listdir(lay: Layout) -> None:
    top = allocfs.listdir(lay.alloc, "/")
    assert names(top) == ["alloc", "web"] and all(e.is_dir for e in top)
    assert names(allocfs.listdir(lay.alloc, "")) == ["alloc", "web"]
    assert names(allocfs.listdir(lay.alloc, "web")) == ["local", "secrets", "tmp"]
    logs = allocfs.listdir(lay.alloc, "alloc/logs")
    assert logs == [
        Entry("web.stderr.0", False, 0, logs[0].mode, logs[0].mod_time),
        Entry("web.stdout.0", False, 29, logs[1].mode, logs[1].mod_time),
    ]
    assert all(stat.S_ISREG(e.mode) for e in logs)


def test_stat(lay: Layout) -> None:
    x = allocfs.stat(lay.alloc, "/web/local/x")
    assert x == Entry("x", False, 10, x.mode, 1_700_000_000.5)
    assert stat.S_ISREG(x.mode)
    assert allocfs.stat(lay.alloc, "web//local/./x") == x
    top = allocfs.stat(lay.alloc, "/")
    assert top.name == ALLOC and top.is_dir and stat.S_ISDIR(top.mode)
    local = allocfs.stat(lay.alloc, "web/local")
    assert local.name == "local" and local.is_dir


def test_read(lay: Layout) -> None:
    assert (
        allocfs.read(lay.alloc, "alloc/logs/web.stdout.0", 0, 1 << 20) == b"listening on :8080\nGET / 200\n"
    )
    assert allocfs.read(lay.alloc, "/web//local/./x", 0, 100) == b"0123456789"


def test_read_offset_and_limit(lay: Layout) -> None:
    def rd(offset: int, limit: int) -> bytes:
        return allocfs.read(lay.alloc, "web/local/x", offset, limit)

    assert rd(3, 4) == b"3456"
    assert rd(8, 100) == b"89"
    assert rd(0, 0) == b""
    assert rd(10, 5) == b""  # at the end
    assert rd(11, 5) == b""  # past it
    assert rd(10**30, 5) == b""  # beyond any off_t: no OverflowError
    refused(lambda: rd(-1, 5), "must not be negative")
    refused(lambda: rd(0, -1), "must not be negative")


def test_read_is_capped_and_huge_sparse_files_are_cheap(lay: Layout) -> None:
    big = lay.alloc / "alloc" / "data" / "big"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)  # 1 TiB, sparse
        fh.seek((1 << 40) - 4)
        fh.write(b"tail")
    assert allocfs.stat(lay.alloc, "alloc/data/big").size == 1 << 40
    assert allocfs.read(lay.alloc, "alloc/data/big", (1 << 40) - 4, 100) == b"tail"
    got = allocfs.read(lay.alloc, "alloc/data/big", 0, 1 << 30)
    assert len(got) == allocfs.MAX_READ == 8 * 1024 * 1024


def test_secrets_are_listed_and_stated_never_read(lay: Layout) -> None:
    assert names(allocfs.listdir(lay.alloc, "web/secrets")) == ["vault_token"]
    token = allocfs.stat(lay.alloc, "web/secrets/vault_token")
    assert stat.S_IMODE(token.mode) == 0o600 and token.size == len(b"hvs.MY-TOKEN")
    for path in ("web/secrets/vault_token", "/web/./secrets//vault_token"):
        msg = refused(partial(allocfs.read, lay.alloc, path, 0, 100), "secrets")
        assert "MY-TOKEN" not in msg
    (lay.alloc / "alloc" / "data" / "secrets").write_bytes(b"shared, not a task's secrets dir")
    assert allocfs.read(lay.alloc, "alloc/data/secrets", 0, 100).startswith(b"shared")


def test_missing_and_wrong_kinds(lay: Layout) -> None:
    for call in (
        lambda: allocfs.read(lay.alloc, "web/local/nope", 0, 10),
        lambda: allocfs.stat(lay.alloc, "web/local/nope"),
        lambda: allocfs.listdir(lay.alloc, "web/nope"),
        lambda: allocfs.listdir(lay.alloc.parent / "no-such-alloc", "/"),
    ):
        with pytest.raises(FsNotFound):
            call()
    refused(lambda: allocfs.listdir(lay.alloc, "web/local/x"), "is a regular file, not a directory")
    refused(lambda: allocfs.read(lay.alloc, "web/local/x/y", 0, 10), "is a regular file, not a directory")
    refused(lambda: allocfs.read(lay.alloc, "web/local", 0, 10), "is a directory, not a regular file")
    refused(lambda: allocfs.read(lay.alloc, "/", 0, 10), "not a regular file")
    refused(lambda: allocfs.stat(lay.alloc, "web/" + "n" * 300), "too long")


def test_deep_tree(lay: Layout) -> None:
    deep = lay.alloc / "alloc" / "data"
    for _ in range(61):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"deep")
    path = "alloc/data/" + "d/" * 61 + "f"  # 64 components
    assert allocfs.read(lay.alloc, path, 0, 10) == b"deep"
    refused(lambda: allocfs.read(lay.alloc, "alloc/data/" + "d/" * 62 + "f", 0, 10), "64 components")


# -- hostile: links ----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["host", "/etc/shadow"])
def test_symlink_at_the_last_component_is_never_followed(lay: Layout, target: str) -> None:
    if target == "host":
        target, content = str(lay.etc / "shadow"), HOST_SHADOW
    else:
        content = real_etc_file("shadow")
    os.symlink(target, lay.alloc / "web" / "local" / "creds")
    for path in ("web/local/creds", "/web/local/./creds"):
        msg = refused(
            partial(allocfs.read, lay.alloc, path, 0, 1 << 20),
            '"web/local/creds" is a symbolic link, not a regular file',
        )
        assert content.decode(errors="replace") not in msg
    link = allocfs.stat(lay.alloc, "web/local/creds")
    assert stat.S_ISLNK(link.mode) and not link.is_dir
    assert link.size == len(os.fsencode(target))  # the link's own size, not the target's
    listed = {e.name: e for e in allocfs.listdir(lay.alloc, "web/local")}
    assert stat.S_ISLNK(listed["creds"].mode) and listed["creds"].size == link.size


def test_symlink_to_a_dir_is_shown_as_a_link_and_not_entered(lay: Layout) -> None:
    os.symlink(lay.etc, lay.alloc / "web" / "local" / "etc")
    e = allocfs.stat(lay.alloc, "web/local/etc")
    assert stat.S_ISLNK(e.mode) and not e.is_dir
    refused(lambda: allocfs.listdir(lay.alloc, "web/local/etc"), "symbolic link, not a directory")


@pytest.mark.parametrize("target", ["host", "/etc"])
def test_symlink_as_an_intermediate_dir_is_never_followed(lay: Layout, target: str) -> None:
    if target == "host":
        target, passwd = str(lay.etc), HOST_PASSWD
    else:
        passwd = real_etc_file("passwd")
    local = lay.alloc / "web" / "local"
    (local / "x").unlink()
    local.rmdir()
    os.symlink(target, local)  # web/local -> /etc
    for path in ("web/local/passwd", "web/local/./passwd", "/web//local/passwd"):
        refused(partial(allocfs.read, lay.alloc, path, 0, 1 << 20), '"web/local" is a symbolic link')
        refused(partial(allocfs.stat, lay.alloc, path), '"web/local" is a symbolic link')
    refused(lambda: allocfs.listdir(lay.alloc, "web/local"), "symbolic link, not a directory")
    assert stat.S_ISLNK(allocfs.stat(lay.alloc, "web/local").mode)
    assert passwd  # what a follow would have returned (and did not)


def test_symlink_to_another_allocs_dir(lay: Layout) -> None:
    local = lay.alloc / "web" / "local"
    os.symlink(f"../../../{OTHER}", local / "rel")
    os.symlink(lay.other, local / "abs")
    os.symlink(lay.other / "web" / "secrets" / "vault_token", lay.alloc / "alloc" / "data" / "token")
    for link in ("rel", "abs"):
        assert stat.S_ISLNK(allocfs.stat(lay.alloc, f"web/local/{link}").mode)
        refused(partial(allocfs.listdir, lay.alloc, f"web/local/{link}"), "symbolic link")
        for rest in ("web/local/app.cfg", "web/secrets/vault_token"):
            path = f"web/local/{link}/{rest}"
            msg = refused(partial(allocfs.read, lay.alloc, path, 0, 100), "symbolic link")
            assert OTHER_TOKEN.decode() not in msg
    refused(lambda: allocfs.read(lay.alloc, "alloc/data/token", 0, 100), "symbolic link")
    # the alloc dir itself a link (a stale or planted entry in data/alloc): not entered either
    os.symlink(lay.other, lay.alloc.parent / "linked-alloc")
    refused(lambda: allocfs.listdir(lay.alloc.parent / "linked-alloc", "/"), "alloc dir")


@pytest.mark.parametrize("path", [*DOTDOT, f"../{OTHER}/web/local/app.cfg", f"/../{OTHER}/web/local/app.cfg"])
def test_dotdot_never_reaches_the_parent(lay: Layout, path: str) -> None:
    """Each of these names an existing file or dir above the alloc dir (data/alloc, another alloc):
    without the `..` refusal, listdir would list data/alloc and read would return OTHER_TOKEN."""
    for call in (
        lambda: allocfs.read(lay.alloc, path, 0, 100),
        lambda: allocfs.stat(lay.alloc, path),
        lambda: allocfs.listdir(lay.alloc, path),
    ):
        msg = refused(call, "leaves the alloc dir", json.dumps(path), ALLOC)
        assert OTHER_TOKEN.decode() not in msg


def test_hard_link_to_a_private_file_is_not_read(lay: Layout) -> None:
    """A hard link is indistinguishable from the file: with fs.protected_hardlinks off a task could link
    the host's /etc/shadow into its dir. A multiply-linked file that not everyone may read is refused."""
    os.link(lay.etc / "shadow", lay.alloc / "web" / "local" / "h")
    msg = refused(lambda: allocfs.read(lay.alloc, "web/local/h", 0, 1 << 20), "2 hard links")
    assert HOST_SHADOW.decode() not in msg
    assert allocfs.stat(lay.alloc, "web/local/h").size == len(HOST_SHADOW)  # stat is fine
    os.link(lay.etc / "passwd", lay.alloc / "web" / "local" / "p")  # 0644: anyone may read it anyway
    assert allocfs.read(lay.alloc, "web/local/p", 0, 1 << 20) == HOST_PASSWD


# -- hostile: special files ------------------------------------------------------------------------


def test_fifo_never_blocks(lay: Layout, open_watch: Callable[[Path], OpenWatch]) -> None:
    os.mkfifo(lay.alloc / "web" / "local" / "fifo")
    watch = open_watch(lay.alloc / "web" / "local" / "fifo")
    t0 = time.monotonic()
    refused(lambda: allocfs.read(lay.alloc, "web/local/fifo", 0, 10), "is a FIFO, not a regular file")
    refused(lambda: allocfs.listdir(lay.alloc, "web/local/fifo"), "is a FIFO, not a directory")
    refused(lambda: allocfs.read(lay.alloc, "web/local/fifo/x", 0, 10), "is a FIFO, not a directory")
    assert stat.S_ISFIFO(promptly(lambda: allocfs.stat(lay.alloc, "web/local/fifo")).mode)
    assert "fifo" in names(promptly(lambda: allocfs.listdir(lay.alloc, "web/local")))
    assert time.monotonic() - t0 < PROMPT
    assert not watch.opened()  # looked at (O_PATH, lstat), never opened: no writer can attach


def test_socket_is_not_read(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(lay.alloc / "web" / "local")  # AF_UNIX paths are short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")
        refused(lambda: allocfs.read(lay.alloc, "web/local/sock", 0, 10), "is a socket, not a regular file")
        assert stat.S_ISSOCK(allocfs.stat(lay.alloc, "web/local/sock").mode)


@root_only
def test_device_node_is_never_opened(lay: Layout, open_watch: Callable[[Path], OpenWatch]) -> None:
    """A /dev/zero-like node a task made (docker grants CAP_MKNOD): readable directly (so the refusal
    is allocfs's), never read, and never even opened (a device's open can act: a watchdog arms, a tape
    rewinds), which an inotify IN_OPEN watch on the node checks."""
    dev = lay.alloc / "web" / "local" / "zero"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    with open(dev, "rb") as fh:  # the precondition: this mount allows devices
        assert fh.read(4) == b"\0\0\0\0"
    watch = open_watch(dev)
    with pytest.raises(FsRefused, match="is a character device, not a regular file"):
        promptly(lambda: allocfs.read(lay.alloc, "web/local/zero", 0, 10))
    e = allocfs.stat(lay.alloc, "web/local/zero")
    assert stat.S_ISCHR(e.mode) and e.size == 0
    refused(lambda: allocfs.listdir(lay.alloc, "web/local/zero"), "character device, not a directory")
    assert not watch.opened()


# -- hostile: races, sizes, names --------------------------------------------------------------------


@pytest.fixture
def swapper(lay: Layout) -> Iterator[threading.Event]:
    """A thread that swaps web/local between the real dir and a link to host/etc, as fast as it can,
    until the test ends; the event is set once it has swapped at least once."""
    local = lay.alloc / "web" / "local"
    (local / "passwd").write_bytes(b"inside\n")
    real, link = local.with_name("local.real"), local.with_name("local.link")
    os.symlink(lay.etc, link)
    stop, swapped = threading.Event(), threading.Event()

    def swap() -> None:
        cycles = 0
        while not stop.is_set():
            os.rename(local, real)
            os.rename(link, local)  # web/local -> host/etc
            swapped.set()
            os.rename(local, link)
            os.rename(real, local)
            cycles += 1
            if cycles % 64 == 0:  # a breath with the real dir in place, so that some reads land whole
                stop.wait(0.001)  # however busy the machine (a loaded CI had 2000 reads miss it)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the GIL changes hands at every chance: the swaps land mid-walk
    th = threading.Thread(target=swap, name="allocfs-swapper", daemon=True)
    th.start()
    try:
        assert swapped.wait(PROMPT)
        yield swapped
    finally:
        stop.set()
        th.join(PROMPT)
        sys.setswitchinterval(interval)
    assert not th.is_alive()


def test_rename_race_never_steers_a_read_out(lay: Layout, swapper: threading.Event) -> None:
    outcomes = {"inside": 0, "refused": 0, "missing": 0}
    deadline = time.monotonic() + RACE_FOR
    for i in itertools.count():
        if i >= 2000 and ((outcomes["inside"] and outcomes["refused"]) or time.monotonic() > deadline):
            break
        try:
            if i % 4 == 3:
                listed = names(allocfs.listdir(lay.alloc, "web/local"))
                assert "shadow" not in listed, listed
                outcomes["inside"] += 1
                continue
            got = allocfs.read(lay.alloc, "web/local/passwd" if i % 2 else "/web/./local//passwd", 0, 4096)
        except FsRefused as exc:
            assert "symbolic link" in str(exc) or "was replaced while it was opened" in str(exc), exc
            outcomes["refused"] += 1
            continue
        except FsNotFound:
            outcomes["missing"] += 1  # between two renames
            continue
        assert got == b"inside\n", got  # never HOST_PASSWD
        outcomes["inside"] += 1
    assert outcomes["inside"] and outcomes["refused"], outcomes  # the race was actually run


def test_directory_of_more_than_10000_entries(lay: Layout) -> None:
    many = lay.alloc / "alloc" / "data" / "many"
    many.mkdir()
    for i in range(10_001):
        os.close(os.open(many / f"f{i:05}", os.O_CREAT | os.O_WRONLY, 0o644))
    refused(lambda: allocfs.listdir(lay.alloc, "alloc/data/many"), "more than 10000 entries")
    assert allocfs.read(lay.alloc, "alloc/data/many/f10000", 0, 1) == b""  # a file by name still is
    (many / "f10000").unlink()
    listed = allocfs.listdir(lay.alloc, "alloc/data/many")
    assert len(listed) == 10_000 and listed[0].name == "f00000" and listed[-1].name == "f09999"


def test_names_that_are_not_utf8(lay: Layout) -> None:
    logs = os.fsencode(lay.alloc / "alloc" / "logs")
    with open(logs + b"/bad\xff\xfe.log", "wb") as fh:
        fh.write(b"odd")
    os.mkdir(logs + b"/dir\xc3")
    listed = allocfs.listdir(lay.alloc, "alloc/logs")
    assert names(listed) == ["bad\ufffd\ufffd.log", "dir\ufffd", "web.stderr.0", "web.stdout.0"]
    json.dumps([e.name for e in listed], ensure_ascii=False).encode()  # no lone surrogate left
    asked = os.fsdecode(b"alloc/logs/bad\xff\xfe.log")  # the request's own surrogate escapes
    assert allocfs.stat(lay.alloc, asked).name == "bad\ufffd\ufffd.log"
    assert allocfs.read(lay.alloc, asked, 0, 10) == b"odd"
    assert allocfs.listdir(lay.alloc, os.fsdecode(b"alloc/logs/dir\xc3")) == []


def test_no_fd_leaks_on_any_path(lay: Layout) -> None:
    os.symlink(lay.etc, lay.alloc / "web" / "local" / "etc")
    os.mkfifo(lay.alloc / "web" / "local" / "fifo")
    calls: list[Callable[[], object]] = [
        lambda: allocfs.read(lay.alloc, "web/local/x", 0, 10),
        lambda: allocfs.read(lay.alloc, "web/local/etc/passwd", 0, 10),
        lambda: allocfs.read(lay.alloc, "web/local/etc", 0, 10),
        lambda: allocfs.read(lay.alloc, "web/local/fifo", 0, 10),
        lambda: allocfs.read(lay.alloc, "web/local/nope", 0, 10),
        lambda: allocfs.listdir(lay.alloc, "web/local"),
        lambda: allocfs.listdir(lay.alloc, "web/local/etc"),
        lambda: allocfs.stat(lay.alloc, "web/local/etc/x"),
        lambda: allocfs.stat(lay.alloc, "/"),
    ]
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        for call in calls:
            with contextlib.suppress(FsError):
                promptly(call)
    assert len(os.listdir("/proc/self/fd")) == before
