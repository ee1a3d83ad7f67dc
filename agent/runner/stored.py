"""A terminal alloc of an earlier agent run, read back from its record: to list and read (its view,
events, logs), never to act on. The agent keeps no runner for it once restarted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.jobcodec import JobCodecError, decode_job
from agent.model import Group, Job, Task
from agent.records import AllocRecord, RecordError
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.state import StateStore


def stored_runner(
    deps: RunnerDeps, store: StateStore, jobs: Mapping[str, Job], alloc_id: str, raw: Mapping[str, Any] | None
) -> AllocRunner | None:
    """The alloc's runner from its record; None when the record is unreadable or neither the job
    nor any version of it the store keeps has the alloc's group, and it has no task records."""
    if raw is None:
        return None
    try:
        rec = AllocRecord.from_record(raw, alloc_id)
    except RecordError:
        return None
    job = jobs.get(rec.job)
    group = next((g for g in job.groups if g.name == rec.group), None) if job else None
    if job is not None and group is None:
        job, group = version_with_group(store, rec.job, rec.group)
    if job is None or group is None:
        job, group = group_from_records(store, rec)
    if job is None or group is None:
        return None
    return AllocRunner(deps, rec, job, group)


def version_with_group(store: StateStore, job_id: str, group_name: str) -> tuple[Job | None, Group | None]:
    """The newest earlier version of the job that has the group: an alloc of a version whose group
    a later one dropped (or renamed) is still listed until the GC collects it, as Nomad lists it."""
    for h in (store.get("job", job_id) or {}).get("history") or []:
        try:
            old = decode_job(h.get("canonical"))
        except JobCodecError:
            continue
        group = next((g for g in old.groups if g.name == group_name), None)
        if group is not None:
            return old, group
    return None, None


def group_from_records(store: StateStore, rec: AllocRecord) -> tuple[Job | None, Group | None]:
    """The alloc's group as its own records tell it (each task's name, and its driver from its
    handle), when no version of its job the store keeps has it any more (a job run again under the
    same id more times than the versions kept): enough to list and read the alloc until the GC,
    as Nomad lists every alloc of a job until then."""
    prefix = f"{rec.id}/"
    names = sorted(k.removeprefix(prefix) for k in store.list("task").records if k.startswith(prefix))
    if not names:
        return None, None
    tasks = []
    for name in names:
        handle = store.get("handle", prefix + name) or {}
        tasks.append(Task(name=name, driver=str(handle.get("driver") or "docker")))
    group = Group(name=rec.group, tasks=tuple(tasks))
    return Job(id=rec.job, groups=(group,)), group
