"""Baked VM images (lab/vm_bake.py): a docker layer's whiteouts read right (pure), and (root, dockerd)
the last layer of a real committed image found through `docker save` and applied to a real node tree
as the overlay would: deleted, emptied, added, owners and file capabilities kept, and nothing written
outside the tree through a symlink the tree holds."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.errors import ImageBuildError
from lab.providers.qemu import QemuProvider
from lab.vm_bake import LayerChanges, apply_layer, baked_vm_dir, layer_changes, top_layer


def test_whiteouts_and_opaque_directories_are_read_from_member_names() -> None:
    names = [
        "etc/",
        "etc/docker/daemon.json",
        "etc/.wh.motd",
        "./var/lib/.wh.old",
        "opt/app/.wh..wh..opq",
        "opt/app/new",
    ]
    assert layer_changes(names) == LayerChanges(removed=["etc/motd", "var/lib/old"], emptied=["opt/app"])


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside", "etc/../../outside"])
def test_a_member_that_leaves_the_tree_is_refused(name: str) -> None:
    with pytest.raises(ImageBuildError, match="outside the tree"):
        layer_changes(["etc/", name])


def test_baked_vm_images_are_cached_per_vm_image_bake_and_role(tmp_path: Path) -> None:
    a = baked_vm_dir(tmp_path, "vm1", "bake1", "client")
    assert a.parent == tmp_path  # `lab down --image` removes what is in the VM cache
    others = [("vm2", "bake1", "client"), ("vm1", "bake2", "client"), ("vm1", "bake1", "server")]
    assert len({a} | {baked_vm_dir(tmp_path, *o) for o in others}) == 4


def test_the_provider_reads_which_image_each_disk_overlays(tmp_path: Path) -> None:
    from lab.config import LabPaths
    from lab.providers.base import LabRecord, Node

    paths = LabPaths("vmb", home=tmp_path)
    record = LabRecord(
        "vmb", "qemu", [Node("server1", "server", "10.0.0.10"), Node("client1", "client", "10.0.0.11")]
    )
    (paths.state_dir / "vm" / "server1").mkdir(parents=True)
    (paths.state_dir / "vm" / "server1" / "base.json").write_text(
        '{"image": "fieldlab-node-baked:server-abc"}\n'
    )
    (paths.state_dir / "vm" / "client1").mkdir(parents=True)
    (paths.state_dir / "vm" / "client1" / "base.json").write_text('{"image": ""}\n')
    in_use = QemuProvider(cache=tmp_path / "cache").images_in_use(record, paths)
    assert in_use == {"server1": ["fieldlab-node-baked:server-abc"], "client1": []}


# --- for real: a committed layer over the node image, applied to the node image's own tree -----


@pytest.fixture(scope="module")
def docker_client() -> Any:
    from lab.providers.docker import _client

    return _client()


@pytest.fixture(scope="module")
def committed(docker_client: Any) -> Iterator[tuple[str, str]]:
    """(base tag, an image one layer over it): a container of the bare node image in which files are
    added, one deleted, a directory emptied and refilled, a file capability set; then committed."""
    from lab.image import ensure_image

    base, _ = ensure_image(docker_client)
    tag = f"fieldlab-vmbake-test:{os.getpid()}"
    script = (
        "set -e; mkdir -p /opt/baked/keep /opt/opaque && echo lower > /opt/opaque/old && "
        "echo added > /opt/baked/file && chown 1234:5678 /opt/baked/file && chmod 0640 /opt/baked/file && "
        "cp /bin/true /opt/baked/capped && setcap cap_net_raw+ep /opt/baked/capped && "
        "rm /etc/motd && rm -rf /opt/opaque && mkdir /opt/opaque && echo upper > /opt/opaque/new"
    )
    c = docker_client.containers.create(base, entrypoint=["sh", "-c", script])
    try:
        c.start()
        assert c.wait(timeout=60)["StatusCode"] == 0, c.logs().decode()
        c.commit(repository=tag.split(":", maxsplit=1)[0], tag=tag.split(":")[1])
    finally:
        c.remove(force=True)
    yield base, tag
    docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def node_tree(
    docker_client: Any, committed: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The bare node image's filesystem as a directory (what the VM tree is the twin of)."""
    base, _ = committed
    tree = tmp_path_factory.mktemp("tree")
    c = docker_client.containers.create(base)
    try:
        export = subprocess.Popen(["docker", "export", c.id], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "--numeric-owner", "-C", str(tree)], stdin=export.stdout, check=True)
        assert export.wait() == 0
    finally:
        c.remove(force=True)
    return tree


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (docker, chroot)")
def test_the_committed_layer_applies_to_the_tree_as_the_overlay_would(
    docker_client: Any, committed: tuple[str, str], node_tree: Path
) -> None:
    _, tag = committed
    tree = node_tree
    assert (tree / "etc/motd").exists()  # what the layer deletes is in the lower tree
    t0 = time.monotonic()
    with top_layer(docker_client, tag) as layer:
        with tarfile.open(fileobj=layer) as tf:
            names = tf.getnames()
        layer.seek(0)
        apply_layer(tree, layer)
    print(f"\n[vm-bake] layer of {len(names)} members found and applied in {time.monotonic() - t0:.1f}s")
    assert not (tree / "etc/motd").exists(), "a whiteout did not delete"
    assert sorted(p.name for p in (tree / "opt/opaque").iterdir()) == ["new"], (
        "the opaque dir kept lower files"
    )
    f = tree / "opt/baked/file"
    assert f.read_text() == "added\n"
    st = f.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 5678, 0o640)
    caps = subprocess.run(
        ["getcap", str(tree / "opt/baked/capped")], capture_output=True, text=True, check=False
    )
    assert "cap_net_raw" in caps.stdout, f"the file capability was lost: {caps.stdout!r} {caps.stderr!r}"


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (docker, chroot)")
def test_a_whiteout_under_a_symlink_of_the_tree_deletes_nothing_on_the_controller(node_tree: Path) -> None:
    """The tree's absolute symlink resolves inside the tree (chroot): a whiteout below it must not
    reach the controller's directory of the same name."""
    host_dir = Path(f"/tmp/fieldlab-vmbake-host-{os.getpid()}")
    host_dir.mkdir()
    (host_dir / "victim").write_text("keep me\n")
    (node_tree / "srv").mkdir(exist_ok=True)
    (node_tree / "srv/escape").symlink_to(host_dir)
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tf:
        tf.addfile(tarfile.TarInfo("srv/escape/.wh.victim"))
    layer.seek(0)
    try:
        apply_layer(node_tree, layer)
        assert (host_dir / "victim").read_text() == "keep me\n", (
            "a whiteout deleted a file of the controller's"
        )
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (docker, chroot)")
def test_a_layer_that_is_not_the_images_last_is_refused(
    docker_client: Any, committed: tuple[str, str]
) -> None:
    _, tag = committed

    class Renamed:  # the image as docker describes it, but its last diff id is another layer's
        def __init__(self, img: Any) -> None:
            self._img = img
            self.attrs = {"RootFS": {"Layers": [*img.attrs["RootFS"]["Layers"][:-1], "sha256:" + "0" * 64]}}

        def save(self, named: bool = False) -> Iterator[bytes]:
            return self._img.save(named=named)  # type: ignore[no-any-return]

    class Images:
        def get(self, t: str) -> Renamed:
            return Renamed(docker_client.images.get(t))

    class Client:
        images = Images()

    with pytest.raises(ImageBuildError, match="not the image's last layer"), top_layer(Client(), tag):
        pass
