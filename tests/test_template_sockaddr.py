"""`sockaddr` in templates: the go-sockaddr forms Nomad jobspecs use, over fixed addresses (pure),
and once over this host's real interfaces."""

from __future__ import annotations

import ipaddress

import pytest

from agent.errors import AgentError
from agent.templates.sockaddr import HostAddress, evaluate, sockaddr

ADDRS = [
    HostAddress("docker0", ipaddress.ip_address("172.17.0.1"), False),
    HostAddress("lo", ipaddress.ip_address("127.0.0.1"), False),
    HostAddress("eth0", ipaddress.ip_address("fd00::2"), True),
    HostAddress("eth0", ipaddress.ip_address("10.0.0.5"), True),
    HostAddress("eth1", ipaddress.ip_address("203.0.113.9"), False),  # documentation space: not global
    HostAddress("eth2", ipaddress.ip_address("8.8.4.4"), False),
]


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("GetPrivateIP", "10.0.0.5"),  # the default route's interface first, IPv4 first
        ("GetPrivateIPs", "10.0.0.5 fd00::2 172.17.0.1 203.0.113.9"),
        ("GetPublicIP", "8.8.4.4"),
        ("GetPublicIPs", "8.8.4.4"),
        ('GetInterfaceIP "eth0"', "10.0.0.5"),
        ('GetInterfaceIPs "eth0"', "10.0.0.5 fd00::2"),
        ('GetInterfaceIP "nope"', ""),
        ("  GetPrivateIP  ", "10.0.0.5"),
    ],
)
def test_the_supported_forms(expr: str, want: str) -> None:
    assert evaluate(expr, ADDRS) == want


@pytest.mark.parametrize(
    "expr", ['GetAllInterfaces | include "flag" "forwardable" | attr "address"', "GetPrivateIP | x", ""]
)
def test_other_forms_are_refused_naming_what_is_supported(expr: str) -> None:
    with pytest.raises(AgentError, match="evaluates only GetPrivateIP"):
        evaluate(expr, ADDRS)


def test_this_hosts_loopback_is_found() -> None:
    assert sockaddr('GetInterfaceIP "lo"') == "127.0.0.1"
