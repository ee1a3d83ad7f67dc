"""The probe workload: it reports the certificate it has loaded (at start and on SIGHUP only), the
signals it received, serves TLS with that certificate, and exits 0 on SIGTERM/SIGINT."""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agent.workloads.probe import probe
from lab.waits import wait_until
from tests.pki import Issued, TestCA

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 5.0
SIGNAL_TIMEOUT = 3.0
EXIT_TIMEOUT = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sha256(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


def _serial(cert: x509.Certificate) -> str:
    n = cert.serial_number
    return n.to_bytes((n.bit_length() + 7) // 8, "big").hex()


@dataclass
class RunningProbe:
    proc: subprocess.Popen[bytes]
    port: int
    tls_port: int
    cert: Path
    key: Path
    ca: TestCA

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=2) as resp:
            body: dict[str, Any] = json.loads(resp.read())
        return body

    def tls_peer_sha256(self) -> str:
        ctx = ssl.create_default_context(cafile=str(self.ca.ca_file))
        with (
            socket.create_connection(("127.0.0.1", self.tls_port), timeout=2) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as conn,
        ):
            der = conn.getpeercert(binary_form=True)
        assert der is not None
        return hashlib.sha256(der).hexdigest()

    def install(self, issued: Issued) -> None:
        _install(issued, self.cert, self.key)

    def wait_status(self, what: str, pred: Any) -> dict[str, Any]:
        def check() -> tuple[dict[str, Any] | None, str]:
            st = self.status()
            return (st if pred(st) else None), json.dumps(st)

        return wait_until(check, timeout=SIGNAL_TIMEOUT, interval=0.05, what=what)

    def wait_exit(self) -> int:
        def check() -> tuple[int | None, str]:
            rc = self.proc.poll()
            return rc, f"pid {self.proc.pid} still running"

        return wait_until(check, timeout=EXIT_TIMEOUT, interval=0.05, what="the probe to exit")


def _install(issued: Issued, cert: Path, key: Path) -> None:
    """Replace the certificate and key files as a template renderer does: write aside, rename."""
    for src, dst in ((issued.key, key), (issued.cert, cert)):
        tmp = dst.with_suffix(".tmp")
        tmp.write_bytes(src.read_bytes())
        tmp.replace(dst)


def _start(tmp_path: Path, ca: TestCA, issued: Issued) -> RunningProbe:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    cert, key, port, tls_port = secrets / "cert.pem", secrets / "key.pem", _free_port(), _free_port()
    _install(issued, cert, key)
    argv = [sys.executable, "-m", "agent.workloads.probe", "--host", "127.0.0.1", "--cert", str(cert)]
    argv += ["--key", str(key), "--tls-port", str(tls_port)]
    env = {**os.environ, "PROBE_PORT": str(port)}  # the port from the environment, the rest from argv
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stderr=(tmp_path / "probe.log").open("wb"))
    running = RunningProbe(proc, port, tls_port, cert, key, ca)

    def healthy() -> tuple[bool | None, str]:
        if running.proc.poll() is not None:
            log = (tmp_path / "probe.log").read_text()
            raise AssertionError(f"the probe exited with {running.proc.returncode}: {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/health", timeout=1) as resp:
                return (True if resp.read() == b"ok" else None), f"HTTP {resp.status}"
        except (urllib.error.URLError, OSError) as e:
            return None, str(e)

    wait_until(healthy, timeout=START_TIMEOUT, interval=0.05, what="the probe to answer /health")
    return running


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
def running(tmp_path: Path, ca: TestCA) -> Iterator[RunningProbe]:
    first = ca.issue("probe-first", server=True)
    p = _start(tmp_path, ca, first)
    yield p
    if p.proc.poll() is None:
        p.proc.kill()
        p.proc.wait(EXIT_TIMEOUT)


def test_reports_the_loaded_certificate_and_reloads_it_only_on_sighup(running: RunningProbe) -> None:
    old = _cert(running.cert)
    st = running.status()
    assert st["pid"] == running.proc.pid
    assert st["cert"]["sha256"] == _sha256(old)
    assert st["cert"]["serial"] == _serial(old)
    assert st["cert"]["path"] == str(running.cert)
    assert st["cert"]["not_after"] == old.not_valid_after_utc.timestamp()
    assert st["loads"] == 1 and st["signals"] == [] and st["load_error"] is None
    assert running.tls_peer_sha256() == _sha256(old)

    running.install(running.ca.issue("probe-second", server=True))
    new = _cert(running.cert)
    assert _sha256(new) != _sha256(old)
    # The file changed, the probe was not told: it still has the old certificate loaded.
    st = running.status()
    assert st["cert"]["sha256"] == _sha256(old) and st["loads"] == 1
    assert running.tls_peer_sha256() == _sha256(old)

    running.proc.send_signal(signal.SIGHUP)
    st = running.wait_status("the probe to load the new certificate", lambda s: s["loads"] == 2)
    assert st["cert"]["sha256"] == _sha256(new)
    assert st["cert"]["serial"] == _serial(new)
    assert [(s["signal"], s["cert_sha256"]) for s in st["signals"]] == [("SIGHUP", _sha256(new))]
    assert st["started"] <= st["signals"][0]["time"] <= st["cert"]["loaded_at"] + 1
    assert running.tls_peer_sha256() == _sha256(new)


def test_records_every_signal_in_order_and_exits_0_on_sigterm(running: RunningProbe) -> None:
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGUSR1):
        n = len(running.status()["signals"])
        running.proc.send_signal(sig)
        running.wait_status(f"the probe to record {sig.name}", lambda s, n=n: len(s["signals"]) > n)
    st = running.status()
    assert [s["signal"] for s in st["signals"]] == ["SIGUSR1", "SIGUSR2", "SIGUSR1"]
    times = [s["time"] for s in st["signals"]]
    assert times == sorted(times)
    assert st["loads"] == 1  # only SIGHUP reloads

    running.proc.send_signal(signal.SIGTERM)
    assert running.wait_exit() == 0


def test_sigint_exits_0(running: RunningProbe) -> None:
    running.proc.send_signal(signal.SIGINT)
    assert running.wait_exit() == 0


def test_a_bad_certificate_on_sighup_keeps_the_loaded_one(running: RunningProbe) -> None:
    old = _cert(running.cert)
    running.cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n")
    running.proc.send_signal(signal.SIGHUP)
    st = running.wait_status("the probe to record SIGHUP", lambda s: len(s["signals"]) == 1)
    assert st["cert"]["sha256"] == _sha256(old) and st["loads"] == 1
    assert str(running.cert) in st["load_error"]["error"]
    assert running.tls_peer_sha256() == _sha256(old)


def test_runs_without_a_certificate(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agent.workloads.probe", "--port", str(port)], cwd=REPO)
    try:

        def status() -> tuple[dict[str, Any] | None, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as resp:
                    return json.loads(resp.read()), "answered"
            except OSError as e:
                return None, str(e)

        st = wait_until(status, timeout=START_TIMEOUT, interval=0.05, what="the probe to answer /")
        assert st["cert"] is None and st["loads"] == 0
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=1)
        assert e.value.code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EXIT_TIMEOUT) == 0


# -- the DER walk, without processes ---------------------------------------------------------------
def _self_signed(serial: int, not_after: dt.datetime) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "der")])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )


@pytest.mark.parametrize(
    "serial",
    [1, 0x7F, 0x80, 0xFF00, (1 << 158) | 1, 0x80 << (8 * 18)],
    ids=["one", "7f", "80-needs-sign-byte", "ff00", "159-bits", "top-bit-set"],
)
def test_serial_and_fingerprint_match_cryptography(serial: int) -> None:
    # 2051 is after 2049: a GeneralizedTime, where 2024 is a UTCTime.
    not_after = dt.datetime(2051, 6, 7, 8, 9, 10, tzinfo=dt.UTC)
    cert = _self_signed(serial, not_after)
    info = probe.parse_certificate(cert.public_bytes(serialization.Encoding.DER))
    assert info.sha256 == _sha256(cert)
    assert info.serial == _serial(cert)
    assert info.not_before == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()
    assert info.not_after == not_after.timestamp()


def test_the_leaf_is_the_first_block_of_a_chain(ca: TestCA) -> None:
    leaf = ca.issue("leaf", server=False)
    text = "junk before\n" + leaf.cert.read_text() + ca.ca_file.read_text()
    ders = probe.pem_certificates(text)
    assert len(ders) == 2
    assert probe.parse_certificate(ders[0]).sha256 == _sha256(_cert(leaf.cert))


@pytest.mark.parametrize(
    "der",
    [b"", b"\x30", b"\x30\x05\x02\x01", b"\x02\x01\x01", b"\x30\x84\xff\xff\xff\xff", b"\x30\x00\x00"],
    ids=["empty", "no-length", "truncated", "not-a-sequence", "huge-length", "trailing-bytes"],
)
def test_malformed_der_is_a_der_error(der: bytes) -> None:
    with pytest.raises(probe.DerError):
        probe.parse_certificate(der)


def test_config_from_the_environment_and_the_command_line() -> None:
    env = {"PROBE_PORT": "9000", "PROBE_CERT": "/s/cert.pem", "PROBE_TLS_PORT": "9443"}
    assert probe.parse_args([], env) == probe.Config(port=9000, cert="/s/cert.pem", tls_port=9443)
    assert probe.parse_args(["--port", "7"], env).port == 7
    assert probe.parse_args([], {}) == probe.Config()
    with pytest.raises(SystemExit):
        probe.parse_args(["--tls-port", "8443"], {})


def test_workloads_import_only_the_standard_library() -> None:
    """A workload runs inside a task, in the fieldlab/probe image on a bare interpreter: it may import
    the standard library and its own package, never the agent's runtime nor a third-party package."""
    workloads = REPO / "agent" / "workloads"
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for path in sorted(workloads.rglob("*.py")):
        package = ".".join(path.relative_to(REPO).parent.parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{package}.{node.module or ''}" if node.level else str(node.module)]
            else:
                continue
            for name in names:
                own = name == package or name.startswith(f"{package}.")
                if name.split(".")[0] not in allowed and not own:
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not bad, bad
    # As the image runs it: isolated, no site-packages, from a directory that holds only the file.
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(workloads / "probe" / "probe.py"), "--help"],
        cwd=workloads / "probe",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0 and "usage: probe" in proc.stdout, proc.stderr
