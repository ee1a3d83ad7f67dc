"""Shared fixtures: `openbao`, a real OpenBao server (see tests/openbao_server.py); `images` and `lab`,
an AgentLab with the workload images for root tests of a real agent (see tests/agent_lab.py; a module
may define its own `lab`)."""

from __future__ import annotations

from tests.agent_lab import images, lab
from tests.openbao_server import openbao

__all__ = ["images", "lab", "openbao"]
