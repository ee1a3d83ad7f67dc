"""Every alloc's last Nomad check results on this node (written by the tasks' check hooks,
agent.runner.checks; read by the API). Low in the runner: the runner's deps hold one."""

from __future__ import annotations

import threading
from typing import Any


class CheckResults:
    """Every alloc's last check results on this node ({alloc: {check id: api.AllocCheckStatus}}),
    written by the tasks' check hooks, read by the API; an alloc's go with its teardown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_alloc: dict[str, dict[str, dict[str, Any]]] = {}

    def put(self, alloc_id: str, result: dict[str, Any]) -> None:
        with self._lock:
            self._by_alloc.setdefault(alloc_id, {})[str(result["ID"])] = result

    def drop(self, alloc_id: str, ids: set[str]) -> None:
        with self._lock:
            kept = {k: v for k, v in self._by_alloc.get(alloc_id, {}).items() if k not in ids}
            if kept:
                self._by_alloc[alloc_id] = kept
            else:
                self._by_alloc.pop(alloc_id, None)

    def of(self, alloc_id: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._by_alloc.get(alloc_id, {}))
