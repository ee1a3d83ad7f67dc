"""Progress lines and per-phase timings for long-running lab commands."""

from __future__ import annotations

import json
import sys
import threading
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
    # The phase this one ran inside (e.g. one of the branches of a parallel phase); the total counts
    # only top-level phases, so that branches that overlap in time are not added up.
    parent: str = ""


@dataclass
class Timings:
    """Records how long each phase of a command took; printed in the summary and kept as JSON."""

    command: str
    started: float = field(default_factory=time.time)
    phases: list[Phase] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def phase(self, name: str, parent: str = "") -> Iterator[Phase]:
        """Time a phase. A parent phase is recorded where it starts, so that the phases that ran
        inside it (its branches, recorded as they end) follow it in the table."""
        say(f"{name} ...")
        t0 = time.monotonic()
        ph = Phase(name=name, seconds=0.0, ok=False, parent=parent)
        with self._lock:
            self.phases.append(ph)
        try:
            yield ph
            ph.ok = True
        finally:
            ph.seconds = time.monotonic() - t0
            status = "done" if ph.ok else "FAILED"
            extra = f" ({ph.detail})" if ph.detail else ""
            say(f"{name}: {status} in {ph.seconds:.1f}s{extra}")

    def add(self, name: str, seconds: float, ok: bool, detail: str = "", parent: str = "") -> None:
        """Record a phase timed elsewhere (e.g. one play of a playbook run)."""
        with self._lock:
            self.phases.append(Phase(name, seconds, ok, detail, parent))
        say(f"{name}: {'done' if ok else 'FAILED'} in {seconds:.1f}s" + (f" ({detail})" if detail else ""))

    @property
    def total(self) -> float:
        """Wall time of the phases: top-level phases add up, the branches inside them do not."""
        return sum(p.seconds for p in self.phases if not p.parent)

    def _ordered(self) -> list[tuple[int, Phase]]:
        """Phases with their depth, each parent followed by the phases that ran inside it."""
        out: list[tuple[int, Phase]] = []

        def walk(parent: str, depth: int) -> None:
            for p in self.phases:
                if p.parent == parent:
                    out.append((depth, p))
                    if p.name != parent:
                        walk(p.name, depth + 1)

        walk("", 0)
        known = {id(p) for _, p in out}
        out += [(1, p) for p in self.phases if id(p) not in known]  # a branch whose parent is missing
        return out

    def table(self) -> str:
        rows_in = [(("  " * d) + ("| " if d else "") + p.name, p) for d, p in self._ordered()]
        width = max((len(n) for n, _ in rows_in), default=5)
        rows = [
            f"  {n:<{width}}  {p.seconds:7.1f}s  {'' if p.ok else 'FAILED '}{p.detail}" for n, p in rows_in
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
                    | ({"parent": p.parent} if p.parent else {})
                    for _, p in self._ordered()
                ],
            }
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(runs, indent=2) + "\n")
