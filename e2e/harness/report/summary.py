"""The run's few lines for the terminal: totals, suites, figures, counts, failures, where the pages are."""

from __future__ import annotations

from pathlib import Path

from e2e.harness.report.fmt import fmt_outcomes, fmt_seconds, fmt_stats, replay_command
from e2e.harness.report.index import index_page_for
from e2e.harness.report.model import (
    REPORT_NAME,
    Figure,
    Run,
    counts_checked,
    figures,
    load_run,
    suites,
)

SUMMARY_ITEMS = 6  # at most this many suites, measurements and failures in the summary each


def _capped(lines: list[str], more: str) -> list[str]:
    if len(lines) <= SUMMARY_ITEMS:
        return lines
    return [*lines[: SUMMARY_ITEMS - 1], f"  ... {len(lines) - SUMMARY_ITEMS + 1} more {more}"]


def summary_measure(fig: Figure) -> str:
    target = f" vs target {fmt_seconds(fig.target)}" if fig.target is not None else ""
    over = f" ({fig.over} OVER)" if fig.over else ""
    return f"  {fig.name}: {fmt_stats(fig)}{target}{over}"


def summary(run_dir: Path) -> str:
    """A few lines for the terminal: totals, suites, figures, counts, failures and the report path."""
    return summary_of(load_run(run_dir), index_page_for(run_dir))


def summary_of(run: Run, index: Path | None = None) -> str:
    """`index`: the index page across runs, named before the report when there is one."""
    repro = run.repro
    replay = repro.replay if repro and repro.replay else replay_command(run.seed)
    lines = [
        f"e2e run {run.run_id}  lab {run.lab}  seed {run.seed or '?'}"
        + (f"  (replay: {replay})" if replay else ""),
        f"tests: {fmt_outcomes(run.outcomes)}  wall {fmt_seconds(run.wall)}",
    ]
    if repro is not None:
        flag = f"fault flag {repro.flag}" if repro.flag else "no fault flag"
        lines.append(f"repro of {repro.bug} ({repro.half}, {flag}): {repro.verdict or 'not judged yet'}")
        if repro.kind:
            lines.append(f"kind of run: {repro.kind}")
    elif run.agent_flags:
        lines.append(f"agent fault flags: {run.agent_flags}")
    suite_lines = [f"  {s.name}: {fmt_outcomes(s.outcomes)}  {fmt_seconds(s.wall)}" for s in suites(run)]
    lines += ["suites:", *_capped(suite_lines, "suites")] if suite_lines else []
    measure_lines = [summary_measure(fig) for fig in figures(run.records)]
    lines += ["measurements:", *_capped(measure_lines, "measurements")] if measure_lines else []
    counts = counts_checked(run)
    if counts:
        lines.append("counts checked: " + ", ".join(f"{n}={t}" for n, (t, _) in counts.items()))
    failures = [test for test in run.tests if test.outcome in {"failed", "error"}]
    fail_lines = [f"  {t.nodeid}: {(t.message.strip().splitlines() or [''])[0][:100]}" for t in failures]
    lines += ["failures:", *_capped(fail_lines, "failures")] if fail_lines else []
    if index is not None:
        lines.append(f"index of runs: {index}")
    lines.append(f"report: {run.run_dir / REPORT_NAME}")
    return "\n".join(lines)
