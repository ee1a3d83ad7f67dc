"""The docker node image: a debootstrap'ed Debian rootfs with systemd, cached by a hash of its inputs.

Build steps (each one measured in LAB-SUBSTRATE.md): debootstrap a minbase rootfs with the baked
packages, put the node entrypoint in it, `docker import` the tree, then a two-line build on top that
sets STOPSIGNAL (import cannot). The tag carries the hash of every input, so a second `lab-up` finds
the image and builds nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from lab.errors import ImageBuildError
from lab.progress import say

IMAGE_DIR = Path(__file__).resolve().parent / "node_image"
IMAGE_REPO = "fieldlab-node"
SUITE = "bookworm"
# Bump when the build steps below change in a way the input files do not show.
BUILD_RECIPE = "3"
# Units that make no sense in a container node and only fail or wait there.
MASKED_UNITS = (
    "getty.target",
    "console-getty.service",
    "systemd-firstboot.service",
    "systemd-remount-fs.service",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "systemd-networkd-wait-online.service",
)


def package_list(path: Path) -> list[str]:
    """The packages a packages.txt names, one per line (blank lines and # comments skipped)."""
    lines = path.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def packages() -> list[str]:
    return package_list(IMAGE_DIR / "packages.txt")


def input_hash() -> str:
    """Hash of everything that decides the image's content."""
    h = hashlib.sha256()
    h.update(f"recipe={BUILD_RECIPE} suite={SUITE}\n".encode())
    for name in sorted(p.name for p in IMAGE_DIR.iterdir() if p.is_file()):
        h.update(name.encode() + b"\0" + (IMAGE_DIR / name).read_bytes() + b"\0")
    h.update(" ".join(MASKED_UNITS).encode())
    return h.hexdigest()[:12]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{input_hash()}"


def apt_mirror() -> str:
    """The Debian mirror the controller itself uses, so the build goes where apt already reaches."""
    for src in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if not src.exists():
            continue
        for raw in src.read_text().splitlines():
            line = raw.strip()
            if line.startswith("URIs:"):
                uri = line.split()[1]
                if "security" not in uri:
                    return uri
            if line.startswith("deb ") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def run_step(argv: list[str], what: str, **kw: Any) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def debootstrap(tree: Path, include: list[str]) -> None:
    """A minbase Debian rootfs in `tree` with `include`, from the controller's own mirror."""
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: run `make bootstrap` (the controller playbook)")
    mirror = apt_mirror()
    say(f"debootstrap {SUITE} from {mirror} with {len(include)} packages (takes ~2 minutes) ...")
    run_step(
        ["debootstrap", "--variant=minbase", f"--include={','.join(include)}", SUITE, str(tree), mirror],
        "debootstrap",
    )


def ensure_image(client: Any, cache_dir: Path = Path("/var/cache/fieldlab")) -> tuple[str, bool]:
    """Return (tag, built): the cached image when its hash matches, else build it now."""
    tag = image_tag()
    if _have_image(client, tag):
        return tag, False
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: run `make bootstrap` (the controller playbook)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    # One build at a time on this controller: `make test` runs the integration tests (whose docker
    # provider test starts nodes) beside molecule and lab-up; the second comes to find the first's image.
    with (cache_dir / "image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _have_image(client, tag):
            return tag, False
        _build(client, tag, cache_dir)
    return tag, True


def _have_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build(client: Any, tag: str, cache_dir: Path) -> None:
    """debootstrap the rootfs, import it and finish the node image as `tag`."""
    import docker.errors

    tree = Path(tempfile.mkdtemp(prefix=f"rootfs-{input_hash()}-", dir=cache_dir))
    try:
        debootstrap(tree, packages())
        _customise(tree)
        rootfs_tag = f"{IMAGE_REPO}-rootfs:{input_hash()}"
        say("importing the rootfs into docker ...")
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(tree), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        run_step(["docker", "import", "-", rootfs_tag], "docker import", stdin=tar.stdout)
        if tar.wait() != 0:
            raise ImageBuildError("tar of the rootfs failed")
        say("finishing the node image (stop signal, entrypoint) ...")
        dockerfile = (IMAGE_DIR / "Dockerfile").read_bytes()
        ctx = io.BytesIO()
        with tarfile.open(fileobj=ctx, mode="w") as tf:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tf.addfile(info, io.BytesIO(dockerfile))
        ctx.seek(0)
        client.images.build(
            fileobj=ctx,
            custom_context=True,
            tag=tag,
            buildargs={"ROOTFS": rootfs_tag},
            rm=True,
            labels={"fieldlab.hash": input_hash()},
        )
        client.images.remove(rootfs_tag, noprune=False)
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"docker could not build {tag}: {exc}") from None
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _customise(tree: Path) -> None:
    """Changes to the rootfs that every container node needs before its first boot."""
    init = tree / "usr/local/sbin/fieldlab-node-init"
    init.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(IMAGE_DIR / "fieldlab-node-init", init)
    init.chmod(0o755)
    for unit in MASKED_UNITS:
        link = tree / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    customise_any_node(tree)


def customise_any_node(tree: Path) -> None:
    """Changes to the rootfs that every node needs, container or VM."""
    # Host keys are made per node at its first boot; an image must not share them.
    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    sshd_dropin = tree / "etc/ssh/sshd_config.d/fieldlab.conf"
    sshd_dropin.write_text("PasswordAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n")
    # Empty machine-id: systemd makes one at boot. Apt lists are useless without a network.
    (tree / "etc/machine-id").write_text("")
    shutil.rmtree(tree / "var/lib/apt/lists", ignore_errors=True)
    (tree / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tree / "var/cache/apt/archives", ignore_errors=True)
    (tree / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (tree / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
