"""Shared fixtures: `openbao`, a real OpenBao server (see tests/openbao_server.py); `images` and `lab`,
an AgentLab with the workload images for root tests of a real agent (see tests/agent_lab.py; a module
may define its own `lab`); `agent`, an agent on a fake node serving Nomad's HTTP API over mTLS with
the operator's CLI flags for it (see tests/agent_api.py)."""

from __future__ import annotations

from tests.agent_api import agent
from tests.agent_lab import images, lab
from tests.openbao_server import openbao

__all__ = ["agent", "images", "lab", "openbao"]
