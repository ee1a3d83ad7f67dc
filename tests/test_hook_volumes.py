"""The volume hook (agent.runner.hooks.VolumeHook), handed the task's mounts, the group's requests,
a lookup of the node's host volumes and the agent's own paths: each mount resolved and held open
at every start, read only when the client, the request or the mount says so; a volume the node
does not have, or one that leads into the agent's own dirs, fails the start naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.drivers.base import DriverError
from agent.runner.hooks import VolumeHook
from agent.runner.interfaces import StartRequest
from agent.structs.model import HostVolume, VolumeMount


def hook(
    node: dict[str, tuple[str, bool]], own: Path, *, request_ro: bool = False, mount_ro: bool = False
) -> VolumeHook:
    mounts = (VolumeMount(volume="data", destination="/data", read_only=mount_ro),)
    requests = {"data": HostVolume(alias="data", source="scratch", read_only=request_ro)}
    return VolumeHook("web", mounts, requests, node.get, (own,))


@pytest.mark.parametrize(
    ("client_ro", "request_ro", "mount_ro"),
    [(False, False, False), (True, False, False), (False, True, False), (False, False, True)],
)
def test_each_mount_is_resolved_held_and_read_only_when_anyone_says_so(
    tmp_path: Path, client_ro: bool, request_ro: bool, mount_ro: bool
) -> None:
    scratch = tmp_path / "srv" / "scratch"
    scratch.mkdir(parents=True)
    (tmp_path / "link").symlink_to(scratch)
    h = hook(
        {"scratch": (str(tmp_path / "link"), client_ro)},
        tmp_path / "data",
        request_ro=request_ro,
        mount_ro=mount_ro,
    )
    req = StartRequest()
    h.prestart(req)
    (m,) = req.mounts
    assert (m.host_path, m.task_path) == (str(scratch.resolve()), "/data")
    assert m.read_only is (client_ro or request_ro or mount_ro)
    (held,) = req.held
    assert m.fd == held.fd and os.fstat(held.fd)  # open until the start returned
    req.release()
    assert req.held == []
    with pytest.raises(OSError):
        os.fstat(m.fd)


def test_a_volume_the_node_does_not_have_fails_the_start_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match="host volume validation error: missing scratch"):
        hook({}, tmp_path / "data").prestart(StartRequest())


def test_a_volume_leading_into_the_agents_own_dirs_is_refused(tmp_path: Path) -> None:
    own = tmp_path / "data"
    (own / "state").mkdir(parents=True)
    with pytest.raises(DriverError, match="leads into the agent's own"):
        hook({"scratch": (str(own / "state"), False)}, own).prestart(StartRequest())


def test_the_nodes_volumes_are_read_at_each_start(tmp_path: Path) -> None:
    node: dict[str, tuple[str, bool]] = {}
    h = hook(node, tmp_path / "data")
    with pytest.raises(DriverError):
        h.prestart(StartRequest())
    (tmp_path / "scratch").mkdir()
    node["scratch"] = (str(tmp_path / "scratch"), False)
    req = StartRequest()
    h.prestart(req)
    req.release()
    assert len(req.mounts) == 1
