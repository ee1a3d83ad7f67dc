"""The id, job, group and status of every alloc the client lists (`NomadApi.all_alloc_views`): what a
job's status, modify index and summary read. The terminal allocs of earlier runs come from one query of their
records, with no runner built for each: with a long history (10,000 terminal allocs) building them
held the main loop for seconds per `GET /v1/jobs`, and the calls behind it timed out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.node.gc import TERMINAL_STATUSES
from agent.structs.records import AllocRecord, RecordError

if TYPE_CHECKING:
    from agent.client.core import Core

_KEYS = ("id", "job", "group", "status")


def alloc_briefs(core: Core) -> list[dict[str, Any]]:
    """On the loop."""
    out: list[dict[str, Any]] = [
        {"id": r.id, "job": r.rec.job, "group": r.rec.group, "status": r.rec.status.value}
        for r in core.runners.values()
    ]
    for alloc_id, raw in core.store.list("alloc", TERMINAL_STATUSES).records.items():
        if alloc_id in core.runners:
            continue
        try:
            rec = AllocRecord.from_record(raw, alloc_id)
        except RecordError:
            continue  # not listed either (agent.runner.stored)
        out.append({"id": rec.id, "job": rec.job, "group": rec.group, "status": rec.status.value})
    return out + [{k: v.get(k) for k in _KEYS} for v in core.adoption.views()]
