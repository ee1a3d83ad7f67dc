"""The error every driver raises (low in the drivers package: the exec session and the host
process helpers raise it without importing the driver protocols)."""

from __future__ import annotations

from agent.errors import AgentError


class DriverError(AgentError):
    """A driver could not do what it was asked. `unavailable`: the runtime itself did not answer
    (the docker engine down or restarting): worth retrying as is, not a verdict on the task.
    `recoverable`: a start may work when tried again (Nomad's RecoverableError: the docker driver's
    create and start errors); an unavailable runtime is always recoverable."""

    def __init__(
        self, driver: str, what: str, reason: str, *, unavailable: bool = False, recoverable: bool = False
    ) -> None:
        self.driver, self.what, self.reason = driver, what, reason
        self.unavailable = unavailable
        self.recoverable = recoverable or unavailable
        super().__init__(f"{driver}: {what}: {reason}")
