"""`make repro BUG=<id>|list|all`: reproduce a field bug from FIELD-BUGS.md on the running lab.

For a bug, its scenario (one or more e2e tests) runs twice on the lab: first with the agent's fault
flag that puts the bug back, where the suite must fail with the field symptom (REPRODUCED), then with
a clean agent, where it must pass (FIXED). Both verdicts are printed, with the failure that showed the
symptom and each run's report directory; `all` prints the table for every bug. The exit status is 0
only when every bug asked for was both REPRODUCED and FIXED.

    python -m e2e.repro --lab dev nomad-24292
    python -m e2e.repro --lab dev list
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

E2E = Path(__file__).resolve().parent
ROOT = E2E.parent


@dataclass(frozen=True)
class Bug:
    id: str
    flag: str
    tests: tuple[str, ...]  # pytest node ids under e2e/
    symptom: str  # regex a failure message must match to count as the field symptom
    what: str  # the field symptom in a line


RESTORE = "test_restore.py::test_reboot_restores_the_alloc_with_its_network[clean-reboot]"
PAUSE = "test_pause_kill.py::test_pause_and_task_kills_leave_one_working_set_and_no_orphans"
EDGES = "test_restore_edges.py::"
TEMPLATES = "test_template_restarts.py::"

CATALOGUE: tuple[Bug, ...] = (
    Bug(
        "nomad-24140",
        "last-event-wins",
        (TEMPLATES + "test_every_change_is_delivered_exactly_once_across_agent_restarts",),
        r"new cert loaded after restart|deliveries for",
        "a re-rendered cert is never signalled: the workload keeps the old one",
    ),
    Bug(
        "nomad-9636",
        "no-change-on-restore",
        (TEMPLATES + "test_every_change_is_delivered_exactly_once_across_agent_restarts",),
        r"new cert loaded after restart|deliveries for",
        "after an agent restart the task is not told of re-issued secrets",
    ),
    Bug(
        "nomad-15851",
        "script-change-before-handle",
        (TEMPLATES + "test_change_script_runs_once_in_a_restored_task",),
        r"change script after agent",
        "change_mode script fails in a restored task (no driver handle)",
    ),
    Bug(
        "nomad-25861",
        "signal-while-restarting",
        (TEMPLATES + "test_a_change_while_the_task_restarts_is_queued_not_fired_into_it",),
        r"fired while the task was not running",
        "a change action is fired into a task that is not running, and lost",
    ),
    Bug(
        "nomad-28016",
        "noop-runner-dies",
        ("test_outages.py::test_noop_templates_resume_rendering_after_a_vault_outage",),
        r"did not resume|stopped retrying",
        "noop templates: the watcher gives up after a Vault outage, secrets go stale",
    ),
    Bug(
        "fieldlab-12-restart-tracker",
        "stale-restart-timer",
        (PAUSE,),
        r"a second start for one decision|containers of live allocs changed",
        "a restart timer pending at a recovery fires later: the healthy container replaced, a second start",
    ),
    Bug(
        "nomad-12216",
        "reuse-dead-pause",
        (PAUSE,),
        r"events say 'non running container'",
        "killed pause container: tasks restarted into a network that is gone",
    ),
    Bug(
        "nomad-12216-orphans",
        "no-orphan-sweep",
        (EDGES + "test_what_a_forgotten_alloc_left_behind_is_swept",),
        r"orphan ",
        "containers, netns, IP reservations and chains of dead allocs are left behind",
    ),
    Bug(
        "nomad-16338",
        "sweep-untracked-pause",
        (EDGES + "test_the_sweeper_leaves_restored_allocs_alone",),
        r"changed while the sweeper ran|no live container|does not answer",
        "the reaper kills pause containers of restored allocs",
    ),
    Bug(
        "nomad-11272",
        "ipam-stale-after-reboot",
        (PAUSE,),
        r"duplicate allocation",
        "'duplicate allocation is not allowed' from the alloc's own stale reservation",
    ),
    Bug(
        "nomad-6385",
        "leak-portmap-chains",
        (PAUSE,),
        r"orphan cni_chain|orphan cni_rule|more than one set of CNI chains|does not answer from",
        "iptables chains and DNAT rules left behind blackhole a host port",
    ),
    Bug(
        "nomad-24292",
        "no-network-check-on-restore",
        (RESTORE,),
        r"no IPv4 address|does not answer|cannot reach Vault",
        "after a reboot the alloc runs with no network",
    ),
    Bug(
        "nomad-24236",
        "stale-network-status-on-restore",
        (PAUSE,),
        r"netns has \S+ but the agent reports",
        "after the network is rebuilt the alloc reports its old address",
    ),
    Bug(
        "nomad-23684",
        "half-alive-restore",
        (EDGES + "test_a_task_container_removed_while_the_agent_was_down_is_started_again",),
        r"is running but task",
        "after a restart an alloc is 'running' with no live task",
    ),
    Bug(
        "nomad-27933",
        "restore-missing-alloc-dir",
        (EDGES + "test_an_alloc_whose_dir_vanished_is_replaced",),
        r"alloc dir is missing|kept as running",
        "an alloc whose directory is missing is restored instead of replaced",
    ),
)
BUGS = {b.id: b for b in CATALOGUE}


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


def _symptom(bug: Bug, fails: list[str]) -> str | None:
    """The line of a failure that shows the bug's field symptom, with its test's name; None if none."""
    for f in fails:
        m = re.search(bug.symptom, f)
        if m:
            line_start = f.rfind("\n", 0, m.start()) + 1
            line_end = f.find("\n", m.end())
            where = f.split(":", 1)[0]
            return f"{where}: {f[line_start : line_end if line_end > 0 else None].strip()}"
    return None


def run_once(bug: Bug, lab: str, target: str, base: Path, loops: int) -> Half:
    """The bug's scenario once against clients that take no fault flags (TARGET=nomad): PRESENT
    when the suite failed with the field symptom, ABSENT when it passed."""
    run_dir = base / f"{bug.id}-{target}"
    rc, fails, took, log = _run_suite(bug, lab, "", run_dir, loops, target)
    if rc == 0:
        return Half("ABSENT", took, "", run_dir)
    return _failed(bug, "PRESENT", rc, fails, took, log, run_dir)


def _failed(
    bug: Bug, shown_verdict: str, rc: int, fails: list[str], took: float, log: Path, run_dir: Path
) -> Half:
    """A run whose suite failed: `shown_verdict` when a failure shows the field symptom."""
    shown = _symptom(bug, fails)
    if shown:
        return Half(shown_verdict, took, shown, run_dir)
    return Half(
        "FAILED, NOT WITH THE FIELD SYMPTOM", took, (fails or [f"pytest exit {rc}, see {log}"])[0], run_dir
    )


def _run_suite(
    bug: Bug, lab: str, flag: str, run_dir: Path, loops: int, target: str = ""
) -> tuple[int, list[str], float, Path]:
    """(pytest's exit code, the failures, seconds, the log) of the bug's scenario."""
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


def run_half(bug: Bug, lab: str, with_flag: bool, base: Path, loops: int) -> Half:
    run_dir = base / f"{bug.id}-{'with-flag' if with_flag else 'without'}"
    rc, fails, took, log = _run_suite(bug, lab, bug.flag if with_flag else "", run_dir, loops)
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


def print_list() -> None:
    wid = max(len(b.id) for b in CATALOGUE) + 1
    wflag = max(len(b.flag) for b in CATALOGUE) + 1
    print(f"{'bug':<{wid}} {'fault flag':<{wflag}} scenario")
    for b in CATALOGUE:
        print(f"{b.id:<{wid}} {b.flag:<{wflag}} {', '.join(b.tests)}")
        print(f"{'':<{wid}} symptom: {b.what}")


def markdown_table() -> str:
    """The catalogue as docs/field-bugs.md shows it (`make repro BUG=list MARKDOWN=1` prints it)."""
    rows = ["| bug | fault flag | field symptom | scenario (under e2e/) |", "|---|---|---|---|"]
    for b in CATALOGUE:
        tests = "<br>".join(f"`{t}`" for t in b.tests)
        rows.append(f"| {b.id} | `{b.flag}` | {b.what.replace('|', '/')} | {tests} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make repro", description=__doc__.split("\n\n")[0])
    ap.add_argument("bug", help="a bug id, 'list' or 'all'")
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
    if args.bug != "all" and args.bug not in BUGS:
        print(
            f"make repro: unknown bug {args.bug!r}; known: {', '.join(BUGS)} (or list, all)", file=sys.stderr
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
    bugs = CATALOGUE if args.bug == "all" else (BUGS[args.bug],)
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
        print(f"[repro {i}/{len(bugs)}] {bug.id}: with fault flag {bug.flag} ...", flush=True)
        w = run_half(bug, args.lab, True, base, args.loops)
        print(
            f"    {w.verdict} in {w.seconds:.0f}s" + (f": {w.message[:300]}" if w.message else ""), flush=True
        )
        print(f"[repro {i}/{len(bugs)}] {bug.id}: without the flag ...", flush=True)
        wo = run_half(bug, args.lab, False, base, args.loops)
        print(
            f"    {wo.verdict} in {wo.seconds:.0f}s" + (f": {wo.message[:300]}" if wo.message else ""),
            flush=True,
        )
        rows.append((bug, w, wo))
    print()
    print(f"{'bug':<22} {'fault flag':<32} {'with the flag':<36} {'without':<12} time")
    for bug, w, wo in rows:
        print(f"{bug.id:<22} {bug.flag:<32} {w.verdict:<36} {wo.verdict:<12} {w.seconds + wo.seconds:.0f}s")
    ok = all(w.verdict == "REPRODUCED" and wo.verdict == "FIXED" for _, w, wo in rows)
    print(
        f"\n{sum(1 for _, w, wo in rows if w.verdict == 'REPRODUCED' and wo.verdict == 'FIXED')}/{len(rows)} "
        f"bugs reproduced and fixed in {time.monotonic() - t_all:.0f}s; reports under {base}"
    )
    return 0 if ok else 1


def _present_or_absent(bugs: tuple[Bug, ...], lab: str, target: str, base: Path, loops: int) -> int:
    """Each bug's scenario once on clients that take no fault flags: does the field symptom show?"""
    rows = []
    t_all = time.monotonic()
    for i, bug in enumerate(bugs, 1):
        print(f"[repro {i}/{len(bugs)}] {bug.id} on the {target} target ...", flush=True)
        h = run_once(bug, lab, target, base, loops)
        print(
            f"    {h.verdict} in {h.seconds:.0f}s" + (f": {h.message[:300]}" if h.message else ""), flush=True
        )
        rows.append((bug, h))
    print()
    print(f"{'bug':<22} {'on ' + target:<36} time")
    for bug, h in rows:
        print(f"{bug.id:<22} {h.verdict:<36} {h.seconds:.0f}s")
    present = sum(1 for _, h in rows if h.verdict == "PRESENT")
    print(
        f"\n{present}/{len(rows)} field symptoms present on {target} in {time.monotonic() - t_all:.0f}s; "
        f"reports under {base}"
    )
    return 0 if all(h.verdict in ("PRESENT", "ABSENT") for _, h in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
