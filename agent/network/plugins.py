"""The version of the CNI plugins, whether CNI CHECK can be trusted with them, and which of the
conflist's plugins run (`plan_cni_chain`, a decision with its fault flag).

Debian's containernetworking-plugins 1.1.1 give no version fingerprint of their own (`--version` says
"version unknown", VERSION only lists spec versions): `plugin_version` asks dpkg first, then the
binary's `--version`, and `check_supported` gates CHECK on >= 1.3.0 (upstream's gate; portmap CHECK
fails on IPv4-only hosts and bridge CHECK when udev rewrites the veth MAC in 1.1.1).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.fieldbugs.bugs import NO_BUGS, Bugs


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int = 0

    _RE = re.compile(r"^\s*(?:\d+:)?v?(\d+)\.(\d+)(?:\.(\d+))?")

    @classmethod
    def parse(cls, text: str) -> Version | None:
        """'1.1.1+ds1-3+b5' (dpkg), 'v1.3.0', '1.2' -> Version; anything else -> None."""
        m = cls._RE.match(text)
        return cls(int(m[1]), int(m[2]), int(m[3] or 0)) if m else None

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


CHECK_MIN_VERSION = Version(1, 3, 0)
_PLUGIN_VERSION_RE = re.compile(r"\bv(\d+\.\d+\.\d+)\b")


def _dpkg_version(binary: Path) -> Version | None:
    try:
        owner = subprocess.run(
            ["dpkg-query", "-S", str(binary)], capture_output=True, text=True, timeout=10, check=False
        )
        if owner.returncode != 0 or ":" not in owner.stdout:
            return None
        package = owner.stdout.split(":", 1)[0].split(",")[0].strip()
        ver = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Version.parse(ver.stdout) if ver.returncode == 0 else None


def plugin_version(
    plugin_dir: str | os.PathLike[str], plugin: str = "bridge", *, declared: str = ""
) -> Version | None:
    """The version of the CNI plugins in `plugin_dir`, or None when it cannot be told (treat as old).

    In order: a version the operator declared (plugins copied in by hand), the Debian package that owns
    the binary (`dpkg-query -S`, then its version), the binary's `--version` ("CNI bridge plugin
    v1.3.0"; 1.1.1 as packaged by Debian prints "version unknown").
    """
    if declared:
        return Version.parse(declared)
    binary = Path(os.path.realpath(Path(plugin_dir) / plugin))
    if not binary.is_file():
        return None
    found = _dpkg_version(binary)
    if found:
        return found
    try:
        proc = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (proc.stdout or proc.stderr).splitlines()[:1]
    m = _PLUGIN_VERSION_RE.search(first[0]) if first else None
    return Version.parse(m[1]) if m else None


def check_supported(version: Version | None) -> bool:
    """Whether CNI CHECK can be trusted with these plugins (upstream's gate: bridge >= 1.3.0)."""
    return version is not None and version >= CHECK_MIN_VERSION


def plan_cni_chain(types: Sequence[str], bugs: Bugs = NO_BUGS) -> tuple[int, ...]:
    """The conflist's plugins an ADD/DEL runs, by index: all of them, the `loopback` one too (it
    brings `lo` up in a netns the agent made, as Nomad's bridge network since PR #13428).
    `no-loopback-in-netns` is nomad-13428: loopback is left out, and an exec or raw_exec task in
    bridge mode has no 127.0.0.1."""
    return tuple(i for i, t in enumerate(types) if not (bugs.no_loopback_in_netns and t == "loopback"))
