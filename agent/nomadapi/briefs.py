"""The id, job, group and status of every alloc the client lists (`NomadApi.all_alloc_views`): what a
job's status, modify index and summary read. The terminal allocs of earlier runs come from one query of their
records, with no runner built for each: with a long history (10,000 terminal allocs) building them
held the main loop for seconds per `GET /v1/jobs`, and the calls behind it timed out."""

from __future__ import annotations

from typing import Any, Protocol

from agent.node.gc import TERMINAL_STATUSES
from agent.nomadapi.context import Allocs, Kept
from agent.structs.records import AllocRecord, RecordError

_KEYS = ("id", "job", "group", "status")


class BriefsPort(Allocs, Kept, Protocol):
    """The runners and adopted allocs, and the store (the terminal allocs' records)."""


def alloc_briefs(api: BriefsPort) -> list[dict[str, Any]]:
    """On the loop."""
    out: list[dict[str, Any]] = [
        {"id": r.id, "job": r.rec.job, "group": r.rec.group, "status": r.rec.status.value}
        for r in api.runners.values()
    ]
    for alloc_id, raw in api.store.list("alloc", TERMINAL_STATUSES).records.items():
        if alloc_id in api.runners:
            continue
        try:
            rec = AllocRecord.from_record(raw, alloc_id)
        except RecordError:
            continue  # not listed either (agent.runner.stored)
        out.append({"id": rec.id, "job": rec.job, "group": rec.group, "status": rec.status.value})
    return out + [{k: v.get(k) for k in _KEYS} for v in api.adoption.views()]
