"""The end of `lab up`: each node's memory in use, and the summary printed for the user (nodes and
their services, where the inventory, state and secrets are, how to ssh in, the phases' times)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.config import LabPaths
from lab.progress import Timings
from lab.providers.base import LabRecord


def node_memory(provider: Any, record: LabRecord, paths: LabPaths, timings: Timings) -> dict[str, int]:
    """Each node's memory in use now (providers that can tell), kept in <state dir>/memory.json."""
    if not hasattr(provider, "node_memory"):
        return {}
    with timings.phase("memory per node") as ph:
        memory: dict[str, int] = provider.node_memory(record)
        (paths.state_dir / "memory.json").write_text(json.dumps(memory, indent=1) + "\n")
        ph.detail = memory_line(record, memory)
    return memory


def memory_line(record: LabRecord, memory: Mapping[str, int]) -> str:
    """Memory per client (a node's whole container: systemd, sshd, the agent, its tasks), by kind (pure)."""
    parts = []
    for role, word in (("client", "full client"), ("light", "light client"), ("server", "server")):
        got = sorted(memory[n.name] for n in record.nodes if n.role == role and n.name in memory)
        if not got:
            continue
        mb = [b / 2**20 for b in got]
        parts.append(
            f"{word} {sum(mb) / len(mb):.0f} MB avg"
            + (f" (min {mb[0]:.0f}, max {mb[-1]:.0f}, n={len(mb)})" if len(mb) > 1 else "")
        )
    return "; ".join(parts)


def print_summary(
    record: LabRecord,
    paths: LabPaths,
    inv: Path,
    timings: Timings,
    *,
    provisioned: bool,
    memory: Mapping[str, int] | None = None,
) -> None:
    from lab.providers.base import ssh_argv

    print("\n" + "=" * 72)
    print(
        f"lab {record.name} is up ({record.provider} provider"
        + (f", image {record.image}" if record.image else "")
        + ")"
    )
    if record.baked:
        print("baked:       " + ", ".join(f"{role}s {tag}" for role, tag in sorted(record.baked.items())))
    agent = "fieldlab-agent" if record.layout == "fieldlab" else f"fieldlab-agent as unit {record.layout}"
    services = {
        "server": "openbao (vault api :8200), consul if installable",
        "client": f"dockerd, cni plugins, {agent} (mTLS api :4646)",
        "light": f"cni plugins, {agent} (mTLS api :4646; exec"
        + (" and raw_exec" if record.raw_exec else "")
        + ", no docker)",
    }
    light = [n for n in record.nodes if n.role == "light"]
    for n in record.nodes:
        if n.role != "light":
            print(f"  {n.name:<9} {n.address:<15} {services[n.role] if provisioned else '(not provisioned)'}")
    if light:
        span = f"{light[0].name}..{light[-1].name}" if len(light) > 1 else light[0].name
        print(
            f"  {span} ({len(light)} light clients, {light[0].address}..{light[-1].address}) "
            + (services["light"] if provisioned else "(not provisioned)")
        )
    if memory:
        print("memory:      " + memory_line(record, memory))
    if record.raw_exec:
        print("raw_exec:    on for every client (no isolation: trusted jobspecs only)")
    if record.target != "fieldlab":
        print(f"target:      {record.target} (your cluster's own clients: nothing deployed here)")
    if record.layout != "fieldlab":
        print(f"layout:      {record.layout} (the agents under Nomad's names; the suites read the nodes so)")
    print(f"inventory:   {inv}")
    print(f"state dir:   {paths.state_dir}   (secrets in {paths.secrets_dir}, mode 0600)")
    last = record.nodes[-1]
    print(f"ssh:         fieldlab lab ssh {last.name}   (or: {' '.join(ssh_argv(last, paths))})")
    print("phases:")
    print(timings.table())
    print("=" * 72, flush=True)
