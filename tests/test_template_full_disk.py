"""A render into a real full tmpfs (the task's secrets/ is one): a `Template Failed` event, the temp
file removed, the old content kept, the watcher alive, and the next render delivers once space
returns. The unit version (tests/test_template_sandbox.py) simulates ENOSPC; this one fills a disk."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.structs.model import Task, Template
from tests.test_template_sandbox import Host

pytestmark = [pytest.mark.root]
if os.geteuid() != 0:
    pytestmark.append(pytest.mark.skip(reason="needs root (mounts a tmpfs)"))

SIZE = 64 * 1024


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    host = Host(tmp_path / "a")
    secrets = host.root / "web" / "secrets"
    secrets.mkdir(parents=True)
    (host.root / "web" / "local").mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(secrets)], check=True
    )
    try:
        yield host
    finally:
        subprocess.run(["umount", "-l", str(secrets)], check=False)


def _fill(directory: Path) -> Path:
    """Fill the tmpfs to the last byte: one big file, then single bytes until ENOSPC."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (4096, 1):
            while True:
                try:
                    os.write(fd, b"x" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


def test_a_render_into_a_full_tmpfs_fails_cleanly_and_delivers_once_space_returns(host: Host) -> None:
    body = "k" * 8000
    task = Task(
        "web",
        "exec",
        templates=(Template("secrets/cert", data=body + '{{ env "V" }}', change_mode="noop", perms="0600"),),
    )
    tt = host.templates(task)
    tt.render_all()
    dest = host.task_dir / "secrets" / "cert"
    assert dest.read_text() == body + "1"

    filler = _fill(dest.parent)
    host.variables["V"] = "2"
    tt.schedule_rerender(0.0)
    host.fire()
    failed = [m for kind, m in host.events if kind == "Template Failed"]
    assert len(failed) == 1 and "secrets/cert" in failed[0] and "No space left" in failed[0], host.events
    assert dest.read_text() == body + "1", "the old content is kept"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["cert", "filler"], "no temp file left behind"
    assert len(host.timers) == 1 and not tt.dead, "the watcher is alive: a retry is scheduled"

    filler.unlink()  # space returns
    seen = len(host.events)
    host.fire()
    assert dest.read_text() == body + "2"
    assert ("Template Rendered", "rendered secrets/cert") in host.events[seen:]
    assert oct(dest.stat().st_mode & 0o777) == "0o600"
