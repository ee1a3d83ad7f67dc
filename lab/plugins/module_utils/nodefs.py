"""Files on a node, as the collection's modules write them: only when they differ, atomically."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile


def parse_mode(where: str, mode: str) -> int:
    """An octal mode string ("0600") as an int; anything else is an error naming where."""
    try:
        value = int(str(mode), 8)
    except ValueError:
        raise ValueError(f"{where}: mode {mode!r} is not an octal mode such as '0644'") from None
    if not 0 <= value <= 0o7777:
        raise ValueError(f"{where}: mode {mode!r} is out of range")
    return value


def differs(path: str, content: bytes | None, mode: int, uid: int, gid: int) -> bool:
    """Whether `path` lacks this content (None: a directory), mode or owner."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if (st.st_mode & 0o7777, st.st_uid, st.st_gid) != (mode, uid, gid):
        return True
    if content is None:
        return not os.path.isdir(path) or os.path.islink(path)
    if not os.path.isfile(path) or os.path.islink(path):
        return True
    with open(path, "rb") as fh:
        return fh.read() != content


def write_atomically(dest: str, content: bytes, mode: int, uid: int, gid: int, validate: str | None) -> None:
    """Write `content` to a temp file beside `dest` with its mode and owner set before any byte is
    written, fsync it, run `validate` on it, rename it over `dest`, fsync the directory."""
    parent = os.path.dirname(dest) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", dir=parent)
    try:
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        if validate:
            if "%s" not in validate:
                raise ValueError(f"{dest}: validate {validate!r} has no %s for the file to check")
            argv = [tmp if part == "%s" else part.replace("%s", tmp) for part in shlex.split(validate)]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                why = (done.stderr or done.stdout).strip()
                raise ValueError(f"{dest}: validate refused it (exit {done.returncode}): {why}")
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(parent, os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
