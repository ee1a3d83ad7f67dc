"""What the hostile-workload suites share: the node's files a workload must never change (the
agent's config, credentials and TLS key, and a canary file of the test's), fingerprinted before an
attack and compared after it, and the alloc's events that name each refusal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.harness.checkers import FileSeen
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.probes import observe_files
from e2e.harness.remote import Remote

CANARY = "/etc/fieldlab-canary"
HOST_FILES = [CANARY, "/etc/fieldlab-agent/*.json", "/etc/fieldlab-agent/tls/*"]


def fingerprint(node: Remote) -> list[FileSeen]:
    seen = observe_files(node, HOST_FILES)
    assert any(f.path == CANARY for f in seen), f"{node.name}: canary {CANARY} not seen"
    assert len(seen) >= 3, f"{node.name}: the agent's config files were not seen: {seen}"
    return seen


@pytest.fixture
def canary(cluster: Cluster) -> Iterator[list[FileSeen]]:
    """The canary written on the first client and the node's files fingerprinted; the canary goes
    at the end."""
    node = cluster.clients[0]
    node.run(f"printf 'fieldlab canary\\n' > {CANARY} && chmod 0644 {CANARY}")
    try:
        yield fingerprint(node)
    finally:
        node.run(f"rm -f {CANARY}", check=False)


def alloc_events(agent: Agent, alloc_id: str) -> list[tuple[str, str]]:
    return [(str(e["type"]), str(e["message"])) for e in agent.events(alloc_id)]
