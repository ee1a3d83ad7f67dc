"""The docker driver's exit watch across a broken event stream (dockerd stopped or restarted): a
managed container that died while the stream was down is reported when it comes back; one reported
already, or dead before the agent first looked (the restore's), is not reported by that look; every
die the stream sends is reported (a pause container docker restarted dies again under its id)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests

from agent.drivers.base import LABEL_ALLOC, KnownDeaths
from agent.drivers.docker import DockerDriver


@dataclass
class _Container:
    id: str
    alloc: str

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL_ALLOC: self.alloc}


def _die(cid: str, alloc: str) -> dict[str, Any]:
    return {"id": cid, "Actor": {"ID": cid, "Attributes": {LABEL_ALLOC: alloc}}}


@dataclass
class _Engine:
    """Each connection: the dead containers listed then, and the die events its stream yields
    (None: the engine refuses the connection; the stream ends by breaking, as dockerd stopping)."""

    connections: list[tuple[list[_Container], list[dict[str, Any]]] | None]
    stop: threading.Event
    dead: list[_Container] = field(default_factory=list)

    @property
    def api(self) -> _Engine:
        return self

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Docker's container list (`/containers/json`): the dead ones, as the engine lists them."""
        assert filters["status"] == ["exited", "dead"] and all
        return [{"Id": c.id, "Names": [f"/{c.id}"], "State": "exited", "Labels": c.labels} for c in self.dead]

    def events(self, decode: bool, filters: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if not self.connections:
            self.stop.set()
            raise requests.ConnectionError("the test is over")
        conn = self.connections.pop(0)
        if conn is None:
            raise requests.ConnectionError("Connection refused")
        self.dead, stream = conn

        def gen() -> Iterator[dict[str, Any]]:
            yield from stream
            raise requests.ConnectionError("Connection aborted")

        return gen()


def test_deaths_while_the_stream_was_down_are_reported_once_when_it_is_back() -> None:
    stop = threading.Event()
    before = _Container("c0", "a0")  # dead before the agent first looked: the restore's business
    engine = _Engine(
        [
            ([before], [_die("c1", "a1")]),  # c1 dies and is reported; then dockerd stops
            None,  # dockerd is down: the reconnect is refused
            # back: c1 (reported) and c2 (died while down: its die event is lost) are dead; c3 dies
            ([before, _Container("c1", "a1"), _Container("c2", "a2")], [_die("c3", "a3")]),
            # another break; back, c1 dies again (a pause container docker restarted): reported again
            ([before, _Container("c2", "a2"), _Container("c3", "a3")], [_die("c1", "a1")]),
        ],
        stop,
    )
    seen: list[tuple[str, str]] = []
    # a short reconnect: the four breaks are the point, not the agent's second between tries
    DockerDriver(client=engine).watch(lambda alloc, cid: seen.append((alloc, cid)), stop, reconnect=0.01)
    assert seen == [("a1", "c1"), ("a2", "c2"), ("a3", "c3"), ("a1", "c1")]


def test_known_deaths_forget_the_oldest_past_their_size() -> None:
    known = KnownDeaths(keep=2)
    assert known.add("a") and known.add("b") and not known.add("a") and not known.add("")
    assert known.add("c") and known.add("a"), "a was forgotten once c came"
