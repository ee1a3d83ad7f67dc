"""The task dir hook (agent.runner.hooks.TaskDirHook), handed its dirs, events and the fault flags:
the setup builds the task's dir with its secrets/ size and says so; a restore mounts secrets/ again
when it is gone (after a reboot), unless the nomad-28345 fault leaves it on disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.runner.hooks import TaskDirHook


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.seen.append((type_, message))


class Dirs:
    """TaskDirs: records what is prepared and remounted; `gone`: a remount finds secrets/ gone."""

    def __init__(self, gone: bool = False) -> None:
        self.prepared: list[tuple[Path, int]] = []
        self.remounted: list[tuple[Path, int]] = []
        self.gone = gone

    def prepare(self, task_dir: Path, secrets_mb: int = 0) -> None:
        self.prepared.append((task_dir, secrets_mb))

    def remount_secrets(self, task_dir: Path, secrets_mb: int = 0) -> bool:
        self.remounted.append((task_dir, secrets_mb))
        return self.gone

    def migrate(self, previous: Path, alloc_dir: Path, tasks: Sequence[str]) -> list[str]:
        return []

    def cleanup(self, alloc_dir: Path) -> None: ...

    def remove(self, alloc_dir: Path) -> None: ...


def hook(tmp_path: Path, dirs: Dirs, bugs: Bugs = NO_BUGS) -> tuple[TaskDirHook, Events]:
    events = Events()
    alloc_dir = tmp_path / "alloc"
    alloc_dir.mkdir(exist_ok=True)
    return TaskDirHook(events, dirs, alloc_dir, alloc_dir / "web", 64, bugs), events


def test_the_setup_builds_the_dir_with_its_secrets_size_and_says_so(tmp_path: Path) -> None:
    dirs = Dirs()
    h, events = hook(tmp_path, dirs)
    done: list[Exception | None] = []
    h.setup(done.append)
    assert done == [None]
    assert dirs.prepared == [(tmp_path / "alloc" / "web", 64)]
    assert events.seen == [("Task Setup", "Building Task Directory")]


def test_a_restore_mounts_secrets_again_when_gone_and_says_so(tmp_path: Path) -> None:
    dirs = Dirs(gone=True)
    h, events = hook(tmp_path, dirs)
    h.restore()
    assert dirs.remounted == [(tmp_path / "alloc" / "web", 64)]
    assert [t for t, _ in events.seen] == ["Task Setup"] and "mounted again" in events.seen[0][1]


def test_a_restore_with_secrets_in_place_is_quiet(tmp_path: Path) -> None:
    dirs = Dirs(gone=False)
    h, events = hook(tmp_path, dirs)
    h.restore()
    assert len(dirs.remounted) == 1 and events.seen == []


def test_a_restore_of_an_alloc_whose_dir_is_gone_mounts_nothing(tmp_path: Path) -> None:
    dirs = Dirs(gone=True)
    h, events = hook(tmp_path, dirs)
    (tmp_path / "alloc").rmdir()
    h.restore()
    assert dirs.remounted == [] and events.seen == []


def test_the_nomad_28345_fault_leaves_secrets_on_disk(tmp_path: Path) -> None:
    dirs = Dirs(gone=True)
    h, events = hook(tmp_path, dirs, Bugs(no_tmpfs_remount_on_restore=True))
    h.restore()
    assert dirs.remounted == [] and events.seen == []
