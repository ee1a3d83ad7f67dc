"""The lab's exceptions: one root, narrow subclasses that say what failed and what to do."""

from __future__ import annotations


class LabError(Exception):
    """Root of every error the lab reports to a user as a one-line message (never a traceback)."""


class ConfigError(LabError):
    """A flag, option, or file given to the lab is invalid; the message names it."""


class NotRootError(LabError):
    """The lab needs root on the controller."""


class ProviderError(LabError):
    """A provider could not create, inspect or change a lab node."""


class ImageBuildError(LabError):
    """The node image could not be built."""


class PlaybookError(LabError):
    """An ansible-playbook run failed."""

    def __init__(self, playbook: str, returncode: int, tail: str = "") -> None:
        self.playbook = playbook
        self.returncode = returncode
        self.tail = tail
        msg = f"playbook {playbook} failed (exit {returncode})"
        if tail:
            msg += f"; last output:\n{tail}"
        super().__init__(msg)
