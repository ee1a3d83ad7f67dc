"""The signal names Nomad's client takes in `POST /v1/client/allocation/:id/signal`, and its error for
any other: the task drivers parse the name with consul-template's `signals.Parse` (drivers/docker
SignalTask), which looks it up upper-cased in `signals.SignalLookup` (signals_unix.go) and fails with
`invalid signal %q - valid signals are %q`, formatting the nil signal it found (Go prints that as
`%!q(<nil>)`); the driver wraps it as `failed to parse signal: ...`, and the alloc runner (Signal
without a task) as `Failed to signal task: <task>, err: ...` in a multierror. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

# consul-template signals.SignalLookup on Linux, sorted as its ValidSignals are
NOMAD_SIGNALS: tuple[str, ...] = tuple(
    sorted(
        [
            "SIGNULL",
            "SIGABRT",
            "SIGALRM",
            "SIGBUS",
            "SIGCONT",
            "SIGFPE",
            "SIGHUP",
            "SIGILL",
            "SIGINT",
            "SIGIO",
            "SIGIOT",
            "SIGKILL",
            "SIGPIPE",
            "SIGPROF",
            "SIGQUIT",
            "SIGSEGV",
            "SIGSTOP",
            "SIGSYS",
            "SIGTERM",
            "SIGTRAP",
            "SIGTSTP",
            "SIGTTIN",
            "SIGTTOU",
            "SIGUSR1",
            "SIGUSR2",
            "SIGWINCH",
            "SIGXCPU",
            "SIGXFSZ",
        ]
    )
)
NOT_SENT = "SIGNULL"  # signal 0: a liveness probe, not something the agent's drivers send


def signal_name(raw: str) -> str | None:
    """The name a driver sends for `raw` (Nomad looks names up upper-cased); None: not one it takes."""
    name = raw.upper()
    return name if name in NOMAD_SIGNALS and name != NOT_SENT else None


def _go_quoted_list(names: Sequence[str]) -> str:
    """Go's %q of a []string: ["A" "B"]."""
    return "[" + " ".join(json.dumps(n) for n in names) + "]"


def parse_error() -> str:
    """The driver's error for a name `signals.Parse` does not know (its text, quirks included)."""
    valid = _go_quoted_list(NOMAD_SIGNALS)
    return f"failed to parse signal: invalid signal %!q(<nil>) - valid signals are {valid}"


def signal_error(task: str, tasks: Sequence[str]) -> str:
    """Nomad's whole answer for an invalid signal: the driver's error as is when a task was named,
    else the alloc runner's multierror over the tasks it was sent to."""
    if task:
        return parse_error()
    lines = "".join(f"\n\t* Failed to signal task: {t}, err: {parse_error()}" for t in tasks)
    count = f"{len(tasks)} error occurred:" if len(tasks) == 1 else f"{len(tasks)} errors occurred:"
    return f"{count}{lines}\n\n"
