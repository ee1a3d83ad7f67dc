"""The node's events as Nomad's client reports them: "Node registered" at the start, and a driver
whose health changed (subsystem Driver, its new description, the driver in the details) as a
NodeStreamEvent beside a node update; a driver first seen, or unchanged, is none."""

from __future__ import annotations

from pathlib import Path

from agent.node.driverevents import MAX_EVENTS, NodeEvent, NodeEvents, driver_changes
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi
from tests.fakes import FakeNode

UP = {"docker": {"healthy": True, "detail": "docker engine 27.3"}, "exec": {"healthy": True, "detail": "ok"}}
DOWN = {**UP, "docker": {"healthy": False, "detail": "the docker engine did not answer within 3s"}}


def test_only_a_change_of_a_known_driver_is_an_event() -> None:
    assert driver_changes({}, UP) == [], "first seen: no event"
    assert driver_changes(UP, UP) == []
    assert driver_changes(UP, DOWN) == [("docker", "the docker engine did not answer within 3s")]
    assert driver_changes(DOWN, UP) == [("docker", "docker engine 27.3")]
    quiet = {**UP, "docker": {"healthy": False, "detail": ""}}
    assert driver_changes(UP, quiet) == [], "no description: no event (Nomad's)"
    ring = NodeEvents()
    for i in range(MAX_EVENTS + 3):
        ring.add(NodeEvent(str(i), "Driver", index=i))
    assert [e.message for e in ring.events] == [str(i) for i in range(3, MAX_EVENTS + 3)]


def test_a_driver_health_change_is_a_node_event_and_a_node_update(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core = node.core()
    ident = NodeIdentity("5f8e2d1c-0000-4000-8000-0000000000e7", "client1", "dc1", "global", "127.0.0.1:4646")
    health = [UP]
    api = NomadApi(core, ident, driver_health=lambda: health[0])
    events = api.node_dict(stub=False)["Events"]
    assert [(e["Subsystem"], e["Message"]) for e in events] == [("Cluster", "Node registered")]
    api.drivers_checked(UP)  # the first look: what is seen now is the reference
    before = core.changes.current()
    api.drivers_checked(UP)
    assert core.changes.current() == before, "no change, no event"
    health[0] = DOWN
    api.drivers_checked(DOWN)
    kinds = [kind for _, kind, _ in core.changes.since(before)]
    assert kinds == ["node", "node_event"], kinds
    node_json = api.node_dict(stub=False)
    last = node_json["Events"][-1]
    assert (last["Subsystem"], last["Message"], last["Details"]) == (
        "Driver",
        "the docker engine did not answer within 3s",
        {"driver": "docker"},
    )
    assert last["CreateIndex"] == core.changes.current() and last["Timestamp"].endswith("Z")
    assert node_json["Drivers"]["docker"]["Healthy"] is False
    assert node_json["ModifyIndex"] > before, "a blocking query on the node wakes"
