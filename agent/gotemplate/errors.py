"""The exceptions of the template language: every failure names the template, a 1-based line and
column and a reason, so `str(e)` reads like `secrets/cert.pem:3:14: <reason>`."""

from __future__ import annotations

import bisect


class TemplateError(Exception):
    """Base of every error `parse` and `execute` raise."""

    def __init__(self, name: str, line: int, col: int, reason: str) -> None:
        super().__init__(name, line, col, reason)
        self.name = name
        self.line = line
        self.col = col
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.name}:{self.line}:{self.col}: {self.reason}"


class TemplateSyntaxError(TemplateError):
    """The template text does not parse."""


class TemplateExecError(TemplateError):
    """Executing the template failed (a missing key, a function's error, a bad comparison...)."""


class Locator:
    """Maps a character offset in the template text to a 1-based (line, column)."""

    __slots__ = ("_starts", "name")

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self._starts = [0]
        i = text.find("\n")
        while i >= 0:
            self._starts.append(i + 1)
            i = text.find("\n", i + 1)

    def line_col(self, pos: int) -> tuple[int, int]:
        idx = bisect.bisect_right(self._starts, pos) - 1
        return idx + 1, pos - self._starts[idx] + 1

    def syntax(self, pos: int, reason: str) -> TemplateSyntaxError:
        line, col = self.line_col(pos)
        return TemplateSyntaxError(self.name, line, col, reason)

    def exec(self, pos: int, reason: str) -> TemplateExecError:
        line, col = self.line_col(pos)
        return TemplateExecError(self.name, line, col, reason)
