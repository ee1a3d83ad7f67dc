"""Mounts of task directories: `secrets/` is a tmpfs (never on disk, gone at reboot, mounted again
on restore: nomad-28345)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.errors import AgentError

SECRETS_TMPFS_SIZE = "4m"


def is_mount(path: Path) -> bool:
    return os.path.ismount(path)


def mount_secrets(path: Path, size_mb: int = 0) -> bool:
    """Mount a private tmpfs (mode 0700) of `size_mb` (0: SECRETS_TMPFS_SIZE; a task's resources.secrets,
    Nomad's SecretsMB) at `path` unless one is there; return whether it mounted."""
    size = f"{size_mb}m" if size_mb > 0 else SECRETS_TMPFS_SIZE
    path.mkdir(parents=True, exist_ok=True)
    if is_mount(path):
        return False
    res = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={size},mode=0700,nosuid,nodev",
            "tmpfs",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise AgentError(f"cannot mount a tmpfs on {path}: {res.stderr.strip()}")
    return True


def unmount_below(root: Path) -> list[str]:
    """Unmount every mount at or below `root` (deepest first); return what was unmounted."""
    prefix = str(root.resolve())
    mounts = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            target = line.split()[1].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)
    return mounts
