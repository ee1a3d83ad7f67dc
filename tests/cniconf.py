"""The bridge conflist the controller tests use: the lab's plugin chain (loopback, bridge with
host-local IPAM, firewall, portmap) on a network, bridge and subnet of the test's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
