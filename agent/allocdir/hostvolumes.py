"""A client host volume's path as it is mounted into a task: resolved at mount time (every start,
restarts included), so that a path that is, or has since become, a link is followed once, by the
agent, and the driver is handed the real directory, never the link. A path that leads into the
agent's own files (its data dir with the state database, secrets and alloc dirs, its config dir, its
TLS cert and key, its Vault credentials, its code), or holds them, is refused: a workload never
reaches them.

`own_path_problem` decides over plain paths; `resolve_host_volume` is the thin adapter that asks
the file system. Nomad's client checks a host volume's path once, when it fingerprints it; the
agent's own dirs are not Nomad's rule but the project's (a task never reaches the agent's files).

No window between the check and the mount (issue 51): `hold_host_volume` opens the checked
directory (O_PATH, each component without following a link: a component swapped for a link since
the check is refused), checks the opened fd's own path again and holds the fd until the driver has
made the mount. The drivers mount that very directory, never the path string again: the exec
driver binds it and compares the mount's device and inode with the fd's before the task runs
(`dir_identity`); the docker driver hands dockerd a bind of the fd on a fresh dir of its own
(`staged_bind`: dockerd and runc mount in another mount namespace, where the fd's
/proc/<pid>/fd/N link cannot be a bind's source), unmounted once the container runs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import agent
from agent.command.config import DEFAULT_CONFIG, Config
from agent.errors import AgentError


class HostVolumeError(AgentError):
    """A host volume cannot be mounted: the reason names the volume, its path and what it leads to."""


def own_paths(cfg: Config) -> tuple[Path, ...]:
    """The agent's own files and dirs besides its data dir: the config dir (the default one and the
    one it was started with), the dirs of its TLS cert
    and key and of its Vault AppRole file (the config dir in the lab's layouts, /etc/nomad.d in
    Nomad's), and its own code (the package, and the virtualenv it runs from: a task that could
    write them would run as root in the agent)."""
    found = [DEFAULT_CONFIG.parent, Path(agent.__file__).resolve().parent]
    if cfg.config_file is not None:  # the dir of the config file the agent was started with
        found.append(cfg.config_file.parent)
    if sys.prefix != sys.base_prefix:
        found.append(Path(sys.prefix))
    if cfg.tls is not None:
        found += [cfg.tls.cert_file.parent, cfg.tls.key_file.parent]
    if cfg.vault.approle_file is not None:
        found.append(cfg.vault.approle_file.parent)
    return tuple(found)


def own_path_problem(real: Path, own: Iterable[Path]) -> str | None:
    """Why the real path `real` may not be mounted into a task, or None: it is one of the agent's
    own paths (`own`, real paths), lies inside one, or holds one."""
    for o in own:
        if real == o or o in real.parents:
            return f"leads into the agent's own {o}"
        if real in o.parents:
            return f"holds the agent's own {o}"
    return None


def _real_forms(paths: Iterable[Path]) -> list[Path]:
    """Each path as given (absolute) and as it resolves now: a data dir that is itself a link is
    protected under both names."""
    out: list[Path] = []
    for p in paths:
        out += [Path(os.path.abspath(p)), Path(os.path.realpath(p))]
    return out


def resolve_host_volume(name: str, path: str, own: Sequence[Path]) -> Path:
    """The real directory of host volume `name` now (its links followed once, here), refused with
    a HostVolumeError when it is missing, not a directory, or leads into (or holds) `own`."""
    try:
        real = Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        raise HostVolumeError(f'host volume "{name}": {path}: {exc.strerror or exc}') from None
    if not real.is_dir():
        raise HostVolumeError(f'host volume "{name}": {path} is not a directory')
    problem = own_path_problem(real, _real_forms(own))
    if problem is not None:
        shown = f"{path} (resolved: {real})" if str(real) != os.path.abspath(path) else path
        raise HostVolumeError(f'host volume "{name}": {shown} {problem}: refused')
    return real


# Each component opened as a directory, never through a link (O_PATH: no read access needed).
_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LEAF = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC  # a dir or a file; a link is opened as the link


def open_no_links(real: str) -> int:
    """An O_PATH fd of the directory `real` (absolute, links already resolved), each component
    opened without following a link: OSError (ENOTDIR, ELOOP) when one is a link now."""
    fd = os.open("/", _WALK)
    try:
        for part in (p for p in real.split("/") if p):
            nxt = os.open(part, _WALK, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def pin_path(path: str) -> int:
    """An O_PATH fd of the dir or file at `path` (absolute, links already resolved: a docker bind's
    checked source), each component opened without following a link, missing dirs made as dockerd
    makes a bind's missing source (never through a link): OSError when one is a link now."""
    fd = os.open("/", _WALK)
    try:
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, _WALK if i < len(parts) - 1 else _LEAF, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _WALK, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, "a link", path)
        if fd_path(fd) != os.path.normpath(path):
            raise OSError(errno.ESTALE, f"moved to {fd_path(fd)}", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fd_path(fd: int) -> str:
    """The path an open fd's directory has now (its /proc/self/fd link)."""
    return os.readlink(f"/proc/self/fd/{fd}")


def dir_identity(fd: int) -> str:
    """ "<device>:<inode>" of an open fd's directory, as `stat -c %d:%i` prints it."""
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


@dataclass
class HeldVolume:
    """A host volume's checked directory, open (an O_PATH fd) until its mount is made."""

    fd: int
    path: str  # its real path when it was checked

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _no_window(real: Path) -> None:
    """The default seam between the check and the open: nothing happens there."""


def hold_host_volume(
    name: str, path: str, own: Sequence[Path], *, checked: Callable[[Path], None] = _no_window
) -> HeldVolume:
    """Host volume `name` resolved and checked (resolve_host_volume), then opened without following
    a link and checked again by the fd's own path: the caller holds the very directory that was
    checked, or a HostVolumeError says why not. `checked`: called between the check and the open
    (a test swaps a component for a link there)."""
    real = resolve_host_volume(name, path, own)
    checked(real)
    try:
        fd = open_no_links(str(real))
    except OSError as exc:
        why = f"changed while it was mounted ({real}: {exc.strerror or exc})"
        raise HostVolumeError(f'host volume "{name}": {path} {why}: refused') from None
    now = fd_path(fd)
    problem = own_path_problem(Path(now), _real_forms(own))
    if now != str(real) or problem is not None:
        os.close(fd)
        why = problem or f"is now {now}"
        raise HostVolumeError(f'host volume "{name}": {path} (resolved: {real}) {why}: refused')
    return HeldVolume(fd, now)


# -- a bind of a held dir on a dir of the agent's own (for a driver that mounts in another namespace) ----
_MS_BIND = 4096
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _syscall_error(what: str, path: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}", path)


@contextmanager
def staged_bind(fd: int, staging_dir: Path) -> Iterator[str]:
    """The dir or file open as `fd` bound on a fresh one under `staging_dir` (root's, 0700: no task
    reaches it), for the length of the block; unmounted (detached) and removed after it. The bind is
    made through the fd (its /proc/self/fd link), never through a path a task could swap."""
    staging_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        where = tempfile.mkdtemp(prefix="bind-", dir=staging_dir)
    else:
        handle, where = tempfile.mkstemp(prefix="bind-", dir=staging_dir)
        os.close(handle)
    target = os.open(where, _LEAF)
    try:
        source, on = f"/proc/self/fd/{fd}".encode(), f"/proc/self/fd/{target}".encode()
        if _libc.mount(source, on, None, _MS_BIND, None):
            raise _syscall_error("bind the host volume", where)
    except BaseException:
        os.close(target)
        _remove(where)
        raise
    os.close(target)
    try:
        yield where
    finally:
        _unstage(where)


def _remove(where: str) -> None:
    if stat.S_ISDIR(os.lstat(where).st_mode):
        os.rmdir(where)  # only ever empty: never a mounted dir's contents
    else:
        os.unlink(where)


def _unstage(where: str) -> None:
    if _libc.umount2(where.encode(), _MNT_DETACH) and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        raise _syscall_error("unmount the staged host volume", where)
    _remove(where)


def sweep_staged(staging_dir: Path) -> None:
    """The binds a crashed start left under `staging_dir`, unmounted and removed."""
    if staging_dir.is_dir():
        for entry in os.listdir(staging_dir):
            if entry.startswith("bind-"):
                _unstage(str(staging_dir / entry))
