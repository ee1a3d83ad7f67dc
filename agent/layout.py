"""Where on the node the agent puts what it makes outside its data dir: the names that differ
between this project's own layout (`fieldlab`, the default) and Nomad's client (`nomad`).

- an exec task group's network namespace: `/run/netns/<netns_prefix><alloc id>` (Nomad names it by
  the alloc id alone, client/lib/nsutil);
- a process task's cgroup: `<cgroup root>[/<controller>]/<cgroup_parent>/<alloc id>.<task>` (Nomad 1.7+
  keeps its tasks under `nomad.slice`).

The CNI network's name is config too (`cni_network`), the data dir and the unit are the lab role's.
The daemon binds one layout at start (`bind`), before any alloc runs; everything else reads
`current()`. The sweeper and restore recognise a name of the bound layout only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,32}$")
_PARENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class NodeLayout:
    netns_prefix: str = "fl-"
    cgroup_parent: str = "fieldlab"

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.netns_prefix):
            raise ValueError(
                f"netns_prefix {self.netns_prefix!r}: up to 32 of letters, digits, '_', '.', '-'"
            )
        if not _PARENT.match(self.cgroup_parent):
            raise ValueError(
                f"cgroup_parent {self.cgroup_parent!r}: one path component of letters, digits, '_', '.', '-'"
            )

    def netns_name(self, alloc_id: str) -> str:
        return f"{self.netns_prefix}{alloc_id}"


def netns_alloc(name: str, prefix: str) -> str | None:
    """The alloc id of an agent-made netns called `name` under `prefix`, or None when the name is
    not one (with no prefix, as Nomad's, only an alloc id's shape tells: a UUID)."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    if prefix:
        return rest or None
    return rest if _UUID.match(rest) else None


FIELDLAB = NodeLayout()
NOMAD = NodeLayout(netns_prefix="", cgroup_parent="nomad.slice")

_current = FIELDLAB


def bind(layout: NodeLayout) -> None:
    """The daemon, from its config, at start (one layout per agent process)."""
    global _current  # noqa: PLW0603 - set once at start, as the job policies and the render worker
    _current = layout


def current() -> NodeLayout:
    return _current
