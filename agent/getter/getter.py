"""The getter the task runner's artifact hook uses: one artifact fetched (agent.getter.fetch) into
an anonymous temporary file of the agent's, then written into the task's sandbox
(agent.getter.unpack). It blocks: the hook runs it off the main loop."""

from __future__ import annotations

import dataclasses
import errno
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.allocdir.sandbox import SandboxError, SandboxPath, open_parent, sandbox_path
from agent.getter.fetch import FetchLimits, download
from agent.getter.plan import DEFAULT_ALLOWED, SINGLE_FILE, ArtifactError, plan_fetch
from agent.getter.unpack import UnpackLimits, decompress, unpack, write_plain
from agent.structs.model import Artifact


class ArtifactGetter(Protocol):
    def fetch(
        self,
        task_dir: Path,
        artifact: Artifact,
        env: dict[str, str],
        owner: tuple[int, int] | None = None,
        cancel: threading.Event | None = None,
    ) -> int:
        """Fetch one artifact into the task's sandbox (and give what it wrote to `owner`'s uid and
        gid when given: `chown = true`); the number of files written. Raises ArtifactError (not worth
        a retry, or `cancel` was set: the alloc is being stopped) or ArtifactUnavailable (its server
        did not answer)."""
        ...


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class HttpGetter:
    allowed_hosts: tuple[str, ...] = DEFAULT_ALLOWED
    fetch_limits: FetchLimits = field(default_factory=FetchLimits)
    unpack_limits: UnpackLimits = field(default_factory=UnpackLimits)
    cafile: str | None = None  # https: the lab's CA, beside the system's trust

    def fetch(
        self,
        task_dir: Path,
        artifact: Artifact,
        env: dict[str, str],
        owner: tuple[int, int] | None = None,
        cancel: threading.Event | None = None,
    ) -> int:
        plan = plan_fetch(
            artifact.source,
            artifact.destination,
            artifact.mode,
            dict(artifact.options),
            dict(artifact.headers),
            env,
            str(task_dir),
        )
        limits = dataclasses.replace(self.fetch_limits, allowed_hosts=self.allowed_hosts)
        with tempfile.TemporaryFile(prefix="fieldlab-artifact-") as tmp:
            download(
                plan.url,
                plan.host,
                dict(plan.headers),
                tmp,
                limits,
                plan.checksum,
                cafile=self.cafile,
                cancel=cancel,
                insecure=artifact.insecure,
            )
            tmp.seek(0)
            if plan.archive in SINGLE_FILE:
                count = decompress(task_dir, tmp, plan.archive, plan.file_dest, self.unpack_limits)
            elif plan.archive:
                count = unpack(task_dir, tmp, plan.archive, plan.dir_dest, self.unpack_limits)
            else:
                count = write_plain(task_dir, tmp, plan.file_dest, self.unpack_limits)
        if owner is not None:
            where = plan.dir_dest if plan.archive and plan.archive not in SINGLE_FILE else plan.file_dest
            chown_tree(task_dir, sandbox_path(where), owner)
        return count


def chown_tree(task_dir: Path, where: SandboxPath, owner: tuple[int, int]) -> None:
    """`where` and everything below it to `owner`, as Nomad's chownDestination, walked by fd: each
    directory opened below its parent's fd with O_NOFOLLOW, everything else changed through its
    parent's fd without following a link. A link, even one planted while the walk runs, is given away
    itself, never what it points at, and the walk never goes through one."""
    try:
        parent = open_parent(task_dir, where)
    except SandboxError as exc:
        raise ArtifactError(f"cannot chown {where}: {exc}") from None
    # the directories being walked: each an fd and the names in it still to do
    stack: list[tuple[int, list[str]]] = [(parent, [where.parts[-1]])]
    try:
        while stack:
            dir_fd, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            name = names.pop()
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise ArtifactError(f"cannot chown {where}: {name}: {exc.strerror}") from None
                _chown_at(dir_fd, name, owner, where)  # a file, or a link itself
                continue
            stack.append((fd, []))
            os.fchown(fd, *owner)
            with os.scandir(fd) as entries:
                stack[-1][1].extend(entry.name for entry in entries)
    finally:
        for fd, _ in stack:
            os.close(fd)


def _chown_at(dir_fd: int, name: str, owner: tuple[int, int], where: SandboxPath) -> None:
    try:
        os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise ArtifactError(f"cannot chown {where}: {name}: {exc.strerror}") from None
