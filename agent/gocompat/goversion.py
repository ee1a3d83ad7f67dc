"""Versions and version constraints as Nomad's `version` and `semver` constraint operators read them.

- `parse_version` is hashicorp/go-version's NewVersion (v1.9.0, the one Nomad builds with): lenient,
  "v1.2", "1.2.3.4", "1.2.3beta" and "1.2.3-rc.1+build" all parse; fewer than three segments are padded
  with zeros;
- `version_constraints` is go-version's NewConstraint: a comma-separated list of `op version`, with op
  one of = != > < >= <= ~> (none: =); a pre-release version matches only a constraint with a pre-release
  on the same segments (go-version's prereleaseCheck), and ~> is the pessimistic operator;
- `semver_constraints` is Nomad's helper/constraints/semver: the same list without ~>, each version
  strict SemVer (a "-" before a pre-release), compared by go-version's ordering with no pre-release
  check.

The node's side of a constraint is always parsed with `parse_version` (Nomad's checkVersionMatch).
The regular expressions are go-version's, read as Go reads them: `\\s` is ASCII whitespace and `$` the
end of the text. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Constraints",
    "Version",
    "VersionError",
    "go_parse_int",
    "parse_semver",
    "parse_version",
    "semver_constraints",
    "version_constraints",
]

_MAX_INT64 = (1 << 63) - 1
_WS = r"[\t\n\f\r ]*"  # Go's \s
_PART = r"[0-9A-Za-z\-~]"
_VERSION_RAW = (
    r"v?([0-9]+(\.[0-9]+)*?)"
    rf"(-([0-9]+{_PART}*(\.{_PART}+)*)|(-?([A-Za-z\-~]+{_PART}*(\.{_PART}+)*)))?"
    rf"(\+({_PART}+(\.{_PART}+)*))?"
    r"?"
)
_SEMVER_RAW = (
    r"v?([0-9]+(\.[0-9]+)*?)"
    rf"(-([0-9]+{_PART}*(\.{_PART}+)*)|(-([A-Za-z\-~]+{_PART}*(\.{_PART}+)*)))?"
    rf"(\+({_PART}+(\.{_PART}+)*))?"
    r"?"
)
_VERSION = re.compile(rf"{_VERSION_RAW}\Z")
_SEMVER = re.compile(rf"{_SEMVER_RAW}\Z")
_VERSION_CONSTRAINT = re.compile(rf"{_WS}(<=|>=|!=|~>|<|>|=|){_WS}({_VERSION_RAW}){_WS}\Z")
_SEMVER_CONSTRAINT = re.compile(rf"{_WS}(<=|>=|!=|<|>|=|){_WS}({_SEMVER_RAW}){_WS}\Z")
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")


class VersionError(ValueError):
    """A version or constraint that does not parse; the message is go-version's."""


def go_parse_int(text: str) -> tuple[int, bool]:
    """Go's strconv.ParseInt(text, 10, 64): (value, ok). Out of range is not ok and answers the
    clamped value, as Go does; anything else that is no number answers (0, False)."""
    if not _GO_INT.match(text):
        return 0, False
    value = int(text)
    if value > _MAX_INT64:
        return _MAX_INT64, False
    if value < -_MAX_INT64 - 1:
        return -_MAX_INT64 - 1, False
    return value, True


@dataclass(frozen=True)
class Version:
    segments: tuple[int, ...]  # padded with zeros to at least three
    given: int  # how many segments the text had (go-version's `si`)
    pre: str = ""
    metadata: str = ""

    def __str__(self) -> str:
        text = ".".join(str(s) for s in self.segments)
        if self.pre:
            text += f"-{self.pre}"
        if self.metadata:
            text += f"+{self.metadata}"
        return text

    def compare(self, other: Version) -> int:
        """-1, 0 or 1 as go-version's Compare: metadata is ignored, a pre-release sorts before its
        release, a missing segment is a zero."""
        if str(self) == str(other):
            return 0
        if self.segments != other.segments:
            return _compare_segments(self.segments, other.segments)
        if self.pre and other.pre:
            return _compare_prereleases(self.pre, other.pre)
        return (not self.pre) - (not other.pre)  # a release sorts after its pre-releases


def _compare_segments(mine: tuple[int, ...], theirs: tuple[int, ...]) -> int:
    for i in range(max(len(mine), len(theirs))):
        if i >= len(mine):
            return -1 if any(theirs[i:]) else 0
        if i >= len(theirs):
            return 1 if any(mine[i:]) else 0
        if mine[i] != theirs[i]:
            return -1 if mine[i] < theirs[i] else 1
    return 0


def _parse(text: str, pattern: re.Pattern[str]) -> Version:
    m = pattern.match(text)
    if m is None:
        raise VersionError(f"malformed version: {text}")
    segments = []
    for part in m.group(1).split("."):
        value, ok = go_parse_int(part)
        if not ok:
            raise VersionError(
                f'error parsing version: strconv.ParseInt: parsing "{part}": value out of range'
            )
        segments.append(value)
    given = len(segments)
    segments += [0] * (3 - given)
    pre = m.group(7) or m.group(4) or ""
    return Version(tuple(segments), given, pre, m.group(10) or "")


def parse_version(text: str) -> Version:
    """go-version's NewVersion; VersionError when `text` is no version."""
    return _parse(text, _VERSION)


def parse_semver(text: str) -> Version:
    """go-version's NewSemver (strict SemVer); VersionError when `text` is none."""
    return _parse(text, _SEMVER)


def _compare_part(mine: str, theirs: str) -> int:  # noqa: PLR0911 - go-version's comparePart, branch by branch
    if mine == theirs:
        return 0
    my_int, my_numeric = go_parse_int(mine)
    their_int, their_numeric = go_parse_int(theirs)
    if mine == "":
        return -1 if their_numeric else 1
    if theirs == "":
        return 1 if my_numeric else -1
    if my_numeric and not their_numeric:
        return -1
    if not my_numeric and their_numeric:
        return 1
    if not my_numeric and not their_numeric and mine > theirs:
        return 1
    return 1 if my_int > their_int else -1


def _compare_prereleases(mine: str, theirs: str) -> int:
    if mine == theirs:
        return 0
    my_parts, their_parts = mine.split("."), theirs.split(".")
    for i in range(max(len(my_parts), len(their_parts))):
        a = my_parts[i] if i < len(my_parts) else ""
        b = their_parts[i] if i < len(their_parts) else ""
        result = _compare_part(a, b)
        if result:
            return result
    return 0


# --- constraints ------------------------------------------------------------------------------------


def _prerelease_check(v: Version, c: Version) -> bool:
    if c.pre and v.pre:
        return v.segments == c.segments  # a pre-release matches only one on the same segments
    return not (v.pre and not c.pre)  # a release constraint matches no pre-release


def _pessimistic(v: Version, c: Version) -> bool:
    if not _prerelease_check(v, c) or (c.pre and not v.pre):
        return False
    if v.compare(c) < 0:
        return False
    n = len(c.segments)
    if n > len(v.segments):
        return False
    if any(v.segments[i] != c.segments[i] for i in range(c.given - 1)):
        return False
    return c.segments[n - 1] <= v.segments[n - 1]


_Check = Callable[[Version, Version], bool]
_VERSION_OPS: dict[str, _Check] = {
    "": lambda v, c: v.compare(c) == 0,
    "=": lambda v, c: v.compare(c) == 0,
    "!=": lambda v, c: v.compare(c) != 0,
    ">": lambda v, c: _prerelease_check(v, c) and v.compare(c) == 1,
    "<": lambda v, c: _prerelease_check(v, c) and v.compare(c) == -1,
    ">=": lambda v, c: _prerelease_check(v, c) and v.compare(c) >= 0,
    "<=": lambda v, c: _prerelease_check(v, c) and v.compare(c) <= 0,
    "~>": _pessimistic,
}
_SEMVER_OPS: dict[str, _Check] = {
    "": lambda v, c: v.compare(c) == 0,
    "=": lambda v, c: v.compare(c) == 0,
    "!=": lambda v, c: v.compare(c) != 0,
    ">": lambda v, c: v.compare(c) == 1,
    "<": lambda v, c: v.compare(c) == -1,
    ">=": lambda v, c: v.compare(c) >= 0,
    "<=": lambda v, c: v.compare(c) <= 0,
}


@dataclass(frozen=True)
class Constraints:
    """Parsed constraints: `check(version)` is whether the version meets all of them."""

    text: str
    parts: tuple[tuple[_Check, Version], ...]

    def check(self, version: Version) -> bool:
        return all(check(version, bound) for check, bound in self.parts)


def _constraints(
    text: str, pattern: re.Pattern[str], ops: dict[str, _Check], parse: Callable[[str], Version], what: str
) -> Constraints:
    parts = []
    for single in text.split(","):
        m = pattern.match(single)
        if m is None:
            raise VersionError(f"{what}: {single}")
        parts.append((ops[m.group(1)], parse(m.group(2))))
    return Constraints(text, tuple(parts))


def version_constraints(text: str) -> Constraints:
    """go-version's NewConstraint (">= 1.2, < 2.0", "~> 1.4"); VersionError when one does not parse."""
    return _constraints(text, _VERSION_CONSTRAINT, _VERSION_OPS, parse_version, "malformed constraint")


def semver_constraints(text: str) -> Constraints:
    """Nomad's semver.NewConstraint: strict SemVer versions, no ~>; VersionError when one does not parse."""
    return _constraints(text, _SEMVER_CONSTRAINT, _SEMVER_OPS, parse_semver, "Malformed constraint")
