"""Bridge networking for allocations: named netns, the CNI plugins called per the spec, the agent's own
network verification and the CNI iptables chains (for teardown and the orphan sweeper)."""

from __future__ import annotations
