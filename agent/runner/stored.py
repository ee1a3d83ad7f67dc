"""A terminal alloc of an earlier agent run, read back from its record: to list and read (its view,
events, logs), never to act on. The agent keeps no runner for it once restarted."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from agent.drivers.base import TaskHandle
from agent.node.gc import TERMINAL_STATUSES
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.runner.state import NETNS_OWNER
from agent.runner.view import alloc_view
from agent.state import StateStore
from agent.structs.jobcodec import JobCodecError, decode_job
from agent.structs.model import Group, Job, Task
from agent.structs.records import AllocRecord, RecordError, TaskRecord

TaskNames = Mapping[str, list[str]]  # alloc id -> the names of its task records


def terminal_views(
    store: StateStore, jobs: Mapping[str, Job], skip: Collection[str], job_id: str = ""
) -> list[dict[str, Any]]:
    """The views of the terminal allocs the store keeps but `skip` (this run's runners), `job_id`'s
    only when given, as their stored runners would give them (`AllocRunner.view`), but from three
    listings of the store (allocs, task records, handles), not a runner and three reads per alloc:
    one listing of 10,000 allocs of an earlier run took the loop 3 s that way, and longer still
    when each alloc read every task record to learn its group."""
    allocs = store.list("alloc", TERMINAL_STATUSES).records
    wanted = [
        (a, raw) for a, raw in allocs.items() if a not in skip and (not job_id or raw.get("job") == job_id)
    ]
    if not wanted:
        return []
    tasks, handles = store.list("task").records, store.list("handle").records
    names = task_names_of(tasks)
    groups: dict[tuple[str, str], tuple[Job | None, Group | None]] = {}  # one look per job's group
    views = []
    for alloc_id, raw in wanted:
        try:
            rec = AllocRecord.from_record(raw, alloc_id)
        except RecordError:
            continue
        if (rec.job, rec.group) not in groups:
            groups[rec.job, rec.group] = registered_group(store, jobs, rec.job, rec.group)
        group = groups[rec.job, rec.group][1] or group_from_records(rec, names, handles)[1]
        if group is None:
            continue
        try:
            records = {t.name: _task_record(tasks, f"{alloc_id}/{t.name}") for t in group.tasks}
        except RecordError:
            continue
        own = {t.name: _handle(handles, f"{alloc_id}/{t.name}") for t in group.tasks}
        views.append(alloc_view(rec, group, records, own, _handle(handles, f"{alloc_id}/{NETNS_OWNER}")))
    return views


def _task_record(tasks: Mapping[str, Mapping[str, Any]], key: str) -> TaskRecord:
    raw = tasks.get(key)
    return TaskRecord.from_record(raw, key) if raw else TaskRecord()


def _handle(handles: Mapping[str, Mapping[str, Any]], key: str) -> TaskHandle | None:
    raw = handles.get(key)
    return TaskHandle.from_record(dict(raw)) if raw else None


def task_names_of(tasks: Iterable[str]) -> TaskNames:
    """The names of each alloc's task records, from the records' keys (`alloc id/task`)."""
    out: dict[str, list[str]] = {}
    for key in tasks:
        alloc, sep, name = key.partition("/")
        if sep:
            out.setdefault(alloc, []).append(name)
    return out


def registered_group(
    store: StateStore, jobs: Mapping[str, Job], job_id: str, group_name: str
) -> tuple[Job | None, Group | None]:
    """The job and group as registered, else the newest version of the job the store keeps that
    has the group; (None, None) if none does."""
    job = jobs.get(job_id)
    group = next((g for g in job.groups if g.name == group_name), None) if job else None
    if job is not None and group is None:
        job, group = version_with_group(store, job_id, group_name)
    return (job, group) if group is not None else (None, None)


def stored_runner(
    deps: RunnerDeps,
    store: StateStore,
    jobs: Mapping[str, Job],
    alloc_id: str,
    raw: Mapping[str, Any] | None,
) -> AllocRunner | None:
    """The alloc's runner from its record; None when the record is unreadable or neither the job
    nor any version of it the store keeps has the alloc's group, and it has no task records."""
    if raw is None:
        return None
    try:
        rec = AllocRecord.from_record(raw, alloc_id)
    except RecordError:
        return None
    job, group = registered_group(store, jobs, rec.job, rec.group)
    if job is None or group is None:
        prefix = f"{alloc_id}/"
        mine = [k for k in store.list("task").records if k.startswith(prefix)]
        handles = {k: h for k in mine if (h := store.get("handle", k)) is not None}
        job, group = group_from_records(rec, task_names_of(mine), handles)
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


def group_from_records(
    rec: AllocRecord, names: TaskNames, handles: Mapping[str, Mapping[str, Any]]
) -> tuple[Job | None, Group | None]:
    """The alloc's group as its own records tell it (each task's name, and its driver from its
    handle), when no version of its job the store keeps has it any more (a job run again under the
    same id more times than the versions kept): enough to list and read the alloc until the GC,
    as Nomad lists every alloc of a job until then. `names`: the task records' names by alloc;
    `handles`: the handle records by key (`alloc id/task`)."""
    prefix = f"{rec.id}/"
    own = sorted(names.get(rec.id, ()))
    if not own:
        return None, None
    tasks = []
    for name in own:
        handle = handles.get(prefix + name) or {}
        tasks.append(Task(name=name, driver=str(handle.get("driver") or "docker")))
    group = Group(name=rec.group, tasks=tuple(tasks))
    return Job(id=rec.job, groups=(group,)), group
