"""Rendering a run: its page, then its summary, the index across runs and `latest`."""

from __future__ import annotations

from pathlib import Path

from e2e.harness.report.index import publish
from e2e.harness.report.model import Run, load_run
from e2e.harness.report.page import write_page


def render(run_dir: Path, *, index_root: Path | None = None) -> Path:
    """Write `run_dir/report.html`, refresh the index and `latest` (see `render_run`); returns the page."""
    return render_run(load_run(run_dir), index_root=index_root)


def render_run(run: Run, *, index_root: Path | None = None) -> Path:
    """Write the run's page; then, when the run lies under `index_root` (by default e2e/reports, for a
    run dir inside it), rebuild that root's index.html and its `latest` symlink."""
    out = write_page(run)
    publish(run, index_root)
    return out
