"""The getter the task runner's artifact hook uses: one artifact fetched (agent.getter.fetch) into
an anonymous temporary file of the agent's, then written into the task's sandbox
(agent.getter.unpack). It blocks: the hook runs it off the main loop."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.getter.fetch import FetchLimits, download
from agent.getter.plan import DEFAULT_ALLOWED, SINGLE_FILE, plan_fetch
from agent.getter.unpack import UnpackLimits, decompress, unpack, write_plain
from agent.model import Artifact
from agent.sandbox import sandbox_path


class ArtifactGetter(Protocol):
    def fetch(
        self, task_dir: Path, artifact: Artifact, env: dict[str, str], owner: tuple[int, int] | None = None
    ) -> int:
        """Fetch one artifact into the task's sandbox (and give what it wrote to `owner`'s uid and
        gid when given: `chown = true`); the number of files written. Raises ArtifactError (not worth
        a retry) or ArtifactUnavailable (its server did not answer)."""
        ...


@dataclass(frozen=True)
class HttpGetter:
    allowed_hosts: tuple[str, ...] = DEFAULT_ALLOWED
    fetch_limits: FetchLimits = field(default_factory=FetchLimits)
    unpack_limits: UnpackLimits = field(default_factory=UnpackLimits)
    cafile: str | None = None  # https: the lab's CA, beside the system's trust

    def fetch(
        self, task_dir: Path, artifact: Artifact, env: dict[str, str], owner: tuple[int, int] | None = None
    ) -> int:
        plan = plan_fetch(
            artifact.source,
            artifact.destination,
            artifact.mode,
            dict(artifact.options),
            dict(artifact.headers),
            env,
        )
        limits = dataclasses.replace(self.fetch_limits, allowed_hosts=self.allowed_hosts)
        with tempfile.TemporaryFile(prefix="fieldlab-artifact-") as tmp:
            download(plan.url, plan.host, dict(plan.headers), tmp, limits, plan.checksum, cafile=self.cafile)
            tmp.seek(0)
            if plan.archive in SINGLE_FILE:
                count = decompress(task_dir, tmp, plan.archive, plan.file_dest, self.unpack_limits)
            elif plan.archive:
                count = unpack(task_dir, tmp, plan.archive, plan.dir_dest, self.unpack_limits)
            else:
                count = write_plain(task_dir, tmp, plan.file_dest, self.unpack_limits)
        if owner is not None:
            chown_tree(
                sandbox_path(
                    plan.dir_dest if plan.archive and plan.archive not in SINGLE_FILE else plan.file_dest
                ).host_path(task_dir),
                owner,
            )
        return count


def chown_tree(top: Path, owner: tuple[int, int]) -> None:
    """`top` and everything below it to `owner`, as Nomad's chownDestination, but no link followed:
    a link is given away itself (lchown), never what it points at, and no walk goes through one."""
    os.lchown(top, *owner)
    if top.is_symlink() or not top.is_dir():
        return
    for root, dirs, files in os.walk(top, followlinks=False):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), *owner)
