"""The template sandbox: file access inside a task's directory, and the Vault paths a template may use.

- **Files.** `destination`, `source` and `file(path)` are paths relative to the task dir (Nomad:
  relative to the task's working dir); `${NOMAD_TASK_DIR}`, `${NOMAD_SECRETS_DIR}` and
  `${NOMAD_ALLOC_DIR}` lead to `local/`, `secrets/` and the alloc's shared dir, and `alloc/...` (or
  `../alloc/...`) is the alloc's shared dir `<alloc_dir>/alloc`, the sibling of the task dirs. That
  is the whole sandbox, as Nomad's default: absolute paths and paths that leave it are refused.
  Paths are resolved with `os.open(..., dir_fd=)` one component at a time from an fd of the sandbox
  root, with O_NOFOLLOW: no `..` escape, and no symbolic link is followed anywhere, intermediate
  directories included. Reads refuse anything but a regular file (opened O_NOFOLLOW|O_NONBLOCK,
  checked with fstat, so a FIFO or a device never blocks the agent). Writes create a fresh temp file
  with O_CREAT|O_EXCL|O_NOFOLLOW in the destination's directory (by fd), write it in full, fchmod the
  open fd to the template's perms, fsync, and rename it over the destination by dir fd; a destination
  that exists and is not a regular file (link, FIFO, device, directory) is refused, and a failed write
  removes the temp file.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import secrets as _secrets
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # (client config template_max_bytes)
REFUSED_VAULT_MOUNTS = ("auth", "sys", "cubbyhole")
_VERSION_QUERY = re.compile(r"version=[0-9]{1,9}")


class SandboxError(Exception):
    """A path the sandbox refuses, or a file it will not read or replace."""


_DIR_VARS = (
    ("${NOMAD_TASK_DIR}", "local"),
    ("${NOMAD_SECRETS_DIR}", "secrets"),
    ("${NOMAD_ALLOC_DIR}", "alloc"),
)
SHARED_DIR = "alloc"  # <alloc_dir>/alloc, the sibling of the task dirs
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_ATTEMPTS = 16
_LINK_REFUSED = "is a symbolic link: refused (the template sandbox follows no links)"


@dataclass(frozen=True)
class SandboxPath:
    """A path inside the sandbox: its components below the task dir, or below the shared dir."""

    shared: bool
    parts: tuple[str, ...]

    def __str__(self) -> str:
        return "/".join((SHARED_DIR, *self.parts) if self.shared else self.parts)

    def host_path(self, task_dir: Path) -> Path:
        root = task_dir.parent / SHARED_DIR if self.shared else task_dir
        return root.joinpath(*self.parts)


def sandbox_path(raw: str) -> SandboxPath:
    """Where `raw` (relative to the task dir) is in the sandbox, lexically; raises SandboxError.
    Lexical `..` is sound here because no link is ever followed on the way down."""
    if not isinstance(raw, str):
        raise SandboxError(f"{raw!r}: not a path")
    if not raw:
        raise SandboxError("an empty path")
    if "\0" in raw:
        raise SandboxError(f"{raw!r}: a NUL byte in the path")
    text = raw
    for var, directory in _DIR_VARS:
        if text == var or text.startswith(var + "/"):
            text = directory + text[len(var) :]
    if text.startswith("/"):
        raise SandboxError(
            f"{raw}: an absolute path: give a path relative to the task dir "
            "(local/..., secrets/..., or alloc/... for the alloc's shared dir)"
        )
    parts = posixpath.normpath(text).split("/")
    shared = False
    if parts[:2] == ["..", SHARED_DIR]:
        shared, parts = True, parts[2:]
    elif parts[0] == "..":
        raise SandboxError(
            f"{raw}: escapes the task directory "
            "(the sandbox is the task dir and the alloc's shared alloc/ dir)"
        )
    elif parts[0] == SHARED_DIR:
        shared, parts = True, parts[1:]
    if parts in ([], ["."]):
        raise SandboxError(f"{raw}: names a sandbox directory, not a file in it")
    return SandboxPath(shared, tuple(parts))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISREG, "regular file"),
    ):
        if test(mode):
            return name
    return "special file"


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _why_not(name: str, dir_fd: int, shown: str, exc: OSError, want: str) -> SandboxError:
    """Why opening `name` failed, said plainly (a link is refused, not merely 'too many levels')."""
    try:
        st = _lstat(name, dir_fd)
    except OSError:
        st = None
    if st is None:
        return SandboxError(f"{shown}: {exc.strerror or exc}")
    if stat.S_ISLNK(st.st_mode):
        return SandboxError(f"{shown} {_LINK_REFUSED}")
    return SandboxError(f"{shown} is a {_kind(st.st_mode)}, not {want}")


def _open_dir(name: str, dir_fd: int, shown: str, *, create: bool) -> int:
    """Open the directory `name` below `dir_fd` without following a link; create it if asked."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError as exc:
        if not create:
            raise SandboxError(f"{shown}: no such directory") from exc
    except OSError as exc:
        raise _why_not(name, dir_fd, shown, exc, "a directory") from None
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _why_not(name, dir_fd, shown, exc, "a directory") from None


def _open_root(task_dir: Path, shared: bool, *, create: bool) -> int:
    """An fd of the sandbox root. The path up to the task dir is the agent's own (data_dir/alloc/<id>);
    the task dir and the shared dir themselves are opened without following a link."""
    base = task_dir.parent if shared else task_dir
    if create:
        base.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as exc:
        if base.is_symlink():
            raise SandboxError(f"{base} {_LINK_REFUSED}") from None
        raise SandboxError(f"{base}: {exc.strerror or exc}") from None
    if not shared:
        return fd
    try:
        return _open_dir(SHARED_DIR, fd, f"{SHARED_DIR}/", create=create)
    finally:
        os.close(fd)


def _open_parent(task_dir: Path, where: SandboxPath, *, create: bool) -> int:
    """An fd of the directory that holds `where`'s last component, walked from the sandbox root one
    component at a time (O_NOFOLLOW each)."""
    fd = _open_root(task_dir, where.shared, create=create)
    shown = [SHARED_DIR] if where.shared else []
    try:
        for name in where.parts[:-1]:
            shown.append(name)
            nfd = _open_dir(name, fd, "/".join(shown), create=create)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_parent(task_dir: Path, where: SandboxPath) -> int:
    """An fd of the existing directory that holds `where`'s last component, walked without following
    a link (for callers that act by fd below it: the artifact hook's chown)."""
    return _open_parent(task_dir, where, create=False)


def _read_at(dir_fd: int, name: str, shown: str, limit: int) -> bytes:
    """The content of the regular file `name` below `dir_fd`, at most `limit` bytes; refuses links,
    FIFOs, devices and directories without opening them for anything that could block."""
    st = _lstat(name, dir_fd)
    if st is None:
        raise SandboxError(f"{shown}: no such file")
    if not stat.S_ISREG(st.st_mode):
        raise SandboxError(
            f"{shown} {_LINK_REFUSED}"
            if stat.S_ISLNK(st.st_mode)
            else f"{shown} is a {_kind(st.st_mode)}: only regular files are read"
        )
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _why_not(name, dir_fd, shown, exc, "a regular file") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):  # swapped since the lstat
            raise SandboxError(f"{shown} is a {_kind(fst.st_mode)}: only regular files are read")
        if fst.st_size > limit:
            raise SandboxError(f"{shown} is {fst.st_size} bytes, more than the {limit}-byte template budget")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise SandboxError(f"{shown} is more than the {limit}-byte template budget")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(task_dir: Path, raw: str, limit: int = DEFAULT_MAX_BYTES) -> str:
    """A file of the sandbox as text (`source`, `file(path)`); raises SandboxError or OSError."""
    where = sandbox_path(raw)
    fd = _open_parent(task_dir, where, create=False)
    try:
        data = _read_at(fd, where.parts[-1], str(where), limit)
    finally:
        os.close(fd)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise SandboxError(f"{where}: not UTF-8 text") from None


def _temp_token() -> str:
    return _secrets.token_hex(8)


def _temp_prefix(name: str) -> str:
    return f".{name[:200]}."


def _remove_stale_temps(dir_fd: int, name: str) -> None:
    """Temp files an earlier agent left when it died mid-write (never a directory; unlink does not
    follow a link)."""
    prefix = _temp_prefix(name)
    for entry in os.listdir(dir_fd):
        if entry.startswith(prefix) and re.fullmatch(r"[0-9a-f]{16}\.tmp", entry[len(prefix) :]):
            st = _lstat(entry, dir_fd)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, "No space left on device (short write)")
        view = view[n:]


def write_file(
    task_dir: Path, where: SandboxPath, data: bytes, perms: int, owner: tuple[int, int] | None = None
) -> bool:
    """Replace the file at `where` with `data` (mode `perms`, owned by `owner`'s uid and gid when
    given) atomically; False when it already holds exactly `data`. Raises SandboxError (refused) or
    OSError (the write failed; nothing left behind)."""
    dir_fd = _open_parent(task_dir, where, create=True)
    try:
        name, shown = where.parts[-1], str(where)
        st = _lstat(name, dir_fd)
        if st is not None and not stat.S_ISREG(st.st_mode):
            what = _LINK_REFUSED if stat.S_ISLNK(st.st_mode) else f"is a {_kind(st.st_mode)}: refused"
            raise SandboxError(f"{shown} exists and {what}; only a regular file is replaced")
        if st is not None and st.st_size == len(data) and _read_at(dir_fd, name, shown, len(data)) == data:
            return False
        _remove_stale_temps(dir_fd, name)
        for _ in range(_TEMP_ATTEMPTS):
            tmp = f"{_temp_prefix(name)}{_temp_token()}.tmp"
            try:
                fd = os.open(tmp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
        else:
            raise SandboxError(f"no free temporary name next to {shown} (planted files or links?)")
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, perms)
                if owner is not None:
                    os.fchown(fd, *owner)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
        return True
    finally:
        os.close(dir_fd)


def perms_of(text: str) -> int:
    try:
        perms = int(text, 8)
    except ValueError:
        raise SandboxError(f"perms {text!r}: not octal file permissions like 0644") from None
    if perms & ~0o777:
        raise SandboxError(f"perms {text}: setuid, setgid and sticky bits are not allowed")
    return perms


# ---------------------------------------------------------------------------------------------
# Vault paths
# ---------------------------------------------------------------------------------------------


def vault_path_problem(path: object) -> str | None:
    """Why a template may not use this Vault path, or None. The agent's token must not reach Vault's
    own APIs (auth/, sys/) or its cubbyhole; the path must be plain so that the check sees what
    Vault sees (no %-escapes, no `..`, no query)."""
    if not isinstance(path, str) or not path.strip("/"):
        return "not a Vault path"
    path, mark, query = path.partition("?")
    if mark and not _VERSION_QUERY.fullmatch(query):
        return "the only query a Vault path may carry is ?version=N (a KV v2 version)"
    if any(c in path for c in "%?#\\") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return "a Vault path may not contain %, ?, #, \\ or control characters"
    segments = [s for s in path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        return "a Vault path may not contain . or .. segments"
    mount = segments[0].strip().lower()
    if mount in REFUSED_VAULT_MOUNTS:
        return f"Vault paths under {mount}/ are refused for templates (auth/, sys/ and cubbyhole/ are)"
    return None
