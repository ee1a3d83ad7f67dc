"""The default provider: each lab host is a systemd container node on a lab-only docker network.

Node run flags are the ones measured in LAB-SUBSTRATE.md: no --privileged (it fails on these hosts),
every capability but CAP_SYS_RESOURCE, a private cgroup namespace, tmpfs /run and /tmp so a reboot
clears them, named volumes for /var/lib/docker and /var/lib/cni so they survive a reboot, and
restart policy unless-stopped so `systemctl reboot` inside the node comes back as a reboot.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lab.config import LabPaths, LabSpec, NodeSpec, image_role
from lab.errors import ProviderError
from lab.image import ensure_image
from lab.keys import ensure_ssh_key
from lab.progress import say
from lab.providers.base import NODE_BOOT_TIMEOUT, LabRecord, Node, NodeState, ssh_argv
from lab.ssh import boot_id, wait_ssh
from lab.waits import WaitTimeout, wait_until

LABEL = "fieldlab.lab"
# Node containers created at once (the API calls are dockerd's work; a fleet is 100 of them).
CREATE_PARALLEL = 4
# What a light client never runs: the docker engine of the image it shares with full clients, and
# udev (its coldplug at boot walks every device of the host: a hundred nodes booting at once were
# 680 udev workers and a load of 500; veths keep the MAC they were created with without it, which
# is what node_base's .link file asks udev for on full clients).
LIGHT_MASKED_UNITS = (
    "docker.service",
    "docker.socket",
    "containerd.service",
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service",
    "e2scrub_all.timer",
)
# A node's container stop: systemd shuts down, inner dockerd stops its containers (up to 10 s).
NODE_STOP_TIMEOUT = 30
HARD_KILL_TIMEOUT = 30.0


def _client() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        raise ProviderError(
            f"cannot reach dockerd ({exc}); run `make bootstrap` to install and start it"
        ) from None
    return client


class DockerProvider:
    name = "docker"
    bakes = True  # nodes start from baked images (lab/bake.py)

    def __init__(self) -> None:
        self._docker: Any = None

    @property
    def docker(self) -> Any:
        if self._docker is None:
            self._docker = _client()
        return self._docker

    # -- names -------------------------------------------------------------------------------
    @staticmethod
    def network_name(lab: str) -> str:
        return f"fieldlab-{lab}"

    @staticmethod
    def container_name(lab: str, node: str) -> str:
        return f"fieldlab-{lab}-{node}"

    @staticmethod
    def volume_names(lab: str, node: str, role: str = "client") -> dict[str, str]:
        """Named volumes survive a reboot as a host's disk does; a light client has no docker engine."""
        vols = {f"fieldlab-{lab}-{node}-cni": "/var/lib/cni"}
        if role != "light":
            vols[f"fieldlab-{lab}-{node}-docker"] = "/var/lib/docker"
        return vols

    # -- up ----------------------------------------------------------------------------------
    def image(self) -> tuple[str, bool]:
        return ensure_image(self.docker)

    def up(self, spec: LabSpec, paths: LabPaths, images: Mapping[str, str] | None = None) -> LabRecord:
        """`images`: the image per role (the baked ones, lab/bake.py); by default the bare node image."""
        import docker.errors

        paths.ensure()
        if not paths.lab_file.exists():
            # No record here, yet labelled objects of this lab may exist: a killed run's or another
            # checkout's, their nodes trusting another key and their restart policy having brought
            # them back with dockerd. Adopting them would wait for an ssh that never accepts us.
            left = self.down(LabRecord(spec.name, self.name, []), paths)
            if left:
                say(f"lab {spec.name}: no record here; removed what a lost run left: {len(left)} objects")
        pubkey = ensure_ssh_key(paths.ssh_key, f"fieldlab-{spec.name}")
        base, _ = self.image()
        net = self._ensure_network(spec)
        nodes = [Node(ns.name, ns.role, ns.address) for ns in spec.nodes]

        def ensure(ns: NodeSpec) -> bool:
            """The node's container exists and runs; True when this call started it."""
            tag = (images or {}).get(image_role(ns.role), base)
            cname = self.container_name(spec.name, ns.name)
            try:
                c = self.docker.containers.get(cname)
            except docker.errors.NotFound:
                c = None
            if c is not None:
                if c.image.tags and tag not in c.image.tags:
                    say(f"{ns.name}: keeps running image {c.image.tags[0]} (lab-down first to use {tag})")
                if c.status != "running":
                    c.start()
                    return True
                return False
            self._create_node(spec, ns.name, ns.role, ns.address, tag, net, pubkey)
            return True

        # A few at once: a fleet of light clients is a hundred containers (dockerd does the work).
        with ThreadPoolExecutor(CREATE_PARALLEL) as pool:
            started = [ns.name for ns, s in zip(spec.nodes, pool.map(ensure, spec.nodes), strict=True) if s]
        record = LabRecord(
            spec.name, self.name, nodes, subnet=spec.subnet, image=base, baked=dict(images or {})
        )
        record.save(paths)
        for n in nodes:
            wait_ssh(n.target(paths), NODE_BOOT_TIMEOUT, what="ssh after start")
        if started:
            shown = ", ".join(started) if len(started) <= 8 else f"{len(started)} nodes"
            say(f"started {shown}; all nodes answer over ssh")
        return record

    def images_in_use(self, record: LabRecord) -> dict[str, list[str]]:
        """node -> the tags of the image its container runs (empty when it has none or is missing)."""
        import docker.errors

        out: dict[str, list[str]] = {}
        for n in record.nodes:
            try:
                c = self.docker.containers.get(self.container_name(record.name, n.name))
                out[n.name] = list(c.image.tags)
            except docker.errors.NotFound:
                out[n.name] = []
        return out

    def _ensure_network(self, spec: LabSpec) -> Any:
        import docker.errors
        from docker.types import IPAMConfig, IPAMPool

        name = self.network_name(spec.name)
        try:
            net = self.docker.networks.get(name)
        except docker.errors.NotFound:
            net = None
        if net is not None:
            have = [c.get("Subnet") for c in (net.attrs.get("IPAM", {}).get("Config") or [])]
            if spec.subnet not in have:
                raise ProviderError(
                    f"network {name} exists with subnet {have}, not {spec.subnet}: "
                    f"`fieldlab lab down --lab {spec.name}` first"
                )
            return net
        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=spec.subnet, gateway=spec.gateway)])
        try:
            # internal: nodes reach each other and the controller, and nothing else.
            return self.docker.networks.create(
                name, driver="bridge", internal=True, ipam=ipam, labels={LABEL: spec.name}
            )
        except docker.errors.APIError as exc:
            raise ProviderError(
                f"cannot create network {name} on {spec.subnet}: {exc.explanation}; choose another --subnet"
            ) from None

    def _create_node(
        self, spec: LabSpec, node: str, role: str, address: str, tag: str, net: Any, pubkey: str
    ) -> None:
        api = self.docker.api
        labels = {LABEL: spec.name, "fieldlab.node": node, "fieldlab.role": role}
        vols = self.volume_names(spec.name, node, role)
        for vol in vols:
            self.docker.volumes.create(vol, labels=labels)
        host_config = api.create_host_config(
            cap_add=["ALL"],
            cap_drop=["SYS_RESOURCE"],
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            device_cgroup_rules=["a *:* rwm"],
            cgroupns="private",
            tmpfs={
                "/run": "rw,mode=755",
                "/run/lock": "rw",
                "/tmp": "rw,mode=1777",  # noqa: S108 - the node's own /tmp, a tmpfs as on a real host
            },
            binds={vol: {"bind": path, "mode": "rw"} for vol, path in vols.items()},
            restart_policy={"Name": "unless-stopped"},
            # Docker Hub's names answer at once, on loopback: the lab network is internal, so a lookup
            # of them through the host's resolver only times out (10 s per `:latest` pull through the
            # registry's Docker Hub mirror, where dockerd resolves docker.io first). Nothing listens there.
            extra_hosts=dict.fromkeys(DOCKER_HUB_NAMES, DOCKER_HUB_SINK),
        )
        # The CLI's `--security-opt systempaths=unconfined`: nothing under /proc masked or read-only.
        host_config["MaskedPaths"] = []
        host_config["ReadonlyPaths"] = []
        networking = api.create_networking_config(
            {net.name: api.create_endpoint_config(ipv4_address=address)}
        )
        cname = self.container_name(spec.name, node)
        c = api.create_container(
            tag,
            name=cname,
            hostname=node,
            labels=labels,
            host_config=host_config,
            networking_config=networking,
            stop_timeout=NODE_STOP_TIMEOUT,
        )
        api.put_archive(c["Id"], "/root/.ssh", _tar_file("authorized_keys", (pubkey + "\n").encode(), 0o600))
        if role == "light":
            # The client image has a docker engine: masked before the first boot, it never starts.
            api.put_archive(c["Id"], "/etc/systemd/system", _tar_masks(LIGHT_MASKED_UNITS))
        api.start(c["Id"])
        say(f"{node}: created {cname} at {address}")

    # -- down / status -----------------------------------------------------------------------
    def down(self, record: LabRecord, paths: LabPaths) -> list[str]:
        import docker.errors

        removed: list[str] = []
        for c in self.docker.containers.list(all=True, filters={"label": f"{LABEL}={record.name}"}):
            c.remove(force=True, v=True)
            removed.append(f"container {c.name}")
        for v in self.docker.volumes.list(filters={"label": f"{LABEL}={record.name}"}):
            v.remove(force=True)
            removed.append(f"volume {v.name}")
        try:
            self.docker.networks.get(self.network_name(record.name)).remove()
            removed.append(f"network {self.network_name(record.name)}")
        except docker.errors.NotFound:
            pass
        return removed

    def status(self, record: LabRecord, paths: LabPaths) -> list[NodeState]:
        import docker.errors

        out = []
        for n in record.nodes:
            try:
                c = self.docker.containers.get(self.container_name(record.name, n.name))
                image = c.image.tags[0] if c.image.tags else record.image
                out.append(NodeState(n.name, n.address, c.status, f"image {image}"))
            except docker.errors.NotFound:
                out.append(NodeState(n.name, n.address, "missing"))
        return out

    def node_memory(self, record: LabRecord) -> dict[str, int]:
        """node -> bytes of memory its container uses now, as `docker stats` counts it (usage less
        the inactive page cache): everything of the node, systemd to its tasks."""
        import docker.errors

        def one(n: Node) -> tuple[str, int | None]:
            try:
                c = self.docker.containers.get(self.container_name(record.name, n.name))
                return n.name, memory_in_use(c.stats(stream=False, one_shot=True).get("memory_stats") or {})
            except (docker.errors.APIError, docker.errors.NotFound):
                return n.name, None

        with ThreadPoolExecutor(CREATE_PARALLEL) as pool:
            return {name: b for name, b in pool.map(one, record.nodes) if b is not None}

    # -- reboot ------------------------------------------------------------------------------
    def reboot(self, record: LabRecord, paths: LabPaths, node: str, *, hard: bool) -> float:
        import docker.errors

        n = record.node(node)
        target = n.target(paths)
        before = boot_id(target)
        if before is None:
            raise ProviderError(f"{node}: does not answer over ssh before the reboot")
        c = self.docker.containers.get(self.container_name(record.name, node))
        t0 = time.monotonic()
        if hard:
            # Power cut: SIGKILL every process of the node, then power on again.
            c.kill()

            def stopped() -> tuple[bool | None, str]:
                c.reload()
                return (True if c.status != "running" else None), c.status

            # The restart policy may already have brought it back; the boot id decides below.
            with contextlib.suppress(WaitTimeout):
                wait_until(stopped, timeout=HARD_KILL_TIMEOUT, what=f"{node} container to die")
            c.reload()
            if c.status != "running":
                try:
                    c.start()
                except docker.errors.APIError as exc:
                    raise ProviderError(f"{node}: cannot power on again: {exc.explanation}") from None
        else:
            # Clean: systemd shuts the node down, PID 1 exits, the restart policy boots it again.
            c.exec_run(["systemctl", "reboot"], detach=True)
        wait_ssh(target, NODE_BOOT_TIMEOUT, not_boot_id=before, what="ssh with a new boot id after reboot")
        return time.monotonic() - t0

    def ssh_argv(self, record: LabRecord, paths: LabPaths, node: str) -> list[str]:
        return ssh_argv(record.node(node), paths)


def _tar_masks(units: tuple[str, ...]) -> bytes:
    """A tar of `<unit> -> /dev/null` symlinks: systemctl mask, done before systemd ever runs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for unit in units:
            info = tarfile.TarInfo(unit)
            info.type = tarfile.SYMTYPE
            info.linkname = "/dev/null"
            info.mtime = int(time.time())
            tf.addfile(info)
    return buf.getvalue()


# The names dockerd looks up for a Docker Hub image (the registry role's mirror serves them), and the
# loopback address they resolve to on a node: no lookup leaves the node, no connection leaves it.
DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io", "auth.docker.io")
DOCKER_HUB_SINK = "127.0.0.9"


def _tar_file(name: str, data: bytes, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        info.mtime = int(time.time())
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def memory_in_use(stats: Mapping[str, Any]) -> int | None:
    """Docker's figure from a container's memory_stats (pure): usage less inactive file pages
    (cgroup v1: total_inactive_file, v2: inactive_file), as the docker CLI shows it."""
    usage = stats.get("usage")
    if usage is None:
        return None
    detail = stats.get("stats") or {}
    cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    return int(usage) - int(cache) if int(cache) < int(usage) else int(usage)
