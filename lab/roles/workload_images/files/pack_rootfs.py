#!/usr/bin/python3
"""Pack files of this node into a tar for an image's build context (`ADD rootfs.tar /`).

Takes executables and directory trees; adds every shared library they need (per `ldd`, for the
executables and for every shared object in the trees) and every parent directory. Symbolic links are
stored as the files they point to. The tar depends on nothing but the paths, contents and modes: it is
sorted, owned by 0:0, and every mtime is 0 (a directory's mtime moves whenever anything is installed
next to it; leave out bytecode caches, which Python writes whenever it likes, and compile them in the
image instead). It is replaced only when its bytes would change, and the last line of output is JSON:
{"changed": ..., "files": ..., "bytes": ...}.

Runs on the node with its /usr/bin/python3 (standard library only).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

# `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`
_LDD_LINE = re.compile(r"^\s*(?:(?P<name>\S+)\s+=>\s+)?(?P<path>/\S+|not found)(?:\s+\(0x[0-9a-f]+\))?\s*$")


class PackError(Exception):
    pass


def _is_shared_object(path: Path) -> bool:
    return path.name.endswith(".so") or ".so." in path.name


def shared_libraries(binary: Path) -> set[Path]:
    """Every library the dynamic loader maps for `binary`, the loader included (empty if static)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        if "not a dynamic executable" in out.stdout + out.stderr:
            return set()
        raise PackError(f"ldd {binary}: {out.stderr.strip() or out.stdout.strip()}")
    libs: set[Path] = set()
    for line in out.stdout.splitlines():
        m = _LDD_LINE.match(line)
        if not m:
            continue  # linux-vdso.so.1 (0x...), "statically linked"
        if m["path"] == "not found":
            raise PackError(f"{binary}: needs {m['name']}, which the loader cannot find")
        libs.add(Path(m["path"]))
    return libs


def walk(tree: Path, exclude: Sequence[str]) -> Iterable[Path]:
    """Every directory and file under `tree`, minus those whose path relative to it matches `exclude`."""

    def excluded(path: Path) -> bool:
        rel = str(path.relative_to(tree))
        return any(fnmatch.fnmatchcase(rel, pattern) for pattern in exclude)

    yield tree
    for root, dirs, files in os.walk(tree):
        here = Path(root)
        # os.walk does not descend into symbolic links to directories: leave them out altogether.
        dirs[:] = sorted(d for d in dirs if not excluded(here / d) and not (here / d).is_symlink())
        yield from (here / d for d in dirs)
        yield from (here / f for f in sorted(files) if not excluded(here / f))


def collect(executables: Sequence[Path], trees: Sequence[Path], exclude: Sequence[str]) -> list[Path]:
    paths: set[Path] = set(executables)
    for tree in trees:
        if not tree.is_dir():
            raise PackError(f"{tree}: not a directory")
        paths.update(walk(tree, exclude))
    for path in sorted(paths):
        if path in executables or (path.is_file() and _is_shared_object(path)):
            paths.update(shared_libraries(path))
    for path in list(paths):
        paths.update(p for p in path.parents if p != Path("/"))
    return sorted(paths)


def _tarinfo(path: Path, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(str(path).lstrip("/"))
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tar(paths: Sequence[Path], output: Path) -> tuple[int, int]:
    """Write the tar of `paths` (symbolic links followed); (files, bytes of content)."""
    files = size = 0
    with tarfile.open(output, "w", format=tarfile.GNU_FORMAT) as tar:
        for path in paths:
            try:
                st = path.stat()
            except FileNotFoundError:
                print(f"skipping {path}: a dangling symbolic link", file=sys.stderr)
                continue
            info = _tarinfo(path, st)
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with path.open("rb") as f:
                    tar.addfile(info, f)
                files += 1
                size += st.st_size
            else:
                print(f"skipping {path}: not a file or a directory", file=sys.stderr)
    return files, size


def _same(a: Path, b: Path) -> bool:
    if not b.exists() or a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while chunk := fa.read(1 << 20):
            if chunk != fb.read(len(chunk)):
                return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--executable", type=Path, action="append", default=[])
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[], help="glob, relative to its tree")
    ns = parser.parse_args(argv)
    try:
        paths = collect(ns.executable, ns.tree, ns.exclude)
        tmp = ns.output.with_name(ns.output.name + ".new")
        files, size = write_tar(paths, tmp)
    except (PackError, OSError) as e:
        print(f"pack_rootfs: {e}", file=sys.stderr)
        return 1
    tmp.chmod(0o644)
    changed = not _same(tmp, ns.output)
    if changed:
        tmp.replace(ns.output)
    else:
        tmp.unlink()
    print(json.dumps({"changed": changed, "files": files, "bytes": size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
