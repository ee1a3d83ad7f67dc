"""Nomad's FileRotator rules (client/logmon/logging/rotator.go) as pure functions: how a write is cut
between files, which names are rotated files, and which old files go.

Files are `<task>.<stream>.N`. A write fills the current file up to `file_size`. Near the end of a
file (less than LINE_SCAN bytes of room beyond the data) the cut prefers a newline: the data up to and
including the first newline goes in when it fits, else the file is rotated first. Data with no
newline goes to the next file whole when it would fit there, else (longer than a file, or files
smaller than LINE_SCAN) it is split at exactly the room left.

Two places where Nomad's code would go wrong and these rules do not: Nomad adds the running total of
a write to the file's size after each piece (it overcounts); here each piece counts once. And on a
fresh, empty file Nomad rotates again and again when a line does not fit (endless empty files);
here a fresh file is filled up to its size instead, since rotating cannot help.
"""

from __future__ import annotations

from collections.abc import Iterable

LINE_SCAN = 32 * 1024  # Nomad's lineScanLimit: how far before a file's end a newline is looked for


def plan_write(current_size: int, file_size: int, data: bytes) -> list[tuple[bool, bytes]]:
    """`data` cut into (rotate before it, piece) pairs, in order: every byte in exactly one piece.

    `current_size` is what the current file holds. No piece makes a file exceed `file_size`.
    Linear in `data`: the rest is never copied, and each newline is searched for once, not once
    per piece (tiny files cut a long line into many pieces).
    """
    pieces: list[tuple[bool, bytes]] = []
    size, n, rotate = current_size, 0, current_size >= file_size
    newline = -1  # the first newline at or after n; len(data) when there is none
    while n < len(data):
        if rotate:
            size = 0
        if newline < n:
            found = data.find(b"\n", n)
            newline = len(data) if found < 0 else found
        end = _piece_end(size, file_size, len(data), n, newline)
        if end is None:  # the file is rotated first; on a fresh one _piece_end never says so
            rotate = True
            continue
        pieces.append((rotate, data[n:end]))
        size += end - n
        n = end
        rotate = size >= file_size
    return pieces


def _piece_end(size: int, file_size: int, total: int, n: int, newline: int) -> int | None:
    """Where the piece from `n` ends when the file holds `size` bytes (the data's first newline at
    or after `n` is at `newline`, `total` when there is none); None: rotate before writing any."""
    room = file_size - size
    rest = total - n
    if room - LINE_SCAN >= rest:  # far from the end: no cut needed
        return total
    if newline < total and newline - n < room:  # the first line fits: it goes in whole
        return newline + 1
    fresh = size == 0
    if newline < total:
        return min(total, n + room) if fresh else None
    if rest > file_size or file_size < LINE_SCAN or fresh:
        # it would not fit a fresh file either (or the files are too small to look for a line):
        # fill this one up
        return min(total, n + room)
    return None


def index_of(name: str, base: str) -> int | None:
    """N of a rotated file `<base>.N`, else None.

    Only canonical decimal N (ASCII digits, no leading zero): a name is then the one name of its
    index, so that removing index N by the name `<base>.N` removes what was counted. A task can put
    any name in the logs dir (`web.stdout.²`, `web.stdout.007`): those are not rotated files.
    """
    prefix = base + "."
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    if not (digits.isascii() and digits.isdigit()) or (digits != "0" and digits.startswith("0")):
        return None
    return int(digits)


def to_purge(indexes: Iterable[int], max_files: int) -> list[int]:
    """The indexes to remove, oldest first, so that the `max_files` highest remain."""
    ordered = sorted(set(indexes))
    return ordered[: max(0, len(ordered) - max_files)]
