"""`fieldlab e2e shrink RUN`: a failing seeded chaos run shrunk to the few steps that matter.

The run's history gives its seed, its agent fault flags and the chaos steps it did before it failed.
Those steps are replayed on the lab (`--chaos-schedule`, same seed and flags for everything else) in
ever smaller subsets by delta debugging (Zeller's ddmin), until no step can be dropped without the
failure going away. The minimal schedule is then replayed once without the fault flags (does it
pass?) and written as a scenario file (`fieldlab repro FILE` runs it). Every replay is one chaos run
with its own report under the shrink's directory; the summary says how many replays and how long.

    python -m e2e.drivers.shrink e2e/reports/<run> [--lab LAB] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from e2e.harness.chaos import STEP_NOTE, ScheduleError, Step, steps_run
from e2e.harness.scenario_write import dump

E2E = Path(__file__).resolve().parents[1]
ROOT = E2E.parent
CHAOS_TEST = "test_chaos.py::test_seeded_chaos_keeps_every_invariant"
T = TypeVar("T")


# -- delta debugging (pure) -------------------------------------------------------------------------------
def _chunks(items: Sequence[T], n: int) -> list[list[T]]:
    size, extra = divmod(len(items), n)
    out, i = [], 0
    for k in range(n):
        step = size + (1 if k < extra else 0)
        out.append(list(items[i : i + step]))
        i += step
    return [c for c in out if c]


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal subsequence of `items` (order kept) on which `fails` is still True: dropping any
    one step of it makes the failure go away. `fails(items)` is taken as True (the caller checked
    it). Each subset is asked about once (a replay is minutes)."""
    seen: dict[tuple[int, ...], bool] = {}
    index = list(range(len(items)))

    def test(subset: list[int]) -> bool:
        key = tuple(subset)
        if key not in seen:
            seen[key] = fails([items[i] for i in subset])
        return seen[key]

    n = 2
    while len(index) >= 2:
        chunks = _chunks(index, n)
        for chunk in chunks:  # a chunk alone still fails: keep only it
            if test(chunk):
                index, n = chunk, 2
                break
        else:
            for chunk in chunks:  # dropping a chunk still fails: drop it
                rest = [i for i in index if i not in chunk]
                if len(chunks) > 2 and rest and test(rest):
                    index, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(index):
                    break
                n = min(len(index), n * 2)
    return [items[i] for i in index]


# -- the failing run ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailedRun:
    run_dir: Path
    seed: int
    flags: str
    steps: list[Step]
    failure: str  # the chaos test's failure message (its first line)


def read_run(run_dir: Path) -> FailedRun:
    """The seed, fault flags and chaos steps of a failed chaos run; ValueError says what is missing."""
    from e2e.harness.report.model import load_run

    try:
        run = load_run(run_dir)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    chaos = [t for t in run.tests if t.nodeid.endswith(CHAOS_TEST)]
    if not chaos:
        raise ValueError(f"{run_dir}: no chaos test in this run ({CHAOS_TEST})")
    if chaos[0].outcome not in ("failed", "error"):
        raise ValueError(f"{run_dir}: its chaos test {chaos[0].outcome}: nothing to shrink")
    if run.seed is None:
        raise ValueError(f"{run_dir}: no seed recorded")
    notes = [str(r.get("name") or "") for r in run.of_kind("note")]
    try:
        steps = steps_run([n for n in notes if n.startswith(STEP_NOTE)])
    except ScheduleError as exc:
        raise ValueError(f"{run_dir}: {exc}") from None
    if not steps:
        raise ValueError(f"{run_dir}: the chaos test failed before its first step: nothing to shrink")
    return FailedRun(run_dir, int(run.seed), run.agent_flags, steps, _first_problem(chaos[0].message))


# -- replays on the lab -------------------------------------------------------------------------------------
@dataclass
class Replays:
    lab: str
    seed: int
    base: Path
    count: int = 0
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)

    def run(self, steps: list[Step], flags: str, what: str) -> tuple[bool, str]:
        """One chaos run of exactly `steps`: (failed, its failure or ""), its report kept."""
        self.count += 1
        run_dir = self.base / f"replay-{self.count:02d}"
        argv = [
            sys.executable, "-m", "pytest", f"e2e/suites/{CHAOS_TEST}",
            "--lab", self.lab, "--seed", str(self.seed), "--agent-faults", flags,
            "--chaos-schedule", "; ".join(map(str, steps)),
            "--report-dir", str(run_dir), "-p", "no:cacheprovider", "-q", "--no-header", "-x",
        ]  # fmt: skip
        print(f"[shrink] replay {self.count}: {len(steps)} step(s) {what} ...", flush=True)
        t0 = time.monotonic()
        run_dir.mkdir(parents=True, exist_ok=True)
        with (run_dir.parent / f"{run_dir.name}.log").open("w") as fh:
            rc = subprocess.call(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
        took = time.monotonic() - t0
        self.seconds += took
        failure = _failure(run_dir) if rc != 0 else ""
        verdict = "FAILS" if rc == 1 else ("passes" if rc == 0 else f"broke (pytest exit {rc})")
        listed = "; ".join(map(str, steps))
        self.log.append(f"replay {self.count}: {verdict} in {took:.0f}s with {len(steps)} step(s): {listed}")
        print(f"    {verdict} in {took:.0f}s" + (f": {failure[:200]}" if failure else ""), flush=True)
        return rc == 1, failure


def _failure(run_dir: Path) -> str:
    from e2e.drivers.repro import failures

    fails = failures(run_dir / "junit.xml")
    return fails[0].split("\n", 1)[0] if fails else ""


def scenario_text(run: FailedRun, steps: list[Step], replays: Replays, passes_without: bool | None) -> str:
    """The minimal schedule as a scenario file of the catalogue's format (a Python scenario: the chaos
    suite, with its steps and seed)."""
    bug = "fieldlab-0-chaos-shrunk"
    doc = {
        "bug": bug,
        "title": f"shrunk from the chaos run {run.run_dir.name}",
        "link": str(run.run_dir),
        "versions": "fieldlab",
        "family": "restarts",
        "flag": run.flags or "none",
        "symptom": _symptom_of(run.failure),
        "what": run.failure[:160] or "the chaos run's failure",
        "python": [CHAOS_TEST],
        "python_why": "a chaos schedule (the chaos suite's workload: four jobs per client) shrunk by "
        "e2e/drivers/shrink.py; its steps replay with --chaos-schedule and the same seed",
        "chaos": [str(s) for s in steps],
        "seed": run.seed,
    }
    without = "passes" if passes_without else "FAILS too" if passes_without is False else "was not replayed"
    head = (
        f"# Shrunk by `fieldlab e2e shrink {run.run_dir}`: {len(run.steps)} step(s) -> {len(steps)} in "
        f"{replays.count} replays, {replays.seconds:.0f}s.\n"
        f"# Without the fault flag(s) the shrunk schedule {without}.\n"
        "# Rename the bug (nomad-<issue>), fill in title, link and versions: a catalogue entry.\n"
    )
    return head + dump(doc)


def _first_problem(message: str) -> str:
    """The failure's first problem: the line under a wait's "after <what>, within Ns:" header."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if re.search(r"within \d+s:$", line) and i + 1 < len(lines):
            return lines[i + 1]
    return lines[0] if lines else ""


def _symptom_of(failure: str) -> str:
    """A regex for the failure that other runs of the same symptom match too: its words without
    digits (node names, ids, addresses and ports differ from run to run), in order."""
    words = [re.escape(w) for w in failure.split() if not re.search(r"\d", w)]
    return ".*".join(words[:12]) if words else "."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fieldlab e2e shrink", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a failed chaos run's directory (e2e/reports/<run>)")
    ap.add_argument("--lab", default="default")
    ap.add_argument("--out", default="", help="the scenario file to write (default: <shrink dir>/shrunk.yml)")
    args = ap.parse_args(argv)
    try:
        run = read_run(Path(args.run_dir).resolve())
    except ValueError as exc:
        print(f"shrink: {exc}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = E2E / "reports" / f"{stamp}-shrink-{run.run_dir.name}"
    replays = Replays(args.lab, run.seed, base)
    t0 = time.monotonic()
    print(
        f"[shrink] {run.run_dir.name}: seed {run.seed}, flags {run.flags or 'none'}, "
        f"{len(run.steps)} step(s) before the failure: {run.failure[:160]}",
        flush=True,
    )
    failed, _ = replays.run(run.steps, run.flags, "(the whole schedule: does it fail again?)")
    if not failed:
        print(
            "shrink: the whole schedule did not fail again: the failure is not reproducible this way",
            file=sys.stderr,
        )
        return 1
    minimal = ddmin(run.steps, lambda s: replays.run(s, run.flags, "")[0])
    passes_without: bool | None = None
    if run.flags:
        failed_without, _ = replays.run(minimal, "", "without the fault flags")
        passes_without = not failed_without
    out = Path(args.out) if args.out else base / "shrunk.yml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(scenario_text(run, minimal, replays, passes_without))
    (base / "shrink.json").write_text(
        json.dumps(
            {
                "run": str(run.run_dir),
                "seed": run.seed,
                "flags": run.flags,
                "steps_before": [str(s) for s in run.steps],
                "steps_after": [str(s) for s in minimal],
                "replays": replays.count,
                "seconds": round(replays.seconds, 1),
                "passes_without_flags": passes_without,
                "log": replays.log,
            },
            indent=2,
        )
        + "\n"
    )
    print()
    for line in replays.log:
        print(f"  {line}")
    print(
        f"\n{len(run.steps)} step(s) -> {len(minimal)}: {'; '.join(map(str, minimal))}\n"
        f"{replays.count} replays in {time.monotonic() - t0:.0f}s; without the flags: "
        f"{'passes' if passes_without else 'FAILS' if passes_without is False else 'no flags to drop'}\n"
        f"scenario: {out} (fieldlab repro {out})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
