"""Task directories on the node: `local/` (0755) and `secrets/` (a 0700 tmpfs, mounted again after
a reboot), and unmounting everything below an alloc dir at teardown. Behind a protocol so that the
runner's unit tests need no root."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Protocol

from agent.fsutil import mount_secrets, unmount_below

log = logging.getLogger(__name__)


class TaskDirs(Protocol):
    def prepare(self, task_dir: Path) -> None:
        """Create local/ (and the alloc's shared alloc/ dir, the task dirs' sibling) and mount secrets/."""

    def remount_secrets(self, task_dir: Path) -> bool:
        """Mount secrets/ again if it is not mounted (after a reboot); whether it was mounted now."""

    def cleanup(self, alloc_dir: Path) -> None:
        """Unmount everything below the alloc dir."""

    def remove(self, alloc_dir: Path) -> None:
        """The alloc dir gone (the GC): unmounted, then removed without following any link in it."""


class HostTaskDirs:
    def prepare(self, task_dir: Path) -> None:
        shared = task_dir.parent / "alloc"  # the alloc's shared dir (NOMAD_ALLOC_DIR), 0777 as Nomad's
        shared.mkdir(parents=True, exist_ok=True)
        shared.chmod(0o777)
        local = task_dir / "local"
        local.mkdir(parents=True, exist_ok=True)
        local.chmod(0o755)
        mount_secrets(task_dir / "secrets")

    def remount_secrets(self, task_dir: Path) -> bool:
        return mount_secrets(task_dir / "secrets")

    def cleanup(self, alloc_dir: Path) -> None:
        unmount_below(alloc_dir)

    def remove(self, alloc_dir: Path) -> None:
        unmount_below(alloc_dir)

        def report(fn: object, path: str, exc: object) -> None:
            log.error("GC: cannot remove %s: %s", path, exc)

        if alloc_dir.is_dir() and not alloc_dir.is_symlink():
            shutil.rmtree(alloc_dir, onerror=report)  # rmtree removes links, never what they point at
