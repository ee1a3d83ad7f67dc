"""A nomad check of a host-network alloc on a node with `advertise_address = ""` (the default) goes
to the node's own address, as Nomad's client fingerprints it (the interface of the default route)
and reserves the alloc's ports on, never to loopback (issue 51): agent.client.checktarget."""

from __future__ import annotations

import http.server
import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agent.client.checktarget import CheckTarget, check_target, fingerprinted_address
from agent.structs.model import Check
from agent.structs.records import PortAlloc
from agent.templates.sockaddr import host_addresses
from tests.test_checks_hostile import _outputs, _Recorder, _run_checks


@dataclass(frozen=True)
class _Addr:
    interface: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    default_route: bool


def _a(interface: str, address: str, default_route: bool) -> _Addr:
    return _Addr(interface, ipaddress.ip_address(address), default_route)


def test_the_node_address_is_the_default_routes_interfaces_ipv4_first() -> None:
    addrs = [
        _a("lo", "127.0.0.1", False),
        _a("docker0", "172.17.0.1", False),
        _a("eth0", "fe80::1", True),
        _a("eth0", "2001:db8::5", True),
        _a("eth0", "10.1.2.3", True),
    ]
    assert fingerprinted_address(addrs) == "10.1.2.3"
    assert fingerprinted_address(addrs[:4]) == "2001:db8::5", "an IPv6 one when it has no IPv4"
    assert fingerprinted_address(addrs[:3]) == "fe80::1", "link-local only when it has no other"


def test_never_loopback_and_nothing_without_a_default_route() -> None:
    assert fingerprinted_address([_a("lo", "127.0.0.1", True), _a("lo", "::1", True)]) == ""
    assert fingerprinted_address([_a("eth0", "10.1.2.3", False)]) == "", "no default route: no address"
    assert fingerprinted_address([]) == ""


def test_a_host_mode_check_goes_to_the_node_address_and_the_reserved_host_port() -> None:
    ports = (PortAlloc("http", 25001, 8080),)
    target = check_target(mode="", label="http", ports=ports, alloc_address="", node_address="10.1.2.3")
    assert target == CheckTarget("10.1.2.3", 25001)
    # no address at all (none advertised, none fingerprinted): refused with the reason, not loopback
    refused = check_target(mode="host", label="http", ports=ports, alloc_address="", node_address="")
    assert isinstance(refused, str) and "no advertise_address" in refused


def _node_address() -> str:
    try:
        return fingerprinted_address(host_addresses())
    except (OSError, ImportError):
        return ""


@pytest.fixture
def node_stub() -> Iterator[tuple[str, int, list[str]]]:
    """A listener on the node's own (fingerprinted) address: the task's stand-in."""
    address = _node_address()
    if not address or ":" in address:
        pytest.skip("this host has no IPv4 address on the interface of its default route")
    seen: list[str] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield address, server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_host_network_check_without_advertise_address_reaches_the_node_address_not_loopback(
    node_stub: tuple[str, int, list[str]],
) -> None:
    """The agent's default (advertise_address ""): the check goes to the node's fingerprinted
    address, where the task listens (only there: the stub is not on loopback)."""
    address, port, seen = node_stub
    check = Check(name="web", type="http", port="http", path="/health", interval=1.0)
    deps = _run_checks(check, ports=(PortAlloc("http", port, port),), advertise="", node=address)
    assert seen and all(s.startswith("GET /health") for s in seen), seen
    assert [s for s, _ in _outputs(deps)] == ["success"], _outputs(deps)
