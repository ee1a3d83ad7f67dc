"""Baked VM images for the qemu provider: the container bake's layer, applied to the VM image's tree.

The bake (lab/bake.py) runs the lab-independent roles once on container nodes started from the bare
node image and commits each node as ONE layer over that image: the layer is exactly what the roles
changed. A VM node's root filesystem is the same debootstrap and packages plus Debian's kernel,
initramfs and AppArmor (lab/vm_image.py), and the roles do the same on either (none of them asks
whether it runs in a container), so the baked VM image of a role is the VM tree with that layer
applied, docker's whiteouts honoured. Under TCG the same roles cost 18-22 minutes of emulated CPU on
every VM lab-up; this costs one debootstrap and a filesystem per role on the controller, once per
bake, and `lab up` then does only the per-lab work on the VMs, as on container nodes.

Cached in /var/cache/fieldlab/vm/baked-<VM image hash>-<bake hash>-<role>/ (kernel and initramfs
copied from the VM image they share); `lab down --image` removes them with the VM images.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from lab import image
from lab.bake import bake_lock
from lab.errors import ImageBuildError
from lab.progress import say
from lab.vm_image import VM_CACHE, VmImage, build_tree, write_disk

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
# GNU tar in the tree: owners by number, modes and xattrs (file capabilities) kept, whiteouts left out.
EXTRACT = ("tar", "-x", "-p", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--exclude=.wh.*")


@dataclass(frozen=True)
class LayerChanges:
    """What a docker layer does to the tree below it, besides adding its files (pure data)."""

    removed: list[str]  # paths the layer deletes (whiteout `.wh.<name>`)
    emptied: list[str]  # directories whose lower contents the layer hides (opaque `.wh..wh..opq`)


def layer_changes(names: list[str]) -> LayerChanges:
    """The deletions of a layer from its member names (pure). A name that would leave the tree
    (absolute, `..`) is refused: a layer of our own bake never has one."""
    removed: list[str] = []
    emptied: list[str] = []
    for name in names:
        p = PurePosixPath(name.removeprefix("./"))
        if p.is_absolute() or ".." in p.parts:
            raise ImageBuildError(f"layer member {name!r} points outside the tree")
        if p.name == OPAQUE:
            emptied.append(str(p.parent))
        elif p.name.startswith(WHITEOUT):
            removed.append(str(p.parent / p.name[len(WHITEOUT) :]))
    return LayerChanges(removed=removed, emptied=emptied)


def baked_vm_dir(cache: Path, vm_hash: str, bake_hash: str, role: str) -> Path:
    return cache / f"baked-{vm_hash}-{bake_hash}-{role}"


def baked_vm_tag(vm_hash: str, bake_hash: str, role: str) -> str:
    """How the summary and the lab's record name a baked VM image."""
    return f"fieldlab-vm-baked:{role}-{vm_hash}-{bake_hash}"


def ensure_vm_baked(
    client: Any, vm: VmImage, bake_tags: dict[str, str], bake_hash: str, cache: Path = VM_CACHE
) -> tuple[dict[str, VmImage], bool]:
    """({role: baked VM image}, built): each found in the cache, or made now from the VM tree and
    the layer the bake committed for that role (one debootstrap for all the roles missing)."""
    images = {role: VmImage(vm.hash, baked_vm_dir(cache, vm.hash, bake_hash, role)) for role in bake_tags}
    if all(img.complete() for img in images.values()):
        return images, False
    with bake_lock():  # two VM lab-ups at once carry it once
        missing = [role for role, img in images.items() if not img.complete()]
        if not missing:
            return images, False
        _carry(client, vm, bake_tags, bake_hash, cache, {role: images[role] for role in missing})
    return images, True


def _carry(
    client: Any,
    vm: VmImage,
    bake_tags: dict[str, str],
    bake_hash: str,
    cache: Path,
    missing: dict[str, VmImage],
) -> None:
    say(f"carrying the bake {bake_hash} onto the VM image {vm.hash} ({', '.join(missing)}) ...")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".vm-bake-", dir=cache) as tmp:
        work = Path(tmp)
        tree = work / "tree"
        build_tree(tree)
        for role, target in missing.items():
            role_tree = work / f"tree-{role}"
            image.run_step(["cp", "-a", "--reflink=auto", str(tree), str(role_tree)], "copy the VM tree")
            with top_layer(client, bake_tags[role], workdir=work) as layer:
                apply_layer(role_tree, layer)
            out = work / f"out-{role}"
            out.mkdir()
            write_disk(role_tree, out / "rootfs.qcow2")
            shutil.rmtree(role_tree)
            for name in ("vmlinuz", "initrd.img"):  # the same kernel: the layer does not touch /boot
                shutil.copyfile(vm.dir / name, out / name)
            (out / "bake.json").write_text(
                json.dumps({"bake": bake_hash, "image": bake_tags[role], "vm": vm.hash}) + "\n"
            )
            shutil.rmtree(target.dir, ignore_errors=True)  # an incomplete one
            os.rename(out, target.dir)
            say(f"baked {baked_vm_tag(vm.hash, bake_hash, role)}")


@contextmanager
def top_layer(client: Any, tag: str, workdir: Path | None = None) -> Iterator[IO[bytes]]:
    """The last layer of image `tag` (what the bake committed) as an uncompressed tar, checked
    against the image's own diff id: `docker save` into a temporary file (in `workdir`: the whole
    image, hundreds of MB), then its manifest."""
    img = client.images.get(tag)
    diff_id = str(img.attrs["RootFS"]["Layers"][-1])
    with tempfile.TemporaryFile(dir=workdir) as saved:
        for chunk in img.save(named=False):
            saved.write(chunk)
        saved.seek(0)
        with tarfile.open(fileobj=saved) as archive:
            manifest = json.load(_member(archive, "manifest.json"))
            layer_name = str(manifest[0]["Layers"][-1])
            with tempfile.TemporaryFile(dir=workdir) as layer:
                digest = hashlib.sha256()
                src = _member(archive, layer_name)
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    layer.write(chunk)
                if f"sha256:{digest.hexdigest()}" != diff_id:
                    raise ImageBuildError(
                        f"{tag}: the saved layer {layer_name} is not the image's last layer {diff_id}"
                        " (compressed, or another layout)"
                    )
                layer.seek(0)
                yield layer


def _member(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    f = archive.extractfile(name)
    if f is None:
        raise ImageBuildError(f"docker save gave no {name}")
    return f


def apply_layer(tree: Path, layer: IO[bytes]) -> None:
    """Apply a docker layer to `tree` as the overlay would: its whiteouts delete from the tree, its
    opaque directories are emptied, then its files are extracted over the tree. Every step runs
    chrooted into the tree, so a symlink in the tree resolves inside it, never on the controller."""
    with tarfile.open(fileobj=layer) as tf:
        changes = layer_changes(tf.getnames())
    if changes.emptied:
        empty = (
            'for d; do if [ -d "$d" ]; then find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; fi; done'
        )
        _in_tree(tree, ["sh", "-c", empty, "sh", *(f"/{d}" for d in changes.emptied)])
    if changes.removed:
        _in_tree(tree, ["rm", "-rf", "--", *(f"/{p}" for p in changes.removed)])
    layer.seek(0)
    _in_tree(
        tree,
        [*EXTRACT, "-C", "/", "-f", "-"],
        stdin=layer,
    )


def _in_tree(tree: Path, argv: list[str], stdin: IO[bytes] | None = None) -> None:
    feed: dict[str, Any] = {}
    if stdin is not None:
        try:
            stdin.fileno()
            feed["stdin"] = stdin  # a file: the command reads it from its descriptor
        except (OSError, io.UnsupportedOperation):
            feed["input"] = stdin.read()  # in memory (a small layer)
    proc = subprocess.run(["chroot", str(tree), *argv], capture_output=True, check=False, **feed)
    if proc.returncode != 0:
        raise ImageBuildError(
            f"applying the bake's layer ({argv[0]} in the VM tree) failed: "
            f"{proc.stderr.decode(errors='replace')[-500:]}"
        )
