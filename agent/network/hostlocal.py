"""host-local's reservations of one network (its files under <dataDir>/<network>: one per address,
naming the container and interface), read for the sweeper and the nomad-11272 checks, and released
under host-local's own lock when a DEL could not."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from agent.network.result import CniError, Reservation


def reservations(dirs: Sequence[Path]) -> list[Reservation]:
    """Every reservation in `dirs`, by container and address."""
    found = []
    for d in dirs:
        try:
            entries = list(d.iterdir())
        except FileNotFoundError:
            continue
        for p in entries:
            if p.name == "lock" or p.name.startswith("last_reserved_ip"):
                continue
            try:
                ipaddress.ip_address(p.name)
                lines = p.read_text().splitlines()
            except (ValueError, OSError):
                continue
            cid = lines[0].strip() if lines else ""
            ifname = lines[1].strip() if len(lines) > 1 else ""
            found.append(Reservation(p.name, cid, ifname, p))
    return sorted(found, key=lambda r: (r.container_id, r.ip))


def release(dirs: Sequence[Path], container_id: str, ifname: str | None = None) -> list[str]:
    """Remove the reservation files of this container (under host-local's own lock)."""
    released = []
    for d in dirs:
        if not d.is_dir():
            continue
        with _flocked(d / "lock"):
            for r in reservations(dirs):
                if r.path.parent != d or r.container_id != container_id:
                    continue
                if ifname is not None and r.ifname and r.ifname != ifname:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    r.path.unlink()
                    released.append(f"reservation {r.path}")
    return released


def carry_over(held: Sequence[Reservation], dest: Path) -> tuple[list[str], list[str]]:
    """Reserve in `dest` (the host-local dir of the network that now hands out addresses on the same
    subnet) every address of `held` (an earlier network's reservations, whose allocs still run), for the
    same container and interface, so that it never hands one out twice. Returns what was written and
    the addresses `dest` holds for another container (a double allocation, to be said)."""
    written: list[str] = []
    clashes: list[str] = []
    if not held:
        return written, clashes
    dest.mkdir(mode=0o755, parents=True, exist_ok=True)
    with _flocked(dest / "lock"):
        theirs = {r.ip: r.container_id for r in reservations([dest])}
        for r in held:
            if r.ip in theirs:
                if theirs[r.ip] != r.container_id:
                    clashes.append(f"{r.ip} ({r.container_id} in {r.path.parent}, {theirs[r.ip]} in {dest})")
                continue
            try:
                fd = os.open(dest / r.ip, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:  # host-local's own format: "<container id>\r\n<ifname>"
                f.write(f"{r.container_id}\r\n{r.ifname}")
            written.append(f"{r.ip} for {r.container_id}")
    return written, clashes


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EACCES):
            yield
            return
        raise CniError(f"cannot open host-local lock {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
