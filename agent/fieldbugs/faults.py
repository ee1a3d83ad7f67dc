"""Fault flags: put one field bug from FIELD-BUGS.md back on demand.

`FIELDLAB_AGENT_FAULTS=flag,flag` (off by default). Each flag restores exactly one known bug so the lab
can show its symptom and prove that the suite guarding it fails while the bug is present. An unknown
flag is a startup error, never ignored. The agent reads the flags once, as `decisions.Bugs` (one field
per flag, checked by a test, so a typo cannot make a flag silently do nothing), and only the pure
`plan_*` decisions look at it. Every active flag is announced with a loud WARNING at start.

Kill points (not a field bug, the same variable): an item `crash-at=<point>` makes the agent SIGKILL
itself when it reaches that named step of start, restart, network recovery, replacement or stop
(`agent.fieldbugs.killpoints.POINTS`, each documented there), once per data dir (a marker file there lets the
restarted agent get past it). Off unless set; an unknown point is a startup error like an unknown flag.
It is how the lab shows that no kill point loses or doubles anything (issue 12).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.errors import AgentError
from agent.fieldbugs.bugs import Bugs
from agent.fieldbugs.catalogue import FAULTS, IMPLEMENTED_FAULTS, KNOWN_FAULTS
from agent.fieldbugs.killpoints import POINTS, check_point

ENV_VAR = "FIELDLAB_AGENT_FAULTS"
CRASH_AT = "crash-at="  # the kill point item: crash-at=<point> (agent.fieldbugs.killpoints)


class FaultError(AgentError):
    """An unknown fault flag, in the environment or asked for by the code."""

    def __init__(self, flags: Iterable[str], source: str = ENV_VAR) -> None:
        self.flags = tuple(flags)
        self.source = source
        names = []
        for flag in self.flags:
            close = difflib.get_close_matches(flag, KNOWN_FAULTS, n=1)
            names.append(f"{flag!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        noun = "flag" if len(self.flags) == 1 else "flags"
        super().__init__(
            f"{source}: unknown fault {noun} {', '.join(names)}; known: {', '.join(sorted(KNOWN_FAULTS))}"
        )


@dataclass(frozen=True)
class Faults:
    """The active fault flags; `Faults()` is the default: none. `crash_at`: the kill point at which
    the agent SIGKILLs itself ("" for none; agent.fieldbugs.killpoints)."""

    active: frozenset[str] = frozenset()
    crash_at: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(self.active - KNOWN_FAULTS.keys())
        if unknown:
            raise FaultError(unknown, source="Faults")
        if self.crash_at:
            try:
                check_point(self.crash_at)
            except ValueError as exc:
                raise AgentError(f"Faults: {exc}") from None

    @classmethod
    def parse(cls, value: str, source: str = ENV_VAR) -> Faults:
        """A comma-separated list of flags; blanks around names and empty items are allowed."""
        flags = [item.strip() for item in value.split(",")]
        crash = [f.removeprefix(CRASH_AT).strip() for f in flags if f.startswith(CRASH_AT)]
        flags = [f for f in flags if f and not f.startswith(CRASH_AT)]
        unknown = sorted(set(flags) - KNOWN_FAULTS.keys())
        if unknown:
            raise FaultError(unknown, source)
        if len(set(crash)) > 1:
            raise AgentError(f"{source}: more than one crash-at point: {', '.join(crash)}")
        point = crash[0] if crash else ""
        if point and point not in POINTS:
            close = difflib.get_close_matches(point, POINTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise AgentError(f"{source}: unknown kill point {point!r}{hint}; known: {', '.join(POINTS)}")
        return cls(frozenset(flags), point)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Faults:
        return cls.parse(environ.get(ENV_VAR, ""))

    def bugs(self) -> Bugs:
        """The active flags as the frozen object the pure decisions take (read once at start)."""
        return Bugs.from_flags(self.active)

    def require_implemented(self) -> None:
        """Refuse flags whose bug the agent cannot put back yet: a flag must never be a silent no-op."""
        pending = sorted(self.active - IMPLEMENTED_FAULTS)
        if pending:
            raise FaultError(
                pending, source=f"{ENV_VAR} (not implemented yet, arrives with the templates issue)"
            )

    def announce(self, logger: logging.Logger) -> None:
        """One loud WARNING per active flag, so nobody mistakes a faulty run for a real one."""
        for flag in sorted(self.active):
            spec = FAULTS[flag]
            logger.warning("FAULT INJECTION ACTIVE: %s puts back %s: %s", flag, spec.bug, spec.description)
        if self.crash_at:
            logger.warning(
                "FAULT INJECTION ACTIVE: crash-at=%s: the agent SIGKILLs itself there (once per data dir)",
                self.crash_at,
            )
