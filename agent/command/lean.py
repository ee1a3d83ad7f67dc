"""What the daemon process leaves out: the docker SDK imports paramiko (and with it invoke and
pynacl) for `ssh://` engines, which the agent never talks to: about 16 MB of RSS and 45 ms of
start-up for nothing. Marking it absent before the SDK loads makes the SDK skip its ssh transport,
as it does where paramiko is not installed. Only the daemon calls this (fieldlab-agent run): the
test and lab processes that use paramiko for their own SSH are never affected.

It also caps glibc's malloc arenas (`fewer_malloc_arenas`): glibc gives each thread that allocates
an arena of its own, up to 8 per core, and the restore's worker threads, the render passes and the
exec streams each touch one; what they freed stays in the daemon's RSS. Python's own small objects
come from pymalloc, and the GIL serialises the rest, so two arenas cost the daemon no contention
(the same as MALLOC_ARENA_MAX=2 in its environment, which many Python services set). On
make bench-agent's 50 allocs its effect was within the run-to-run noise (docs/benchmarks.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
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


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
ARENAS = 2


def fewer_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (before its threads start); False where the C
    library is not glibc or refuses."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
