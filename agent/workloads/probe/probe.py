"""fieldlab's probe workload: the long-running task the e2e suites assert through.

Over HTTP (``/`` or ``/status``, JSON) it reports when it started, every signal it received with the
time it arrived, and the SHA-256 fingerprint and serial of the certificate it has currently *loaded*;
``/health`` answers ``ok``. It loads the certificate at start and again on SIGHUP only, never by
watching the file: what it reports is what the orchestrator delivered, not what is on disk. With
``--tls-port`` it also serves the same endpoints over TLS with that certificate and its key, so a peer on
another node can see which certificate is live.

Signals: SIGHUP reloads and is recorded; SIGUSR1 and SIGUSR2 are recorded; SIGTERM and SIGINT are
recorded and end the probe with status 0 (a second one while it stops forces exit with status 1).

This file is the whole program and imports nothing but the standard library: it runs as
``python3 -m agent.workloads.probe`` from the agent's venv (exec tasks) and as ``python3 probe.py`` in the
``fieldlab/probe`` image, which has a bare interpreter and no packages.

Formats: ``sha256`` is the lowercase hex SHA-256 of the leaf certificate's DER, without separators
(openssl's ``-fingerprint -sha256`` with the colons removed, lowercased); ``serial`` is the lowercase
hex of the serial's bytes, without separators or sign padding (Vault's ``serial_number`` with the
colons removed). Times are Unix times (float seconds).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime as dt
import hashlib
import http.server
import json
import logging
import os
import queue
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

log = logging.getLogger("probe")

RECORDED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
DEFAULT_PORT = 8080
# A file replaced while it is being loaded is read again, at most this many times.
LOAD_ATTEMPTS = 3
# A TLS peer that connects and says nothing holds its handler thread no longer than this.
TLS_HANDSHAKE_TIMEOUT = 10.0
# How often a listener looks for a shutdown request: the bound on how long a stop takes.
SHUTDOWN_POLL = 0.1


class ProbeError(Exception):
    """Root of the probe's errors."""


class CertificateError(ProbeError):
    """The certificate (or, for TLS, its key) could not be loaded; the message names the file."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class DerError(ProbeError):
    """The DER of a certificate is not what X.509 says it is."""


# -- PEM and DER -----------------------------------------------------------------------------------
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
_PEM_END = "-----END CERTIFICATE-----"

_TAG_INTEGER = 0x02
_TAG_SEQUENCE = 0x30
_TAG_VERSION = 0xA0  # [0] EXPLICIT Version in TBSCertificate
_TAG_UTC_TIME = 0x17
_TAG_GENERALIZED_TIME = 0x18


def pem_certificates(text: str) -> list[bytes]:
    """The DER of every CERTIFICATE block of a PEM text, in order (the first is the leaf)."""
    ders: list[bytes] = []
    pos = 0
    while (begin := text.find(_PEM_BEGIN, pos)) >= 0:
        end = text.find(_PEM_END, begin)
        if end < 0:
            raise DerError(f"a CERTIFICATE block at offset {begin} has no END line")
        body = "".join(text[begin + len(_PEM_BEGIN) : end].split())
        try:
            ders.append(base64.b64decode(body, validate=True))
        except binascii.Error as e:
            raise DerError(f"the CERTIFICATE block at offset {begin} is not base64: {e}") from e
        pos = end + len(_PEM_END)
    return ders


@dataclass(frozen=True)
class Tlv:
    """One DER element: its tag and where its content lies in the buffer."""

    tag: int
    start: int
    end: int


def der_element(data: bytes, offset: int, limit: int | None = None) -> Tlv:
    """The DER element at `offset`, which must end at or before `limit` (default: the end of data)."""
    limit = len(data) if limit is None else limit
    if offset + 2 > limit:
        raise DerError(f"truncated element at offset {offset}")
    tag = data[offset]
    if tag & 0x1F == 0x1F:
        raise DerError(f"high tag numbers are not used in X.509 (offset {offset})")
    first = data[offset + 1]
    pos = offset + 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4:
            raise DerError(f"unsupported length encoding 0x{first:02x} at offset {offset}")
        if pos + count > limit:
            raise DerError(f"truncated length at offset {offset}")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > limit:
        raise DerError(f"element at offset {offset} runs past its container ({pos + length} > {limit})")
    return Tlv(tag, pos, pos + length)


def der_children(data: bytes, parent: Tlv) -> list[Tlv]:
    """The elements directly inside a constructed element."""
    children: list[Tlv] = []
    pos = parent.start
    while pos < parent.end:
        child = der_element(data, pos, parent.end)
        children.append(child)
        pos = child.end
    return children


def _expect(tlv: Tlv, tag: int, what: str) -> Tlv:
    if tlv.tag != tag:
        raise DerError(f"{what}: expected tag 0x{tag:02x}, found 0x{tlv.tag:02x}")
    return tlv


def _der_time(data: bytes, tlv: Tlv) -> float:
    text = data[tlv.start : tlv.end].decode("ascii")
    if tlv.tag == _TAG_UTC_TIME:
        # RFC 5280: YY >= 50 means 19YY, else 20YY.
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    elif tlv.tag != _TAG_GENERALIZED_TIME:
        raise DerError(f"validity: expected a time, found tag 0x{tlv.tag:02x}")
    try:
        when = dt.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError as e:
        raise DerError(f"validity: {text!r} is not a DER time") from e
    return when.timestamp()


@dataclass(frozen=True)
class CertInfo:
    """What the probe reports about a certificate."""

    sha256: str
    serial: str
    not_before: float
    not_after: float


def parse_certificate(der: bytes) -> CertInfo:
    """Fingerprint, serial and validity of one DER certificate (a minimal walk of its TBSCertificate)."""
    cert = _expect(der_element(der, 0), _TAG_SEQUENCE, "Certificate")
    if cert.end != len(der):
        raise DerError(f"{len(der) - cert.end} bytes after the Certificate")
    tbs = _expect(der_children(der, cert)[0], _TAG_SEQUENCE, "TBSCertificate")
    fields = der_children(der, tbs)
    # version [0] EXPLICIT is absent for v1 certificates.
    i = 1 if fields and fields[0].tag == _TAG_VERSION else 0
    if len(fields) < i + 6:
        raise DerError(f"TBSCertificate has {len(fields)} fields")
    serial_tlv = _expect(fields[i], _TAG_INTEGER, "serialNumber")
    serial = der[serial_tlv.start : serial_tlv.end]
    if not serial:
        raise DerError("serialNumber is empty")
    if len(serial) > 1 and serial[0] == 0:
        serial = serial[1:]  # the sign byte of a positive integer whose top bit is set
    validity = der_children(der, _expect(fields[i + 3], _TAG_SEQUENCE, "validity"))
    if len(validity) != 2:
        raise DerError(f"validity has {len(validity)} fields")
    return CertInfo(
        sha256=hashlib.sha256(der).hexdigest(),
        serial=serial.hex(),
        not_before=_der_time(der, validity[0]),
        not_after=_der_time(der, validity[1]),
    )


# -- loading ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedCert:
    """A certificate as loaded: what it is, where from, when, and the TLS context built with it."""

    info: CertInfo
    path: str
    loaded_at: float
    chain: int
    tls: ssl.SSLContext | None

    def to_json(self) -> dict[str, Any]:
        return {
            "sha256": self.info.sha256,
            "serial": self.info.serial,
            "not_before": self.info.not_before,
            "not_after": self.info.not_after,
            "loaded_at": self.loaded_at,
            "path": self.path,
            "chain": self.chain,
            "tls": self.tls is not None,
        }


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise CertificateError(path, e.strerror or str(e)) from e


def load_certificate(cert_path: str, key_path: str | None, *, tls: bool) -> LoadedCert:
    """Read the certificate file (and, for TLS, build a server context with it and its key).

    With `tls`, the context is built from the same bytes that were fingerprinted: a file replaced
    while it was being loaded is read again.
    """
    for _ in range(LOAD_ATTEMPTS):
        data = _read(cert_path)
        try:
            ders = pem_certificates(data.decode("ascii", errors="replace"))
            if not ders:
                raise DerError("no CERTIFICATE block")
            info = parse_certificate(ders[0])
        except DerError as e:
            raise CertificateError(cert_path, str(e)) from e
        context: ssl.SSLContext | None = None
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                context.load_cert_chain(cert_path, key_path)
            except (ssl.SSLError, OSError) as e:
                raise CertificateError(key_path or cert_path, f"cannot load for TLS: {e}") from e
            if _read(cert_path) != data:
                continue
        return LoadedCert(info, cert_path, time.time(), len(ders), context)
    raise CertificateError(cert_path, f"changed on every one of {LOAD_ATTEMPTS} loads")


# -- config ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    host: str = "0.0.0.0"  # noqa: S104 -- peers on other nodes must reach it
    port: int = DEFAULT_PORT
    cert: str | None = None
    key: str | None = None
    tls_port: int | None = None


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"probe: {name}={raw!r} is not a port number") from None


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """The command line, with PROBE_* environment variables as defaults."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="probe", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default=env.get("PROBE_HOST") or Config.host, help="address to bind")
    parser.add_argument(
        "--port", type=int, default=_env_int(env, "PROBE_PORT") or DEFAULT_PORT, help="HTTP port (PROBE_PORT)"
    )
    parser.add_argument("--cert", default=env.get("PROBE_CERT") or None, help="PEM certificate (PROBE_CERT)")
    parser.add_argument("--key", default=env.get("PROBE_KEY") or None, help="PEM key for TLS (PROBE_KEY)")
    parser.add_argument(
        "--tls-port", type=int, default=_env_int(env, "PROBE_TLS_PORT"), help="TLS port (PROBE_TLS_PORT)"
    )
    ns = parser.parse_args(argv)
    if ns.tls_port is not None and not ns.cert:
        parser.error("--tls-port needs --cert (and --key, unless the key is in the certificate file)")
    return Config(host=ns.host, port=ns.port, cert=ns.cert, key=ns.key, tls_port=ns.tls_port)


# -- HTTP ------------------------------------------------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "fieldlab-probe"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/status"):
            self._send(200, "application/json", json.dumps(self.server.probe.status()).encode() + b"\n")
        elif path == "/health":
            self._send(200, "text/plain", b"ok")
        else:
            self._send(404, "application/json", json.dumps({"error": "not found", "path": path}).encode())

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], probe: Probe, *, tls: bool) -> None:
        self.probe = probe
        self.tls = tls
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if not self.tls:
            super().finish_request(request, client_address)
            return
        # The context is the one of the certificate loaded when the peer connects.
        context = self.probe.tls_context()
        if context is None:
            return
        request.settimeout(TLS_HANDSHAKE_TIMEOUT)
        try:
            conn = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, e)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


# -- the probe -------------------------------------------------------------------------------------
SIGNAL_POLL = 0.1  # seconds: the longest a signal waits for the main thread to run its handler


class Probe:
    """startup() -> run() until SIGTERM/SIGINT -> shutdown(). Signal handlers only queue the signal."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.started = time.time()
        self._lock = threading.Lock()
        self._signals: list[dict[str, Any]] = []
        self._cert: LoadedCert | None = None
        self._loads = 0
        self._load_error: dict[str, Any] | None = None
        # SimpleQueue.put is reentrant: the one queue that may be fed from a signal handler.
        self._queue: queue.SimpleQueue[tuple[int, float]] = queue.SimpleQueue()
        self._stopping = False
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def startup(self) -> None:
        for sig in RECORDED_SIGNALS:
            signal.signal(sig, self._on_signal)
        self._load()
        cfg = self.config
        listeners = [(cfg.port, False)] + ([(cfg.tls_port, True)] if cfg.tls_port is not None else [])
        for port, tls in listeners:
            server = _Server((cfg.host, port), self, tls=tls)
            self._servers.append(server)
            thread = threading.Thread(
                target=server.serve_forever, args=(SHUTDOWN_POLL,), name=f"probe-{port}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
            log.info("serving %s on %s:%d", "TLS" if tls else "HTTP", cfg.host, server.server_address[1])

    def run(self) -> int:
        """Handle signals in arrival order until a stop signal; the exit status."""
        while True:
            # Never block without a timeout: a signal the kernel hands to a server thread only sets a
            # flag, and its Python handler runs when the MAIN thread next runs bytecode; a main thread
            # asleep in get() forever would leave it pending (a lost SIGHUP, seen as a flaky test).
            try:
                signum, at = self._queue.get(timeout=SIGNAL_POLL)
            except queue.Empty:
                continue
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                self._load(signal_at=(name, signum, at))  # the load and its signal seen together
            else:
                self._record(name, signum, at)
            if signum in STOP_SIGNALS:
                log.info("%s: stopping", name)
                return 0

    def shutdown(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum in STOP_SIGNALS:
            if self._stopping:
                os._exit(1)
            self._stopping = True
        self._queue.put((signum, time.time()))

    # -- state ---------------------------------------------------------------------------------
    def _load(self, signal_at: tuple[str, int, float] | None = None) -> None:
        """Load the certificate; with `signal_at` (a SIGHUP), record that signal in the same step,
        so a status never shows the new load without its signal (or the signal without its load)."""
        cfg = self.config
        if cfg.cert is None:
            if signal_at:
                self._record(*signal_at)
            return
        try:
            loaded = load_certificate(cfg.cert, cfg.key, tls=cfg.tls_port is not None)
        except CertificateError as e:
            log.error("keeping the certificate loaded before: %s", e)
            with self._lock:
                self._load_error = {"time": time.time(), "error": str(e)}
            if signal_at:
                self._record(*signal_at)
            return
        with self._lock:
            self._cert = loaded
            self._loads += 1
            self._load_error = None
            if signal_at:
                name, signum, at = signal_at
                entry = {"signal": name, "number": signum, "time": at, "cert_sha256": loaded.info.sha256}
                self._signals.append(entry)
        log.info("loaded %s: sha256 %s serial %s", loaded.path, loaded.info.sha256, loaded.info.serial)

    def _record(self, name: str, signum: int, at: float) -> None:
        with self._lock:
            sha256 = self._cert.info.sha256 if self._cert else None
            self._signals.append({"signal": name, "number": signum, "time": at, "cert_sha256": sha256})
        log.info("received %s", name)

    def tls_context(self) -> ssl.SSLContext | None:
        with self._lock:
            return self._cert.tls if self._cert else None

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "started": self.started,
                "pid": os.getpid(),
                "hostname": socket.gethostname(),
                "now": time.time(),
                "signals": list(self._signals),
                "cert": self._cert.to_json() if self._cert else None,
                "loads": self._loads,
                "load_error": self._load_error,
                "ports": {("tls" if s.tls else "http"): s.server_address[1] for s in self._servers},
            }


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s probe[%(process)d] %(levelname)s %(message)s",
    )
    probe = Probe(parse_args(argv))
    try:
        probe.startup()
    except OSError as e:
        log.error("cannot listen: %s", e)
        probe.shutdown()
        return 2
    try:
        return probe.run()
    finally:
        probe.shutdown()


if __name__ == "__main__":
    sys.exit(main())
