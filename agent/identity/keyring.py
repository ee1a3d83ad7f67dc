"""The agent's signing key for workload identities: RSA 2048, RS256 (Nomad's algorithm for them),
made on first use and kept in `<data_dir>/server/keystore/<key id>.pem` (0600, its dir 0700), so
tokens signed before an agent restart still verify after it. The public half is served as a JWKS
(`/.well-known/jwks.json`, as Nomad's) for whoever verifies the tokens (OpenBao's JWT auth)."""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at the first use: an agent whose tasks have no identity never loads it
    from cryptography.hazmat.primitives.asymmetric import rsa

ALGORITHM = "RS256"
KEY_BITS = 2048
KEYSTORE = Path("server") / "keystore"


class KeyringError(Exception):
    pass


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


class Keyring:
    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / KEYSTORE
        self._lock = threading.Lock()
        self._key: rsa.RSAPrivateKey | None = None
        self._kid = ""

    def _load(self) -> tuple[rsa.RSAPrivateKey, str]:
        with self._lock:
            if self._key is None:
                self._key, self._kid = self._read() or self._create()
            return self._key, self._kid

    def _read(self) -> tuple[rsa.RSAPrivateKey, str] | None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        if not self.dir.is_dir():
            return None
        found = sorted(self.dir.glob("*.pem"))
        if not found:
            return None
        path = found[0]
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise KeyringError(f"workload identity key {path}: {exc}") from None
        if not isinstance(key, rsa.RSAPrivateKey):
            raise KeyringError(f"workload identity key {path}: not an RSA key")
        return key, path.stem

    def _create(self) -> tuple[rsa.RSAPrivateKey, str]:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
        kid = str(uuid.uuid4())
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        tmp = self.dir / f".{kid}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / f"{kid}.pem")
        return key, kid

    @property
    def key_id(self) -> str:
        return self._load()[1]

    def sign(self, claims: dict[str, Any]) -> str:
        """A compact JWS (RS256) of `claims`, its header naming the key."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        key, kid = self._load()
        header = {"alg": ALGORITHM, "kid": kid, "typ": "JWT"}
        signing_input = f"{_b64(_json(header))}.{_b64(_json(claims))}".encode()
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input.decode()}.{_b64(signature)}"

    def jwks(self) -> dict[str, Any]:
        key, kid = self._load()
        pub = key.public_key().public_numbers()
        jwk = {"kty": "RSA", "kid": kid, "use": "sig", "alg": ALGORITHM, "n": _b64(_int_bytes(pub.n))}
        jwk["e"] = _b64(_int_bytes(pub.e))
        return {"keys": [jwk]}

    def public_pem(self) -> str:
        from cryptography.hazmat.primitives import serialization

        key, _ = self._load()
        pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem.decode()


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
