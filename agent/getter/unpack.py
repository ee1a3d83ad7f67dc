"""A download written into the task's sandbox (agent.allocdir.sandbox: a path below the task dir or
the alloc's shared dir, each directory opened without following a link, each file replaced
atomically): a plain file as it is, a compressed file decompressed, an archive's regular files below
its destination. An archive member that would land outside its destination, a link, a device or a
FIFO is refused, as are more members or bytes than the client's limits; setuid, setgid and sticky
bits are dropped (Nomad's getter umask)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import posixpath
import stat
import tarfile
import zipfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, Self

from agent.allocdir.sandbox import SandboxError, sandbox_path, write_file
from agent.getter.plan import ArtifactError

CHUNK = 1 << 16


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class UnpackLimits:
    max_files: int = 4096  # Nomad's decompression_file_count_limit
    max_bytes: int = 256 * 1024 * 1024  # of everything unpacked (Nomad's decompression_size_limit)


def _write(task_dir: Path, dest: str, data: bytes, mode: int) -> None:
    try:
        write_file(task_dir, sandbox_path(dest), data, mode & 0o777)
    except SandboxError as exc:
        raise ArtifactError(f"cannot write {dest}: {exc}") from None


def _read_capped(f: _Readable, left: int, name: str) -> bytes:
    chunks, total = [], 0
    while chunk := f.read(min(CHUNK, left + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > left:
            raise ArtifactError(f"{name}: unpacks to more than the client's limit of bytes")
    return b"".join(chunks)


def member_path(dest_dir: str, name: str) -> str:
    """Where an archive member lands: below `dest_dir`, or ArtifactError."""
    clean = posixpath.normpath(posixpath.join(dest_dir, name.lstrip("/")))
    base = posixpath.normpath(dest_dir)
    if name.startswith("/") or not (clean + "/").startswith(base + "/") or clean == base:
        raise ArtifactError(f'archive member "{name}" would land outside its destination {dest_dir}')
    return clean


def write_plain(task_dir: Path, src: IO[bytes], dest: str, limits: UnpackLimits) -> int:
    _write(task_dir, dest, _read_capped(src, limits.max_bytes, dest), 0o644)
    return 1


def decompress(task_dir: Path, src: IO[bytes], kind: str, dest: str, limits: UnpackLimits) -> int:
    """A compressed single file (gz, bz2, xz) into `dest`."""
    try:
        with _decompressor(kind, src) as f:
            data = _read_capped(f, limits.max_bytes, dest)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise ArtifactError(f"not a {kind} file: {exc}") from None
    _write(task_dir, dest, data, 0o644)
    return 1


def _decompressor(kind: str, src: IO[bytes]) -> AbstractContextManager[_Readable]:
    """The decompressed view of `src` ("" for none): gz, bz2 or xz."""
    if kind == "gz":
        return gzip.GzipFile(fileobj=src, mode="rb")
    if kind == "bz2":
        return bz2.BZ2File(src)
    if kind == "xz":
        return lzma.LZMAFile(src)
    return nullcontext(src)


def unpack(task_dir: Path, src: IO[bytes], kind: str, dest_dir: str, limits: UnpackLimits) -> int:
    """An archive's regular files below `dest_dir`; the number written. Every member counts against
    the file limit (a directory too: go-getter counts every header), and everything the decompressor
    yields (headers included) against the byte limit."""
    if kind == "zip":
        return _unzip(task_dir, src, dest_dir, limits)
    members = written = 0
    try:
        with _decompressor(kind.removeprefix("tar").lstrip("."), src) as plain:
            capped = _Capped(plain, limits.max_bytes)
            with tarfile.open(fileobj=capped, mode="r|", tarinfo=_Member) as tar:  # type: ignore[call-overload]
                # stream mode: one member at a time, in order; `tar.members` would keep every one read
                while (member := tar.next()) is not None:
                    tar.members.clear()
                    members = _count(members, limits, member.name)
                    if member.isdir():
                        continue
                    target = member_path(dest_dir, member.name)
                    if not member.isreg():
                        what = "a link" if member.issym() or member.islnk() else "a device or FIFO"
                        raise ArtifactError(f'archive member "{member.name}" is {what}: refused')
                    if capped.total + member.size > limits.max_bytes:
                        raise ArtifactError(_too_big(limits, member.name))
                    f = tar.extractfile(member)
                    if f is not None:
                        data = _read_capped(f, limits.max_bytes, member.name)
                        _write(task_dir, target, data, member.mode)
                        written += 1
    except RecursionError:  # tarfile reads a chain of long-name or pax headers recursively
        raise ArtifactError(f"not a {kind} archive: headers chained too deep") from None
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError) as exc:
        raise ArtifactError(f"not a {kind} archive: {exc}") from None
    return written


# a pax or GNU long-name header's data, which tarfile reads whole into memory: Go's archive/tar (which
# go-getter uses) refuses one above 1 MiB (a 204 KB .tar.gz with a 200 MiB pax comment held +614 MB)
MAX_HEADER_DATA = 1 << 20
_HEADER_TYPES = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }
)


class _Member(tarfile.TarInfo):
    """A tar header, refused before its data is read when it is a header for the next one (pax, GNU
    long name) larger than MAX_HEADER_DATA."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        member = super().frombuf(buf, encoding, errors)
        if member.type in _HEADER_TYPES and member.size > MAX_HEADER_DATA:
            raise ArtifactError(
                f"a tar header of {member.size} bytes: more than the {MAX_HEADER_DATA} a header may carry"
            )
        return member


class _Capped:
    """A decompressed stream, counted as it is read: more than `limit` bytes is refused."""

    def __init__(self, f: _Readable, limit: int) -> None:
        self.f, self.limit, self.total = f, limit, 0

    def read(self, size: int = -1) -> bytes:
        want = self.limit + 1 - self.total
        data = self.f.read(min(size, want) if size >= 0 else want)
        self.total += len(data)
        if self.total > self.limit:
            raise ArtifactError(f"decompresses to more than the client's limit of {self.limit} bytes")
        return data


# zipfile's reader of a zip's end record (what ZipFile itself reads first): [.., entries, size, ..]
_END_RECORD = getattr(zipfile, "_EndRecData", None)
ZIP_ENTRY_BYTES = 46 + 512  # a central directory entry's fixed part and a generous name and extra


def _zip_directory(src: IO[bytes], limits: UnpackLimits) -> None:
    """ZipFile reads a zip's whole central directory into memory before a member can be counted
    (a 26 MB zip of 300,000 empty members: +158 MB): its end record is checked first, its entries
    against the file limit and its size against ZIP_ENTRY_BYTES per allowed member."""
    if _END_RECORD is None:
        return
    end = _END_RECORD(src)
    src.seek(0)
    if not end:
        raise ArtifactError("not a zip archive: no end of central directory record")
    entries, size = int(end[4]), int(end[5])
    if entries > limits.max_files:
        raise ArtifactError(
            f"more than the client's limit of {limits.max_files} files ({entries} in the zip)"
        )
    if size > limits.max_files * ZIP_ENTRY_BYTES:
        raise ArtifactError(
            f"a zip central directory of {size} bytes: more than {ZIP_ENTRY_BYTES} bytes for each of "
            f"the client's limit of {limits.max_files} files"
        )


def _unzip(task_dir: Path, src: IO[bytes], dest_dir: str, limits: UnpackLimits) -> int:
    members = written = size = 0
    try:
        _zip_directory(src, limits)
        with zipfile.ZipFile(src) as z:
            for info in z.infolist():
                members = _count(members, limits, info.filename)
                if info.is_dir():
                    continue
                target = member_path(dest_dir, info.filename)
                unix_mode = info.external_attr >> 16
                kind = stat.S_IFMT(unix_mode)  # 0: a zip that says no file type (a regular file)
                if kind and kind != stat.S_IFREG:
                    what = "a link" if stat.S_ISLNK(unix_mode) else "not a regular file"
                    raise ArtifactError(f'archive member "{info.filename}" is {what}: refused')
                if size + info.file_size > limits.max_bytes:
                    raise ArtifactError(_too_big(limits, info.filename))
                with z.open(info) as f:
                    data = _read_capped(f, limits.max_bytes - size, info.filename)
                size += len(data)
                _write(task_dir, target, data, (unix_mode & 0o777) or 0o644)
                written += 1
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ArtifactError(f"not a zip archive: {exc}") from None
    return written


def _count(count: int, limits: UnpackLimits, name: str) -> int:
    if count + 1 > limits.max_files:
        raise ArtifactError(f"more than the client's limit of {limits.max_files} files (at {name})")
    return count + 1


def _too_big(limits: UnpackLimits, name: str) -> str:
    return f"more than the client's limit of {limits.max_bytes} bytes unpacked (at {name})"
