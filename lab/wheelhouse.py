"""The agent's wheelhouse: the project's wheel and its dependencies, built on the controller so that
nodes with no network of their own can `pip install --no-index` it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from lab.config import PROJECT_DIR
from lab.errors import LabError

SOURCES = ("pyproject.toml", "agent")


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
    if (out / ".complete").exists():
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
    (out / ".complete").write_text(digest + "\n")
    return digest, True
