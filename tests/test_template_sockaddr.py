"""`sockaddr` in templates: the go-sockaddr forms Nomad jobspecs use, over fixed addresses (pure),
and once over this host's real interfaces."""

from __future__ import annotations

import ipaddress
from typing import Any

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


def test_the_hosts_addresses_are_netlinks_and_the_daemon_loads_no_netlink_library_for_them() -> None:
    """host_addresses reads iproute2's `ip -j` listings: the same interfaces, addresses and default
    route holders as the kernel's netlink answers (read here with pyroute2), without importing
    pyroute2 into the process (12 MB of the daemon's RSS at start)."""
    import subprocess
    import sys

    from pyroute2 import IPRoute

    from agent.templates.sockaddr import host_addresses

    def netlink() -> tuple[set[tuple[str, Any]], set[str]]:
        """(interface, address) pairs and the default route's interfaces, as netlink answers."""
        with IPRoute() as ipr:
            names = {link["index"]: str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()}
            default = {
                names.get(r.get_attr("RTA_OIF"), "")
                for family in (2, 10)
                for r in ipr.get_routes(family=family, table=254)
                if r["dst_len"] == 0 and r.get_attr("RTA_OIF") is not None
            }
            pairs = {
                (names.get(a["index"], ""), ipaddress.ip_address(a.get_attr("IFA_ADDRESS")))
                for a in ipr.get_addr()
                if a.get_attr("IFA_ADDRESS")
            }
        return pairs, default - {""}

    # read between two netlink reads: a link that comes or goes meanwhile (a container starting
    # beside the test) may be in one answer and not the other, every other one must match
    before = netlink()
    found = host_addresses()
    after = netlink()
    pairs = {(h.interface, h.address) for h in found}
    assert before[0] & after[0] <= pairs <= before[0] | after[0], (before[0] ^ pairs, after[0] ^ pairs)
    defaults = {h.interface for h in found if h.default_route}
    assert before[1] & after[1] <= defaults <= before[1] | after[1]
    code = (
        "import sys; from agent.templates.sockaddr import host_addresses; "
        "host_addresses(); print('pyroute2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "reading the host's addresses imported pyroute2"
