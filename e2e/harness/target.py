"""What the harness reads on a client besides Nomad's HTTP API: one target profile, data in
e2e/targets/<name>.yml. `fieldlab` is this project's agent (the fieldlab_agent role's layout); `nomad`
a Nomad client as HashiCorp's packages lay it out. The suites, probes and checkers take names from
here (the agent's unit, the data dir, the CNI network, the netns and cgroup names, the docker labels),
so that what they read on a node means the same on a real Nomad client."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TARGETS_DIR = Path(__file__).resolve().parents[1] / "targets"
DEFAULT = "fieldlab"


class TargetError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    name: str
    unit: str  # the client agent's systemd unit
    data_dir: str  # alloc dirs: <data_dir>/alloc/<alloc id>/...
    config_dir: str  # the agent's config and credentials
    cni_network: str  # the bridge network's CNI name
    ipam_dir: str  # host-local IP reservations
    netns_dir: str
    netns_prefix: str  # an alloc's named netns: <netns_dir>/<prefix><alloc id>
    cgroup_parent: str  # process-driver task cgroups: <root>[/<controller>]/<parent>/...
    docker_alloc_label: str  # every container of an alloc carries it (its pause container too)
    docker_role_label: str  # "pause" or "task" ("": no such label; the pause is told by its name)
    docker_managed_label: str  # every container the client made carries it
    pause_prefix: str  # the pause container's name: <prefix><alloc id>
    fault_flags: bool  # the client takes the lab's fault flags (FIELDLAB_FAULTS)
    own_stats: str  # the Stats section of /v1/agent/self with the client's own health ("": none)

    def netns_name(self, alloc_id: str) -> str:
        return f"{self.netns_prefix}{alloc_id}"

    def is_alloc_netns(self, name: str) -> bool:
        """An alloc's named netns: `<prefix><alloc id>` (a Nomad client's prefix is "": the alloc id)."""
        return name.startswith(self.netns_prefix) and (bool(self.netns_prefix) or bool(_UUID.match(name)))

    def alloc_dir(self, alloc_id: str) -> str:
        return f"{self.data_dir}/alloc/{alloc_id}"


def names() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.yml"))


def parse_target(text: str, where: str) -> Target:
    """A profile from its YAML text; TargetError naming `where` and the field when it is wrong."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TargetError(f"{where}: not YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise TargetError(f"{where}: a target profile is a mapping of fields")
    want = {f.name: f.type for f in fields(Target)}
    missing = sorted(set(want) - set(raw))
    extra = sorted(set(raw) - set(want))
    if missing or extra:
        raise TargetError(f"{where}: missing fields {missing}, unknown fields {extra}")
    for key, value in raw.items():
        kind = bool if want[key] == "bool" else str
        if not isinstance(value, kind) or (kind is str and value is None):
            raise TargetError(f"{where}: {key} must be a {kind.__name__}, not {value!r}")
    return Target(**raw)


def load_target(name: str = DEFAULT) -> Target:
    path = TARGETS_DIR / f"{name}.yml"
    if not path.is_file():
        raise TargetError(f"no target profile {name!r} (have {', '.join(names())}): {path}")
    target = parse_target(path.read_text(), str(path))
    if target.name != name:
        raise TargetError(f"{path}: name {target.name!r} differs from the file's name {name!r}")
    return target
