"""The agent's wheelhouse: the project's wheel and its dependencies, built on the controller so that
nodes with no network of their own can `pip install --no-index` it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

from lab.config import PROJECT_DIR
from lab.errors import LabError

SOURCES = ("pyproject.toml", "agent")
# The wheels again as one file, beside them: the fieldlab_agent role sends it in one transfer where a
# directory copy costs a module run or three per wheel (~200 s for 11 wheels on a TCG VM).
ARCHIVE = "wheelhouse.tar"


def source_hash() -> str:
    h = hashlib.sha256()
    for top in SOURCES:
        p = PROJECT_DIR / top
        files = (
            [p]
            if p.is_file()
            else sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        )
        for f in files:
            h.update(str(f.relative_to(PROJECT_DIR)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_wheelhouse(dest: Path) -> tuple[str, bool]:
    """Build into dest/<hash>/ unless it is there already; return (hash, built)."""
    digest = source_hash()
    out = dest / digest
    if (out / ".complete").exists() and (out / ARCHIVE).exists():  # one built before the archive: again
        return digest, False
    out.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old != out and old.is_dir():
            subprocess.run(["rm", "-rf", str(old)], check=False)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(out), str(PROJECT_DIR)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise LabError(f"building the agent wheelhouse failed (is PyPI reachable?):\n{tail}")
    _archive(out)
    (out / ".complete").write_text(digest + "\n")
    return digest, True


def _archive(out: Path) -> None:
    """out/ARCHIVE: the wheels (not the stamp), root-owned and 0644 as the role installs them, in a
    stable order; written beside and renamed, so a half-written one is never taken."""
    tmp = out / (ARCHIVE + ".part")
    with tarfile.open(tmp, "w") as tar:
        for wheel in sorted(out.glob("*.whl")):
            info = tar.gettarinfo(str(wheel), arcname=wheel.name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with wheel.open("rb") as fh:
                tar.addfile(info, fh)
    tmp.rename(out / ARCHIVE)
