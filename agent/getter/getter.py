"""The getter the task runner's artifact hook uses: one artifact fetched (agent.getter.fetch) into
an anonymous temporary file of the agent's, then written into the task's sandbox
(agent.getter.unpack). It blocks: the hook runs it off the main loop."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.getter.fetch import FetchLimits, download
from agent.getter.plan import DEFAULT_ALLOWED, SINGLE_FILE, plan_fetch
from agent.getter.unpack import UnpackLimits, decompress, unpack, write_plain
from agent.model import Artifact


class ArtifactGetter(Protocol):
    def fetch(self, task_dir: Path, artifact: Artifact, env: dict[str, str]) -> int:
        """Fetch one artifact into the task's sandbox; the number of files written. Raises
        ArtifactError (not worth a retry) or ArtifactUnavailable (its server did not answer)."""
        ...


@dataclass(frozen=True)
class HttpGetter:
    allowed_hosts: tuple[str, ...] = DEFAULT_ALLOWED
    fetch_limits: FetchLimits = field(default_factory=FetchLimits)
    unpack_limits: UnpackLimits = field(default_factory=UnpackLimits)
    cafile: str | None = None  # https: the lab's CA, beside the system's trust

    def fetch(self, task_dir: Path, artifact: Artifact, env: dict[str, str]) -> int:
        plan = plan_fetch(
            artifact.source,
            artifact.destination,
            artifact.mode,
            dict(artifact.options),
            dict(artifact.headers),
            env,
        )
        limits = FetchLimits(self.fetch_limits.max_bytes, self.fetch_limits.timeout, self.allowed_hosts)
        with tempfile.TemporaryFile(prefix="fieldlab-artifact-") as tmp:
            download(plan.url, plan.host, dict(plan.headers), tmp, limits, plan.checksum, cafile=self.cafile)
            tmp.seek(0)
            if plan.archive in SINGLE_FILE:
                return decompress(task_dir, tmp, plan.archive, plan.file_dest, self.unpack_limits)
            if plan.archive:
                return unpack(task_dir, tmp, plan.archive, plan.dir_dest, self.unpack_limits)
            return write_plain(task_dir, tmp, plan.file_dest, self.unpack_limits)
