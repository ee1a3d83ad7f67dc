"""The qemu provider's pure parts (command line, names, network config, KVM probe verdict), its seed
disk (a real ext4 image read back with debugfs), and its QMP client against a socket that speaks the
protocol as QEMU's monitor does (greeting, capabilities handshake, events between answers)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.providers.qemu import (
    KERNEL_ARGS,
    VmSpec,
    bridge_name,
    forward_rules,
    mac_for,
    network_file,
    probe_outcome,
    qemu_argv,
    tap_name,
    write_seed,
)
from lab.qmp import Qmp, QmpError


def vm(tmp_path: Path, accel: str = "tcg") -> VmSpec:
    d = tmp_path / "vm" / "client1"
    return VmSpec(
        name="lab-client1",
        disk=d / "disk.qcow2",
        seed=d / "seed.img",
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd.img",
        tap="flqabcdeft1",
        mac="52:54:00:d5:00:0b",
        qmp=d / "qmp.sock",
        console=d / "console.log",
        pidfile=d / "qemu.pid",
        accel=accel,
    )


def opt(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_command_line_boots_the_image_kernel_with_the_node_disk_seed_tap_console_and_monitor(
    tmp_path: Path,
) -> None:
    spec = vm(tmp_path)
    argv = qemu_argv(spec)
    assert argv[0] == "qemu-system-x86_64"
    assert opt(argv, "-kernel") == [str(spec.kernel)] and opt(argv, "-initrd") == [str(spec.initrd)]
    assert opt(argv, "-append") == [KERNEL_ARGS] and "console=ttyS0" in KERNEL_ARGS
    assert opt(argv, "-drive") == [
        f"file={spec.disk},if=virtio,format=qcow2",
        f"file={spec.seed},if=virtio,format=raw,readonly=on",
    ]
    assert opt(argv, "-netdev") == [f"tap,id=lab,ifname={spec.tap},script=no,downscript=no"]
    assert f"virtio-net-pci,netdev=lab,mac={spec.mac}" in opt(argv, "-device")
    assert opt(argv, "-qmp") == [f"unix:{spec.qmp},server=on,wait=off"]
    # The console is appended to across power cycles, not truncated by each start.
    assert opt(argv, "-chardev") == [f"file,id=console,path={spec.console},append=on"]
    assert opt(argv, "-pidfile") == [str(spec.pidfile)] and "-daemonize" in argv
    assert opt(argv, "-accel") == ["tcg,thread=multi"] and opt(argv, "-cpu") == ["max"]
    assert opt(qemu_argv(vm(tmp_path, "kvm")), "-accel") == ["kvm"]
    assert opt(argv, "-m") == ["2048"] and opt(argv, "-smp") == ["2"]


def test_interface_names_fit_the_kernel_limit_and_differ_per_lab_and_node() -> None:
    names = {
        bridge_name("a-very-long-lab-name-24ch"),
        *(tap_name("a-very-long-lab-name-24ch", i) for i in range(200)),
    }
    assert all(len(n) <= 15 for n in names)  # IFNAMSIZ - 1
    assert len(names) == 201
    assert bridge_name("one") != bridge_name("two") and tap_name("one", 0) != tap_name("two", 0)


def test_mac_and_network_file_give_the_node_its_lab_address_and_no_route_off_the_lab() -> None:
    assert mac_for("10.213.5.11") == "52:54:00:d5:05:0b"
    assert mac_for("10.213.5.11") != mac_for("10.213.5.12")
    cfg = network_file("52:54:00:d5:05:0b", "10.213.5.11", 24)
    assert "MACAddress=52:54:00:d5:05:0b" in cfg and "Address=10.213.5.11/24" in cfg
    assert "Gateway" not in cfg and "DHCP" not in cfg


def test_forward_rules_accept_bridge_to_bridge_and_drop_the_rest_of_what_a_node_sends() -> None:
    accept, drop = forward_rules("flqabcdef12")
    assert accept[:6] == ["-i", "flqabcdef12", "-o", "flqabcdef12", "-j", "ACCEPT"]
    assert drop[:7] == ["-i", "flqabcdef12", "!", "-o", "flqabcdef12", "-j", "DROP"]


@pytest.mark.parametrize(
    ("output", "exited", "works"),
    [
        ("...\nKernel panic - not syncing: VFS: Unable to mount root fs\n", True, True),
        ("", False, False),  # hung: KVM here
        ("qemu-system-x86_64: failed to initialize kvm: Permission denied\n", True, False),
    ],
)
def test_the_kvm_probe_verdict(output: str, exited: bool, works: bool) -> None:
    ok, why = probe_outcome(output, exited)
    assert ok is works
    if not exited:
        assert "did not end within" in why
    elif not works:
        assert "Permission denied" in why


@pytest.mark.skipif(
    shutil.which("mkfs.ext4") is None or shutil.which("debugfs") is None, reason="no e2fsprogs"
)
def test_the_seed_disk_is_an_ext4_volume_with_the_node_identity(tmp_path: Path) -> None:
    seed = tmp_path / "seed.img"
    write_seed(seed, "client1", network_file("52:54:00:d5:05:0b", "10.213.5.11", 24), "ssh-ed25519 AAAA lab")
    assert seed.stat().st_mode & 0o777 == 0o600

    def cat(name: str) -> str:
        return subprocess.run(
            ["debugfs", "-R", f"cat /{name}", str(seed)], capture_output=True, text=True, check=True
        ).stdout

    assert cat("hostname") == "client1\n"
    assert "Address=10.213.5.11/24" in cat("lab.network")
    assert cat("authorized_keys") == "ssh-ed25519 AAAA lab\n"
    label = subprocess.run(["e2label", str(seed)], capture_output=True, text=True, check=True).stdout
    assert label.strip() == "fl-seed"


# -- QMP ------------------------------------------------------------------------------------------


class Monitor:
    """A unix socket speaking QMP as QEMU does: the commands it got are kept in `seen`."""

    def __init__(self, path: Path, answers: dict[str, list[dict[str, object]]], greet: bool = True) -> None:
        self.path, self.answers, self.greet = path, answers, greet
        self.seen: list[dict[str, object]] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.srv.accept()
        with conn:
            f = conn.makefile("rwb")
            if self.greet:
                f.write(b'{"QMP": {"version": {"qemu": {"major": 7}}, "capabilities": []}}\r\n')
            else:
                f.write(b'{"hello": 1}\r\n')
            f.flush()
            for line in f:
                msg = json.loads(line)
                self.seen.append(msg)
                name = str(msg["execute"])
                replies = self.answers.get(name, [{"return": {}}])
                for r in replies:
                    f.write(json.dumps(r).encode() + b"\r\n")
                f.flush()
                if name == "quit":
                    return


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    path = Path("/tmp") / f"qmp-test-{tmp_path.name}.sock"  # unix socket paths are short
    yield path
    path.unlink(missing_ok=True)


def test_qmp_negotiates_capabilities_skips_events_and_returns_the_answer(sock: Path) -> None:
    reset_event: dict[str, object] = {"event": "RESET", "data": {"guest": False}, "timestamp": {"seconds": 1}}
    mon = Monitor(
        sock,
        {
            "system_reset": [reset_event, {"return": {}}],
            "query-status": [{"return": {"status": "running", "running": True}}],
        },
    )
    with Qmp(sock, timeout=5) as q:
        assert q.command("system_reset") == {}
        assert q.command("query-status")["status"] == "running"
    assert [m["execute"] for m in mon.seen] == ["qmp_capabilities", "system_reset", "query-status"]


def test_qmp_error_answers_and_a_vanished_monitor_are_errors_that_say_so(sock: Path) -> None:
    Monitor(sock, {"bogus": [{"error": {"class": "CommandNotFound", "desc": "no bogus"}}], "quit": []})
    with Qmp(sock, timeout=5) as q:
        with pytest.raises(QmpError, match="bogus: CommandNotFound: no bogus"):
            q.command("bogus")
        with pytest.raises(QmpError, match="closed its monitor"):
            q.command("quit")  # QEMU may exit before answering


def test_qmp_refuses_a_socket_that_is_not_a_monitor(sock: Path, tmp_path: Path) -> None:
    Monitor(sock, {}, greet=False)
    with pytest.raises(QmpError, match="no greeting"):
        Qmp(sock, timeout=5).connect()
    with pytest.raises(QmpError, match="cannot connect"):
        Qmp(tmp_path / "absent.sock", timeout=1).connect()
