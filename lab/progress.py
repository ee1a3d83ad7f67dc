"""Progress lines and per-phase timings for long-running lab commands."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def say(msg: str) -> None:
    """One progress line, flushed at once so that a CI log shows it as it happens."""
    print(f"[fieldlab {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"[fieldlab {time.strftime('%H:%M:%S')}] WARNING: {msg}", file=sys.stderr, flush=True)


@dataclass
class Phase:
    name: str
    seconds: float
    ok: bool
    detail: str = ""


@dataclass
class Timings:
    """Records how long each phase of a command took; printed in the summary and kept as JSON."""

    command: str
    started: float = field(default_factory=time.time)
    phases: list[Phase] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        say(f"{name} ...")
        t0 = time.monotonic()
        ph = Phase(name=name, seconds=0.0, ok=False)
        try:
            yield ph
            ph.ok = True
        finally:
            ph.seconds = time.monotonic() - t0
            self.phases.append(ph)
            status = "done" if ph.ok else "FAILED"
            extra = f" ({ph.detail})" if ph.detail else ""
            say(f"{name}: {status} in {ph.seconds:.1f}s{extra}")

    def add(self, name: str, seconds: float, ok: bool, detail: str = "") -> None:
        """Record a phase timed elsewhere (e.g. one play of a playbook run)."""
        self.phases.append(Phase(name, seconds, ok, detail))
        say(f"{name}: {'done' if ok else 'FAILED'} in {seconds:.1f}s ({detail})")

    @property
    def total(self) -> float:
        return sum(p.seconds for p in self.phases)

    def table(self) -> str:
        width = max((len(p.name) for p in self.phases), default=5)
        rows = [
            f"  {p.name:<{width}}  {p.seconds:7.1f}s  {'' if p.ok else 'FAILED'}{p.detail}"
            for p in self.phases
        ]
        rows.append(f"  {'total':<{width}}  {self.total:7.1f}s")
        return "\n".join(rows)

    def write(self, path: Path) -> None:
        """Append this run to a JSON list at `path` (one entry per run, newest last)."""
        runs: list[object] = []
        if path.exists():
            try:
                loaded = json.loads(path.read_text())
                runs = loaded if isinstance(loaded, list) else []
            except json.JSONDecodeError:
                runs = []
        runs.append(
            {
                "command": self.command,
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
                "total_seconds": round(self.total, 2),
                "phases": [
                    {"name": p.name, "seconds": round(p.seconds, 2), "ok": p.ok, "detail": p.detail}
                    for p in self.phases
                ],
            }
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(runs, indent=2) + "\n")
