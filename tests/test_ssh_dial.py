"""A node that closes the ssh connection mid-handshake (sshd stopping or starting during a reboot)
is a node that does not answer yet: a ProviderError naming it, and `boot_id` None, so a wait for
the node to come back keeps polling instead of failing on paramiko's EOFError."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from lab import ssh
from lab.errors import ProviderError


@pytest.fixture
def closing_server() -> Iterator[int]:
    """A TCP port that sends an ssh banner, then closes every connection (as a dying sshd may)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        th.join(5)
        srv.close()


def test_a_connection_closed_mid_handshake_is_a_node_not_answering(closing_server: int) -> None:
    target = ssh.SshTarget("node1", "127.0.0.1", port=closing_server)
    with pytest.raises(ProviderError, match="node1"):
        ssh.run(target, "true", timeout=5, probe=True)
    assert ssh.boot_id(target) is None
    assert ssh.answers(target) is False
