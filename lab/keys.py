"""Per-lab secrets made on the controller: the SSH key pair that reaches every node."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def write_secret(path: Path, data: bytes) -> None:
    """Write a secret file created 0600 from the start (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    path.chmod(0o600)


def ensure_ssh_key(path: Path, comment: str) -> str:
    """Create an ed25519 key pair at `path` unless one is there; return the public key line."""
    pub = path.with_suffix(".pub")
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        write_secret(path, private)
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        pub.write_bytes(public + f" {comment}\n".encode())
    path.chmod(0o600)
    return pub.read_text().strip()
