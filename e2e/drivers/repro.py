"""`make repro BUG=<id>|FILE|list|all`: reproduce a field bug of the catalogue on the running lab.

The catalogue is e2e/scenarios/<bug>.yml, one file per bug (e2e.harness.scenario): its scenario is
data (a jobspec, steps, checks) or names the Python tests that replay it. BUG may also be the path of
a scenario file anywhere (`fieldlab repro FILE`); `new BUG --jobspec FILE` writes a skeleton.

For a bug, its scenario (one or more e2e tests) runs twice on the lab: first with the agent's fault
flag that puts the bug back, where the suite must fail with the field symptom (REPRODUCED), then with
a clean agent, where it must pass (FIXED). Both verdicts are printed, with the failure that showed the
symptom and each run's report directory; `all` prints the table for every bug. The exit status is 0
only when every bug asked for was both REPRODUCED and FIXED.

A scenario without a fault flag (a new report: no flag puts its bug back yet), and every scenario on
a target whose clients take no fault flags (TARGET=nomad), runs once instead: PRESENT when the suite
failed with the field symptom, ABSENT when it passed (exit 0 for either). The table, the half's
repro.json and its report say which kind of run each was.

    python -m e2e.drivers.repro --lab dev nomad-24292
    python -m e2e.drivers.repro --lab dev list
    python -m e2e.drivers.repro --lab dev ./my-report.yml
    python -m e2e.drivers.repro new nomad-12345 --jobspec ./report.nomad.hcl
    python -m e2e.drivers.repro new acme-incident-7 --jobspec ./inspect.json --dir ./reports
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from e2e.harness import scenario_jobspec
from e2e.harness.scenario import SCENARIOS, Scenario, ScenarioError, catalogue, load
from e2e.harness.scenario_ids import CATALOGUE_ID, IdError, catalogue_problem, report_id
from e2e.harness.scenario_write import images_in, skeleton

E2E = Path(__file__).resolve().parents[1]
SUITES = E2E / "suites"  # a scenario's tests are pytest node ids under it
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


HALVES = "halves"  # with the fault flag (REPRODUCED), then without (FIXED)
ONCE = "once"  # one run, PRESENT or ABSENT


def run_kind(bug: Scenario, target_takes_flags: bool) -> str:
    """How a scenario is run: in two halves when it names a fault flag and the clients take one,
    else once."""
    return HALVES if bug.flag and target_takes_flags else ONCE


def kind_text(bug: Scenario, kind: str, target: str) -> str:
    """The kind of run in words, for the progress line, repro.json and the report."""
    if kind == HALVES:
        return (
            f"two halves on the {target} target: with fault flag {bug.flag} (REPRODUCED), "
            "then without (FIXED)"
        )
    why = (
        "the scenario names no fault flag"
        if not bug.flag
        else f"the {target} target's clients take no fault flags"
    )
    return f"once on the {target} target ({why}): PRESENT or ABSENT"


@dataclass
class Row:
    """One scenario's run(s): its kind and its halves (one for ONCE)."""

    bug: Scenario
    kind: str
    halves: list[Half]

    @property
    def ok(self) -> bool:
        verdicts = [h.verdict for h in self.halves]
        if self.kind == HALVES:
            return verdicts == ["REPRODUCED", "FIXED"]
        return verdicts in (["PRESENT"], ["ABSENT"])

    @property
    def seconds(self) -> float:
        return sum(h.seconds for h in self.halves)


def verdict_table(rows: list[Row], target: str, total: float, base: Path) -> str:
    """The table the repro ends with (pure): each scenario's kind of run, flag, verdict(s) and time,
    then a count per kind."""
    lines = [f"{'bug':<28} {'run':<22} {'fault flag':<32} {'verdict':<28} time"]
    for r in rows:
        if r.kind == HALVES:
            run, verdict = "with flag, without", ", ".join(h.verdict for h in r.halves)
        else:
            run, verdict = f"once on {target}", r.halves[0].verdict if r.halves else "?"
        lines.append(f"{r.bug.bug:<28} {run:<22} {r.bug.flag or '(none)':<32} {verdict:<28} {r.seconds:.0f}s")
    lines.append("")
    halves = [r for r in rows if r.kind == HALVES]
    once = [r for r in rows if r.kind == ONCE]
    if halves:
        both = sum(1 for r in halves if r.ok)
        lines.append(f"{both}/{len(halves)} bugs reproduced and fixed (with the fault flag, then without)")
    if once:
        present = sum(1 for r in once if r.halves and r.halves[0].verdict == "PRESENT")
        absent = sum(1 for r in once if r.halves and r.halves[0].verdict == "ABSENT")
        lines.append(f"{present}/{len(once)} field symptoms PRESENT, {absent} ABSENT on {target} (run once)")
    lines.append(f"took {total:.0f}s ({total / max(1, len(rows)):.0f}s a bug); reports under {base}")
    return "\n".join(lines) + "\n"


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
    """The bug's scenario once, with no fault flag (a scenario without one, or clients that take
    none: TARGET=nomad): PRESENT when the suite failed with the field symptom, ABSENT when it passed."""
    run_dir = base / f"{bug.bug}-{target}"
    rc, fails, took, log = _run_suite(bug, lab, "", run_dir, loops, "once", target)
    if rc == 0:
        return _kept(bug, "once", Half("ABSENT", took, "", run_dir), target, lab)
    return _kept(bug, "once", _failed(bug, "PRESENT", rc, fails, took, log, run_dir), target, lab)


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
        *(f"{SUITES.relative_to(ROOT)}/{t}" for t in bug.tests),
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


def run_half(bug: Scenario, lab: str, with_flag: bool, base: Path, loops: int, target: str = "") -> Half:
    half = "with-flag" if with_flag else "without"
    run_dir = base / f"{bug.bug}-{half}"
    rc, fails, took, log = _run_suite(bug, lab, bug.flag if with_flag else "", run_dir, loops, half, target)
    return _kept(bug, half, _verdict(bug, with_flag, rc, fails, took, log, run_dir), target, lab)


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


def replay_command(bug: Scenario, lab: str, target: str) -> str:
    """The command that runs this repro again: the catalogue's by id, a file of one's own by path."""
    env = f"TARGET={target} " if target and target != "fieldlab" else ""
    if bug.path.parent == SCENARIOS and bug.bug in BUGS:
        return f"make repro BUG={bug.bug} LAB={lab}" + (f" TARGET={target}" if env else "")
    return f"{env}fieldlab repro {bug.path} --lab {lab}"


def _kept(bug: Scenario, half: str, h: Half, target: str = "fieldlab", lab: str = "default") -> Half:
    """The half's verdict written beside its run (repro.json), and the run's report rendered again so
    that its header says it: the bug, the kind of run, the flag, the half, the verdict and the
    repro's replay."""
    if not h.run_dir.is_dir():
        return h
    kind = ONCE if half == "once" else HALVES
    data = {
        "bug": bug.bug,
        "flag": bug.flag if half == "with-flag" else "",
        "half": half,
        "kind": kind_text(bug, kind, target or "fieldlab"),
        "target": target or "fieldlab",
        "verdict": h.verdict,
        "message": h.message[:2000],
        "seconds": round(h.seconds, 1),
        "scenario": str(bug.path),
        "replay": replay_command(bug, lab, target),
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
        "| bug | Nomad versions | fault flag | family | field symptom "
        "| scenario (data under e2e/, tests under e2e/suites/) |",
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
    """The README's table of the agent's fault flags, from the catalogue and agent/fieldbugs/catalogue.py."""
    from agent.fieldbugs.catalogue import FAULTS

    rows = ["| flag | field bug | what it does |", "|---|---|---|"]
    for b in CATALOGUE:
        spec = FAULTS.get(b.flag)
        rows.append(f"| `{b.flag}` | {b.bug} | {_cell(spec.description if spec else '?')} |")
    return "\n".join(rows) + "\n"


def new_scenario(bug: str, jobspec: Path, root: Path = SCENARIOS) -> int:
    """`new ID --jobspec FILE`: the jobspec (HCL2 or JSON) copied beside the scenario, a skeleton to
    fill in. ID: any report id, or the report's URL (the id taken from it); into the catalogue
    (e2e/scenarios/, the default) only nomad-<n>."""
    in_catalogue = root.resolve() == SCENARIOS
    try:
        bug_id, url = report_id(bug)
    except IdError as exc:
        print(f"repro new: {exc}", file=sys.stderr)
        return 2
    if in_catalogue:
        number = re.fullmatch(r"nomad-([0-9]+)", bug_id)
        link = url or (f"https://github.com/hashicorp/nomad/issues/{number.group(1)}" if number else "")
        problem = catalogue_problem(bug_id, link)
        if problem:
            print(f"repro new: {problem}", file=sys.stderr)
            return 2
    target = root / f"{bug_id}.yml"
    if target.exists():
        print(f"repro new: {target} exists already (nothing written)", file=sys.stderr)
        return 2
    try:
        text = jobspec.read_text()
    except OSError as exc:
        print(f"repro new: --jobspec {jobspec}: {exc.strerror}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"repro new: --jobspec {jobspec}: not text (a jobspec is HCL2 or JSON)", file=sys.stderr)
        return 2
    form = scenario_jobspec.check(text)
    if form:
        print(f"repro new: --jobspec {jobspec}: {form}", file=sys.stderr)
        return 2
    copy = root / "jobs" / f"{bug_id}-{jobspec.name}"
    if copy.exists():
        print(f"repro new: {copy} exists already (nothing written)", file=sys.stderr)
        return 2
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text)
    target.write_text(
        skeleton(bug_id, f"jobs/{copy.name}", images_in(text), str(target), url, catalogue=in_catalogue)
    )
    run = f"make repro BUG={bug_id}" if in_catalogue else f"fieldlab repro {target}"
    print(f"wrote {target} and {copy}: fill in the scenario, then `{run}`")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["new"]:
        return _main_new(argv[1:])
    ap = argparse.ArgumentParser(prog="make repro", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "bug", help="a bug id, a scenario file, 'list', 'flags' or 'all' (or: new ID --jobspec FILE)"
    )
    ap.add_argument("--lab", default="default")
    ap.add_argument("--loops", type=int, default=2, help="agent restarts in the template scenarios")
    ap.add_argument("--report-dir", default="", help="where the runs' directories go")
    ap.add_argument("--markdown", action="store_true", help="list: as the table in docs/field-bugs.md")
    ap.add_argument(
        "--target",
        default=os.environ.get("TARGET", ""),
        help="what the clients run (e2e/targets/; env TARGET; default: the lab's): a target whose "
        "clients take no fault flags (nomad) runs each scenario once and prints PRESENT or ABSENT",
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
        close = difflib.get_close_matches(args.bug, list(BUGS), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        print(
            f"make repro: unknown bug {args.bug!r}; {hint}`make repro BUG=list` lists the catalogue "
            "(or all, or a scenario file)",
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
    from e2e.harness.target import TargetError, load_target

    target = args.target or _inventory_target(inventory)
    try:
        takes_flags = load_target(target).fault_flags
    except TargetError as exc:
        print(f"make repro: {exc}", file=sys.stderr)
        return 2
    rows = []
    t_all = time.monotonic()
    for i, bug in enumerate(bugs, 1):
        kind = run_kind(bug, takes_flags)
        print(f"[repro {i}/{len(bugs)}] {bug.bug}: {kind_text(bug, kind, target)}", flush=True)
        if kind == ONCE:
            halves = [run_once(bug, args.lab, target, base, args.loops)]
        else:
            print(f"[repro {i}/{len(bugs)}] {bug.bug}: with fault flag {bug.flag} ...", flush=True)
            halves = [run_half(bug, args.lab, True, base, args.loops, target)]
            _said(halves[0])
            print(f"[repro {i}/{len(bugs)}] {bug.bug}: without the flag ...", flush=True)
            halves.append(run_half(bug, args.lab, False, base, args.loops, target))
        _said(halves[-1])
        rows.append(Row(bug, kind, halves))
    print()
    print(verdict_table(rows, target, time.monotonic() - t_all, base), end="")
    return 0 if all(r.ok for r in rows) else 1


def _said(h: Half) -> None:
    print(f"    {h.verdict} in {h.seconds:.0f}s" + (f": {h.message[:300]}" if h.message else ""), flush=True)
    print(f"    report: {h.run_dir / 'report.html'}", flush=True)


def _inventory_target(inventory: Path) -> str:
    """The target the lab's inventory names (fieldlab_target), else fieldlab."""
    import yaml

    try:
        inv = yaml.safe_load(inventory.read_text()) or {}
        return str(((inv.get("all") or {}).get("vars") or {}).get("fieldlab_target") or "fieldlab")
    except (OSError, yaml.YAMLError, AttributeError):
        return "fieldlab"


def _main_new(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="make repro new", description="write a scenario skeleton for a bug report"
    )
    ap.add_argument(
        "bug",
        help="the report's id ([a-z0-9][a-z0-9._-]*) or URL; in the catalogue: nomad-<issue number>",
    )
    ap.add_argument(
        "--jobspec",
        required=True,
        help="the report's jobspec as it gives it: HCL2, or JSON (nomad job inspect)",
    )
    ap.add_argument(
        "--dir",
        default="",
        help="where to write it (default: the catalogue for a nomad-<n> id, else beside the jobspec)",
    )
    args = ap.parse_args(argv)
    jobspec = Path(args.jobspec)
    return new_scenario(args.bug, jobspec, Path(args.dir) if args.dir else default_dir(args.bug, jobspec))


def default_dir(bug: str, jobspec: Path) -> Path:
    """Where `new` writes without --dir: a catalogue id's skeleton into the catalogue, any other
    report's beside its jobspec (the report's own directory)."""
    try:
        bug_id, _ = report_id(bug)
    except IdError:
        return SCENARIOS  # new_scenario says what is wrong with the id
    return SCENARIOS if CATALOGUE_ID.match(bug_id) else jobspec.resolve().parent


if __name__ == "__main__":
    sys.exit(main())
