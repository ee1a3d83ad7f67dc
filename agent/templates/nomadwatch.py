"""Templates that read Nomad variables or services are rendered again when what they read changes,
as consul-template's blocking queries on /v1/var and /v1/service wake its runner.

Each task whose last pass read Nomad data is watched with a digest of what it read
(agent.templates.nomadfuncs.fingerprint). While any task is watched, `NomadWatch` looks every
`interval` seconds, on the agent's main loop, at the state's change index of variables and allocs
(a variable written or deleted, an alloc started or stopped: agent.state.changes); when it moved,
or for a task watched since the last look, it asks each task whether its digest changed, and a task
whose did gets a render pass at once (the pass watches it again with the new digest; a render that
gives the same text writes nothing and sends no change_mode action). Nothing runs while no task
is watched. The tasks of one look share their views' service catalogue and its digests (built once
per change by the source, agent.runner.services.NomadData): a look costs one catalogue, not one
per watched task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from agent.structs.model import Task
from agent.templates.nomadfuncs import NomadSource, NomadView, fingerprint, uses_nomad

log = logging.getLogger(__name__)

WATCH_INTERVAL = 1.0  # seconds between looks at the change index while a task is watched

Probe = Callable[[], bool | None]


class NomadWatch:
    """Watched tasks: key -> (probe, fire). Runs on the main loop (`schedule`)."""

    def __init__(
        self,
        changed: Callable[[], int],
        schedule: Callable[[float, Callable[[], None]], None],
        interval: float = WATCH_INTERVAL,
    ) -> None:
        self._changed = changed  # the change index of what the views read
        self._schedule = schedule
        self.interval = interval
        self._watching: dict[str, tuple[Probe, Callable[[], None]]] = {}
        self._fresh: set[str] = set()  # watched since the last look: probed whatever the index
        self._seen = changed()
        self._armed = False
        self.fired = 0

    @property
    def watching(self) -> int:
        return len(self._watching)

    def watch(self, key: str, probe: Probe, fire: Callable[[], None]) -> None:
        self._watching[key] = (probe, fire)
        self._fresh.add(key)
        if not self._armed:
            self._armed = True
            self._schedule(self.interval, self._look)

    def unwatch(self, key: str) -> None:
        self._watching.pop(key, None)
        self._fresh.discard(key)

    def _look(self) -> None:
        index = self._changed()
        moved, self._seen = index != self._seen, index
        fresh, self._fresh = self._fresh, set()
        for key, (probe, fire) in list(self._watching.items()):
            if not moved and key not in fresh:
                continue
            try:
                changed = probe()
            except Exception:  # a probe that fails is dropped, never the loop
                log.exception("nomad data watch of %s failed", key)
                changed = None
            if changed is None or changed:
                self._watching.pop(key, None)
            if changed:
                self.fired += 1
                fire()
        if self._watching:
            self._schedule(self.interval, self._look)
        else:
            self._armed = False


class Host(Protocol):
    """The alloc of a watched task (agent.templates.deps.TaskHost)."""

    @property
    def alloc_id(self) -> str: ...

    def alloc_running(self) -> bool: ...


def task_view(source: NomadSource | None, alloc_id: str, task: Task) -> NomadView | None:
    """On the main loop: what of this node's Nomad data the task may read, for a render pass; None
    when its templates call no Nomad function (or there is no source)."""
    if source is None or not uses_nomad(task.templates):
        return None
    return source.view(alloc_id, task.name)


def follow(
    source: NomadSource | None,
    host: Host,
    task: Task,
    view: NomadView | None,
    reads: Iterable[set[str]],
    fire: Callable[[], None],
) -> None:
    """After a pass that rendered from `view`: watch what its templates read (`reads`, their
    Reads.nomad) for a change; `fire` when it changed, while the alloc runs. A task that read no
    Nomad data is not watched."""
    if source is None:
        return
    key = f"{host.alloc_id}/{task.name}"
    depends = set().union(*reads)
    if view is None or not depends:
        source.unwatch(key)
        return
    seen = fingerprint(view, depends)

    def probe() -> bool | None:
        now = task_view(source, host.alloc_id, task) if host.alloc_running() else None
        return None if now is None else fingerprint(now, depends) != seen

    source.watch(key, probe, fire)
