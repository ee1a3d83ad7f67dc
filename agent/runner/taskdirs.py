"""Task directories on the node, as Nomad's client lays them out: the alloc's shared `alloc/` with
`data/`, `logs/` and `tmp/` (0777, every task of the alloc writes them), and per task `local/` (0755),
`tmp/` and `secrets/` (a 0700 tmpfs, mounted again after a reboot); at teardown everything below the alloc
dir is unmounted, and at its removal (the GC) any logmon left of it ended. Behind a protocol so
that the runner's unit tests need no root."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.allocdir.fsutil import mount_secrets, unmount_below
from agent.runner.logmonhook import HOST_LOGMON

log = logging.getLogger(__name__)


class TaskDirs(Protocol):
    def prepare(self, task_dir: Path, secrets_mb: int = 0) -> None:
        """Create local/ (and the alloc's shared alloc/ dir, the task dirs' sibling) and mount secrets/
        (a tmpfs of the task's resources.secrets MB; 0: the default size)."""

    def remount_secrets(self, task_dir: Path, secrets_mb: int = 0) -> bool:
        """Mount secrets/ again if it is not mounted (after a reboot); whether it was mounted now."""

    def migrate(self, previous: Path, alloc_dir: Path, tasks: Sequence[str]) -> list[str]:
        """The previous alloc's `alloc/data` and each task's `local/` moved here (ephemeral_disk
        sticky or migrate); what was moved."""

    def cleanup(self, alloc_dir: Path) -> None:
        """Unmount everything below the alloc dir."""

    def remove(self, alloc_dir: Path) -> None:
        """The alloc dir gone (the GC): unmounted, then removed without following any link in it."""


def _dir_with_mode(d: Path, mode: int) -> None:
    """`d` made when missing and given `mode` through an fd opened without following a link: a task
    can write alloc/ and its own dirs, and a link it planted there is refused (OSError), never chmod'ed
    through."""
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def migrate_dirs(previous: Path, alloc_dir: Path, tasks: Sequence[str]) -> list[str]:
    """Nomad's sticky ephemeral disk on one node: `alloc/data` and each task's `local/` of the alloc
    this one replaces are renamed into this one (the previous alloc is stopped: nothing writes them),
    before any of this alloc's tasks or templates run. A dir is taken only when it is a real dir (a
    link a task left there is not followed nor moved) and this alloc's is missing or empty; a second
    run (after a kill) finds the moved ones gone and moves the rest. Returns what was moved."""
    moved = []
    for parts in (("alloc", "data"), *((t, "local") for t in tasks)):
        src, dst = previous.joinpath(*parts), alloc_dir.joinpath(*parts)
        try:
            if not stat.S_ISDIR(os.lstat(src).st_mode):
                continue
        except FileNotFoundError:
            continue
        try:
            if any(dst.iterdir()):
                continue
        except FileNotFoundError:
            pass
        except NotADirectoryError:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)  # an empty dir at dst is replaced; nothing is copied
        moved.append("/".join(parts))
    return moved


class HostTaskDirs:
    def prepare(self, task_dir: Path, secrets_mb: int = 0) -> None:
        shared = task_dir.parent / "alloc"  # the alloc's shared dir (NOMAD_ALLOC_DIR), 0777 as Nomad's
        for d in (shared, shared / "data", shared / "logs", shared / "tmp"):
            _dir_with_mode(d, 0o777)
        _dir_with_mode(task_dir / "local", 0o755)
        _dir_with_mode(task_dir / "tmp", 0o1777)
        mount_secrets(task_dir / "secrets", secrets_mb)

    def remount_secrets(self, task_dir: Path, secrets_mb: int = 0) -> bool:
        return mount_secrets(task_dir / "secrets", secrets_mb)

    def migrate(self, previous: Path, alloc_dir: Path, tasks: Sequence[str]) -> list[str]:
        return migrate_dirs(previous, alloc_dir, tasks)

    def cleanup(self, alloc_dir: Path) -> None:
        unmount_below(alloc_dir)

    def remove(self, alloc_dir: Path) -> None:
        HOST_LOGMON.stop_all(alloc_dir)  # none as a rule: the alloc's teardown ended them
        unmount_below(alloc_dir)

        def report(fn: object, path: str, exc: object) -> None:
            log.error("GC: cannot remove %s: %s", path, exc)

        if alloc_dir.is_dir() and not alloc_dir.is_symlink():
            shutil.rmtree(alloc_dir, onerror=report)  # rmtree removes links, never what they point at
