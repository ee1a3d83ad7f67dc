"""The alloc dir's files for Nomad's client filesystem endpoints (`/v1/client/fs/{ls,stat,cat,readat,
stream}/:alloc_id?path=...`).

Nomad resolves `path` relative to the alloc dir (`<data_dir>/alloc/<alloc id>/`: the shared `alloc/`
and one dir per task), and so does this module, for workloads that are untrusted: a task can plant
links, FIFOs, device nodes, hard links, huge files, deep trees and names that are not UTF-8 in its own
dirs, and rename them while the agent (root) reads.

- `clean_path` is lexical: `..` anywhere, a NUL byte, more than 4096 characters or 64 components are
  refused, so that every walk only goes down.
- The walk opens the alloc dir (O_DIRECTORY|O_NOFOLLOW), then each component by its parent's fd
  (`os.open(name, O_DIRECTORY|O_NOFOLLOW, dir_fd=parent)`): no link is followed anywhere, intermediate
  components included, and a rename race can only change which of the task's own dirs is read: the
  walk holds fds, not names, and never goes up.
- `stat` and `listdir` show a link as itself (lstat: its mode says link); its target is never read.
  A listing stops at 10,000 entries (an error says so); names that are not UTF-8 are shown with U+FFFD.
- `read` opens the last component O_PATH|O_NOFOLLOW (an O_PATH open never blocks and runs no device
  driver's open: a FIFO, a device or a link is only looked at), refuses by fstat anything but a regular
  file, and only then opens that same inode (/proc/self/fd/N) O_RDONLY|O_NONBLOCK to pread it. A file
  with more than one hard link is read only if anyone may read it (o+r): a task can copy such a file
  anyway, and a link to a private host file (fs.protected_hardlinks off) is not served as root. As
  Nomad's AllocDir.ReadAt, a task's `secrets/` is listed and stat'ed, never read.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from stat import S_IROTH, S_ISBLK, S_ISCHR, S_ISDIR, S_ISFIFO, S_ISLNK, S_ISREG, S_ISSOCK

from agent.errors import AgentError

MAX_PATH_CHARS = 4096
MAX_COMPONENTS = 64
MAX_ENTRIES = 10_000  # entries of one listing
MAX_READ = 8 * 1024 * 1024  # bytes of one read (the routes cap `limit` too)
SHARED_DIR = "alloc"  # <alloc dir>/alloc, the tasks' shared dir; every other top-level dir is a task's
SECRETS_DIR = "secrets"  # <alloc dir>/<task>/secrets: never read (Nomad: "Reading secret file prohibited")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOOK_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1024 * 1024
_SHOWN_CHARS = 256  # of a path quoted in an error


class FsError(AgentError):
    """A path of an alloc dir that is not served; the message says what, the path as asked and the alloc."""


class FsNotFound(FsError):
    """The path, or a directory on its way, does not exist (HTTP 404)."""


class FsRefused(FsError):
    """The path is refused: it leaves the alloc dir, crosses a link, names no regular file to read, ...
    (HTTP 400)."""


@dataclass(frozen=True)
class Entry:
    """One file as Nomad's AllocFileInfo shows it; a link is the link (mode says so), never its target."""

    name: str
    is_dir: bool
    size: int
    mode: int  # st_mode
    mod_time: float  # st_mtime, seconds since the epoch


def _quoted(path: str) -> str:
    """`path` in double quotes, control characters and non-ASCII escaped, long ones cut."""
    return json.dumps(path if len(path) <= _SHOWN_CHARS else path[:_SHOWN_CHARS] + "...")


def _display(name: str) -> str:
    """A file name as valid UTF-8 text: bytes that are not UTF-8 (surrogate-escaped) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _kind(mode: int) -> str:
    for test, kind in (
        (S_ISLNK, "symbolic link"),
        (S_ISDIR, "directory"),
        (S_ISREG, "regular file"),
        (S_ISFIFO, "FIFO"),
        (S_ISSOCK, "socket"),
        (S_ISCHR, "character device"),
        (S_ISBLK, "block device"),
    ):
        if test(mode):
            return kind
    return "special file"


@dataclass(frozen=True)
class _Ask:
    """A request: the path as asked, and the alloc it is asked of (in every error)."""

    path: str
    alloc: str = ""

    def error(self, cls: type[FsError], what: str) -> FsError:
        where = f" in alloc {self.alloc}" if self.alloc else ""
        return cls(f"path {_quoted(self.path)}{where}: {what}")

    def parts(self) -> tuple[str, ...]:
        if "\0" in self.path:
            raise self.error(FsRefused, "a NUL byte in the path")
        if len(self.path) > MAX_PATH_CHARS:
            raise self.error(FsRefused, f"longer than {MAX_PATH_CHARS} characters")
        parts = tuple(p for p in self.path.split("/") if p not in ("", "."))
        if ".." in parts:
            raise self.error(FsRefused, "leaves the alloc dir (a `..` component is refused)")
        if len(parts) > MAX_COMPONENTS:
            raise self.error(FsRefused, f"more than {MAX_COMPONENTS} components")
        for p in parts:
            try:
                p.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise self.error(FsRefused, f"{_quoted(p)} is not a file name") from None
        return parts


def clean_path(path: str) -> tuple[str, ...]:
    """Nomad's `path` argument as components below the alloc dir ("/" and "" are the alloc dir itself;
    empty and `.` components are dropped); raises FsRefused for `..`, NUL bytes, or a path too long."""
    return _Ask(path).parts()


def _not_a(shown: str, mode: int, want: str) -> str:
    why = f"{_quoted(shown)} is a {_kind(mode)}, not a {want}"
    return why + " (links are never followed)" if S_ISLNK(mode) else why


def _explain(dir_fd: int, name: str, ask: _Ask, shown: str, exc: OSError, want: str) -> FsError:
    """Why opening `name` below `dir_fd` as a `want` failed, said plainly (lstat, never a follow)."""
    mode = None
    if not isinstance(exc, FileNotFoundError):
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError as gone:
            exc = gone
        except OSError:
            pass
    if isinstance(exc, FileNotFoundError):
        return ask.error(FsNotFound, f"{_quoted(shown)} does not exist")
    if mode is not None and _kind(mode) == want and exc.errno in (errno.ENOTDIR, errno.ELOOP):
        return ask.error(FsRefused, f"{_quoted(shown)} was replaced while it was opened (try again)")
    if mode is None or _kind(mode) == want:
        return ask.error(FsRefused, f"{_quoted(shown)}: {exc.strerror or exc}")
    return ask.error(FsRefused, _not_a(shown, mode, want))


def _open_dirs(alloc_dir: Path, ask: _Ask, parts: tuple[str, ...]) -> int:
    """An fd of the directory `parts` below the alloc dir, opened one component at a time by the
    parent's fd, none followed if it is a link."""
    try:
        fd = os.open(alloc_dir, _DIR_FLAGS)
    except FileNotFoundError:
        raise ask.error(FsNotFound, "no such alloc dir on this node") from None
    except OSError as exc:
        raise ask.error(FsRefused, f"the alloc dir: {exc.strerror or exc}") from None
    try:
        for i, name in enumerate(parts):
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _explain(fd, name, ask, "/".join(parts[: i + 1]), exc, "directory") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _entry(name: str, st: os.stat_result) -> Entry:
    return Entry(_display(name), S_ISDIR(st.st_mode), st.st_size, st.st_mode, st.st_mtime)


def listdir(alloc_dir: Path, path: str) -> list[Entry]:
    """The entries of the directory `path` (lstat: a link is listed as a link), sorted by name."""
    ask = _Ask(path, alloc_dir.name)
    fd = _open_dirs(alloc_dir, ask, ask.parts())
    try:
        with os.scandir(fd) as it:
            found: list[os.DirEntry[str]] = []
            for e in it:
                found.append(e)
                if len(found) > MAX_ENTRIES:
                    raise ask.error(
                        FsRefused,
                        f"the directory holds more than {MAX_ENTRIES} entries: not listed "
                        "(stat or read its files by name)",
                    )
            found.sort(key=lambda e: os.fsencode(e.name))
            entries = []
            for e in found:
                try:
                    entries.append(_entry(e.name, e.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # removed since the readdir
    finally:
        os.close(fd)
    return entries


def stat(alloc_dir: Path, path: str) -> Entry:
    """The file `path` itself (lstat: a link is shown as a link); "/" is the alloc dir."""
    ask = _Ask(path, alloc_dir.name)
    parts = ask.parts()
    fd = _open_dirs(alloc_dir, ask, parts[:-1])
    try:
        if not parts:
            return _entry(alloc_dir.name, os.fstat(fd))
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise ask.error(FsNotFound, "does not exist") from None
        except OSError as exc:
            raise ask.error(FsRefused, exc.strerror or str(exc)) from None
        return _entry(parts[-1], st)
    finally:
        os.close(fd)


def _open_regular(dir_fd: int, name: str, ask: _Ask, shown: str) -> tuple[int, os.stat_result]:
    """An fd for reading the regular file `name` below `dir_fd`, and its fstat. Anything else is looked
    at with an O_PATH fd only (never opened for reading: a FIFO cannot block, a device is not opened)."""
    try:
        look = os.open(name, _LOOK_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _explain(dir_fd, name, ask, shown, exc, "regular file") from None
    try:
        st = os.fstat(look)
        if not S_ISREG(st.st_mode):
            raise ask.error(FsRefused, _not_a(shown, st.st_mode, "regular file"))
        if st.st_nlink > 1 and not st.st_mode & S_IROTH:
            raise ask.error(
                FsRefused,
                f"{_quoted(shown)} has {st.st_nlink} hard links and is not world-readable: "
                "refused (a hard link can name a file outside the alloc dir)",
            )
        try:
            fd = os.open(f"/proc/self/fd/{look}", _READ_FLAGS)  # the inode just checked, not the name
        except OSError as exc:
            raise ask.error(FsRefused, f"cannot reopen the file by its fd: {exc.strerror or exc}") from None
    finally:
        os.close(look)
    try:
        again = os.fstat(fd)
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) or not S_ISREG(again.st_mode):
            raise ask.error(FsRefused, f"{_quoted(shown)} changed while it was opened")
    except BaseException:
        os.close(fd)
        raise
    return fd, again


def read(alloc_dir: Path, path: str, offset: int, limit: int) -> bytes:
    """At most `limit` bytes (and at most MAX_READ) of the regular file `path` from `offset`; empty at or
    past its end."""
    ask = _Ask(path, alloc_dir.name)
    parts = ask.parts()
    if offset < 0 or limit < 0:
        raise ask.error(FsRefused, f"offset {offset} and limit {limit} must not be negative")
    if not parts:
        raise ask.error(FsRefused, "is the alloc dir, not a regular file")
    if len(parts) > 1 and parts[0] != SHARED_DIR and parts[1] == SECRETS_DIR:
        raise ask.error(FsRefused, f"reading a task's {SECRETS_DIR}/ dir is refused (as Nomad's)")
    dir_fd = _open_dirs(alloc_dir, ask, parts[:-1])
    try:
        fd, st = _open_regular(dir_fd, parts[-1], ask, "/".join(parts))
    finally:
        os.close(dir_fd)
    try:
        limit = min(limit, MAX_READ)
        if offset >= st.st_size:
            return b""
        chunks, total = [], 0
        while total < limit:
            chunk = os.pread(fd, min(_CHUNK, limit - total), offset + total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
