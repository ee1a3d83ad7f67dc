"""What the agent names and writes for the containers of a docker task (pure): Nomad's labels and
container names, the pause container's hostname and DNS options, the /etc/hosts of a group network's
task, the engine's log bounds, why an image is missing, and a managed container as docker's list
shows it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.drivers.base import Sandbox

# Nomad's docker driver's labels (drivers/docker/driver.go: dockerLabelAllocID, ...)
NOMAD_LABEL_PREFIX = "com.hashicorp.nomad."
NOMAD_LABEL_ALLOC = NOMAD_LABEL_PREFIX + "alloc_id"


def pause_sandbox(sandbox: Sandbox) -> dict[str, object]:
    """The pause container's create options for the group network's hostname and DNS (only those
    set: docker keeps the node's resolv.conf lines for the others)."""
    kw: dict[str, object] = {"hostname": sandbox.hostname} if sandbox.hostname else {}
    for key, values in (
        ("dns", sandbox.dns_servers),
        ("dns_search", sandbox.dns_searches),
        ("dns_opt", sandbox.dns_options),
    ):
        if values:
            kw[key] = list(values)
    return kw


def etc_hosts(address: str, hostname: str, extra_hosts: Sequence[str] = ()) -> str:
    """The /etc/hosts Nomad's docker driver mounts into a task of a group network
    (GenerateEtcHostsMount), with the task's `extra_hosts` ("<host>:<ip>", checked by dockeropts) as
    "<ip> <host>" lines after the alloc's own."""
    extra = "".join(f"\n{ip} {host}" for host, _, ip in (h.partition(":") for h in extra_hosts))
    if extra:
        extra = f"\n# these entries are extra hosts added by the task config{extra}\n"
    return (
        "# written by fieldlab-agent for the task group's network (as a Nomad client writes it)\n"
        "127.0.0.1 localhost\n"
        "::1 localhost\n"
        "::1 ip6-localhost ip6-loopback\n"
        "fe00::0 ip6-localnet\n"
        "ff00::0 ip6-mcastprefix\n"
        "ff02::1 ip6-allnodes\n"
        "ff02::2 ip6-allrouters\n"
        "ff02::3 ip6-allhosts\n"
        "\n"
        "# the alloc's address and hostname, the same for every task of the group\n"
        f"{address} {hostname}\n"
        f"{extra}"
    )


def pause_name(alloc_id: str) -> str:
    """Nomad's name of an alloc's pause container (drivers/docker/network.go)."""
    return f"nomad_init_{alloc_id}"


def legacy_pause_name(alloc_id: str) -> str:
    """The name this agent gave pause containers before it took Nomad's: one started then is found
    by it (kept, not renamed: its alloc's tasks share its network namespace)."""
    return f"fieldlab_init_{alloc_id}"


# json-file, per container: bounded whatever the daemon's defaults (nomad#5782). Nomad's driver keeps
# 2 files of 2 MB; the agent's logger (python, following the engine's log) can fall behind a task
# that writes fast on a loaded node, and lines the engine rotated away before it read them are lost
# (seen in CI: nomad-11721's 16 500 first lines), so the engine keeps 3 files of 10 MB.
CONTAINER_LOG_OPTS = {"max-file": "3", "max-size": "10m"}


def task_container_name(task: str, alloc_id: str) -> str:
    return f"{task}-{alloc_id}"


def no_image(image: str, local: list[str], shown: int = 12) -> str:
    """Why a task's image is not there to run although the pull path found or pulled it (it was
    removed in between): the node's images (pure)."""
    have = sorted(set(local))
    listed = ", ".join(have[:shown]) + (f" and {len(have) - shown} more" if len(have) > shown else "")
    return (
        f"image {image!r} is not on this node (removed since it was found or pulled): the node has "
        f"{listed or 'no images'}; the lab's images are in its registry (docs/drivers.md, image pulls)"
    )


@dataclass(frozen=True)
class ManagedContainer:
    """A container the agent made, as docker's container list shows it (`GET /containers/json`):
    what the sweeper and the adoption read, with no inspect per container."""

    id: str
    name: str
    status: str  # docker's State: "created", "running", "exited", "dead", ...
    created: float  # unix seconds
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def listed(cls, entry: Mapping[str, object]) -> ManagedContainer:
        """One entry of docker's list (Id, Names ["/name"], State, Created, Labels)."""
        names = entry.get("Names")
        name = str(names[0]).lstrip("/") if isinstance(names, list) and names else ""
        labels = entry.get("Labels")
        created = entry.get("Created")
        return cls(
            id=str(entry.get("Id", "")),
            name=name,
            status=str(entry.get("State", "")),
            created=float(created) if isinstance(created, int | float) else 0.0,
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
        )
