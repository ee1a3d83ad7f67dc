"""`make repro BUG=<id>|FILE|list|all`: reproduce a field bug of the catalogue on the running lab.

The catalogue is e2e/scenarios/<bug>.yml, one file per bug (e2e.harness.scenario): its scenario is
data (a jobspec, steps, checks) or names the Python tests that replay it. BUG may also be the path of
a scenario file anywhere (`fieldlab repro FILE`); `new BUG --jobspec FILE` writes a skeleton.

For a bug, its scenario (one or more e2e tests) runs twice on the lab: first with the agent's fault
flag that puts the bug back, where the suite must fail with the field symptom (REPRODUCED), then with
a clean agent, where it must pass (FIXED). Both verdicts are printed, with the failure that showed the
symptom and each run's report directory; `all` prints the table for every bug. The exit status is 0
only when every bug asked for was both REPRODUCED and FIXED.

    python -m e2e.repro --lab dev nomad-24292
    python -m e2e.repro --lab dev list
    python -m e2e.repro --lab dev ./my-report.yml
    python -m e2e.repro new nomad-12345 --jobspec ./report.nomad.hcl
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from e2e.harness.scenario import SCENARIOS, Scenario, ScenarioError, catalogue, load
from e2e.harness.scenario_write import images_in, skeleton

E2E = Path(__file__).resolve().parent
ROOT = E2E.parent
REPRO_FILE = "repro.json"  # a half's verdict, beside its run (the report's header reads it)


def _catalogue() -> tuple[Scenario, ...]:
    try:
        return catalogue()
    except ScenarioError as exc:
        print(f"make repro: {exc}", file=sys.stderr)
        sys.exit(2)


CATALOGUE: tuple[Scenario, ...] = _catalogue()
BUGS = {b.bug: b for b in CATALOGUE}


@dataclass
class Half:
    verdict: str
    seconds: float
    message: str
    run_dir: Path


def failures(junit: Path) -> list[str]:
    if not junit.exists():
        return []
    root = ET.parse(junit).getroot()
    out = []
    for case in root.iter("testcase"):
        for f in list(case.iter("failure")) + list(case.iter("error")):
            # pytest folds long messages in the attribute; the element's text has the whole report.
            out.append(f"{case.get('name')}: {f.get('message', '')}\n{f.text or ''}")
    return out


def _symptom(bug: Scenario, fails: list[str]) -> str | None:
    """The line of a failure that shows the bug's field symptom, with its test's name; None if none."""
    for f in fails:
        m = re.search(bug.symptom, f)
        if m:
            line_start = f.rfind("\n", 0, m.start()) + 1
            line_end = f.find("\n", m.end())
            where = f.split(":", 1)[0]
            line = f[line_start : line_end if line_end > 0 else None].strip()
            return line if line.startswith(f"{where}:") else f"{where}: {line}"
    return None


def run_once(bug: Scenario, lab: str, target: str, base: Path, loops: int) -> Half:
    """The bug's scenario once against clients that take no fault flags (TARGET=nomad): PRESENT
    when the suite failed with the field symptom, ABSENT when it passed."""
    run_dir = base / f"{bug.bug}-{target}"
    rc, fails, took, log = _run_suite(bug, lab, "", run_dir, loops, "once", target)
    if rc == 0:
        return _kept(bug, "once", Half("ABSENT", took, "", run_dir))
    return _kept(bug, "once", _failed(bug, "PRESENT", rc, fails, took, log, run_dir))


def _failed(
    bug: Scenario, shown_verdict: str, rc: int, fails: list[str], took: float, log: Path, run_dir: Path
) -> Half:
    """A run whose suite failed: `shown_verdict` when a failure shows the field symptom."""
    shown = _symptom(bug, fails)
    if shown:
        return Half(shown_verdict, took, shown, run_dir)
    return Half(
        "FAILED, NOT WITH THE FIELD SYMPTOM", took, (fails or [f"pytest exit {rc}, see {log}"])[0], run_dir
    )


def _run_suite(
    bug: Scenario, lab: str, flag: str, run_dir: Path, loops: int, half: str, target: str = ""
) -> tuple[int, list[str], float, Path]:
    """(pytest's exit code, the failures, seconds, the log) of the bug's scenario."""
    own_file = bug.tests == ("test_scenarios.py::test_scenario_file",)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *(f"e2e/{t}" for t in bug.tests),
        "--lab",
        lab,
        *(["--target", target] if target else []),
        "--agent-faults",
        flag,
        "--loops",
        str(loops),
        "--report-dir",
        str(run_dir),
        "--repro",
        f"{bug.bug},{half}",
        *(["--scenario", str(bug.path)] if own_file else []),
        *(["--chaos-schedule", "; ".join(bug.chaos)] if bug.chaos else []),
        *(["--seed", str(bug.seed)] if bug.seed is not None else []),
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "-x",
    ]
    t0 = time.monotonic()
    log = run_dir.parent / f"{run_dir.name}.log"
    run_dir.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        rc = subprocess.call(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    return rc, failures(run_dir / "junit.xml"), time.monotonic() - t0, log


def run_half(bug: Scenario, lab: str, with_flag: bool, base: Path, loops: int) -> Half:
    half = "with-flag" if with_flag else "without"
    run_dir = base / f"{bug.bug}-{half}"
    rc, fails, took, log = _run_suite(bug, lab, bug.flag if with_flag else "", run_dir, loops, half)
    return _kept(bug, half, _verdict(bug, with_flag, rc, fails, took, log, run_dir))


def _verdict(
    bug: Scenario, with_flag: bool, rc: int, fails: list[str], took: float, log: Path, run_dir: Path
) -> Half:
    if with_flag:
        if rc == 0:
            return Half("NOT REPRODUCED (suite passed with the flag)", took, "", run_dir)
        return _failed(bug, "REPRODUCED", rc, fails, took, log, run_dir)
    if rc == 0:
        return Half("FIXED", took, "", run_dir)
    return Half(
        "NOT FIXED (suite failed without the flag)",
        took,
        (fails or [f"pytest exit {rc}, see {log}"])[0],
        run_dir,
    )


def _kept(bug: Scenario, half: str, h: Half) -> Half:
    """The half's verdict written beside its run (repro.json), and the run's report rendered again so
    that its header says it: the bug, the flag, the half, the verdict and the repro's replay."""
    if not h.run_dir.is_dir():
        return h
    data = {
        "bug": bug.bug,
        "flag": bug.flag if half == "with-flag" else "",
        "half": half,
        "verdict": h.verdict,
        "message": h.message[:2000],
        "seconds": round(h.seconds, 1),
        "scenario": str(bug.path),
    }
    (h.run_dir / REPRO_FILE).write_text(json.dumps(data, indent=2) + "\n")
    try:
        from e2e.harness.report.build import render

        render(h.run_dir)
    except Exception as exc:  # the verdict stands; the page is a view of it
        print(f"    (could not render {h.run_dir}/report.html again: {exc})", flush=True)
    return h


def print_list() -> None:
    wid = max(len(b.bug) for b in CATALOGUE) + 1
    wflag = max(len(b.flag) for b in CATALOGUE) + 1
    print(f"{'bug':<{wid}} {'fault flag':<{wflag}} scenario")
    for b in CATALOGUE:
        where = f"data: {b.path.name}" if b.as_data else ", ".join(b.tests)
        print(f"{b.bug:<{wid}} {b.flag:<{wflag}} {where}")
        print(f"{'':<{wid}} symptom: {b.what}")
    families = Counter(b.family for b in CATALOGUE)
    print(f"\n{len(CATALOGUE)} bugs: " + ", ".join(f"{n} {f}" for f, n in sorted(families.items())))


def _cell(text: str) -> str:
    return text.replace("|", "/")


def markdown_table() -> str:
    """The catalogue as docs/field-bugs.md shows it (`make repro BUG=list MARKDOWN=1` prints it)."""
    rows = [
        "| bug | Nomad versions | fault flag | family | field symptom | scenario (under e2e/) |",
        "|---|---|---|---|---|---|",
    ]
    for b in CATALOGUE:
        bug = f"[{b.bug}]({b.link})" if b.link.startswith("https://") and " " not in b.link else b.bug
        where = f"data: `scenarios/{b.path.name}`" if b.as_data else "<br>".join(f"`{t}`" for t in b.tests)
        rows.append(f"| {bug} | {_cell(b.versions)} | `{b.flag}` | {b.family} | {_cell(b.what)} | {where} |")
    families = Counter(b.family for b in CATALOGUE)
    data = sum(1 for b in CATALOGUE if b.as_data)
    count = ", ".join(f"{n} {f}" for f, n in sorted(families.items()))
    rows += ["", f"{len(CATALOGUE)} entries ({count}); {data} as data, {len(CATALOGUE) - data} in Python."]
    return "\n".join(rows) + "\n"


def flags_table() -> str:
    """The README's table of the agent's fault flags, from the catalogue and agent/faults.py."""
    from agent.faults import FAULTS

    rows = ["| flag | field bug | what it does |", "|---|---|---|"]
    for b in CATALOGUE:
        spec = FAULTS.get(b.flag)
        rows.append(f"| `{b.flag}` | {b.bug} | {_cell(spec.description if spec else '?')} |")
    return "\n".join(rows) + "\n"


def new_scenario(bug: str, jobspec: Path, root: Path = SCENARIOS) -> int:
    """`new BUG --jobspec FILE`: the jobspec copied beside the catalogue, a skeleton to fill in."""
    from e2e.harness.scenario import BUG_ID

    if not BUG_ID.match(bug):
        print(f"repro new: {bug!r}: a bug id is nomad-<issue number> (e.g. nomad-5883)", file=sys.stderr)
        return 2
    target = root / f"{bug}.yml"
    if target.exists():
        print(f"repro new: {target} exists already (nothing written)", file=sys.stderr)
        return 2
    try:
        text = jobspec.read_text()
    except OSError as exc:
        print(f"repro new: --jobspec {jobspec}: {exc.strerror}", file=sys.stderr)
        return 2
    copy = root / "jobs" / f"{bug}-{jobspec.name}"
    if copy.exists():
        print(f"repro new: {copy} exists already (nothing written)", file=sys.stderr)
        return 2
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text)
    target.write_text(skeleton(bug, f"jobs/{copy.name}", images_in(text), str(target)))
    run = f"make repro BUG={bug}" if root == SCENARIOS else f"fieldlab repro {target}"
    print(f"wrote {target} and {copy}: fill in the scenario, then `{run}`")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["new"]:
        return _main_new(argv[1:])
    ap = argparse.ArgumentParser(prog="make repro", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "bug", help="a bug id, a scenario file, 'list', 'flags' or 'all' (or: new BUG --jobspec FILE)"
    )
    ap.add_argument("--lab", default="default")
    ap.add_argument("--loops", type=int, default=2, help="agent restarts in the template scenarios")
    ap.add_argument("--report-dir", default="", help="where the runs' directories go")
    ap.add_argument("--markdown", action="store_true", help="list: as the table in docs/field-bugs.md")
    ap.add_argument(
        "--target",
        default="",
        help="what the clients run (e2e/targets/): a target whose clients take no fault flags (nomad) "
        "runs each scenario once and prints PRESENT or ABSENT",
    )
    args = ap.parse_args(argv)
    if args.bug == "list":
        print(markdown_table(), end="") if args.markdown else print_list()
        return 0
    if args.bug == "flags":
        print(flags_table(), end="")
        return 0
    if args.bug.endswith((".yml", ".yaml")) or "/" in args.bug:
        try:
            bugs: tuple[Scenario, ...] = (load(Path(args.bug).resolve()),)
        except ScenarioError as exc:
            print(f"make repro: {exc}", file=sys.stderr)
            return 2
    elif args.bug == "all":
        bugs = CATALOGUE
    elif args.bug in BUGS:
        bugs = (BUGS[args.bug],)
    else:
        print(
            f"make repro: unknown bug {args.bug!r}; known: {', '.join(BUGS)} (or list, all, a scenario file)",
            file=sys.stderr,
        )
        return 2
    from lab.config import LabPaths

    inventory = LabPaths(args.lab).inventory
    if not inventory.exists():
        print(
            f"make repro: no lab {args.lab!r} (no {inventory}): run `make lab-up LAB={args.lab}` first",
            file=sys.stderr,
        )
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = Path(args.report_dir) if args.report_dir else E2E / "reports" / f"{stamp}-repro-{args.lab}"
    if args.target:
        from e2e.harness.target import TargetError, load_target

        try:
            flags = load_target(args.target).fault_flags
        except TargetError as exc:
            print(f"make repro: {exc}", file=sys.stderr)
            return 2
        if not flags:
            return _present_or_absent(bugs, args.lab, args.target, base, args.loops)
    rows = []
    t_all = time.monotonic()
    for i, bug in enumerate(bugs, 1):
        print(f"[repro {i}/{len(bugs)}] {bug.bug}: with fault flag {bug.flag} ...", flush=True)
        w = run_half(bug, args.lab, True, base, args.loops)
        print(
            f"    {w.verdict} in {w.seconds:.0f}s" + (f": {w.message[:300]}" if w.message else ""), flush=True
        )
        print(f"[repro {i}/{len(bugs)}] {bug.bug}: without the flag ...", flush=True)
        wo = run_half(bug, args.lab, False, base, args.loops)
        print(
            f"    {wo.verdict} in {wo.seconds:.0f}s" + (f": {wo.message[:300]}" if wo.message else ""),
            flush=True,
        )
        rows.append((bug, w, wo))
    print()
    print(f"{'bug':<28} {'fault flag':<32} {'with the flag':<36} {'without':<12} time")
    for bug, w, wo in rows:
        print(f"{bug.bug:<28} {bug.flag:<32} {w.verdict:<36} {wo.verdict:<12} {w.seconds + wo.seconds:.0f}s")
    ok = all(w.verdict == "REPRODUCED" and wo.verdict == "FIXED" for _, w, wo in rows)
    total = time.monotonic() - t_all
    both = sum(1 for _, w, wo in rows if w.verdict == "REPRODUCED" and wo.verdict == "FIXED")
    print(
        f"\n{both}/{len(rows)} bugs reproduced and fixed in {total:.0f}s "
        f"({total / max(1, len(rows)):.0f}s a bug); reports under {base}"
    )
    return 0 if ok else 1


def _main_new(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="make repro new", description="write a scenario skeleton for a bug report"
    )
    ap.add_argument("bug", help="the bug id: nomad-<issue number>")
    ap.add_argument("--jobspec", required=True, help="the report's jobspec, as it gives it")
    ap.add_argument("--dir", default=str(SCENARIOS), help="where to write it (default: the catalogue)")
    args = ap.parse_args(argv)
    return new_scenario(args.bug, Path(args.jobspec), Path(args.dir))


def _present_or_absent(bugs: tuple[Scenario, ...], lab: str, target: str, base: Path, loops: int) -> int:
    """Each bug's scenario once on clients that take no fault flags: does the field symptom show?"""
    rows = []
    t_all = time.monotonic()
    for i, bug in enumerate(bugs, 1):
        print(f"[repro {i}/{len(bugs)}] {bug.bug} on the {target} target ...", flush=True)
        h = run_once(bug, lab, target, base, loops)
        print(
            f"    {h.verdict} in {h.seconds:.0f}s" + (f": {h.message[:300]}" if h.message else ""), flush=True
        )
        rows.append((bug, h))
    print()
    print(f"{'bug':<28} {'on ' + target:<36} time")
    for bug, h in rows:
        print(f"{bug.bug:<28} {h.verdict:<36} {h.seconds:.0f}s")
    present = sum(1 for _, h in rows if h.verdict == "PRESENT")
    print(
        f"\n{present}/{len(rows)} field symptoms present on {target} in {time.monotonic() - t_all:.0f}s; "
        f"reports under {base}"
    )
    return 0 if all(h.verdict in ("PRESENT", "ABSENT") for _, h in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
