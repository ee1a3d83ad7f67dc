"""The VM node image of the qemu provider: the container node's rootfs (lab/image.py: the same
debootstrap, packages and common changes) plus Debian's cloud kernel, its initramfs and AppArmor,
as an ext4 filesystem in a qcow2 file, with the kernel and initramfs beside it (qemu boots them
directly: no bootloader in the image). Each node boots a qcow2 overlay of it.

Cached in /var/cache/fieldlab/vm/<hash>/ by the hash of every input (the container node's inputs
too); a build writes a temporary directory and renames it into place, so a half-built image is never
used, and a stale one is left for the overlays that still use it (`lab down --image` removes them all).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lab import image
from lab.errors import ImageBuildError
from lab.progress import say

VM_DIR = Path(__file__).resolve().parent / "node_vm"
VM_CACHE = Path("/var/cache/fieldlab/vm")
# Bump when the build steps below change in a way the input files do not show.
VM_RECIPE = "1"
DISK_SIZE = "8G"  # the root filesystem's size (sparse: a fresh image takes ~1 GiB)
ROOT_LABEL = "fieldlab-root"
SEED_LABEL = "fl-seed"  # the per-node seed disk (lab/node_vm/fieldlab-vm-seed)
TOOLS = ("debootstrap", "mkfs.ext4", "qemu-img", "qemu-system-x86_64")


@dataclass(frozen=True)
class VmImage:
    hash: str
    dir: Path

    @property
    def disk(self) -> Path:
        return self.dir / "rootfs.qcow2"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    def complete(self) -> bool:
        return all(p.is_file() for p in (self.disk, self.kernel, self.initrd))


def vm_packages() -> list[str]:
    return image.package_list(VM_DIR / "packages.txt")


def input_hash() -> str:
    """Hash of everything that decides the VM image: the container node's inputs and the VM's."""
    h = hashlib.sha256()
    h.update(f"node={image.input_hash()} recipe={VM_RECIPE} size={DISK_SIZE}\n".encode())
    for name in sorted(p.name for p in VM_DIR.iterdir() if p.is_file()):
        h.update(name.encode() + b"\0" + (VM_DIR / name).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def ensure_vm_image(cache: Path = VM_CACHE) -> tuple[VmImage, bool]:
    """(image, built): the cached image when its hash matches, else built now (~3-4 minutes)."""
    found = VmImage(input_hash(), cache / input_hash())
    if found.complete():
        return found, False
    missing = missing_tools()
    if missing:
        raise ImageBuildError(
            f"the qemu provider needs {', '.join(missing)}: run `make bootstrap PROVIDER=qemu`"
            " (the controller playbook with its VM packages)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".build-{found.hash}-", dir=cache))
    try:
        tree = work / "tree"
        build_tree(tree)
        _copy_boot_files(tree, work)
        write_disk(tree, work / "rootfs.qcow2")
        shutil.rmtree(tree)
        shutil.rmtree(found.dir, ignore_errors=True)  # an incomplete one
        os.rename(work, found.dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return found, True


def build_tree(tree: Path) -> None:
    """The VM node's root filesystem as a directory: the container node's debootstrap and packages,
    the VM's packages (kernel, initramfs, AppArmor), the VM's own changes."""
    tree.mkdir(parents=True, exist_ok=True)
    image.debootstrap(tree, image.packages() + vm_packages())
    customise_vm(tree)


def write_disk(tree: Path, qcow2: Path) -> None:
    """`tree` as an ext4 root filesystem (labelled ROOT_LABEL, DISK_SIZE, sparse) in a qcow2 file."""
    say(f"writing the root filesystem ({DISK_SIZE}, ext4) and converting it to qcow2 ...")
    raw = qcow2.with_suffix(".raw")
    try:
        image.run_step(
            ["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(tree), str(raw), DISK_SIZE], "mkfs.ext4"
        )
        image.run_step(["qemu-img", "convert", "-O", "qcow2", str(raw), str(qcow2)], "qemu-img")
    finally:
        raw.unlink(missing_ok=True)


def remove_vm_images(cache: Path = VM_CACHE) -> list[Path]:
    """Every cached VM image (and half-built ones); what was removed."""
    gone = []
    for d in sorted(cache.iterdir()) if cache.is_dir() else []:
        if d.is_dir():
            shutil.rmtree(d)
            gone.append(d)
    return gone


def customise_vm(tree: Path) -> None:
    """Changes to the rootfs that a VM node needs before its first boot (pure file edits, and
    `systemctl enable` in the tree, which only writes symlinks)."""
    image.customise_any_node(tree)
    sbin = tree / "usr/local/sbin/fieldlab-vm-seed"
    sbin.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(VM_DIR / "fieldlab-vm-seed", sbin)
    sbin.chmod(0o755)
    shutil.copy2(VM_DIR / "fieldlab-vm-seed.service", tree / "etc/systemd/system/fieldlab-vm-seed.service")
    (tree / "etc/fstab").write_text(f"LABEL={ROOT_LABEL} / ext4 defaults,errors=remount-ro 0 1\n")
    (tree / "etc/hostname").write_text("fieldlab-vm\n")
    image.run_step(
        ["chroot", str(tree), "systemctl", "enable", "fieldlab-vm-seed.service", "systemd-networkd.service"],
        "systemctl enable in the VM tree",
    )


def _copy_boot_files(tree: Path, out: Path) -> None:
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    initrds = sorted((tree / "boot").glob("initrd.img-*"))
    if len(kernels) != 1 or len(initrds) != 1:
        raise ImageBuildError(
            f"the VM tree's /boot has {len(kernels)} kernel(s) and {len(initrds)} initramfs(es), not one"
            " each: check lab/node_vm/packages.txt"
        )
    shutil.copyfile(kernels[0], out / "vmlinuz")
    shutil.copyfile(initrds[0], out / "initrd.img")
