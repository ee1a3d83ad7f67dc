"""The qemu provider for real: a lab of VMs (server1 + client1, the smallest lab there is) boots a
real kernel to SSH, is hard-reset through QMP, rebooted cleanly, power-cycled, and each time comes
back with a new boot id; its kernel is its own (not the controller's) and runs cgroup v2; nothing
the nodes send leaves the lab's bridge. Minutes under TCG: `make test-vm` and the nightly-vm, not
`make test`."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.config import LabPaths, LabSpec
from lab.providers.base import LabRecord
from lab.providers.qemu import QemuProvider, bridge_name
from lab.ssh import boot_id, run
from lab.vm_image import missing_tools

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.slow]

SUBNET = "10.213.110.0/24"  # the VM test's own lab network


@pytest.fixture(scope="module")
def vm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[QemuProvider, LabRecord, LabPaths]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (bridge, taps, iptables)")
    if missing_tools():
        pytest.skip(f"needs {', '.join(missing_tools())}: make bootstrap PROVIDER=qemu")
    home = tmp_path_factory.mktemp("vmlab")
    paths = LabPaths("vmtest", home=home)
    spec = LabSpec(name="vmtest", provider="qemu", clients=1, subnet=SUBNET)
    provider = QemuProvider()
    t0 = time.monotonic()
    provider.image()
    print(f"\n[vm] image ready in {time.monotonic() - t0:.1f}s; accel {provider.accel()}")
    t0 = time.monotonic()
    try:
        record = provider.up(spec, paths)
        print(f"[vm] 2 VMs up (boot to ssh) in {time.monotonic() - t0:.1f}s")
        yield provider, record, paths
    finally:
        rec = LabRecord.load(paths)
        if rec is not None:
            provider.down(rec, paths)
        for n in ("server1", "client1"):
            console = paths.state_dir / "logs" / f"console-{n}.log"
            if console.exists():
                print(f"[vm] {n} console tail:\n" + "\n".join(console.read_text().splitlines()[-15:]))


def test_a_vm_runs_its_own_kernel_with_cgroup_v2_and_reaches_its_peer_only_on_the_lab(
    vm_lab: tuple[QemuProvider, LabRecord, LabPaths],
) -> None:
    _, record, paths = vm_lab
    client = record.node("client1").target(paths)
    kernel = run(client, "uname -r").stdout.strip()
    assert kernel.endswith("-cloud-amd64"), kernel
    assert kernel != os.uname().release
    fs = run(client, "stat -fc %T /sys/fs/cgroup").stdout.strip()
    assert fs == "cgroup2fs", fs
    assert run(client, "hostname").stdout.strip() == "client1"
    peer = record.node("server1").address
    assert run(client, f"ping -c1 -W5 {peer}").rc == 0
    # Nothing routes off the lab: no default route in the node.
    routes = run(client, "ip -4 route show default").stdout.strip()
    assert routes == "", routes


def test_hard_reset_clean_reboot_and_power_cycle_each_bring_a_new_boot_id(
    vm_lab: tuple[QemuProvider, LabRecord, LabPaths],
) -> None:
    provider, record, paths = vm_lab
    target = record.node("client1").target(paths)
    seen = [boot_id(target)]
    assert seen[0]
    hard = provider.reboot(record, paths, "client1", hard=True)
    seen.append(boot_id(target))
    clean = provider.reboot(record, paths, "client1", hard=False)
    seen.append(boot_id(target))
    cycle = provider.power_cycle(record, paths, "client1")
    seen.append(boot_id(target))
    print(f"[vm] to ssh: hard reset {hard:.1f}s, clean reboot {clean:.1f}s, power cycle {cycle:.1f}s")
    assert None not in seen and len(set(seen)) == 4, seen
    console = (paths.state_dir / "vm" / "client1" / "console.log").read_text()
    assert console.count("Linux version") >= 4  # every boot is in the console log, appended


def test_down_removes_the_vms_their_disks_taps_bridge_and_rules(
    vm_lab: tuple[QemuProvider, LabRecord, LabPaths],
) -> None:
    provider, record, paths = vm_lab
    removed = provider.down(record, paths)
    assert "vm client1" in removed and "vm server1" in removed
    kept = paths.state_dir / "logs" / "console-client1.log"
    assert "Linux version" in kept.read_text()  # the console outlives the VM
    assert not (paths.state_dir / "vm" / "client1").exists()
    assert not Path(f"/sys/class/net/{bridge_name(record.name)}").exists()
    states = {s.name: s.state for s in provider.status(record, paths)}
    assert states == {"server1": "missing", "client1": "missing"}


BAKED_SUBNET = "10.213.111.0/24"  # the baked-VM test's own lab network


def test_vms_boot_from_the_baked_images_with_the_bake_in_them(tmp_path: Path) -> None:
    """The path `lab up --provider qemu` takes: the container bake (made or found), carried onto the
    VM image, and a lab of VMs booted from it: each runs its own kernel with what the bake's roles
    put there (the agent's venv and the workload images on the client, the OpenBao binary on the
    server, dockerd answering) and an identity of its own (machine-id, SSH host keys made at boot)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (docker, bridge, taps)")
    if missing_tools():
        pytest.skip(f"needs {', '.join(missing_tools())}: make bootstrap PROVIDER=qemu")
    from lab.cli import _ensure_bake

    paths = LabPaths("vmbaked", home=tmp_path)
    spec = LabSpec(name="vmbaked", provider="qemu", clients=1, subnet=BAKED_SUBNET)
    provider = QemuProvider()
    t0 = time.monotonic()
    provider.image()
    bake, _ = _ensure_bake(provider, provider.bake_base(), paths)
    t_bake = time.monotonic() - t0
    t0 = time.monotonic()
    carried = provider.carry_bake(bake)
    print(f"\n[vm] bake {bake.hash} ({'built' if bake.built else 'cached'}) {t_bake:.1f}s; {carried} "
          f"{time.monotonic() - t0:.1f}s")  # fmt: skip
    record = None
    try:
        t0 = time.monotonic()
        record = provider.up(spec, paths, images=bake.tags)
        print(f"[vm] 2 VMs from the baked images up (boot to ssh) in {time.monotonic() - t0:.1f}s")
        assert provider.images_in_use(record, paths) == {
            "server1": [bake.tags["server"]],
            "client1": [bake.tags["client"]],
        }
        server, client = record.node("server1").target(paths), record.node("client1").target(paths)
        assert run(client, "uname -r").stdout.strip().endswith("-cloud-amd64")
        checks = {
            client: [
                "test -x /opt/fieldlab-agent/venv/bin/fieldlab-agent",
                "test -s /var/lib/fieldlab/workload-images.tar",
                "timeout 120 sh -c 'until docker info >/dev/null 2>&1; do sleep 1; done'",
                "test -f /etc/sysctl.d/60-fieldlab.conf",
            ],
            server: ["/usr/local/bin/bao version"],
        }
        for target, cmds in checks.items():
            for cmd in cmds:
                res = run(target, cmd, timeout=180)
                assert res.rc == 0, f"{target.name}: {cmd}: rc {res.rc} {res.stderr[-300:]}"
        ids = {run(t, "cat /etc/machine-id").stdout.strip() for t in (server, client)}
        assert len(ids) == 2 and "" not in ids, f"machine-ids not made per node: {ids}"
        keys = {run(t, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for t in (server, client)}
        assert len(keys) == 2, "the nodes share an SSH host key"
    finally:
        rec = record or LabRecord.load(paths)
        if rec is not None:
            provider.down(rec, paths)
