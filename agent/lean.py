"""What the daemon process leaves out: the docker SDK imports paramiko (and with it invoke and
pynacl) for `ssh://` engines, which the agent never talks to: about 16 MB of RSS and 45 ms of
start-up for nothing. Marking it absent before the SDK loads makes the SDK skip its ssh transport,
as it does where paramiko is not installed. Only the daemon calls this (fieldlab-agent run): the
test and lab processes that use paramiko for their own SSH are never affected."""

from __future__ import annotations

import sys

UNUSED = ("paramiko",)


def leave_out_unused_sdks() -> list[str]:
    """Mark the unused SDKs absent (unless something already imported them); what was left out."""
    left_out = []
    for name in UNUSED:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # `import paramiko` raises ImportError
            left_out.append(name)
    return left_out
