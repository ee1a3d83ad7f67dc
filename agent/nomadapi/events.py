"""`GET /v1/event/stream`: Nomad's event stream for this node, newline-delimited JSON.

Each line is `{"Index": N, "Events": [...]}` with Nomad's Event (Topic, Type, Key, Namespace,
FilterKeys, Index, Payload); `{}` is a heartbeat while nothing happens (every HEARTBEAT seconds).
The events come from the agent's change index (agent.state.changes): every store write names a
kind and a key, read here as Job (`JobRegistered`, `JobDeregistered`), Allocation
(`AllocationUpdated`), Evaluation (`EvaluationUpdated`) and Node (`NodeRegistration` at the
agent's start; `NodeStreamEvent` and `NodeRegistration` when a driver's health changed) events with
the object as it is when the line is written (Nomad's payload is the object at that index; a
burst of writes to one alloc is one event here). `topic=Topic:Key` filters as Nomad's (`*` for
every topic or key); `index=N` starts after N, as far back as the change log goes (LOG_SIZE
changes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol

from agent.api.handler import Handler, Idle, Streamed, pulled, query_params, query_values
from agent.errors import AgentError
from agent.nomadapi import structs
from agent.nomadapi.context import Allocs, AllocViews, Changes, Jobs, JobViews, NodeViews, OnLoop
from agent.nomadapi.http import HttpError
from agent.nomadapi.node import Evals, eval_fields

HEARTBEAT = 10.0  # seconds between heartbeats of an idle stream (Nomad's default)
TOPICS = ("Job", "Allocation", "Evaluation", "Node")
_KIND_TOPIC = {
    "job": "Job",
    "alloc": "Allocation",
    "eval": "Evaluation",
    "node": "Node",
    "node_event": "Node",
    "node_drain": "Node",  # agent.nomadapi.nodeverbs: a drain's update (NodeDrain)
    "node_eligibility": "Node",  # ... and an eligibility's (NodeEligibility)
}
_NODE_VERB_TYPES = {"node_drain": "NodeDrain", "node_eligibility": "NodeEligibility"}
_NODE_TYPES = {
    "node": "NodeRegistration",  # the client's registration or update, as Nomad's Node.Register writes it
    "node_event": "NodeStreamEvent",  # a driver's health changed (Nomad's UpsertNodeEvents)
    **_NODE_VERB_TYPES,
}


class EventPort(OnLoop, Changes, Jobs, Allocs, JobViews, AllocViews, NodeViews, Protocol):
    evals: Evals


def node_verbs_merged(latest: dict[tuple[str, str], int]) -> None:
    """A node verb writes its change, then the node's (its ModifyIndex) at the next index: one
    event, NodeDrain or NodeEligibility at the node's index, as Nomad's one write makes it."""
    for kind in _NODE_VERB_TYPES:
        for k, key in [k for k in latest if k[0] == kind]:
            if latest.get(("node", key)) == latest[(k, key)] + 1:
                latest[(k, key)] = latest.pop(("node", key))


def parse_topics(raw: list[str]) -> dict[str, set[str]]:
    """`topic` values -> {topic: keys} ("*" for any); none given: every topic, every key."""
    if not raw:
        return {t: {"*"} for t in TOPICS}
    out: dict[str, set[str]] = {}
    for value in raw:
        topic, _, key = value.partition(":")
        if topic != "*" and topic not in TOPICS:
            raise HttpError(400, f"topic {topic[:64]!r}: one of {', '.join(TOPICS)} or *")
        for t in TOPICS if topic == "*" else (topic,):
            out.setdefault(t, set()).add(key or "*")
    return out


def wanted(topics: dict[str, set[str]], topic: str, key: str, filter_keys: list[str]) -> bool:
    keys = topics.get(topic, set())
    return "*" in keys or key in keys or any(k in keys for k in filter_keys)


def alloc_view(api: Allocs, alloc_id: str) -> dict[str, Any] | None:
    """On the loop: the alloc's view, None once collected: its runner's, an adopted one's, else its
    stored runner's (not every alloc's views for one: with 10,000 terminal allocs of an earlier run
    that cost the loop half a second for each change of any alloc)."""
    if (runner := api.runners.get(alloc_id)) is not None:
        return runner.view()
    adopted = next((v for v in api.adoption.views() if v.get("id") == alloc_id), None)
    if adopted is not None:
        return adopted
    try:
        found = api.allocs.alloc(alloc_id)
    except AgentError:  # collected (NotFound); never two allocs for a full id
        return None
    return found.view() if found.id == alloc_id else None


def event_stream(api: EventPort) -> Handler:
    def job_event(key: str) -> tuple[str, str, list[str], dict[str, Any]]:
        job = api.jobs.get(key)
        if job is None:
            return "Job", "JobDeregistered", [], {"Job": {"ID": key, "Namespace": "default"}}
        return "Job", "JobRegistered", [], {"Job": api.job_dict(job)}

    def payload(kind: str, key: str) -> tuple[str, str, list[str], dict[str, Any]] | None:
        """On the loop: (topic, type, filter keys, payload) of one change, None when nothing to say
        (an alloc or eval already collected: Nomad says nothing of one either)."""
        if kind == "job":
            return job_event(key)
        if kind in _NODE_TYPES:
            return "Node", _NODE_TYPES[kind], [], {"Node": api.node_dict(stub=False)}
        if kind == "alloc":
            view = alloc_view(api, key)
            alloc = {"Allocation": api.alloc_dict(view, stub=False)} if view is not None else None
            return ("Allocation", "AllocationUpdated", [str(view["job"])], alloc) if view and alloc else None
        ev = api.evals.find(key) if kind == "eval" else None
        if ev is None:
            return None
        found = {"Evaluation": structs.evaluation(**eval_fields(ev), namespace="default")}
        return "Evaluation", "EvaluationUpdated", [ev.job_id], found

    def stream(groups: tuple[str, ...], body: bytes) -> Streamed:
        params = query_params()
        topics = parse_topics(query_values("topic"))
        raw = params.get("index", "0") or "0"
        if not raw.isdigit() or len(raw) > 20:
            raise HttpError(400, f"index={raw[:32]!r}: a change index")
        start = int(raw)
        served = pulled()  # a server waits out an idle stream on its loop, with no thread

        def lines() -> Iterator[bytes | Idle]:
            at = start if start else api.changes.current()
            while True:
                yield from Idle(HEARTBEAT, api.changes, at).waited(served)
                changes = api.changes.since(at)
                if not changes:
                    yield b"{}\n"
                    continue
                at = changes[-1][0]
                latest: dict[tuple[str, str], int] = {}
                for index, kind, key in changes:
                    if kind in _KIND_TOPIC:
                        latest[(kind, key)] = index
                node_verbs_merged(latest)
                wanted_changes = sorted(latest.items(), key=lambda kv: kv[1])

                def build(todo: list[tuple[tuple[str, str], int]] = wanted_changes) -> list[dict[str, Any]]:
                    out = []
                    for (kind, key), index in todo:
                        got = payload(kind, key)
                        if got is None:
                            continue
                        topic, type_, filter_keys, body_ = got
                        if wanted(topics, topic, key, filter_keys):
                            out.append(
                                {
                                    "Topic": topic,
                                    "Type": type_,
                                    "Key": key,
                                    "Namespace": "default",
                                    "FilterKeys": filter_keys,
                                    "Index": index,
                                    "Payload": body_,
                                }
                            )
                    return out

                events = api.call(build)
                if events:
                    yield json.dumps({"Index": at, "Events": events}, separators=(",", ":")).encode() + b"\n"

        return Streamed(200, "application/json", lines())

    return stream
