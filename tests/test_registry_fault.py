"""The e2e fault `registry: down | slow | up` (e2e.harness.faults.RegistryFault and the scenario step):
what it runs on the registry's server, that it checks the registry stopped answering a client, and that
a scenario's cleanup heals one left in effect; over fake nodes (the lab runs the real one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e.harness import faults, scenario_steps
from e2e.harness.scenario import STEPS, Step


@dataclass
class Result:
    rc: int
    stdout: str = ""


@dataclass
class Node:
    name: str
    address: str = "10.213.0.10"
    ran: list[str] = field(default_factory=list)
    registry_up: bool = True

    def run(self, command: str, **_: Any) -> Result:
        """The server: what stops and starts its registry (the safety timer's units only schedule)."""
        self.ran.append(command)
        if command.startswith(("systemd-run", "systemctl stop fieldlab-heal")):
            return Result(0)
        if "systemctl stop docker-registry" in command or "-j DROP" in command:
            self.registry_up = False
        elif command == "systemctl start docker-registry" or "iptables -X FIELDLAB-REGISTRY-SLOW" in command:
            self.registry_up = True
        return Result(0)


@dataclass
class Cluster:
    server: Node
    clients: list[Node]

    @property
    def servers(self) -> list[Node]:
        return [self.server]


class SharedState(Node):
    """A client whose curl sees the server's registry."""

    def __init__(self, server: Node) -> None:
        super().__init__("client1")
        self.server = server

    def run(self, command: str, **_: Any) -> Result:
        self.ran.append(command)
        return Result(0 if self.server.registry_up else 7)


def lab() -> tuple[Cluster, Node, SharedState]:
    server = Node("server1")
    client = SharedState(server)
    return Cluster(server, [client]), server, client


def test_registry_down_stops_the_service_with_a_safety_heal_and_up_starts_it() -> None:
    cluster, server, client = lab()
    fault = faults.RegistryFault(cluster, server, mode="down")  # type: ignore[arg-type]
    fault.inject()
    assert "systemctl stop docker-registry" in server.ran
    assert any(
        "systemd-run --unit fieldlab-heal-registry" in c and "docker-registry" in c for c in server.ran
    )
    assert (
        fault.in_effect()
        and client.ran[-1].startswith("curl -sk")
        and "10.213.0.10:5000/v2/" in client.ran[-1]
    )
    fault.heal()
    assert "systemctl start docker-registry" in server.ran and not fault.in_effect()


def test_registry_slow_drops_its_port_from_outside_the_node() -> None:
    cluster, server, _ = lab()
    fault = faults.RegistryFault(cluster, server, mode="slow")  # type: ignore[arg-type]
    fault.inject()
    rule = next(c for c in server.ran if "--dport 5000 -j DROP" in c)
    assert "-i lo -j RETURN" in rule and "iptables -I INPUT -j FIELDLAB-REGISTRY-SLOW" in rule
    assert fault.in_effect()
    fault.heal()
    assert not fault.in_effect() and "iptables -X FIELDLAB-REGISTRY-SLOW" in server.ran[-2]


def test_a_registry_that_still_answers_is_a_failed_inject() -> None:
    cluster, server, _ = lab()
    server.run = lambda command, **_: Result(0)  # type: ignore[method-assign]
    with pytest.raises(faults.FaultError, match="still reaches the registry"):
        faults.RegistryFault(cluster, server, mode="down").inject()  # type: ignore[arg-type]
    with pytest.raises(faults.FaultError, match="must be down or slow"):
        faults.RegistryFault(cluster, server, mode="up")  # type: ignore[arg-type]


def test_the_step_toggles_the_fault_and_the_cleanup_heals_one_left_in_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert STEPS["registry"] == ("down", "slow", "up")
    made: list[tuple[str, list[str]]] = []

    class Fake:
        def __init__(self, cluster: object, node: object, mode: str) -> None:
            self.mode = mode
            self.log: list[str] = []
            made.append((mode, self.log))

        def inject(self) -> None:
            self.log.append("inject")

        def heal(self) -> None:
            self.log.append("heal")

    monkeypatch.setattr(scenario_steps, "RegistryFault", Fake)
    cluster, _, _ = lab()
    run = scenario_steps.ScenarioRun(cluster, None, cluster.clients[0])  # type: ignore[arg-type]
    run._step_registry(Step("registry", "down"))
    run._step_registry(Step("registry", "slow"))  # the down one healed first
    run.cleanup()
    assert made == [("down", ["inject", "heal"]), ("slow", ["inject", "heal"])]
    assert run.registry is None
