"""The API's view of an alloc: a pure function of what the runner keeps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.drivers.base import TaskHandle
from agent.structs.model import Group
from agent.structs.records import AllocRecord, TaskRecord


def alloc_view(
    rec: AllocRecord,
    group: Group,
    tasks: Mapping[str, TaskRecord],
    handles: Mapping[str, TaskHandle | None],
    owner: TaskHandle | None,
) -> dict[str, Any]:
    return {
        "id": rec.id,
        "job": rec.job,
        "job_version": rec.job_version,
        "group": rec.group,
        "status": rec.status.value,
        "desired": rec.desired.value,
        "reason": rec.reason,
        "replaced_by": rec.replaced_by,
        "replaces": rec.replaces,
        "created": rec.created,
        "eval_id": rec.eval_id,
        "followup_eval_id": rec.followup_eval_id,
        "reschedule_events": [e.to_record() for e in rec.reschedule_events],
        "create_index": rec.create_index,
        "network": {
            "mode": group.network.mode if group.network else "none",
            "address": rec.address,
            "ports": [p.to_record() for p in rec.ports],
            "pause_container": owner.id if owner else None,
        },
        "tasks": {
            t.name: {
                "driver": t.driver,
                "state": tasks[t.name].state.value,
                "restarts": tasks[t.name].restarts,
                "failed": tasks[t.name].failed,
                "container": h.id if (h := handles.get(t.name)) else None,
            }
            for t in group.tasks
        },
    }
