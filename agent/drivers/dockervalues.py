"""The plain data of a docker task's options (agent.drivers.dockeropts; Nomad's plugin config is
agent.command.plugins.DockerPlugin): the task's facts the mapping reads, its result, and the readers of
Nomad's HCL spec types (a block may arrive as a list of maps, a number as a string)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.fieldbugs.bugs import NO_BUGS, Bugs


@dataclass(frozen=True)
class TaskFacts:
    """What the mapping reads besides the config: the group's network mode, the task's memory, and
    the host paths of the task's dir and of its alloc's dir (the sandbox of binds while volumes are
    off), the agent's own paths (never mounted), and how a host path resolves (os.path.realpath at
    start; the identity in tests and at submission), and the fault flags the mapping takes (the
    driver's: agent.fieldbugs.faults; NO_BUGS at submission)."""

    network_mode: str = "bridge"  # the group's: bridge, host or none
    memory_mb: int = 300
    memory_max_mb: int = 0  # the task's resources.memory_max (-1: no hard limit)
    task_dir: str = "/alloc-dir/task"
    alloc_dir: str = "/alloc-dir"
    own_paths: tuple[str, ...] = ()
    resolve: Callable[[str], str] = field(default=lambda p: p)
    bugs: Bugs = NO_BUGS


@dataclass
class DockerOpts:
    kwargs: dict[str, Any] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (config key path, why)
    port_map: dict[str, int] = field(default_factory=dict)  # legacy: label -> container port

    def refuse(self, key: str, why: str) -> None:
        self.refused.append((key, why))


# -- value readers: Nomad's HCL spec types (a block may arrive as a list of maps) --------------------
# Shared by the exec and raw_exec options (agent.drivers.execopts): each refuses into what it is given.


class Refuses(Protocol):
    def refuse(self, key: str, why: str) -> None: ...


def read_str(config: Mapping[str, Any], key: str, out: Refuses) -> str:
    v = config.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        out.refuse(key, f"must be a string, not {type(v).__name__}")
        return ""
    return v


def read_bool(config: Mapping[str, Any], key: str, out: Refuses) -> bool | None:
    v = config.get(key)
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str) and v in ("true", "false"):
        return v == "true"
    out.refuse(key, f"must be a bool, not {v!r}")
    return None


def read_int(config: Mapping[str, Any], key: str, out: Refuses) -> int | None:
    v = config.get(key)
    if v is None:
        return None
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v:
        out.refuse(key, f"must be a whole number, not {v!r}")
        return None
    return int(v)


def read_strs(config: Mapping[str, Any], key: str, out: Refuses) -> list[str]:
    v = config.get(key)
    if v is None:
        return []
    if not isinstance(v, list | tuple) or not all(isinstance(s, str) for s in v):
        out.refuse(key, "must be a list of strings")
        return []
    return list(v)


def str_map(value: object) -> dict[str, str] | None:
    """Nomad's list(map(string)) / a block of attributes: one map, or None when it is not one."""
    maps = value if isinstance(value, list | tuple) else [value]
    merged: dict[str, str] = {}
    for m in maps:
        if not isinstance(m, Mapping):
            return None
        for k, v in m.items():
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                return None
            merged[str(k)] = str(v)
    return merged


def read_map(config: Mapping[str, Any], key: str, out: Refuses) -> dict[str, str]:
    v = config.get(key)
    if v is None:
        return {}
    m = str_map(v)
    if m is None:
        out.refuse(key, "must be a map of strings")
        return {}
    return m


def read_block(config: Mapping[str, Any], key: str, out: Refuses) -> dict[str, Any]:
    v = config.get(key)
    if v is None:
        return {}
    if isinstance(v, list | tuple) and len(v) == 1:
        v = v[0]
    if not isinstance(v, Mapping):
        out.refuse(key, "must be one block")
        return {}
    return dict(v)


def read_blocks(config: Mapping[str, Any], key: str, out: Refuses) -> list[dict[str, Any]]:
    v = config.get(key)
    if v is None:
        return []
    items = [v] if isinstance(v, Mapping) else v
    if not isinstance(items, list | tuple) or not all(isinstance(b, Mapping) for b in items):
        out.refuse(key, "must be blocks (a list of maps)")
        return []
    return [dict(b) for b in items]
