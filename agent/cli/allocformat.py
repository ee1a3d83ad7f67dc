"""What `fieldlab-agent alloc list|stop` print, from Nomad's api.Allocation and
api.AllocationListStub (pure; the helpers that read an alloc are agent.cli.format's; `alloc status`
is agent.cli.allocstatus)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.cli.format import (
    alloc_row,
    is_live,
    short,
    table,
)


def alloc_list(allocs: Sequence[Mapping[str, Any]], now: float, verbose: bool = False) -> str:
    """`alloc list`: GET /v1/allocations (api.AllocationListStub), newest first."""
    if not allocs:
        return "No allocations"
    rows = [
        alloc_row(a, now, verbose, job=True)
        for a in sorted(allocs, key=lambda a: int(a.get("CreateTime") or 0), reverse=True)
    ]
    return table(["ID", "Job ID", "Task Group", "Version", "Desired", "Status", "Created", "Modified"], rows)


def alloc_stopped(alloc_id: str, answer: Mapping[str, Any], after: Mapping[str, Any] | None) -> str:
    """`alloc stop`: POST /v1/allocation/:id/stop's answer (EvalID), and the alloc after it (None:
    gone, as an adopted alloc once its tasks are removed)."""
    if after is None:
        head = f'==> Allocation "{short(alloc_id)}" stopped (adopted: its tasks were removed)'
    else:
        head = f'==> Allocation "{short(alloc_id)}" ' + ("stopping" if is_live(after) else "stopped")
    lines = [head, f'    Evaluation "{short(answer.get("EvalID"))}" finished with status "complete"']
    if after is not None and after.get("NextAllocation"):
        lines.append(f'    Allocation "{short(after["NextAllocation"])}" replaces it')
    return "\n".join(lines)
