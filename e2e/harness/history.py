"""The run's history: every fault, observation, check and remote command, with its time and the seed.

One `History` per run writes JSON lines to `<run dir>/history.jsonl` as things happen (so a run that
is killed still leaves its history behind) and every remote command to `commands.log`. The report
(`e2e.harness.report`) is built from these files alone. Listeners (`History.listeners`) see each
record as it is written: the suites' conftest prints a `progress_line` for every step of a long suite.

Harness code records through `current()`, so a `Remote` or a probe needs no history argument; with
no run open (a harness call from a REPL) records go nowhere.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Kinds of record; the report colours its timeline by these.
RUN, TEST, FAULT, HEAL, OBSERVE, CHECK, MEASURE, COMMAND, NOTE, EVENT = (
    "run",
    "test",
    "fault",
    "heal",
    "observe",
    "check",
    "measure",
    "command",
    "note",
    "event",
)

# A fault's `heals` datum: HEALS_ITSELF for a disruption the system under test recovers from with no
# heal step of the harness (a killed container or process: the agent's restart is what is tested;
# a storm whose span runs from the first kill to the last agent back). The report closes its band at
# the end of its own span instead of calling it never healed.
HEALS_ITSELF = "itself"

# The note that makes a run one half of a bug's reproduction (`make repro`): its data names the bug,
# the half (with-flag, without, once), the fault flag and the repro's own replay command.
REPRO_NOTE = "repro of "

# Commands are logged whole in commands.log; the history keeps this much of their output.
OUTPUT_TAIL = 400
# The steps a long suite shows as it goes, one line each (`progress_line`).
PROGRESS_KINDS = frozenset({FAULT, HEAL, CHECK, MEASURE})
PROGRESS_DETAIL = 160  # at most this much of a failed step's detail on its progress line

Listener = Callable[[dict[str, Any]], None]


@dataclass
class History:
    run_dir: Path
    run_id: str
    seed: int
    lab: str
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _test: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    test_started: float = 0.0  # when the current test began (its checks look at what happened since)
    listeners: list[Listener] = field(default_factory=list, repr=False)  # called with each record

    def __post_init__(self) -> None:
        self.started = time.time()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "history.jsonl"
        self.commands = self.run_dir / "commands.log"

    # -- writing ---------------------------------------------------------------------------------
    def record(
        self,
        kind: str,
        name: str,
        *,
        node: str | None = None,
        detail: str = "",
        ok: bool | None = None,
        duration: float | None = None,
        at: float | None = None,
        **data: Any,
    ) -> dict[str, Any]:
        """Append one record; `at` is its time when it happened elsewhere (an agent's task event)."""
        t = time.time() if at is None else at
        rec: dict[str, Any] = {"t": round(t, 3), "kind": kind, "name": name, "test": self._test}
        if node is not None:
            rec["node"] = node
        if detail:
            rec["detail"] = detail
        if ok is not None:
            rec["ok"] = ok
        if duration is not None:
            rec["duration"] = round(duration, 3)
        if data:
            rec["data"] = data
        line = json.dumps(rec, default=str)
        with self._lock:
            with self.path.open("a") as fh:
                fh.write(line + "\n")
            self.counts[kind] = self.counts.get(kind, 0) + 1
        for listener in self.listeners:
            try:
                listener(rec)
            except (OSError, ValueError):  # a closed terminal never fails a test; the record is written
                continue
        return rec

    def check(self, name: str, problems: list[str], *, node: str | None = None, **data: Any) -> list[str]:
        """Record a check: ok when `problems` is empty, the problems as its detail, `data` beside
        (counts={...} for the report). Returns `problems`, for the caller to assert on."""
        self.record(CHECK, name, node=node, ok=not problems, detail="; ".join(problems), **data)
        return problems

    def command(self, node: str, command: str, rc: int, duration: float, stdout: str, stderr: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        with self._lock, self.commands.open("a") as fh:
            fh.write(f"--- {stamp} {node} rc={rc} {duration:.2f}s [{self._test}]\n$ {command}\n")
            if stdout.strip():
                fh.write(stdout if stdout.endswith("\n") else stdout + "\n")
            if stderr.strip():
                fh.write("stderr: " + (stderr if stderr.endswith("\n") else stderr + "\n"))
        self.record(
            COMMAND,
            command[:200],
            node=node,
            ok=rc == 0,
            duration=duration,
            rc=rc,
            out=stdout.strip()[-OUTPUT_TAIL:],
        )

    def set_test(self, nodeid: str) -> None:
        self._test = nodeid
        if nodeid:
            self.test_started = time.time()

    @contextmanager
    def span(
        self, kind: str, name: str, *, node: str | None = None, detail: str = "", **data: Any
    ) -> Iterator[None]:
        """Record `name` with how long the block took and whether it raised (and `data`)."""
        t0 = time.monotonic()
        try:
            yield
        except BaseException as exc:
            self.record(
                kind,
                name,
                node=node,
                detail=f"{detail} FAILED: {exc}".strip(),
                ok=False,
                duration=time.monotonic() - t0,
                **data,
            )
            raise
        self.record(kind, name, node=node, detail=detail, ok=True, duration=time.monotonic() - t0, **data)


_current: History | None = None


def open_run(history: History) -> History:
    global _current  # noqa: PLW0603 - one run per process, opened by the suite's conftest
    _current = history
    history.record(RUN, history.run_id, seed=history.seed, lab=history.lab)
    return history


def current() -> History | None:
    return _current


def record(kind: str, name: str, **kw: Any) -> None:
    if _current is not None:
        _current.record(kind, name, **kw)


def check(name: str, problems: list[str], *, node: str | None = None, **data: Any) -> list[str]:
    """`History.check` on the run (recorded nowhere when no run is open); returns `problems`."""
    if _current is not None:
        _current.check(name, problems, node=node, **data)
    return problems


def measure(name: str, seconds: float, *, node: str | None = None, target: float | None = None) -> None:
    """A figure for the report (fault to recovery times); `target` is printed beside it, not asserted."""
    record(MEASURE, name, node=node, duration=seconds, target=target)


@contextmanager
def span(kind: str, name: str, *, node: str | None = None, detail: str = "", **data: Any) -> Iterator[None]:
    if _current is None:
        yield
        return
    with _current.span(kind, name, node=node, detail=detail, **data):
        yield


def progress_line(rec: dict[str, Any], started: float) -> str | None:
    """One short timestamped line for a step of the run (a fault, heal, check or measurement), or
    None for the other kinds: `[e2e 02:17:03Z +12m05s] FAULT client1 agent SIGKILL 1.8s`."""
    kind = rec.get("kind")
    curves = kind == NOTE and bool((rec.get("data") or {}).get("series"))  # a storm's summary
    if kind not in PROGRESS_KINDS and not curves:
        return None
    t = float(rec.get("t", 0.0))
    since = max(0, int(t - started))
    parts = [
        f"[e2e {time.strftime('%H:%M:%S', time.gmtime(t))}Z +{since // 60}m{since % 60:02d}s]",
        str(kind).upper(),
    ]
    if rec.get("node"):
        parts.append(str(rec["node"]))
    parts.append(str(rec.get("name", "")))
    if rec.get("duration") is not None:
        parts.append(f"{float(rec['duration']):.1f}s")
    target = (rec.get("data") or {}).get("target")
    if kind == MEASURE and target is not None:
        parts.append(f"(target {float(target):.0f}s)")
    if rec.get("ok") is False:
        detail = " ".join(str(rec.get("detail", "")).split())
        detail = detail[:PROGRESS_DETAIL]
        parts.append(detail if "FAILED" in detail else "FAILED" + (f": {detail}" if detail else ""))
    elif kind == CHECK and rec.get("ok"):
        parts.append("ok")
    elif curves:
        parts.append(f"- {rec.get('detail', '')}")
    return " ".join(parts)


def load(path: Path) -> list[dict[str, Any]]:
    """The records of a history file; a truncated last line (a killed run) is skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
