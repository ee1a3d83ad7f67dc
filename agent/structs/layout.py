"""Where on the node the agent puts what it makes outside its data dir, by default as Nomad's client
names it:

- an exec task group's network namespace: `/run/netns/<netns_prefix><alloc id>` (Nomad names it by
  the alloc id alone, client/lib/nsutil);
- a process task's cgroup: `<cgroup root>[/<controller>]/<cgroup_parent>/<alloc id>.<task>` (Nomad 1.7+
  keeps its tasks under `nomad.slice`);
- the bridge network's CNI name: `<cni conf dir>/<cni_network>.conflist` (Nomad's `nomad`), which
  also names host-local's reservations dir and the plugins' iptables chains.

The daemon binds one layout at start (`bind`), before any alloc runs, from its config. An alloc keeps
the names it was made with for its whole life (its record holds them, agent.structs.records): an alloc made
by an agent of an earlier layout (this project's own, `FORMER`: netns `fl-<id>`, cgroup `fieldlab`,
network `fieldlab`) is `pin`ned to its names at restore, and everything that names an alloc's
things asks `for_alloc`. The sweeper recognises the names of every layout in `recognised()`.

`unrecorded_layout` is the pure decision of which names an alloc has whose record an agent wrote
before records held them (the state schema upgrade): what is on the node tells, per name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,32}$")
_PARENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_NETWORK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class NodeLayout:
    netns_prefix: str = ""
    cgroup_parent: str = "nomad.slice"
    cni_network: str = "nomad"

    def __post_init__(self) -> None:
        if not isinstance(self.netns_prefix, str) or not _PREFIX.match(self.netns_prefix):
            raise ValueError(
                f"netns_prefix {self.netns_prefix!r}: up to 32 of letters, digits, '_', '.', '-'"
            )
        if not isinstance(self.cgroup_parent, str) or not _PARENT.match(self.cgroup_parent):
            raise ValueError(
                f"cgroup_parent {self.cgroup_parent!r}: one path component of letters, digits, '_', '.', '-'"
            )
        if not isinstance(self.cni_network, str) or not _NETWORK.match(self.cni_network):
            raise ValueError(
                f"cni_network {self.cni_network!r}: a CNI network name (letters, digits, '_', '.', '-')"
            )

    def netns_name(self, alloc_id: str) -> str:
        return f"{self.netns_prefix}{alloc_id}"

    def to_record(self) -> dict[str, str]:
        return {
            "netns_prefix": self.netns_prefix,
            "cgroup_parent": self.cgroup_parent,
            "cni_network": self.cni_network,
        }


def netns_alloc(name: str, prefix: str) -> str | None:
    """The alloc id of an agent-made netns called `name` under `prefix`, or None when the name is
    not one (with no prefix, as Nomad's, only an alloc id's shape tells: a UUID)."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    if prefix:
        return rest or None
    return rest if _UUID.match(rest) else None


def netns_owner(name: str, prefixes: Iterable[str]) -> str | None:
    """The alloc id of a netns named under any of `prefixes`, or None."""
    for prefix in prefixes:
        alloc = netns_alloc(name, prefix)
        if alloc is not None:
            return alloc
    return None


NOMAD = NodeLayout()  # Nomad's client's names: the default
FIELDLAB = NodeLayout(netns_prefix="fl-", cgroup_parent="fieldlab", cni_network="fieldlab")
FORMER = (FIELDLAB,)  # the layouts an agent of this project ran with before: always recognised

_current = NOMAD
_pinned: dict[str, NodeLayout] = {}


def bind(layout: NodeLayout) -> None:
    """The daemon, from its config, at start (one layout per agent process)."""
    global _current  # noqa: PLW0603 - set once at start, as the job policies and the render worker
    _current = layout
    _pinned.clear()


def current() -> NodeLayout:
    return _current


def pin(alloc_id: str, layout: NodeLayout) -> None:
    """This alloc keeps `layout`'s names (restore, for an alloc an earlier agent made)."""
    if layout == _current:
        _pinned.pop(alloc_id, None)
    else:
        _pinned[alloc_id] = layout


def for_alloc(alloc_id: str) -> NodeLayout:
    """The names of this alloc's things: its pinned layout's, else the bound one's."""
    return _pinned.get(alloc_id, _current)


def recognised() -> tuple[NodeLayout, ...]:
    """The layouts whose names the sweeper and restore take for the agent's: the bound one, the
    former ones and any an alloc is pinned to (in that order, without repeats)."""
    out: list[NodeLayout] = []
    for lay in (_current, *FORMER, *_pinned.values()):
        if lay not in out:
            out.append(lay)
    return tuple(out)


@dataclass(frozen=True)
class SeenNames:
    """What is on the node of one alloc, under each recognised layout's names."""

    netns_prefixes: frozenset[str] = frozenset()  # prefixes p with a netns <p><alloc id>
    cgroup_parents: frozenset[str] = frozenset()  # parents holding a cgroup <alloc id>.<task>
    cni_networks: frozenset[str] = frozenset()  # networks with a kept ADD result of the alloc


def unrecorded_layout(seen: SeenNames, candidates: Iterable[NodeLayout]) -> NodeLayout:
    """The names of an alloc whose record holds none (written before records held them).

    Each name is the one found on the node; one not found (nothing of that kind exists for the alloc)
    is that of the candidate layout most of the found names belong to, and with nothing found at all
    that of the first former layout (the default of every agent that wrote records without names)."""
    cands = list(candidates)

    def score(lay: NodeLayout) -> int:
        return (
            (lay.netns_prefix in seen.netns_prefixes)
            + (lay.cgroup_parent in seen.cgroup_parents)
            + (lay.cni_network in seen.cni_networks)
        )

    best = max(cands, key=score) if cands and max(map(score, cands)) > 0 else FORMER[0]

    def pick(found: frozenset[str], attr: str) -> str:
        for lay in [best, *cands]:
            if getattr(lay, attr) in found:
                return str(getattr(lay, attr))
        return str(getattr(best, attr))

    return NodeLayout(
        netns_prefix=pick(seen.netns_prefixes, "netns_prefix"),
        cgroup_parent=pick(seen.cgroup_parents, "cgroup_parent"),
        cni_network=pick(seen.cni_networks, "cni_network"),
    )


def from_record(raw: object) -> NodeLayout | None:
    """The layout an alloc record holds; None when it holds none (an earlier agent's record).
    Raises ValueError naming the bad name."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"layout {raw!r} is not an object")
    keys = ("netns_prefix", "cgroup_parent", "cni_network")
    missing = [k for k in keys if k not in raw]
    if missing:
        raise ValueError(f"layout has no {', '.join(missing)}")
    return NodeLayout(**{k: raw[k] for k in keys})
