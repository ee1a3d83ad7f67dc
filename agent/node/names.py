"""What is on the node of one alloc under each recognised layout's names (agent.structs.layout.SeenNames):
read for an alloc whose record an earlier agent wrote without its names, so that restore can tell
which netns, task cgroups and CNI network are its (agent.structs.layout.unrecorded_layout decides)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from agent.drivers.cgroups import CGROUP_ROOT
from agent.network import netns
from agent.network.cnicache import ResultCache
from agent.structs.layout import NodeLayout, SeenNames


def seen_names(
    alloc_id: str, layouts: Iterable[NodeLayout], cni_cache_dir: Path, cgroup_root: Path = CGROUP_ROOT
) -> SeenNames:
    lays = list(layouts)
    # A placeholder left by a netns that went away counts too: the name was the alloc's.
    prefixes = {lay.netns_prefix for lay in lays if netns.netns_path(lay.netns_name(alloc_id)).exists()}
    parents = {
        lay.cgroup_parent for lay in lays if _has_task_cgroup(cgroup_root, lay.cgroup_parent, alloc_id)
    }
    networks = {
        lay.cni_network
        for lay in lays
        if ResultCache(cni_cache_dir, lay.cni_network, "").path(alloc_id).exists()
    }
    return SeenNames(frozenset(prefixes), frozenset(parents), frozenset(networks))


def _has_task_cgroup(root: Path, parent: str, alloc_id: str) -> bool:
    bases = [root / parent, root / "memory" / parent, root / "cpu" / parent]
    for base in bases:
        try:
            if any(p.name.startswith(f"{alloc_id}.") for p in base.iterdir() if p.is_dir()):
                return True
        except OSError:
            continue
    return False
