"""One alloc's records in the state store: the alloc, its tasks, their driver handles, its events.
Every change is written before it is acted on (see agent.state)."""

from __future__ import annotations

import logging
from typing import Any

from agent.drivers.base import TaskHandle
from agent.state import StateStore
from agent.structs.records import AllocRecord, TaskRecord

log = logging.getLogger(__name__)

NETNS_OWNER = "<pause>"  # handle key of the alloc's netns owner (the name kept from earlier schemas)


class AllocState:
    def __init__(self, store: StateStore, record: AllocRecord) -> None:
        self.store = store
        self.rec = record
        # Per task, bumped by every decision about it (agent.decide.decisions.PendingRestart): kept in
        # memory only, as the timers it guards die with the agent (a restore resumes an owed
        # restart from the task record's restart_due).
        self._generations: dict[str, int] = {}

    def generation(self, task: str) -> int:
        return self._generations.get(task, 0)

    def bump(self, task: str) -> int:
        """A new decision about `task`: a restart timer scheduled before it will not start it."""
        self._generations[task] = self.generation(task) + 1
        return self._generations[task]

    @property
    def id(self) -> str:
        return self.rec.id

    def save(self, **changes: Any) -> AllocRecord:
        self.rec = self.rec.with_(**changes)
        self.store.put("alloc", self.id, self.rec.to_record())
        return self.rec

    def handle(self, name: str) -> TaskHandle | None:
        rec = self.store.get("handle", f"{self.id}/{name}")
        return TaskHandle.from_record(rec) if rec else None

    def put_handle(self, name: str, handle: TaskHandle) -> None:
        self.store.put("handle", f"{self.id}/{name}", handle.to_record())

    def task(self, name: str) -> TaskRecord:
        rec = self.store.get("task", f"{self.id}/{name}")
        return TaskRecord.from_record(rec, f"{self.id}/{name}") if rec else TaskRecord()

    def put_task(self, name: str, record: TaskRecord) -> TaskRecord:
        self.store.put("task", f"{self.id}/{name}", record.to_record())
        return record

    def update_task(self, name: str, **changes: Any) -> TaskRecord:
        return self.put_task(name, self.task(name).with_(**changes))

    def event(self, task: str, type_: str, message: str, **details: Any) -> None:
        self.store.append_event(self.id, task, type_, message, details or None)
        log.info("alloc=%s task=%s event=%r %s", self.id[:8], task or "-", type_, message)
