"""`python -m agent.cli`: the same as `fieldlab-agent`."""

from __future__ import annotations

import sys

from agent.cli import main

sys.exit(main())
