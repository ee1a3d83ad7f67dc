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
    """Problems (rejections) and warnings collected over one parse; nothing stops at the first. The same
    problem or warning found twice (a block looked at by two passes) is kept once."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _seen: set[tuple[str, str]] = field(default_factory=set, repr=False)
    _seen_warnings: set[str] = field(default_factory=set, repr=False)

    def error(self, path: str, reason: str) -> None:
        if (path, reason) not in self._seen:
            self._seen.add((path, reason))
            self.problems.append((path, reason))

    def warn(self, path: str, reason: str = NOT_IMPLEMENTED) -> None:
        text = f"{path}: {reason}" if path else reason
        if text not in self._seen_warnings:
            self._seen_warnings.add(text)
            self.warnings.append(text)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def depth(value: object, limit: int) -> int:
    """How deeply `value` nests (a scalar is 0, `[1]` is 1, `{"a": {}}` is 2), counted without recursion
    and only up to `limit + 1`: a value nested deeper than `limit` answers `limit + 1`."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Block):
            item = item.body
        if isinstance(item, Mapping):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if deepest > limit:
            return limit + 1
        stack.extend((child, level) for child in children)
    return deepest
