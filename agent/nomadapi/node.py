"""Who this agent is in Nomad's terms: its node ID (kept where Nomad's client keeps it, in the
data dir's `client/client-id`), name, datacenter, region and HTTP address; and the evaluations its
writes create (a one-node agent has no scheduler queue: each is complete when it is answered)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from agent.node.nodeinfo import load_node_id
from agent.state.changes import ChangeIndex
from agent.state.store import StateStore

REGION = "global"
MAX_EVALS = 1000  # evaluations kept (the oldest dropped past it, as a GC would)


@dataclass(frozen=True)
class NodeIdentity:
    id: str
    name: str
    datacenter: str
    region: str
    http_addr: str  # "ip:port" of the API

    @classmethod
    def load(cls, data_dir: Path, name: str, datacenter: str, http_addr: str) -> NodeIdentity:
        """The node ID from `<data dir>/client/client-id`, made (a random UUID) the first time."""
        return cls(load_node_id(data_dir), name, datacenter, REGION, http_addr)


@dataclass(frozen=True)
class Eval:
    id: str
    job_id: str
    triggered_by: str  # "job-register", "job-deregister", "alloc-stop"
    job_type: str
    create_index: int
    created: float
    # The allocs this evaluation placed, when known (a register's); None: those of its job created
    # since it (an alloc stop's replacement)
    placed: tuple[str, ...] | None = None
    priority: int = 50  # the job's, or the write's EvalPriority (api.Evaluation's Priority)
    # What the node could not place (the node is ineligible, agent.nomadapi.nodeverbs): Nomad's
    # FailedTGAllocs (group -> allocs not placed) and the blocked evaluation waiting for capacity
    status: str = "complete"  # "blocked" for that one, until the node turns eligible
    failed: tuple[tuple[str, int], ...] = ()
    blocked_eval: str = ""
    previous_eval: str = ""
    node_id: str = ""  # a node-update evaluation's (`node evaluate`, eligibility)


class EvalHook(Protocol):
    """What the node's scheduling state (agent.nomadapi.nodeverbs) says of a new evaluation."""

    def failed(self, job_id: str, triggered_by: str) -> Mapping[str, int]:
        """group -> allocs the write wanted and the node did not place (empty: none)."""
        ...

    def blocked(self, job_id: str, eval_id: str) -> None:
        """The blocked evaluation made for them."""
        ...


class Evals:
    """The evaluations register, deregister, alloc stop and a failed alloc's replacement make
    (`EvalID`), newest last; kept in the store (kind "eval") when one is given, so that an alloc's
    EvalID still leads to its evaluation after an agent restart."""

    def __init__(self, changes: ChangeIndex, store: StateStore | None = None) -> None:
        self._changes = changes
        self._store = store
        self._lock = threading.Lock()
        self._evals: OrderedDict[str, Eval] = OrderedDict()
        self.hook: EvalHook | None = None  # set by agent.nomadapi.nodeverbs
        if store is not None:
            kept = [e for r in store.list(KIND_EVAL).records.values() if (e := _from_record(r))]
            for ev in sorted(kept, key=lambda e: (e.created, e.create_index)):
                self._evals[ev.id] = ev

    def create(
        self,
        job_id: str,
        triggered_by: str,
        job_type: str,
        placed: tuple[str, ...] | None = None,
        *,
        priority: int = 50,
        node_id: str = "",
    ) -> Eval:
        """On the loop when a store is kept (its writes are the loop's). When the node did not place
        what the write wanted (`hook`), a blocked evaluation ("queued-allocs") is made beside it."""
        eval_id = str(uuid.uuid4())
        failed = tuple(sorted(self.hook.failed(job_id, triggered_by).items())) if self.hook else ()
        blocked = None
        if failed:
            blocked = Eval(
                str(uuid.uuid4()),
                job_id,
                "queued-allocs",
                job_type or "service",
                0,
                time.time(),
                (),
                priority,
                status="blocked",
                failed=failed,
                previous_eval=eval_id,
            )
        index = self._changes.bump("eval", eval_id)
        ev = Eval(
            eval_id,
            job_id,
            triggered_by,
            job_type or "service",
            index,
            time.time(),
            placed,
            priority,
            failed=failed,
            blocked_eval=blocked.id if blocked else "",
            node_id=node_id,
        )
        self.put(ev)
        if blocked is not None and self.hook is not None:
            self.put(replace(blocked, create_index=self._changes.bump("eval", blocked.id)))
            self.hook.blocked(job_id, blocked.id)
        return ev

    def put(self, ev: Eval) -> None:
        """Keep an evaluation (a new one, or one changed: a blocked one unblocked)."""
        eval_id = ev.id
        with self._lock:
            self._evals[eval_id] = ev
            dropped = []
            while len(self._evals) > MAX_EVALS:
                dropped.append(self._evals.popitem(last=False)[0])
        if self._store is not None:
            self._store.put(KIND_EVAL, eval_id, _to_record(ev))
            for old in dropped:
                self._store.delete(KIND_EVAL, old)

    def all(self) -> list[Eval]:
        with self._lock:
            return list(self._evals.values())

    def find(self, ref: str) -> Eval | None:
        with self._lock:
            hits = [e for e in self._evals.values() if e.id.startswith(ref)]
        return hits[0] if len(hits) == 1 else None

    def of_job(self, job_id: str) -> list[Eval]:
        return [e for e in self.all() if e.job_id == job_id]


KIND_EVAL = "eval"  # the store's kind for evaluations (key: eval id)


def _to_record(ev: Eval) -> dict[str, Any]:
    return {
        "id": ev.id,
        "job_id": ev.job_id,
        "triggered_by": ev.triggered_by,
        "job_type": ev.job_type,
        "create_index": ev.create_index,
        "created": ev.created,
        "placed": list(ev.placed) if ev.placed is not None else None,
        "priority": ev.priority,
        "status": ev.status,
        "failed": [list(f) for f in ev.failed],
        "blocked_eval": ev.blocked_eval,
        "previous_eval": ev.previous_eval,
        "node_id": ev.node_id,
    }


def _from_record(rec: Mapping[str, Any]) -> Eval | None:
    """The stored evaluation; None for a record this agent cannot read (it is not shown)."""
    try:
        placed = rec.get("placed")
        return Eval(
            id=str(rec["id"]),
            job_id=str(rec["job_id"]),
            triggered_by=str(rec["triggered_by"]),
            job_type=str(rec["job_type"]),
            create_index=int(rec["create_index"]),
            created=float(rec["created"]),
            placed=tuple(str(a) for a in placed) if isinstance(placed, list) else None,
            priority=int(rec.get("priority", 50)),
            status=str(rec.get("status", "complete")),
            failed=tuple((str(g), int(n)) for g, n in rec.get("failed") or ()),
            blocked_eval=str(rec.get("blocked_eval", "")),
            previous_eval=str(rec.get("previous_eval", "")),
            node_id=str(rec.get("node_id", "")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def eval_fields(ev: Eval) -> dict[str, Any]:
    return {
        "eval_id": ev.id,
        "job_id": ev.job_id,
        "triggered_by": ev.triggered_by,
        "type_": ev.job_type,
        "create_index": ev.create_index,
        "modify_index": ev.create_index,
        "create_time": ev.created,
        "priority": ev.priority,
        "status": ev.status,
        "failed_tg_allocs": dict(ev.failed),
        "blocked_eval": ev.blocked_eval,
        "previous_eval": ev.previous_eval,
        "node_id": ev.node_id,
    }
