"""`python3 -m agent.workloads.probe`: the probe as an exec task, from the agent's venv."""

from __future__ import annotations

import sys

from agent.workloads.probe.probe import main

if __name__ == "__main__":
    sys.exit(main())
