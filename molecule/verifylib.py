"""Helpers of the scenarios' testinfra verifiers (molecule/<role>/tests/test_*.py): HTTP from a node
(an AppRole and its tokens work from the client's own address only), commands that must succeed,
polling waits with a named timeout (lab.waits.wait_until, as everywhere in the project) and reboots
through Ansible's reboot action, which waits for a new boot id. The fixtures are in conftest.py."""

from __future__ import annotations

import datetime
import json
import shlex
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lab.waits import wait_until

REBOOT_TIMEOUT = 120


def hostvars(host: Any) -> dict[str, Any]:
    """The node's inventory variables (group vars included), as the converge saw them."""
    return dict(host.ansible.get_variables())


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status 0 when curl got none (refused, reset, TLS failure); `data` is the JSON body
    when there is one, else the text (curl's error when status is 0)."""

    status: int
    data: Any

    @property
    def errors(self) -> Any:
        return self.data.get("errors") if isinstance(self.data, dict) else self.data


def http(
    host: Any, method: str, url: str, *, token: str | None = None, body: Any = None, timeout: int = 15
) -> Reply:
    """One HTTP request made by `host` itself with curl (the node's address is the one the server sees)."""
    argv = ["curl", "-sS", "--max-time", str(timeout), "-X", method, "-w", "\n%{http_code}", url]
    if token:
        argv += ["-H", f"X-Vault-Token: {token}"]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    res = host.run(shlex.join(argv))
    if res.rc != 0:
        return Reply(0, res.stderr.strip())
    text, _, code = res.stdout.rpartition("\n")
    try:
        data: Any = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        data = text
    return Reply(int(code), data)


def sh(host: Any, cmd: str) -> str:
    """Run `cmd` on the node; fail the test with its output unless it succeeds. Returns stdout."""
    res = host.run(cmd)
    assert res.rc == 0, f"{cmd!r} on {host.backend.get_hostname()}: rc {res.rc}\n{res.stdout}\n{res.stderr}"
    return str(res.stdout)


def boot_id(host: Any) -> str:
    return sh(host, "cat /proc/sys/kernel/random/boot_id").strip()


def reboot(host: Any) -> None:
    """A clean reboot (Ansible's reboot action: `systemctl reboot`, then waits for a new boot id)."""
    before = boot_id(host)
    host.ansible("ansible.builtin.reboot", f"reboot_timeout={REBOOT_TIMEOUT}", check=False)
    assert boot_id(host) != before, "the node did not reboot"


def unit_state(host: Any, unit: str) -> str:
    return sh(host, f"systemctl show -p ActiveState --value {shlex.quote(unit)}").strip()


def wait_for_units(host: Any, units: list[str], *, timeout: float = 60, what: str = "") -> dict[str, str]:
    """Wait until each unit is active or failed (done starting); returns unit -> ActiveState."""

    def settled() -> tuple[dict[str, str] | None, str]:
        states = {u: unit_state(host, u) for u in units}
        done = all(s in ("active", "failed") for s in states.values())
        return (states if done else None), str(states)

    states: dict[str, str] = wait_until(
        settled, timeout=timeout, interval=0.5, what=what or f"{', '.join(units)} to start"
    )
    return states


def self_signed(
    common_name: str, valid_for: datetime.timedelta, *, client_auth: bool = False
) -> tuple[str, str]:
    """A certificate for `common_name` that no lab CA signed, valid from a minute ago for `valid_for`,
    and its key: (certificate PEM, key PEM). `client_auth`: with the clientAuth usage."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + valid_for)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
    )
    if client_auth:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    cert = builder.sign(key, hashes.SHA256())
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), pem_key.decode()
