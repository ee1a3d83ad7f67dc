"""agent.drivers.session.kill_tree: a change script's or an exec's process tree killed whole, even a
shell that forks while the walk reads its children (a docker change script past its timeout left
`sleep 300 & sleep 301` running under load in a rehearsal)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.drivers.session import kill_tree
from lab.waits import wait_until

MARK = "31379"  # the sleeps' argument: finds them among the host's processes
SPAWNED = 5.0  # seconds for the shell to have started forking
GONE = 5.0  # seconds for killed processes to be gone


def _sleeps() -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                argv[:2] == [b"sleep", MARK.encode()]
                and (d / "stat").read_text().split(")")[1].split()[0] != "Z"
            ):
                found.append(int(d.name))
    return found


def test_a_shell_forking_while_the_tree_is_walked_leaves_no_child_behind() -> None:
    # a shell that forks without pause (2,000 at most): children are made while kill_tree reads the tree
    shell = subprocess.Popen(["sh", "-c", f"for i in $(seq 2000); do sleep {MARK} & done; wait"])
    try:
        wait_until(
            lambda: (True if len(_sleeps()) >= 20 else None, f"{len(_sleeps())} children"),
            timeout=SPAWNED,
            what="the shell forking",
            interval=0.01,
        )
        kill_tree(shell.pid)
        shell.wait(5)
        # killed ones take a moment to be gone (SIGKILL delivered, not yet a zombie); a missed one stays
        wait_until(
            lambda: (True if not _sleeps() else None, f"{len(_sleeps())} children outlived kill_tree"),
            timeout=GONE,
            what="every child killed (one forked while the tree was walked would stay)",
            interval=0.05,
        )
    finally:
        for pid in _sleeps():
            os.kill(pid, 9)
        if shell.poll() is None:
            shell.kill()
