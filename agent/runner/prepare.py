"""The driver's blocking first step for a task's next start (agent.drivers.base.PreparesStart:
docker's image pull), off the main loop.

Nomad's driver pulls in the task runner's own goroutine; here the driver's `prepare` runs off the
main loop (the alloc's other operations wait behind it in its Serial; a stop then comes after it,
as the pull cannot be cancelled for one task: others may wait on the same pull) and its events
reach the store on the loop as they happen. The next start uses what it did (ctx.prepared: no
second pull) for the task config it was done for, or raises its DriverError where the start's own
would be.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.client.offload import loop_post
from agent.client.taskenv import interpolate_config
from agent.drivers.base import DriverError, PreparesStart, TaskContext
from agent.errors import AgentError
from agent.runner.env import task_view
from agent.runner.interfaces import TaskHost
from agent.vault import VaultError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A prepare done for the task's next start: the task config it was done for and its error."""

    config: dict[str, Any]
    error: DriverError | None = None


class StartPrepare:
    """One task's prepare for its next start: what it did is kept until that start takes it."""

    def __init__(self, task: TaskHost) -> None:
        self.task = task
        self._done: Prepared | None = None

    def take(self) -> Prepared | None:
        done, self._done = self._done, None
        return done

    def drop(self) -> None:
        """What the next start did not take (it was not started: stopped meanwhile) goes."""
        self._done = None

    def then(self, then: Callable[[], None]) -> None:
        """The prepare off the loop, then `then` on the loop (at once when there is nothing to
        prepare); the start it leads to uses it."""
        if not self.run(then):
            then()

    def run(self, then: Callable[[], None]) -> bool:
        """The driver's prepare off the loop in the alloc's turn (its Serial), `then` on the loop
        when it is done. False (`then` not called): nothing to prepare, or no config to prepare it
        for (the start meets that error on its own path)."""
        tr = self.task
        driver, t, ar = tr.driver, tr.t, tr.ar
        if not isinstance(driver, PreparesStart):
            return False
        try:
            env = tr.env()
            config = interpolate_config(dict(t.config), task_view(t, env), tr.d.node_table)
        except (AgentError, OSError, ValueError, VaultError):
            return False
        post = loop_post(tr.d.offload)

        def driver_event(message: str, details: Mapping[str, str]) -> None:  # in the worker thread
            copied = dict(details)
            post(lambda: tr.event("Driver", message, **copied))

        ctx = TaskContext(
            job=ar.job.id,
            group=ar.group.name,
            alloc_id=ar.id,
            task=replace(t, config=config),
            task_dir=tr.task_dir,
            env=env,
            driver_event=driver_event,
        )

        def done(result: object, exc: Exception | None) -> None:
            if exc is None or isinstance(exc, DriverError):
                self._done = Prepared(config, exc)
            else:  # not the driver's word: the start does it again on its own
                log.error("alloc=%s task=%s: prepare failed: %s", ar.id[:8], t.name, exc)
                self._done = None
            then()

        ar.serial.off_loop(f"prepare {t.name}", lambda: driver.prepare(ctx), done)
        return True


def prepare_each(prepares: Sequence[StartPrepare], then: Callable[[], None]) -> None:
    """Each task's prepare off the loop, one after the other, then `then` on the loop (the starts,
    which use them); what a start did not use is dropped after it."""

    def done() -> None:
        try:
            then()
        finally:
            for p in prepares:
                p.drop()

    def chain(i: int) -> None:
        if i == len(prepares):
            done()
            return
        prepares[i].then(lambda: chain(i + 1))

    chain(0)
