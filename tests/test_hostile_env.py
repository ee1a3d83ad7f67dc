"""A task's environment reaches only the task (issue 32), on the real drivers (root): a workload
whose environment names a preload library (LD_PRELOAD, as a jobspec `env` or an `env = true`
template can) must never get that library loaded by a host-side process that runs as root (P's
shell, env, setpriv, nsenter, unshare, the exec driver's setup and init, `alloc exec` and change
scripts on their way in). The library is real: compiled here, it appends the euid of every process
that loads it to a file. Controls: it does load in the task (as nobody), so a missing mark proves
nothing was missed. Also: a command run in the task uses the environment the runner recorded, never
the task's own /proc/<pid>/environ; an exec task that ends at once is a task exit with its code, not
a setup failure, and a real setup failure is still one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.command.plugins import DEFAULT_CHROOT_ENV
from agent.drivers.base import DriverError, TaskContext, TaskHandle
from agent.drivers.cgroups import Cgroups
from agent.drivers.exec import ExecDriver
from agent.drivers.raw_exec import RawExecDriver
from agent.structs.model import Resources, Task
from lab.waits import wait_until
from tests.test_raw_exec import Exits

pytestmark = [pytest.mark.root]
if os.geteuid() != 0:
    pytestmark.append(pytest.mark.skip(reason="needs root (namespaces, cgroups, setpriv)"))
elif shutil.which("cc") is None:
    pytestmark.append(pytest.mark.skip(reason="needs a C compiler for the preload library (cc)"))

TIMEOUT = 20.0
NOBODY = 65534
LIBRARY = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
static void mark(const char *path) {
    char line[64];
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (fd < 0) return;
    int n = snprintf(line, sizeof line, "uid %d\n", (int)geteuid());
    if (n > 0) (void)!write(fd, line, (size_t)n);
    close(fd);
}
__attribute__((constructor)) static void loaded(void) { mark(HOST_MARKS); mark("/alloc/marks"); }
"""


@dataclass
class Node:
    """An alloc dir with the preload library in its shared dir, and the drivers' tasks to clean up."""

    root: Path
    alloc: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: list[tuple[str, str]] = field(default_factory=list)

    @property
    def shared(self) -> Path:
        return self.root / "alloc" / self.alloc / "alloc"

    @property
    def marks(self) -> Path:
        return self.shared / "marks"

    def build(self) -> None:
        task_dir = self.root / "alloc" / self.alloc / "t"
        for d in (task_dir / "local", task_dir / "secrets", self.shared):
            d.mkdir(parents=True, exist_ok=True)
        for d in (self.root, self.root / "alloc", self.root / "alloc" / self.alloc):
            d.chmod(0o755)
        self.shared.chmod(0o777)
        source = self.root / "preload.c"
        source.write_text(LIBRARY)
        subprocess.run(
            ["cc", "-shared", "-fPIC", f'-DHOST_MARKS="{self.marks}"', "-o", str(self.library), str(source)],
            check=True,
            capture_output=True,
        )
        self.library.chmod(0o755)

    @property
    def library(self) -> Path:
        return self.shared / "preload.so"

    def env(self) -> dict[str, str]:
        """What a hostile jobspec's env says: the library by its host path and its chroot path."""
        return {
            "LD_PRELOAD": f"{self.library}:/alloc/preload.so",
            "GREETING": "hello",
            "NOMAD_ALLOC_DIR": str(self.shared),
            "NOMAD_TASK_NAME": "t",
        }

    def start(self, driver: ExecDriver | RawExecDriver, script: str, user: str = "nobody") -> TaskHandle:
        task = Task(
            "t",
            driver.name,
            config={"command": "/bin/sh", "args": ["-c", script]},
            resources=Resources(cpu=100, memory=48),
            kill_timeout=2.0,
            user=user,
        )
        ctx = TaskContext(
            job="hostile",
            group="g",
            alloc_id=self.alloc,
            task=task,
            task_dir=self.root / "alloc" / self.alloc / "t",
            env=self.env(),
        )
        self.started.append((self.alloc, "t"))
        return driver.start(ctx)

    def uids(self) -> list[int]:
        text = self.marks.read_text() if self.marks.exists() else ""
        return [int(line.split()[1]) for line in text.splitlines()]

    def cleanup(self) -> None:
        for alloc, task in self.started:
            Cgroups.of_task(alloc, task).kill_all()


@pytest.fixture
def node() -> Iterator[Node]:
    # Not below pytest's tmp_path: its 0700 parents keep a nobody task from its own library.
    root = Path(tempfile.mkdtemp(prefix="fieldlab-hostile-env-"))
    root.chmod(0o755)
    n = Node(root / "node")
    try:
        n.build()
        yield n
    finally:
        n.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def _wait_marks(node: Node, count: int, what: str) -> list[int]:
    return wait_until(
        lambda: (node.uids() if len(node.uids()) >= count else None, str(node.uids())),
        timeout=TIMEOUT,
        what=what,
        interval=0.05,
    )


@pytest.mark.parametrize("kind", ["exec", "raw_exec"])
def test_a_tasks_preload_library_never_runs_as_root_at_start_or_in_its_scripts(node: Node, kind: str) -> None:
    driver: ExecDriver | RawExecDriver = ExecDriver(Exits()) if kind == "exec" else RawExecDriver(Exits())
    handle = node.start(driver, "exec sleep 600")
    uids = _wait_marks(node, 1, "the preload library to load in the task (the control)")
    assert NOBODY in uids and 0 not in uids, f"loaded as root by a host-side step: {uids}"

    # A change script / `alloc exec` runs in the environment the runner recorded, loads the library
    # in the task as the task's user, and nowhere before that.
    before = len(node.uids())
    code, said = driver.exec(handle, ["/bin/sh", "-c", 'echo "$GREETING $(id -u)"'], 10.0, node.env())
    assert (code, said.strip().splitlines()[-1]) == (0, f"hello {NOBODY}"), said
    uids = node.uids()
    assert len(uids) > before and 0 not in uids, f"loaded as root by the exec's way in: {uids}"
    driver.stop(handle, 2.0, "SIGKILL")


def test_a_raw_exec_command_never_takes_the_environment_the_task_shows_in_proc(node: Node) -> None:
    """The task can rewrite its own /proc/<pid>/environ (here: it simply exec's with another one);
    a command run without the runner's recorded environment gets the driver's bare one, not that."""
    driver = RawExecDriver(Exits())
    handle = node.start(driver, "exec env LD_PRELOAD=/nonexistent.so PLANTED=by-the-task sleep 600")
    wait_until(
        lambda: (True if b"PLANTED" in Path(f"/proc/{handle.id}/environ").read_bytes() else None, ""),
        timeout=TIMEOUT,
        what="the task to plant its environment",
        interval=0.05,
    )
    code, said = driver.exec(handle, ["/bin/sh", "-c", 'echo "planted=${PLANTED:-none}"'], 10.0, None)
    assert (code, said.strip()) == (0, "planted=none"), said
    driver.stop(handle, 2.0, "SIGKILL")


@pytest.mark.parametrize("code", [0, 3])
def test_an_exec_task_that_ends_at_once_is_a_task_exit_not_a_setup_failure(node: Node, code: int) -> None:
    exits = Exits()
    driver = ExecDriver(exits)
    for _ in range(3):  # the task is often gone before the agent sees its init: every time, an exit
        handle = node.start(driver, f"exit {code}")
        exits.wait_for(node.alloc, handle)
        assert driver.status(handle).exit_code == code


def test_a_failed_exec_setup_is_still_a_setup_failure_that_says_why(node: Node) -> None:
    # /proc in the chroot is a file (a chroot_env entry): the setup's `mkdir -p /proc` fails.
    driver = ExecDriver(Exits(), chroot_env=(*DEFAULT_CHROOT_ENV, ("/etc/hostname", "/proc")))
    with pytest.raises(DriverError, match=r"isolation setup failed: .*proc"):
        node.start(driver, "exit 0")
