"""Faults as inject/heal pairs. A reboot heals itself: its "heal" is waiting until the node is back."""

from __future__ import annotations

from e2e.harness.cluster import Cluster
from lab.providers import provider_for
from lab.providers.base import LabRecord


def reboot(cluster: Cluster, node: str, *, hard: bool) -> float:
    """Reboot through the lab's provider (clean: systemctl reboot; hard: power cut). Returns seconds
    until the node answered over ssh with a new boot id."""
    record = LabRecord.load(cluster.paths)
    if record is None:
        raise RuntimeError(f"lab {cluster.name} has no lab record at {cluster.paths.lab_file}")
    return provider_for(record.provider).reboot(record, cluster.paths, node, hard=hard)
