"""A client host volume's path as it is mounted into a task: resolved at mount time (every start,
restarts included), so that a path that is, or has since become, a link is followed once, by the
agent, and the driver is handed the real directory, never the link. A path that leads into the
agent's own files (its data dir with the state database, secrets and alloc dirs, its config dir, its
TLS cert and key, its Vault credentials, its code), or holds them, is refused: a workload never
reaches them.

`own_path_problem` decides over plain paths; `resolve_host_volume` is the thin adapter that asks
the file system. Nomad's client checks a host volume's path once, when it fingerprints it; the
agent's own dirs are not Nomad's rule but the project's (a task never reaches the agent's files).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import agent
from agent.config import DEFAULT_CONFIG, Config
from agent.errors import AgentError


class HostVolumeError(AgentError):
    """A host volume cannot be mounted: the reason names the volume, its path and what it leads to."""


def own_paths(cfg: Config) -> tuple[Path, ...]:
    """The agent's own files and dirs besides its data dir: the config dir (the default one and the
    one it was started with), the dirs of its TLS cert
    and key and of its Vault AppRole file (the config dir in the lab's layouts, /etc/nomad.d in
    Nomad's), and its own code (the package, and the virtualenv it runs from: a task that could
    write them would run as root in the agent)."""
    found = [DEFAULT_CONFIG.parent, Path(agent.__file__).resolve().parent]
    if cfg.config_file is not None:  # the dir of the config file the agent was started with
        found.append(cfg.config_file.parent)
    if sys.prefix != sys.base_prefix:
        found.append(Path(sys.prefix))
    if cfg.tls is not None:
        found += [cfg.tls.cert_file.parent, cfg.tls.key_file.parent]
    if cfg.vault.approle_file is not None:
        found.append(cfg.vault.approle_file.parent)
    return tuple(found)


def own_path_problem(real: Path, own: Iterable[Path]) -> str | None:
    """Why the real path `real` may not be mounted into a task, or None: it is one of the agent's
    own paths (`own`, real paths), lies inside one, or holds one."""
    for o in own:
        if real == o or o in real.parents:
            return f"leads into the agent's own {o}"
        if real in o.parents:
            return f"holds the agent's own {o}"
    return None


def _real_forms(paths: Iterable[Path]) -> list[Path]:
    """Each path as given (absolute) and as it resolves now: a data dir that is itself a link is
    protected under both names."""
    out: list[Path] = []
    for p in paths:
        out += [Path(os.path.abspath(p)), Path(os.path.realpath(p))]
    return out


def resolve_host_volume(name: str, path: str, own: Sequence[Path]) -> Path:
    """The real directory of host volume `name` now (its links followed once, here), refused with
    a HostVolumeError when it is missing, not a directory, or leads into (or holds) `own`."""
    try:
        real = Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        raise HostVolumeError(f'host volume "{name}": {path}: {exc.strerror or exc}') from None
    if not real.is_dir():
        raise HostVolumeError(f'host volume "{name}": {path} is not a directory')
    problem = own_path_problem(real, _real_forms(own))
    if problem is not None:
        shown = f"{path} (resolved: {real})" if str(real) != os.path.abspath(path) else path
        raise HostVolumeError(f'host volume "{name}": {shown} {problem}: refused')
    return real
