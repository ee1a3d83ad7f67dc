"""The shape both front-ends (HCL and JSON) hand to the builder, and the collector of problems.

A body is a plain mapping of field name to value. Values are str, int, float, bool, None (unset), lists,
mappings, lists of `Block` (an HCL block, with its labels), or `Invalid` (a value the front-end could not
accept; the builder reports it at the field's path, so that paths are spelled in one place).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

NOT_IMPLEMENTED = "accepted but not implemented by fieldlab-agent"

Body = Mapping[str, object]


@dataclass(frozen=True)
class Block:
    labels: tuple[str, ...]
    body: Body


@dataclass(frozen=True)
class Invalid:
    reason: str


@dataclass
class Report:
    """Problems (rejections) and warnings collected over one parse; nothing stops at the first."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error(self, path: str, reason: str) -> None:
        self.problems.append((path, reason))

    def warn(self, path: str, reason: str = NOT_IMPLEMENTED) -> None:
        self.warnings.append(f"{path}: {reason}" if path else reason)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
