"""The qemu provider: lab nodes as VMs that boot a real kernel (Debian's cloud kernel, cgroup v2,
their own netfilter and sysctls), for the field bugs that live below a container node.

Each node boots a qcow2 overlay of the cached VM image (lab/vm_image.py), or of its role's baked VM
image (lab/vm_bake.py: the container bake carried onto the VM tree), with the image's kernel and
initramfs, plus a small seed disk of its own (hostname, address, the lab's SSH key: applied at boot
by lab/node_vm/fieldlab-vm-seed). Networking: a Linux bridge on the controller holding the lab's
gateway address, one tap per VM; the controller reaches every node and the nodes reach each other on
the lab subnet, and the provider's own FORWARD rules drop anything a node sends off the bridge (no
traffic leaves the lab). Acceleration: KVM when a probe boot under KVM finishes within
KVM_PROBE_TIMEOUT (on these machines KVM guests hang), TCG otherwise; `lab up` says which.

Power: a clean reboot is `systemctl reboot` in the guest, a hard one QMP `system_reset`, a power
cut QMP `quit` and the same command line started again; each is complete when the node answers over
SSH with a new boot id. Every node's serial console is appended to <state dir>/vm/<node>/console.log
(moved to <state dir>/logs/console-<node>.log by `lab down`).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.config import LabPaths, LabSpec, image_role
from lab.errors import ProviderError
from lab.keys import ensure_ssh_key
from lab.progress import say
from lab.providers.base import LabRecord, Node, NodeState, ssh_argv
from lab.qmp import Qmp, QmpError
from lab.ssh import boot_id, run, wait_ssh
from lab.vm_bake import ensure_vm_baked
from lab.vm_image import SEED_LABEL, VM_CACHE, VmImage, ensure_vm_image
from lab.waits import WaitTimeout, wait_until

if TYPE_CHECKING:
    from lab.bake import Bake

# A node under TCG on 2 cores: cold boot to ssh 42 s alone (LAB-SUBSTRATE.md), several at once longer.
VM_BOOT_TIMEOUT = 600.0
KVM_PROBE_TIMEOUT = 20.0  # a probe boot under KVM that has not panicked by then: KVM hangs here
QUIT_TIMEOUT = 30.0  # a VM's process gone after QMP quit
VM_MEMORY_MB = 2048
VM_CPUS = 2
VM_MEMORY_HEADROOM_MB = 1024  # left to the controller when it decides whether the VMs fit
KERNEL_ARGS = "root=LABEL=fieldlab-root rw console=ttyS0 net.ifnames=0 apparmor=1 security=apparmor"


@dataclass(frozen=True)
class VmSpec:
    """One VM's qemu command line, as plain data (`qemu_argv` turns it into argv)."""

    name: str
    disk: Path
    seed: Path
    kernel: Path
    initrd: Path
    tap: str
    mac: str
    qmp: Path
    console: Path
    pidfile: Path
    accel: str  # "kvm" or "tcg"
    memory_mb: int = VM_MEMORY_MB
    cpus: int = VM_CPUS


def console_log(paths: LabPaths, node: str) -> Path:
    """Where a VM node's serial console is appended (every boot of it)."""
    return paths.state_dir / "vm" / node / "console.log"


def qemu_argv(vm: VmSpec) -> list[str]:
    """The command line that boots `vm`, daemonized (pure)."""
    if vm.accel == "kvm":
        accel = ["-accel", "kvm", "-cpu", "host"]
    else:
        accel = ["-accel", "tcg,thread=multi", "-cpu", "max"]
    return [
        "qemu-system-x86_64",
        "-name",
        vm.name,
        "-machine",
        "q35",
        *accel,
        "-smp",
        str(vm.cpus),
        "-m",
        str(vm.memory_mb),
        "-nodefaults",
        "-display",
        "none",
        "-kernel",
        str(vm.kernel),
        "-initrd",
        str(vm.initrd),
        "-append",
        KERNEL_ARGS,
        "-drive",
        f"file={vm.disk},if=virtio,format=qcow2",
        "-drive",
        f"file={vm.seed},if=virtio,format=raw,readonly=on",
        "-netdev",
        f"tap,id=lab,ifname={vm.tap},script=no,downscript=no",
        "-device",
        f"virtio-net-pci,netdev=lab,mac={vm.mac}",
        "-device",
        "virtio-rng-pci",  # entropy for sshd's first host keys, which TCG has little of
        "-chardev",
        f"file,id=console,path={vm.console},append=on",
        "-serial",
        "chardev:console",
        "-qmp",
        f"unix:{vm.qmp},server=on,wait=off",
        "-pidfile",
        str(vm.pidfile),
        "-daemonize",
    ]


def lab_tag(lab: str) -> str:
    """Eight hex digits naming the lab in interface names (15 bytes at most) (pure)."""
    return hashlib.sha256(lab.encode()).hexdigest()[:8]


def bridge_name(lab: str) -> str:
    return f"flq{lab_tag(lab)}"


def tap_name(lab: str, index: int) -> str:
    return f"flq{lab_tag(lab)[:6]}t{index}"


def mac_for(address: str) -> str:
    """A locally administered MAC (QEMU's 52:54:00 prefix) from the node's address (pure)."""
    b = ipaddress.ip_address(address).packed
    return "52:54:00:" + ":".join(f"{x:02x}" for x in b[1:])


def network_file(mac: str, address: str, prefixlen: int) -> str:
    """The node's systemd-networkd config: its lab address, no route off the lab subnet (pure)."""
    return (
        f"[Match]\nMACAddress={mac}\n\n"
        f"[Network]\nAddress={address}/{prefixlen}\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
    )


def forward_rules(bridge: str) -> list[list[str]]:
    """The provider's FORWARD rules (iptables argv after the chain): bridge to bridge accepted (the
    nodes talk to each other even where dockerd set the policy to DROP), off the bridge dropped (pure)."""
    return [
        ["-i", bridge, "-o", bridge, "-j", "ACCEPT", "-m", "comment", "--comment", "fieldlab qemu lab"],
        ["-i", bridge, "!", "-o", bridge, "-j", "DROP", "-m", "comment", "--comment", "fieldlab qemu lab"],
    ]


def probe_outcome(output: str, exited: bool) -> tuple[bool, str]:
    """(KVM works, why) from a probe boot's console and whether it ended in time (pure): the probe
    boots the kernel with no root, so a working accelerator gets as far as the root-mount panic."""
    if not exited:
        return False, f"a probe boot under KVM did not end within {KVM_PROBE_TIMEOUT:.0f}s (KVM guests hang)"
    if "Kernel panic" in output or "VFS:" in output:
        return True, "a probe boot under KVM reached its kernel panic"
    last = output.strip().splitlines()[-1:] or ["no console output"]
    return False, f"a probe boot under KVM failed: {last[0][:160]}"


class QemuProvider:
    name = "qemu"
    # Nodes start from baked VM images: the container bake (lab/bake.py) carried onto the VM image
    # (lab/vm_bake.py), so a VM lab-up does only the per-lab work.
    bakes = True

    def __init__(self, cache: Path = VM_CACHE) -> None:
        self.cache = cache
        self._image: VmImage | None = None
        self._baked: dict[str, VmImage] = {}
        self._docker: Any = None
        self._paths: LabPaths | None = None  # the lab `up` brought up last (for images_in_use)

    @property
    def docker(self) -> Any:
        """The controller's dockerd: the bake runs on container nodes (lab/bake.py)."""
        if self._docker is None:
            from lab.providers.docker import _client

            self._docker = _client()
        return self._docker

    def bake_base(self) -> str:
        """The bare container node image the bake starts from (the VM image's tree is its twin)."""
        from lab.image import ensure_image

        tag, _ = ensure_image(self.docker)
        return tag

    def carry_bake(self, bake: Bake) -> str:
        """The baked VM image of each role, made from the bake's layers when missing; what it did."""
        img = self._vm_image()
        self._baked, built = ensure_vm_baked(self.docker, img, bake.tags, bake.hash, self.cache)
        shown = f"fieldlab-vm-baked:{{{','.join(sorted(self._baked))}}}-{img.hash}-{bake.hash}"
        return f"{'built' if built else 'cached'} {shown}"

    # -- image and accelerator ------------------------------------------------------------------
    def image(self) -> tuple[str, bool]:
        img, built = ensure_vm_image(self.cache)
        self._image = img
        return f"fieldlab-vm:{img.hash}", built

    def _vm_image(self) -> VmImage:
        if self._image is None:
            self.image()
        assert self._image is not None
        return self._image

    def accel(self) -> tuple[str, str]:
        """("kvm" or "tcg", why), probed once per boot of the controller (kept in the cache)."""
        key = _controller_boot_id()
        cached = self.cache / "accel.json"
        with contextlib.suppress(OSError, ValueError, KeyError):
            got = json.loads(cached.read_text())
            if got["boot_id"] == key:
                return str(got["accel"]), str(got["why"])
        ok, why = self._probe_kvm()
        accel = "kvm" if ok else "tcg"
        self.cache.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps({"boot_id": key, "accel": accel, "why": why}) + "\n")
        return accel, why

    def _probe_kvm(self) -> tuple[bool, str]:
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return False, "/dev/kvm is missing or not accessible"
        img = self._vm_image()
        argv = [
            "qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults",
            "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(img.kernel),
            "-append", "console=ttyS0 panic=-1",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=KVM_PROBE_TIMEOUT)
            return probe_outcome(out or "", True)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return probe_outcome("", False)

    # -- up / down --------------------------------------------------------------------------------
    def up(self, spec: LabSpec, paths: LabPaths, images: Mapping[str, str] | None = None) -> LabRecord:
        """Boot every node that is not running (its disk kept when it exists) and wait for ssh."""
        _check_host()
        paths.ensure()
        self._paths = paths
        img = self._vm_image()
        accel, why = self.accel()
        say(f"qemu: {accel.upper()} ({why})")
        pubkey = ensure_ssh_key(paths.ssh_key, f"fieldlab-{spec.name}")
        nodes = [Node(ns.name, ns.role, ns.address) for ns in spec.nodes]
        vms = {n.name: self._vm(spec.name, paths, img, i, n, accel) for i, n in enumerate(nodes)}
        to_start = [n for n in nodes if not _running(vms[n.name].pidfile)]
        _check_memory(len(to_start))
        net = ipaddress.ip_network(spec.subnet)
        self._ensure_network(spec.name, f"{spec.gateway}/{net.prefixlen}", len(nodes))
        for n in to_start:
            vm = vms[n.name]
            vm.disk.parent.mkdir(parents=True, exist_ok=True)
            if not vm.disk.exists():
                tag = (images or {}).get(image_role(n.role), "")
                base = self._baked.get(image_role(n.role)) if tag else None
                if tag and base is None:
                    raise ProviderError(f"{n.name}: no baked VM image for {tag} (carry_bake first)")
                _overlay((base or img).disk, vm.disk)
                _base_file(vm).write_text(json.dumps({"image": tag}) + "\n")
            write_seed(vm.seed, n.name, network_file(vm.mac, n.address, net.prefixlen), pubkey)
            _start(vm)
        record = LabRecord(
            spec.name,
            self.name,
            nodes,
            subnet=spec.subnet,
            image=f"fieldlab-vm:{img.hash}",
            baked=dict(images or {}),
        )
        record.save(paths)
        if to_start:
            names = ", ".join(n.name for n in to_start)
            say(f"booting {names} under {accel.upper()} (consoles in {paths.state_dir / 'vm'})")

        def answer(n: Node) -> None:
            console = vms[n.name].console
            wait_ssh(n.target(paths), VM_BOOT_TIMEOUT, what=f"ssh after boot (console: {console})")

        with ThreadPoolExecutor(max(1, len(nodes))) as pool:
            list(pool.map(answer, nodes))
        return record

    def images_in_use(self, record: LabRecord, paths: LabPaths | None = None) -> dict[str, list[str]]:
        """node -> the baked image its disk was made from ([] for the bare VM image or no disk)."""
        state = (paths or self._paths or LabPaths(record.name)).state_dir
        out: dict[str, list[str]] = {}
        for n in record.nodes:
            tag = _disk_base(state / "vm" / n.name / "base.json")
            out[n.name] = [tag] if tag else []
        return out

    def _vm(self, lab: str, paths: LabPaths, img: VmImage, index: int, node: Node, accel: str) -> VmSpec:
        d = paths.state_dir / "vm" / node.name
        return VmSpec(
            name=f"{lab}-{node.name}",
            disk=d / "disk.qcow2",
            seed=d / "seed.img",
            kernel=img.kernel,
            initrd=img.initrd,
            tap=tap_name(lab, index),
            mac=mac_for(node.address),
            qmp=d / "qmp.sock",
            console=console_log(paths, node.name),
            pidfile=d / "qemu.pid",
            accel=accel,
        )

    def _record_vm(self, record: LabRecord, paths: LabPaths, node: str) -> VmSpec:
        index = [n.name for n in record.nodes].index(record.node(node).name)  # raises for a stranger
        accel, _ = self.accel()
        return self._vm(record.name, paths, self._vm_image(), index, record.node(node), accel)

    def _ensure_network(self, lab: str, gateway_cidr: str, taps: int) -> None:
        br = bridge_name(lab)
        if not Path(f"/sys/class/net/{br}").exists():
            _run(["ip", "link", "add", br, "type", "bridge"])
        _run(["ip", "addr", "replace", gateway_cidr, "dev", br])
        _run(["ip", "link", "set", br, "up"])
        for rule in reversed(forward_rules(br)):
            if not _ok(["iptables", "-C", "FORWARD", *rule]):
                _run(["iptables", "-I", "FORWARD", "1", *rule])
        for i in range(taps):
            tap = tap_name(lab, i)
            if not Path(f"/sys/class/net/{tap}").exists():
                _run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
            _run(["ip", "link", "set", tap, "master", br, "up"])

    def down(self, record: LabRecord, paths: LabPaths) -> list[str]:
        removed: list[str] = []
        for i, n in enumerate(record.nodes):
            d = paths.state_dir / "vm" / n.name
            pidfile = d / "qemu.pid"
            if _running(pidfile):
                _power_off(d / "qmp.sock", pidfile)
                removed.append(f"vm {n.name}")
            if d.exists():
                console = console_log(paths, n.name)
                if console.exists():  # kept with the lab's logs: a nightly's artifact after lab-down
                    logs = paths.state_dir / "logs"  # where lab/playbook.py keeps Ansible's logs
                    logs.mkdir(parents=True, exist_ok=True)
                    shutil.move(console, logs / f"console-{n.name}.log")
                shutil.rmtree(d)
                removed.append(f"disk {n.name}")
            tap = tap_name(record.name, i)
            if Path(f"/sys/class/net/{tap}").exists():
                _run(["ip", "link", "del", tap])
                removed.append(f"tap {tap}")
        br = bridge_name(record.name)
        for rule in forward_rules(br):
            while _ok(["iptables", "-D", "FORWARD", *rule]):  # every copy of it
                pass
        if Path(f"/sys/class/net/{br}").exists():
            _run(["ip", "link", "del", br])
            removed.append(f"bridge {br}")
        return removed

    def status(self, record: LabRecord, paths: LabPaths) -> list[NodeState]:
        out = []
        for n in record.nodes:
            d = paths.state_dir / "vm" / n.name
            if not d.exists():
                out.append(NodeState(n.name, n.address, "missing"))
            elif _running(d / "qemu.pid"):
                out.append(NodeState(n.name, n.address, "running", f"image {record.image}"))
            else:
                out.append(NodeState(n.name, n.address, "exited", f"console {d / 'console.log'}"))
        return out

    def node_memory(self, record: LabRecord, paths: LabPaths | None = None) -> dict[str, int]:
        """node -> bytes the VM's qemu process holds (its RSS: guest memory touched so far)."""
        paths = paths or LabPaths(record.name)
        out = {}
        for n in record.nodes:
            pid = _pid(paths.state_dir / "vm" / n.name / "qemu.pid")
            rss = _rss(pid) if pid else None
            if rss is not None:
                out[n.name] = rss
        return out

    # -- power ------------------------------------------------------------------------------------
    def reboot(self, record: LabRecord, paths: LabPaths, node: str, *, hard: bool) -> float:
        """Clean: `systemctl reboot` in the guest; hard: QMP system_reset (the guest gets no say)."""
        target = record.node(node).target(paths)
        before = boot_id(target)
        if before is None:
            raise ProviderError(f"{node}: does not answer over ssh before the reboot")
        t0 = time.monotonic()
        if hard:
            with Qmp(paths.state_dir / "vm" / node / "qmp.sock") as qmp:
                qmp.command("system_reset")
        else:
            # The session may be cut by the shutdown itself: what counts is the new boot id below.
            with contextlib.suppress(ProviderError):
                run(target, "systemctl reboot", timeout=30.0)
        wait_ssh(target, VM_BOOT_TIMEOUT, not_boot_id=before, what="ssh with a new boot id after reboot")
        return time.monotonic() - t0

    def power_cycle(self, record: LabRecord, paths: LabPaths, node: str) -> float:
        """Power cut (QMP quit: the process ends, nothing is flushed by the guest) and power on."""
        target = record.node(node).target(paths)
        before = boot_id(target)
        vm = self._record_vm(record, paths, node)
        t0 = time.monotonic()
        _power_off(vm.qmp, vm.pidfile)
        _start(vm)
        wait_ssh(target, VM_BOOT_TIMEOUT, not_boot_id=before, what="ssh with a new boot id after power on")
        return time.monotonic() - t0

    def ssh_argv(self, record: LabRecord, paths: LabPaths, node: str) -> list[str]:
        return ssh_argv(record.node(node), paths)


# -- host helpers -----------------------------------------------------------------------------------


def _base_file(vm: VmSpec) -> Path:
    """Which image a node's disk overlays (its docker bake tag, "" for the bare VM image)."""
    return vm.disk.parent / "base.json"


def _disk_base(path: Path) -> str:
    try:
        return str(json.loads(path.read_text())["image"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def write_seed(path: Path, hostname: str, network: str, authorized_key: str) -> None:
    """The node's seed disk: an ext4 volume labelled fl-seed (lab/node_vm/fieldlab-vm-seed reads it)."""
    with tempfile.TemporaryDirectory(prefix="fl-seed-") as tmp:
        d = Path(tmp)
        (d / "hostname").write_text(hostname + "\n")
        (d / "lab.network").write_text(network)
        (d / "authorized_keys").write_text(authorized_key.strip() + "\n")
        (d / "authorized_keys").chmod(0o600)
        path.unlink(missing_ok=True)
        _run(["mkfs.ext4", "-q", "-F", "-L", SEED_LABEL, "-d", str(d), str(path), "8M"])
    path.chmod(0o600)  # it holds the lab's public key only, but it is the node's identity


def _check_host() -> None:
    if os.geteuid() != 0:
        raise ProviderError("the qemu provider needs root on the controller (bridge, taps, iptables)")
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        raise ProviderError("the qemu provider needs /dev/net/tun for the nodes' taps")


def _check_memory(vms: int) -> None:
    if not vms:
        return
    avail_mb = _meminfo("MemAvailable") // 1024
    need = vms * VM_MEMORY_MB + VM_MEMORY_HEADROOM_MB
    if avail_mb and avail_mb < need:
        raise ProviderError(
            f"{vms} VM(s) of {VM_MEMORY_MB} MiB need {need} MiB with the controller's headroom;"
            f" {avail_mb} MiB are available: fewer clients (--clients) or more memory"
        )


def _meminfo(key: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _controller_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid(pidfile: Path) -> int:
    try:
        return int(pidfile.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _running(pidfile: Path) -> bool:
    pid = _pid(pidfile)
    if not pid:
        return False
    try:
        return "qemu" in Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return False


def _rss(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def _overlay(base: Path, disk: Path) -> None:
    """A node's own disk: a qcow2 overlay whose reads fall through to the shared image."""
    _run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(base), str(disk)])


def _start(vm: VmSpec) -> None:
    vm.pidfile.unlink(missing_ok=True)
    vm.qmp.unlink(missing_ok=True)
    proc = subprocess.run(qemu_argv(vm), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ProviderError(f"{vm.name}: qemu did not start: {(proc.stderr or proc.stdout).strip()[-400:]}")


def _power_off(qmp: Path, pidfile: Path) -> None:
    """QMP quit, and SIGKILL when the monitor does not answer; waits until the process is gone."""
    pid = _pid(pidfile)
    monitor = Qmp(qmp)
    try:
        monitor.connect()
    except QmpError:  # no monitor to ask: the process goes the hard way
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    else:
        with contextlib.suppress(QmpError):  # QEMU may close the monitor before it answers
            monitor.command("quit")
        monitor.close()

    def gone() -> tuple[bool | None, str]:
        return (True if not _running(pidfile) else None), f"qemu pid {pid} still running"

    try:
        wait_until(gone, timeout=QUIT_TIMEOUT, what=f"qemu {pid} to exit")
    except WaitTimeout:
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(gone, timeout=QUIT_TIMEOUT, what=f"qemu {pid} to exit after SIGKILL")


def _ok(argv: Sequence[str]) -> bool:
    return subprocess.run(list(argv), capture_output=True, check=False).returncode == 0


def _run(argv: Sequence[str]) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ProviderError(f"`{shlex.join(argv)}` failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
