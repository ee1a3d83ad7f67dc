"""The API's TLS: the server's context (mTLS: a client cert that chains to the lab's CA, or no
session) and the identity a verified client cert names."""

from __future__ import annotations

import ssl
from typing import Any

from agent.command.config import Config
from agent.errors import AgentError


def server_ssl_context(config: Config) -> ssl.SSLContext:
    if config.tls is None:
        raise AgentError("config has no tls section: the agent API only serves mTLS")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(config.tls.cert_file), str(config.tls.key_file))
        ctx.load_verify_locations(cafile=str(config.tls.ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise AgentError(
            f"cannot load the API's TLS files ({config.tls.cert_file}, {config.tls.key_file}, "
            f"{config.tls.ca_file}): {exc}"
        ) from None
    ctx.verify_mode = ssl.CERT_REQUIRED  # no cert that chains to the CA: no TLS session
    return ctx


def peer_identity(peercert: Any) -> str | None:
    """The subject CN of a verified client cert; None when it has none, or more than one."""
    if not isinstance(peercert, dict):
        return None
    names = [str(v) for rdn in peercert.get("subject", ()) for k, v in rdn if k == "commonName"]
    return names[0] if len(names) == 1 else None
