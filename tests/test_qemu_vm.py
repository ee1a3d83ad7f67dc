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
