"""The bridge conflist the controller tests use: the lab's plugin chain (loopback, bridge with
host-local IPAM, firewall, portmap) on a network, bridge and subnet of the test's own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from agent.network import iptables


def bridge_conflist(
    path: Path,
    *,
    network: str,
    bridge: str,
    subnet: str,
    ipam_dir: Path,
    admin_chain: str,
    portmap: bool = True,
) -> Path:
    plugins: list[dict[str, Any]] = [
        {"type": "loopback"},
        {
            "type": "bridge",
            "bridge": bridge,
            "isGateway": True,
            "ipMasq": True,
            "forceAddress": True,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": subnet}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(ipam_dir),
            },
        },
        {"type": "firewall", "backend": "iptables", "iptablesAdminChainName": admin_chain},
    ]
    if portmap:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}, "snat": True})
    path.write_text(json.dumps({"cniVersion": "0.4.0", "name": network, "plugins": plugins}, indent=2))
    return path


def scrub_test_network(*, network: str, subnet_prefix: str, admin_chain: str, bridge: str) -> None:
    """Remove whatever a test network can have left: its CNI chains, rules on its subnet or jumping
    to its admin chain, the admin chain itself, the bridge."""
    for c in iptables.list_cni_chains():
        if c.network == network:
            iptables.remove_chain(c.table, c.name)
    for t in iptables.TABLES:
        for r in iptables.read_table(t).rules:
            addr = r.option("-s", "-d") or ""
            ours = (
                (r.owner or ("", ""))[0] == network
                or addr.startswith(subnet_prefix)
                or r.target == admin_chain
            )
            if ours and r.chain != admin_chain:
                iptables.delete_rule(r)
    subprocess.run(["iptables", "-w", "-F", admin_chain], capture_output=True, check=False)
    subprocess.run(["iptables", "-w", "-X", admin_chain], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
