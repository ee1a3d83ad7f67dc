"""Nomad's FileRotator rules (client/logmon/logging/rotator.go), as pure functions: where a write
is cut between files, and which old files go.

Files are `<task>.<stream>.N`. A write fills the current file up to `file_size`; near the end of a
file (less than LINE_SCAN bytes of room beyond the data) the cut prefers a newline: the data up to
and including the first newline goes in when it fits, else the file is rotated first; data with no
newline that is bigger than a whole file (or files smaller than LINE_SCAN) is split at the room left,
and so is a line that does not fit a fresh file either.
"""

from __future__ import annotations

from collections.abc import Iterable

LINE_SCAN = 32 * 1024  # Nomad's lineScanLimit


def plan_write(current: int, file_size: int, data: bytes) -> list[tuple[bool, bytes]]:
    """The pieces `data` goes out in: (rotate first, piece), in order; every byte once."""
    out: list[tuple[bool, bytes]] = []
    n, rotate = 0, False
    while n < len(data):
        if rotate or current >= file_size:
            rotate, current = False, 0
            out.append((True, b""))
        room = file_size - current
        rest = data[n:]
        if room - LINE_SCAN < len(rest):
            nl = rest.find(b"\n")
            if nl >= 0 and room - nl - 1 >= 0:
                piece = rest[: nl + 1]
            elif current == 0 or len(rest) > file_size or (nl < 0 and file_size < LINE_SCAN):
                # a fresh file the line does not fit either, or data bigger than a file: cut at the
                # room left (Nomad would rotate again and again on a fresh file)
                piece = rest[: min(room, len(rest))]
            else:
                rotate = True
                continue
        else:
            piece = rest
        out.append((False, piece))
        n += len(piece)
        current += len(piece)
    return _merged(out)


def _merged(steps: list[tuple[bool, bytes]]) -> list[tuple[bool, bytes]]:
    """(True, b"") markers folded into the piece after them."""
    merged: list[tuple[bool, bytes]] = []
    pending = False
    for rot, piece in steps:
        if rot and not piece:
            pending = True
            continue
        merged.append((pending, piece))
        pending = False
    if pending:
        merged.append((True, b""))
    return merged


def index_of(name: str, base: str) -> int | None:
    """N of `<base>.N`, else None."""
    if not name.startswith(base + "."):
        return None
    rest = name[len(base) + 1 :]
    return int(rest) if rest.isdigit() else None


def to_purge(indexes: Iterable[int], max_files: int) -> list[int]:
    """The oldest indexes beyond the `max_files` newest."""
    ordered = sorted(set(indexes))
    return ordered[: max(0, len(ordered) - max_files)]
